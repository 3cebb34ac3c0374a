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

const FLEET = fileURLToPath(new URL("../fleet-process.js", import.meta.url));

/** A process hosting many member instances on one connection (bench/fleet-process.ts). */
export interface FleetProcess {
  child: ChildProcess;
  /** Resolves when every instance it was started with runs (with the time it said so); rejects if one failed to start. */
  ready: Promise<number>;
  /** Called with each partition's first handled message in this process. */
  onPartition: ((partition: number, at: number) => void) | undefined;
  /** Resolves with the time of the first message `member`'s instance here handles. */
  first(member: string): Promise<number>;
  /** Starts one more instance of `member`; resolves once it runs. */
  start(member: string): Promise<void>;
  /** Samples the process's memory. */
  rss(): Promise<{ rss: number; heap: number; instances: number }>;
  /** Closes its stdin (it stops every instance and exits), SIGKILL after 20 s. */
  stop(): Promise<void>;
}

/** Starts `node fleet-process.js <settings>` (with extra node flags, e.g. --cpu-prof). */
export function startFleetProcess(settings: object, nodeFlags: string[] = []): FleetProcess {
  const child = spawn(process.execPath, [...nodeFlags, FLEET, JSON.stringify(settings)], { stdio: ["pipe", "pipe", "inherit"] });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const waiting = new Map<string, { resolve: (v: never) => void; reject: (e: Error) => void }[]>();
  const firsts = new Map<string, number>();
  const firstWaiters = new Map<string, (at: number) => void>();
  const wait = <T>(key: string): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const list = waiting.get(key) ?? [];
      list.push({ resolve: resolve, reject });
      waiting.set(key, list);
    });
  const settle = (key: string, value: unknown, error?: Error): void => {
    const list = waiting.get(key) ?? [];
    waiting.delete(key);
    for (const w of list) {
      if (error) w.reject(error);
      else w.resolve(value as never);
    }
  };
  const ready = wait<number>("ready");
  ready.catch(() => undefined);
  void exited.then(() => {
    for (const key of [...waiting.keys()]) settle(key, undefined, new Error(`a fleet process exited (code ${String(child.exitCode)}) while waiting for ${key}`));
  });
  const handle: FleetProcess = {
    child,
    ready,
    onPartition: undefined,
    first(member) {
      const at = firsts.get(member);
      if (at !== undefined) return Promise.resolve(at);
      return new Promise((resolve) => firstWaiters.set(member, resolve));
    },
    start(member) {
      const started = wait<void>(`started:${member}`);
      child.stdin?.write(JSON.stringify({ cmd: "start", member }) + "\n");
      return started;
    },
    rss() {
      const sampled = wait<{ rss: number; heap: number; instances: number }>("rss");
      child.stdin?.write(JSON.stringify({ cmd: "rss" }) + "\n");
      return sampled;
    },
    async stop() {
      child.stdin?.end();
      await Promise.race([exited, new Promise((r) => setTimeout(r, 20_000).unref()).then(() => child.kill("SIGKILL"))]);
      await exited;
    },
  };
  createInterface({ input: child.stdout as NodeJS.ReadableStream }).on("line", (line) => {
    let ev: { ev?: string; p?: number; at?: number; member?: string; error?: string; rss?: number; heap?: number; instances?: number };
    try {
      ev = JSON.parse(line) as typeof ev;
    } catch {
      return;
    }
    if (ev.ev === "ready") settle("ready", ev.at ?? 0);
    else if (ev.ev === "partition") handle.onPartition?.(ev.p ?? -1, ev.at ?? 0);
    else if (ev.ev === "first" && ev.member) {
      firsts.set(ev.member, ev.at ?? 0);
      firstWaiters.get(ev.member)?.(ev.at ?? 0);
    } else if (ev.ev === "started" && ev.member) settle(`started:${ev.member}`, undefined);
    else if (ev.ev === "rss") settle("rss", { rss: ev.rss ?? 0, heap: ev.heap ?? 0, instances: ev.instances ?? 0 });
    else if (ev.ev === "error") settle(ev.member ? `started:${ev.member}` : "ready", undefined, new Error(`a fleet process failed to start an instance: ${ev.error ?? ""}`));
  });
  return handle;
}

const HOLDS = fileURLToPath(new URL("../holds-process.js", import.meta.url));

/** An event a holds child printed (see bench/holds-process.ts). */
export interface HoldsEvent {
  ev: "ready" | "start" | "status" | "conn";
  at: number;
  type?: string;
  key?: string;
  seq?: number;
  dc?: number;
  reason?: string;
  durationMs?: number;
}

/** A running holds child and what it printed so far. */
export interface HoldsProcess {
  readonly who: string;
  readonly ready: Promise<void>;
  readonly events: HoldsEvent[];
  /** SIGTERM (the instance stops), SIGKILL after 10 s. */
  stop(): Promise<void>;
}

/** Starts `node holds-process.js <settings>` as instance `who`. */
export function startHoldsProcess(who: string, settings: object): HoldsProcess {
  const child = spawn(process.execPath, [HOLDS, JSON.stringify(settings)], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const events: HoldsEvent[] = [];
  let markReady!: () => void;
  const ready = new Promise<void>((r) => (markReady = r));
  createInterface({ input: child.stdout }).on("line", (line) => {
    let e: HoldsEvent;
    try {
      e = JSON.parse(line) as HoldsEvent;
    } catch {
      return;
    }
    events.push(e);
    if (e.ev === "ready") markReady();
  });
  return {
    who,
    ready: Promise.race([ready, exited.then(() => Promise.reject(new Error(`holds instance ${who} exited before it was ready`)))]),
    events,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
