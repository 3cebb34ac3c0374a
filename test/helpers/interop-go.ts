/**
 * Helpers for the Go interop tests: the Go driver (interop/go-driver, built by
 * `node scripts/install-tools.mjs go-driver` into .tools/go-driver/pcg-driver), Go's
 * reference `cg` CLI pointed at a test server, Go and TypeScript member instances
 * that record what they handle in one shape, and the checks the tests share.
 *
 * A missing or stale driver is an error, never a skip: the interop tests must run.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ConsumerConfig, JetStreamClient } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { elasticConsume, staticConsume, type ConsumerGroupMember, type ConsumerGroupMessage } from "../../src/index.js";

/** The package root (where package.json says nats-pcgroups). */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name === "nats-pcgroups") return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error("cannot find the nats-pcgroups package root");
    dir = parent;
  }
}

/** Same hash as scripts/install-tools.mjs stamps into .tools/go-driver/VERSION. */
function driverSourceHash(root: string): string {
  const hash = createHash("sha256");
  for (const file of ["go.mod", "go.sum", "main.go"]) {
    const path = join(root, "interop", "go-driver", file);
    hash.update(`${file}\0`);
    hash.update(existsSync(path) ? readFileSync(path) : "");
    hash.update("\0");
  }
  return `src-${hash.digest("hex").slice(0, 16)}`;
}

/**
 * The Go driver binary. Fails loudly when it is missing or older than its sources.
 *
 * @throws Error telling how to build it
 */
export function driverBinary(): string {
  const root = packageRoot();
  const bin = join(root, ".tools", "go-driver", "pcg-driver");
  const how = 'build it with "node scripts/install-tools.mjs go-driver" (needs Go; "npm test" does it through scripts/bootstrap.mjs)';
  if (!existsSync(bin)) throw new Error(`the Go interop driver is missing at ${bin}: ${how}`);
  const stamp = join(root, ".tools", "go-driver", "VERSION");
  const built = existsSync(stamp) ? readFileSync(stamp, "utf8").trim() : "(no stamp)";
  const wanted = driverSourceHash(root);
  if (built !== wanted) throw new Error(`the Go interop driver at ${bin} is stale (built from ${built}, sources are ${wanted}): ${how}`);
  return bin;
}

/** The Go reference CLI `cg`, installed by scripts/install-tools.mjs (go-cg). */
export function cgBinary(): string {
  const bin = join(packageRoot(), ".tools", "go-pcgroups", "cg");
  if (!existsSync(bin)) throw new Error(`Go's reference cg CLI is missing at ${bin}: install it with "node scripts/install-tools.mjs go-cg"`);
  return bin;
}

/** What a driver command printed, and how it exited. */
export interface DriverResult {
  code: number;
  stdout: string;
  stderr: string;
}

function run(bin: string, args: string[], env: NodeJS.ProcessEnv = process.env, timeoutMs = 20_000): Promise<DriverResult> {
  return new Promise((resolve, reject) => {
    execFile(bin, args, { env, timeout: timeoutMs, encoding: "utf8" }, (err, stdout, stderr) => {
      const code = err ? (typeof (err as { code?: unknown }).code === "number" ? ((err as { code: number }).code) : -1) : 0;
      if (err && code === -1) reject(new Error(`${bin} ${args.join(" ")} failed to run: ${err.message}\n${stderr}`));
      else resolve({ code, stdout, stderr });
    });
  });
}

/** Runs a driver command; resolves to its raw result whatever the exit code. */
export function goDriverRaw(url: string, ...args: string[]): Promise<DriverResult> {
  return run(driverBinary(), [url, ...args]);
}

/**
 * Runs a driver admin command and returns its stdout (one JSON value, as Go's
 * encoding/json wrote it).
 *
 * @throws Error with Go's error text when the command failed
 */
