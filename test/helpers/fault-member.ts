/** Runs test/helpers/fault-member-child.js instances; their handler runs go into a {@link FaultLog}. */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { FaultLog, FaultRun } from "./fault-check.js";

const CHILD = fileURLToPath(new URL("./fault-member-child.js", import.meta.url));

/** What a fault member child runs (an elastic member, default options but AckWait). */
export interface FaultChildSettings {
  url: string;
  stream: string;
  group: string;
  member: string;
  /** The instance's name in the log. */
  who: string;
  ackWaitMs: number;
  /** Asynchronous work per message, in ms. */
  workMs?: number;
  /** Block synchronously for `payload.block` ms on a message's first delivery. */
  honourBlock?: boolean;
  /** Synchronous work in every handler run before its first await, in ms. */
  syncMs?: number;
  /** The member's concurrency mode (default serial). */
  concurrency?: "serial" | "partition" | "key";
}

/** A running child instance. */
export interface FaultChild {
  readonly who: string;
  readonly child: ChildProcess;
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;
  /** Synchronous blocks it went through. */
  readonly blocks: { key: string; seq: number; from: number; to: number }[];
  /** Member status and connection events, in order. */
  readonly events: { ev: "status" | "conn"; type: string; at: number }[];
  kill(): Promise<void>;
  /** SIGTERM (the instance stops gracefully), SIGKILL after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
}

export function startFaultChild(settings: FaultChildSettings, log: FaultLog): FaultChild {
  const child = spawn(process.execPath, [CHILD, JSON.stringify(settings)], { stdio: ["ignore", "pipe", "inherit"] });
  let markReady!: () => void;
  const open = new Map<number, FaultRun>();
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const alive = (): boolean => child.exitCode === null && child.signalCode === null;
  const c: FaultChild = {
    who: settings.who,
    child,
    ready: new Promise((r) => (markReady = r)),
    exited,
    blocks: [],
    events: [],
    async kill() {
      if (alive()) child.kill("SIGKILL");
      await exited;
    },
    async stop(graceMs = 10_000) {
      if (alive()) child.kill("SIGTERM");
      const timer = setTimeout(() => alive() && child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
  createInterface({ input: child.stdout }).on("line", (line) => {
    const e = JSON.parse(line) as { ev: string; n?: number; key?: string; seq?: number; dc?: number; pin?: string | null; at?: number; from?: number; to?: number; type?: string };
    if (e.ev === "ready") markReady();
    else if (e.ev === "start" && e.n !== undefined) {
      open.set(e.n, log.begin({ who: settings.who, key: e.key ?? "", seq: e.seq ?? 0, deliveryCount: e.dc ?? 0, pinId: e.pin ?? undefined }, e.at));
    } else if (e.ev === "end" && e.n !== undefined) {
      const run = open.get(e.n);
      open.delete(e.n);
      if (run) log.end(run, e.at);
    } else if (e.ev === "block") c.blocks.push({ key: e.key ?? "", seq: e.seq ?? 0, from: e.from ?? 0, to: e.to ?? 0 });
    else if (e.ev === "status" || e.ev === "conn") c.events.push({ ev: e.ev, type: e.type ?? "", at: e.at ?? 0 });
  });
  return c;
}
