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
  /** Wall-clock ms of the first message this instance handled after `since` (wall-clock ms), if any. */
  firstHandledAfter(since: number): number | undefined;
  /** What this instance handled: key, sequence, partition and wall-clock ms at the handler's start. */
  records: { key: string; seq: number; p: number; at: number }[];
  /** Status events the instance reported, in order (type and details). */
  events: { type: string; at: number; [k: string]: unknown }[];
  /** Sends SIGSTOP / SIGCONT (a process stalled, as by a long GC pause). */
  pause(): void;
  resume(): void;
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
  /** Join with a lease (elastic). */
  autoJoin?: { leaseTtlMs?: number; settleMs?: number; assignment?: "balanced" | "sticky" };
  /** The failure policy. */
  retry?: { maxDeliver: number; backoffMs: number; exactAttempts?: boolean };
  /** Where messages that fail `maxDeliver` times go. */
  deadLetterSubject?: string;
  /** Messages of this key fail (each start is still reported); attempt number `hangOnAttempt` here never returns (the process is to be killed during it). */
  poison?: { key: string; hangOnAttempt?: number };
}

/** Starts a member child whose handled messages go into `log`. */
export function startChildMember(settings: ChildSettings, log: HandledLog): ChildMember {
  const child = spawn(process.execPath, [CHILD, JSON.stringify(settings)], { stdio: ["ignore", "pipe", "inherit"] });
  let markReady!: () => void;
  let last = 0;
  const times: number[] = [];
  const m: ChildMember = {
    child,
    ready: new Promise((r) => (markReady = r)),
    exited: new Promise((r) => child.once("exit", () => r())),
    handled: 0,
    handledSince: (since) => last > since,
    firstHandledAfter: (since) => times.find((t) => t > since),
    events: [],
    records: [],
    pause: () => void child.kill("SIGSTOP"),
    resume: () => void child.kill("SIGCONT"),
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
    const ev = JSON.parse(line) as { ev: string; key?: string; seq?: number; p?: number; at?: number; type?: string };
    if (ev.ev === "ready") markReady();
    else if (ev.ev === "status") m.events.push({ ...ev, type: ev.type ?? "", at: ev.at ?? Date.now() });
    else if (ev.ev === "msg") {
      m.handled += 1;
      last = ev.at ?? 0;
      times.push(ev.at ?? 0);
      m.records.push({ key: ev.key ?? "", seq: ev.seq ?? 0, p: ev.p ?? -1, at: ev.at ?? 0 });
      log.records.push({ key: ev.key ?? "", seq: ev.seq ?? 0, at: ev.at ?? 0 });
    }
  });
  return m;
}