export async function goDriver(url: string, ...args: string[]): Promise<string> {
  const r = await goDriverRaw(url, ...args);
  if (r.code !== 0) {
    const goError = (() => {
      try {
        return (JSON.parse(r.stdout) as { error?: string }).error;
      } catch {
        return undefined;
      }
    })();
    throw new Error(`Go ${args[0]} failed (exit ${r.code}): ${goError ?? r.stdout.trim()} ${r.stderr.trim()}`.trim());
  }
  return r.stdout.trim();
}

/** Go's error text of a driver command that is expected to fail. */
export async function goDriverError(url: string, ...args: string[]): Promise<string> {
  const r = await goDriverRaw(url, ...args);
  if (r.code === 0) throw new Error(`expected Go ${args[0]} to fail, but it printed ${r.stdout.trim()}`);
  return (JSON.parse(r.stdout) as { error: string }).error;
}

/**
 * Runs Go's reference `cg` CLI against a server. `cg` connects before it parses its
 * arguments, so `--context` is ignored (and NATS_URL is not read): it always uses
 * the *selected* nats context. We give it one in a throwaway XDG_CONFIG_HOME:
 * `nats/context.txt` names the context, `nats/context/<name>.json` holds the URL.
 */
export async function runCg(url: string, ...args: string[]): Promise<DriverResult> {
  const home = await mkdtemp(join(tmpdir(), "pcg-cg-"));
  try {
    await mkdir(join(home, "nats", "context"), { recursive: true });
    await writeFile(join(home, "nats", "context.txt"), "pcgtest\n");
    await writeFile(join(home, "nats", "context", "pcgtest.json"), JSON.stringify({ url }));
    return await run(cgBinary(), args, { ...process.env, XDG_CONFIG_HOME: home });
  } finally {
    await rm(home, { recursive: true, force: true });
  }
}

/** The raw stored bytes of a KV key, as text (undefined when absent). */
export async function rawKv(js: JetStreamClient, bucket: string, key: string): Promise<string | undefined> {
  const kv = await new Kvm(js).open(bucket);
  const entry = await kv.get(key);
  return entry && entry.operation === "PUT" ? new TextDecoder().decode(entry.value) : undefined;
}

// --- members --------------------------------------------------------------------

/** The payload of a keyed test message. */
export interface KeyedPayload {
  k: string;
  s: number;
}

/** One message as a member instance (Go or TypeScript) handled it. */
export interface Handled {
  /** The instance, e.g. `go:m1` or `ts:m2`. */
  who: string;
  member: string;
  /** The subject without the partition token (Go's `Subject()`, our `msg.subject`). */
  subject: string;
  partition: number;
  /** The sequence in the stream the consumer reads (the work-queue stream for elastic). */
  seq: number;
  pinId: string;
  delivered: number;
  payload: string;
  key: string;
  s: number;
  /** Set when Go's DoubleAck failed. */
  ackError?: string;
  at: number;
}

function keyed(payload: string): KeyedPayload {
  try {
    const p = JSON.parse(payload) as Partial<KeyedPayload>;
    return { k: String(p.k ?? ""), s: Number(p.s ?? 0) };
  } catch {
    return { k: "", s: 0 };
  }
}

/** Every member instance a test file starts, so `stopAll` can end them. */
export interface Instance {
  readonly who: string;
  readonly handled: Handled[];
  /** Stops the instance cleanly. */
  stop(): Promise<void>;
}

/** One NDJSON line of `pcg-driver consume-*`: a handled message, or an event. */
interface DriverLine {
  event?: string;
  error?: string;
  member?: string;
  subject?: string;
  partition?: number;
  seq?: number;
  pin_id?: string;
  delivered?: number;
  payload?: string;
  ack_error?: string;
}

/** A Go member instance: `pcg-driver consume-static|consume-elastic` in its own process. */
export class GoMember implements Instance {
  readonly handled: Handled[] = [];
  /** Non-message lines the driver printed ({"event": ...}). */
  readonly events: { event: string; error?: string }[] = [];
  stderr = "";
  private readonly child: ChildProcess;
  private buffer = "";
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  readonly started: Promise<void>;

