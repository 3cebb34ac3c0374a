/** Runs test/helpers/member-child.js instances and collects what they handled. */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { HandledLog } from "./keyed-load.js";

const CHILD = fileURLToPath(new URL("./member-child.js", import.meta.url));

/** A member instance in its own process. */
export interface ChildMember {
  child: ChildProcess;
  ready: Promise<void>;
  exited: Promise<void>;
  /** Messages this instance handled. */
  handled: number;
  /** Whether this instance has handled a message since `since` (performance-clock ms). */
  handledSince(since: number): boolean;
  kill(): Promise<void>;
  stop(): Promise<void>;
}

/** What a member child runs. */
export interface ChildSettings {
  url: string;
  flavour: "static" | "elastic";
  stream: string;
  group: string;
  member: string;
  ackWaitMs: number;
  /** The handler's time per message. */
  handlerMs?: number;
  /** The concurrency mode (default serial). */
  concurrency?: "serial" | "partition" | "key";
  /** The depth: buffered messages, and the consumer's max_ack_pending (default 1, Go cg's strict template). */
  maxBuffered?: number;
  /** Handlers at once in partition and key modes. */
  maxInFlight?: number;
}

/** Starts a member child whose handled messages go into `log`. */
export function startChildMember(settings: ChildSettings, log: HandledLog): ChildMember {
  const child = spawn(process.execPath, [CHILD, JSON.stringify(settings)], { stdio: ["ignore", "pipe", "inherit"] });
  let markReady!: () => void;
  let last = 0;
  const m: ChildMember = {
    child,
    ready: new Promise((r) => (markReady = r)),
    exited: new Promise((r) => child.once("exit", () => r())),
    handled: 0,
    handledSince: (since) => last > since,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await m.exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await m.exited;
    },
  };
  createInterface({ input: child.stdout }).on("line", (line) => {
    const ev = JSON.parse(line) as { ev: string; key?: string; seq?: number; at?: number };
    if (ev.ev === "ready") markReady();
    else if (ev.ev === "msg") {
      m.handled += 1;
      last = ev.at ?? 0;
      log.records.push({ key: ev.key ?? "", seq: ev.seq ?? 0, at: ev.at ?? 0 });
    }
  });
  return m;
}
