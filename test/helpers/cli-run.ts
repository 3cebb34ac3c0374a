/**
 * Test helpers for the `cg` CLI: run the BUILT binary (`node dist/src/cli/main.js`)
 * to completion, or keep it running and wait on its output, with timeouts (never
 * blind sleeps). Every process started here is killed by {@link killAllCg}.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { JetStreamManager } from "@nats-io/jetstream";

/** The built CLI entry point. */
export const CG_BIN = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));

/** An empty config dir, so no nats CLI context of the machine leaks into the tests (nothing is written to it). */
const isolatedConfig = join(tmpdir(), "cg-test-empty-config");
mkdirSync(isolatedConfig, { recursive: true });

/**
 * The environment of a spawned `cg`: the test's own, without any `NATS_*`
 * variable or `NO_COLOR`, with an isolated config dir, plus `extra`.
 */
export function cgEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("NATS_") && k !== "NO_COLOR") env[k] = v;
  env["XDG_CONFIG_HOME"] = isolatedConfig;
  return { ...env, ...extra };
}

/** How a `cg` process ended, with everything it printed. */
export interface CgResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Options of a spawned `cg`. */
export interface CgOptions {
  /** Written to stdin, which is then closed. Without it stdin is closed at once (runCg) or left open (CgProcess). */
  input?: string;
  /** Extra environment variables (see {@link cgEnv}). */
  env?: NodeJS.ProcessEnv;
  /** How long {@link runCg} waits for the exit before killing it and failing. Default 30 s. */
  timeoutMs?: number;
}

const running = new Set<CgProcess>();

/** A running `cg`. */
export class CgProcess {
  readonly child: ChildProcess;
  stdout = "";
  stderr = "";
  private readonly exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private readonly listeners = new Set<() => void>();

  constructor(
    readonly args: string[],
    options: CgOptions = {},
  ) {
    this.child = spawn(process.execPath, [CG_BIN, ...args], { env: cgEnv(options.env), stdio: ["pipe", "pipe", "pipe"] });
    running.add(this);
    this.child.stdout?.setEncoding("utf8");
    this.child.stderr?.setEncoding("utf8");
    this.child.stdout?.on("data", (chunk: string) => {
      this.stdout += chunk;
      this.notify();
    });
    this.child.stderr?.on("data", (chunk: string) => {
      this.stderr += chunk;
      this.notify();
    });
    this.child.stdin?.on("error", () => undefined); // the process may exit before reading everything
    this.exit = new Promise((resolve) => {
      this.child.on("close", (code, signal) => {
        running.delete(this);
        this.notify();
        resolve({ code, signal });
      });
    });
    if (options.input !== undefined) {
      this.child.stdin?.end(options.input);
    }
  }

  private notify(): void {
    for (const l of this.listeners) l();
  }

  /** True while the process runs. */
  get alive(): boolean {
    return running.has(this);
  }

  /**
   * Waits until `check(stdout, stderr)` is truthy.
   *
   * @throws Error after `timeoutMs`, or when the process exits first, with what it printed
   */
  async waitFor(check: (stdout: string, stderr: string) => boolean, timeoutMs: number, what: string): Promise<void> {
    if (check(this.stdout, this.stderr)) return;
    await new Promise<void>((resolve, reject) => {
      const done = (err?: Error): void => {
        clearTimeout(timer);
        this.listeners.delete(listener);
        if (err) reject(err);
        else resolve();
      };
      const describe = (): string => `cg ${this.args.join(" ")}\n--- stdout:\n${this.stdout}\n--- stderr:\n${this.stderr}`;
      const listener = (): void => {
        if (check(this.stdout, this.stderr)) done();
        else if (!this.alive) done(new Error(`cg exited before ${what}\n${describe()}`));
      };
      const timer = setTimeout(() => done(new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${describe()}`)), timeoutMs);
      this.listeners.add(listener);
    });
  }

  /** Waits until stdout (or stderr) contains `text`. */
  async waitForText(text: string | RegExp, timeoutMs: number, stream: "stdout" | "stderr" = "stdout"): Promise<void> {
    const has = (s: string): boolean => (typeof text === "string" ? s.includes(text) : text.test(s));
    await this.waitFor((out, err) => has(stream === "stdout" ? out : err), timeoutMs, `${stream} to contain ${String(text)}`);
  }

  /** The complete NDJSON lines of a stream, parsed. */
  json<T = Record<string, unknown>>(stream: "stdout" | "stderr" = "stdout"): T[] {
    const text = stream === "stdout" ? this.stdout : this.stderr;
    const lines = text.split("\n");
    lines.pop(); // an incomplete last line
    return lines.filter((l) => l.trim().startsWith("{")).map((l) => JSON.parse(l) as T);
  }

  /** Writes to stdin. */
  write(text: string): void {
    this.child.stdin?.write(text);
  }

  /** Closes stdin. */
  endInput(): void {
    this.child.stdin?.end();
  }

  /** Sends a signal. */
  signal(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  /**
   * Waits for the exit.
   *
   * @throws Error after `timeoutMs` (the process is then killed)
   */
  async exited(timeoutMs: number): Promise<CgResult> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        this.child.kill("SIGKILL");
        reject(new Error(`cg ${this.args.join(" ")} did not exit within ${timeoutMs} ms\n--- stdout:\n${this.stdout}\n--- stderr:\n${this.stderr}`));
      }, timeoutMs);
    });
    try {
      const { code, signal } = await Promise.race([this.exit, timeout]);
      return { code, signal, stdout: this.stdout, stderr: this.stderr };
    } finally {
      clearTimeout(timer);
    }
  }

  /** Kills the process (SIGKILL) and waits for it. */
  async kill(): Promise<void> {
    if (this.alive) this.child.kill("SIGKILL");
    await this.exit;
  }
}

/** Runs `cg` to completion. stdin gets `options.input`, or is closed at once. */
export async function runCg(args: string[], options: CgOptions = {}): Promise<CgResult> {
  const p = new CgProcess(args, { ...options, input: options.input ?? "" });
  return p.exited(options.timeoutMs ?? 30_000);
}

/** Runs `cg --json …` and parses stdout as one JSON document. */
export async function runCgJson<T = Record<string, unknown>>(args: string[], options: CgOptions = {}): Promise<{ result: CgResult; doc: T }> {
  const result = await runCg(["--json", ...args], options);
  if (result.code !== 0) throw new Error(`cg --json ${args.join(" ")} exited ${String(result.code)}\n${result.stderr}`);
  return { result, doc: JSON.parse(result.stdout) as T };
}

/** Kills every `cg` still running. */
export async function killAllCg(): Promise<void> {
  await Promise.all([...running].map((p) => p.kill()));
}

/**
 * A stream for static groups: subjects `<name>.*`, stored as `<p>.<name>.<token>`
 * with the partition transform over the first wildcard.
 */
export async function addStaticStream(jsm: JetStreamManager, name: string, partitions: number): Promise<void> {
  await jsm.streams.add({
    name,
    subjects: [`${name}.*`],
    subject_transform: { src: `${name}.*`, dest: `{{partition(${partitions},1)}}.${name}.{{wildcard(1)}}` },
  });
}

/** A plain source stream for elastic groups, subjects `<name>.>`. */
export async function addSourceStream(jsm: JetStreamManager, name: string): Promise<void> {
  await jsm.streams.add({ name, subjects: [`${name}.>`] });
}