  constructor(
    readonly who: string,
    url: string,
    kind: "static" | "elastic",
    stream: string,
    group: string,
    readonly member: string,
    opts: { ackWaitMs?: number; maxAckPending?: number; sleepMs?: number } = {},
  ) {
    const args = [url, `consume-${kind}`, stream, group, member, String(opts.ackWaitMs ?? 2000), String(opts.maxAckPending ?? 1), String(opts.sleepMs ?? 0)];
    this.child = spawn(driverBinary(), args, { stdio: ["ignore", "pipe", "pipe"] });
    this.exited = new Promise((resolve) => this.child.once("exit", (code, signal) => resolve({ code, signal })));
    let startedResolve!: () => void;
    let startedReject!: (e: Error) => void;
    this.started = new Promise((res, rej) => {
      startedResolve = res;
      startedReject = rej;
    });
    this.child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      this.buffer += chunk;
      for (let nl = this.buffer.indexOf("\n"); nl !== -1; nl = this.buffer.indexOf("\n")) {
        const line = this.buffer.slice(0, nl);
        this.buffer = this.buffer.slice(nl + 1);
        if (line.trim()) this.onLine(line, startedResolve, startedReject);
      }
    });
    this.child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (this.stderr += chunk));
    void this.started.catch(() => undefined); // awaited by the tests; never an unhandled rejection
    void this.exited.then(({ code, signal }) => startedReject(new Error(`${who} exited (code ${code}, signal ${signal}) before it started: ${this.stderr.trim()} ${JSON.stringify(this.events)}`)));
  }

  private onLine(line: string, started: () => void, failed: (e: Error) => void): void {
    const v = JSON.parse(line) as DriverLine;
    if (v.event !== undefined || v.error !== undefined) {
      const event = { event: v.event ?? "error", ...(v.error !== undefined ? { error: v.error } : {}) };
      this.events.push(event);
      if (event.event === "started") started();
      if (event.error) failed(new Error(`${this.who}: ${event.error}`));
      return;
    }
    const payload = v.payload ?? "";
    const { k, s } = keyed(payload);
    this.handled.push({
      who: this.who,
      member: this.member,
      subject: v.subject ?? "",
      partition: v.partition ?? -1,
      seq: v.seq ?? 0,
      pinId: v.pin_id ?? "",
      delivered: v.delivered ?? 1,
      payload,
      key: k,
      s,
      ...(v.ack_error !== undefined ? { ackError: v.ack_error } : {}),
      at: Date.now(),
    });
  }

  /** True while the process runs. */
  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The error lines the driver printed (e.g. Done returned an error). */
  errors(): string[] {
    return this.events.filter((e) => e.error).map((e) => e.error ?? "");
  }

  /** SIGTERM: the driver calls Stop() and waits for Done. */
  async stop(): Promise<void> {
    if (this.running) this.child.kill("SIGTERM");
    await this.exited;
  }

  /** SIGKILL: a crash, nothing is cleaned up. */
  async kill(): Promise<void> {
    if (this.running) this.child.kill("SIGKILL");
    await this.exited;
  }
}

/** A TypeScript member instance recording into the same shape as {@link GoMember}. */
export class TsMember implements Instance {
  readonly handled: Handled[] = [];
  private member: ConsumerGroupMember | undefined;

  private constructor(readonly who: string) {}

  /** The running instance. */
  get instance(): ConsumerGroupMember {
    if (!this.member) throw new Error(`${this.who} has not started`);
    return this.member;
  }

