/** Member instances in child processes, for the benchmarks. */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const MEMBER = fileURLToPath(new URL("../member-process.js", import.meta.url));

/** A running member process and what it reported. */
export interface MemberProcess {
  child: ChildProcess;
  ready: Promise<void>;
  exited: Promise<void>;
  first: Promise<number>;
  /** When the member reported reaching its target count. */
  done: Promise<number>;
  handled(): number;
  rssSamples: { n: number; rss: number; heap: number }[];
  /** SIGTERM, then wait for exit. */
  stop(): Promise<void>;
  /** SIGKILL, then wait for exit. */
  kill(): Promise<void>;
}

/** Starts `node member-process.js <settings>` (with extra node flags, e.g. --expose-gc). */
export function startMember(settings: object, nodeFlags: string[] = []): MemberProcess {
  return startProcess(process.execPath, [...nodeFlags, MEMBER, JSON.stringify(settings)]);
}

/** Starts any process that prints the member JSON lines (the Go driver too). */
export function startProcess(cmd: string, args: string[]): MemberProcess {
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "inherit"] });
  let handled = 0;
  let markReady!: () => void;
  let markFirst!: (at: number) => void;
  let markDone!: (at: number) => void;
  const rssSamples: { n: number; rss: number; heap: number }[] = [];
  const ready = new Promise<void>((r) => (markReady = r));
  const first = new Promise<number>((r) => (markFirst = r));
  const done = new Promise<number>((r) => (markDone = r));
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  createInterface({ input: child.stdout }).on("line", (line) => {
    let ev: { ev?: string; n?: number; at?: number; rss?: number; heap?: number };
    try {
      ev = JSON.parse(line) as typeof ev;
    } catch {
      return;
    }
    if (ev.ev === "ready") markReady();
    else if (ev.ev === "first") markFirst(ev.at ?? 0);
    else if (ev.ev === "done") {
      handled = Math.max(handled, ev.n ?? 0);
      markDone(ev.at ?? 0);
    }
    else if (ev.ev === "count" || ev.ev === "stopped") handled = Math.max(handled, ev.n ?? 0);
    else if (ev.ev === "rss") rssSamples.push({ n: ev.n ?? 0, rss: ev.rss ?? 0, heap: ev.heap ?? 0 });
  });
  const running = (): boolean => child.exitCode === null && child.signalCode === null;
  return {
    child,
    ready,
    exited,
    first,
    done,
    handled: () => handled,
    rssSamples,
    async stop() {
      if (running()) child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000)).then(() => child.kill("SIGKILL"))]);
      await exited;
    },
    async kill() {
      if (running()) child.kill("SIGKILL");
      await exited;
    },
  };
}