  /**
   * Starts `staticConsume` / `elasticConsume` with Go's cg template: explicit acks,
   * `max_ack_pending` (1 by default) and AckWait (2 s by default). The handler acks
   * with ackAck, as the driver does with DoubleAck.
   */
  static async start(
    who: string,
    js: JetStreamClient,
    kind: "static" | "elastic",
    stream: string,
    group: string,
    member: string,
    opts: { ackWaitMs?: number; maxAckPending?: number; sleepMs?: number } = {},
  ): Promise<TsMember> {
    const m = new TsMember(who);
    const consumerConfig: Partial<ConsumerConfig> = {
      ack_policy: "explicit",
      ack_wait: (opts.ackWaitMs ?? 2000) * 1_000_000,
      max_ack_pending: opts.maxAckPending ?? 1,
    };
    const handler = async (msg: ConsumerGroupMessage): Promise<void> => {
      const payload = msg.string();
      const { k, s } = keyed(payload);
      if (opts.sleepMs) await sleep(opts.sleepMs);
      let ackError: string | undefined;
      try {
        await msg.ackAck({ timeout: 5000 });
      } catch (err) {
        ackError = err instanceof Error ? err.message : String(err);
      }
      m.handled.push({
        who,
        member,
        subject: msg.subject,
        partition: msg.partition,
        seq: msg.seq,
        pinId: msg.pinId ?? "",
        delivered: msg.info.deliveryCount,
        payload,
        key: k,
        s,
        ...(ackError ? { ackError } : {}),
        at: Date.now(),
      });
    };
    const consume = kind === "static" ? staticConsume : elasticConsume;
    m.member = await consume(js, { stream, group, member, handler, consumerConfig });
    return m;
  }

  async stop(): Promise<void> {
    await this.member?.stop();
  }
}

// --- load and checks ------------------------------------------------------------

/** `count` key names, `k0` … `k<count-1>`. */
export const keyNames = (count: number): string[] => Array.from({ length: count }, (_, i) => `k${i}`);

/**
 * Publishes `perKey` messages for every key under `<prefix>.<key>`, interleaved
 * (seq 1 of every key, then seq 2, ...), payload `{"k","s"}`.
 */
export async function publishKeyed(js: JetStreamClient, prefix: string, keys: string[], perKey: number, firstSeq = 1): Promise<KeyedPayload[]> {
  const sent: KeyedPayload[] = [];
  const pending: Promise<unknown>[] = [];
  for (let s = firstSeq; s < firstSeq + perKey; s++) {
    for (const k of keys) {
      sent.push({ k, s });
      pending.push(js.publish(`${prefix}.${k}`, JSON.stringify({ k, s })));
      if (pending.length >= 200) await Promise.all(pending.splice(0));
    }
  }
  await Promise.all(pending);
  return sent;
}

/** `k/s` ids of what was sent but never handled (by anyone). */
export function missing(sent: KeyedPayload[], handled: Handled[]): string[] {
  const seen = new Set(handled.map((h) => `${h.key}/${h.s}`));
  return sent.map((p) => `${p.k}/${p.s}`).filter((id) => !seen.has(id));
}

/** Distinct `k/s` ids handled. */
export const distinct = (handled: Handled[]): number => new Set(handled.map((h) => `${h.key}/${h.s}`)).size;

/**
 * Per-key order over first deliveries: each key's messages must first be handled
 * in increasing `s`. `handled` must be in handling order.
 */
export function orderViolations(handled: Handled[]): string[] {
  const seen = new Set<string>();
  const last = new Map<string, number>();
  const violations: string[] = [];
  for (const h of handled) {
    const id = `${h.key}/${h.s}`;
    if (seen.has(id)) continue;
    seen.add(id);
    const prev = last.get(h.key) ?? 0;
    if (h.s <= prev) violations.push(`${h.key}: s=${h.s} first handled (by ${h.who}) after s=${prev}`);
    last.set(h.key, Math.max(prev, h.s));
  }
  return violations;
}

/** Handled messages whose partition the handling member does not own under `owners`. */
export function misrouted(handled: Handled[], owners: (string | undefined)[]): string[] {
  return handled.filter((h) => owners[h.partition] !== h.member).map((h) => `${h.key}/${h.s} (partition ${h.partition}) handled by ${h.who}, owner ${owners[h.partition] ?? "nobody"}`);
}

/** The partitions named by Go filter subjects (`<p>.<filter>`), deduplicated, in order. */
export const partitionsOfFilters = (filters: string[]): number[] => [...new Set(filters.map((f) => Number(f.split(".")[0])))];

/** Milliseconds to wait without a condition (only where absence must be observed). */
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
