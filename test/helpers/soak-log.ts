/**
 * The records of the randomized soak test: the payload the publisher stamps, the
 * NDJSON lines each member child appends to its log file, and a reader that tails
 * those files (incrementally, so the parent can look at runs in flight while the load
 * goes on) and assembles handler runs from their `start` and `end` lines.
 */
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { prng } from "./load-harness.js";

/** The payload of a soak message: drawn by the publisher from the seed. */
export interface SoakPayload {
  key: string;
  /** Per-key sequence, 1, 2, 3… in publish order. */
  seq: number;
  /** How long the handler sleeps, in ms. */
  ms: number;
  /** The handler always throws for it. */
  poison: boolean;
  /** Padding that makes it a large message (hundreds of KB), when it is one. */
  pad?: string;
}

/** What {@link drawSoakWorkload} draws from. */
export interface SoakWorkloadShape {
  keys: number;
  ackWaitMs: number;
  /** Share of slow handlers: 20 ms to 3 × AckWait (the others take 0-20 ms). */
  slowRate: number;
  poisonRate: number;
  /** Share of large messages, padded to `largeBytes`. */
  largeRate: number;
  largeBytes: [number, number];
}

/** The messages to publish, drawn from the seed: same seed, same keys, latencies, poison and padding. */
export function drawSoakWorkload(seed: number, count: number, shape: SoakWorkloadShape): SoakPayload[] {
  const rng = prng(seed);
  const seqs = new Map<string, number>();
  const out: SoakPayload[] = [];
  for (let i = 0; i < count; i++) {
    const key = `k${Math.floor(rng() * shape.keys)}`;
    const slow = rng() < shape.slowRate;
    const spread = rng();
    const ms = slow ? 20 + spread * (3 * shape.ackWaitMs - 20) : spread * 20;
    const poison = rng() < shape.poisonRate;
    const large = rng() < shape.largeRate;
    const padBytes = Math.round(shape.largeBytes[0] + rng() * (shape.largeBytes[1] - shape.largeBytes[0]));
    const seq = (seqs.get(key) ?? 0) + 1;
    seqs.set(key, seq);
    out.push({ key, seq, ms: Math.round(ms), poison, ...(large ? { pad: "x".repeat(padBytes) } : {}) });
  }
  return out;
}

/** One line of a child's log file. Times are ms since the epoch (performance.timeOrigin + performance.now()). */
export type SoakLogLine =
  | { ev: "start"; pid: number; run: number; key: string; seq: number; at: number; dc: number }
  | { ev: "end"; pid: number; run: number; key: string; seq: number; at: number; ok: boolean; aborted: boolean }
  | { ev: "status"; pid: number; at: number; type: string; detail?: string; info?: string }
  | { ev: "closed"; pid: number; at: number; error: string | null };

/** One handler run, from its `start` line and (if it was written) its `end` line. */
export interface HandlerRun {
  pid: number;
  run: number;
  key: string;
  seq: number;
  /** Delivery count the server reported for this delivery. */
  dc: number;
  start: number;
  /** When the handler finished (before the ack); undefined when the process died first. */
  end?: number;
  /** True when the handler returned without throwing. */
  ok?: boolean;
  /** True when msg.signal had aborted by the end of the run. */
  aborted?: boolean;
}

/** The status events a failed run's timeline shows for the processes it names. */
const OWNERSHIP_EVENTS = new Set(["joined", "partitions_changed", "pinned", "unpinned", "starts_held", "consumer_lost", "idle", "lease_lost"]);

/** Tails the log files of every instance and keeps what they recorded. */
export class SoakLogReader {
  private readonly offsets = new Map<string, number>();
  private readonly partial = new Map<string, string>();
  private readonly runsById = new Map<string, HandlerRun>();
  /** Every run, in the order their start lines were read. */
  readonly runs: HandlerRun[] = [];
  /** Status event counts by type, over all instances. */
  readonly statusCounts = new Map<string, number>();
  /** The errors the members reported (`consumer_error`), with when and who. */
  readonly errors: { pid: number; at: number; detail: string }[] = [];
  /** The connections' own events (`connection_disconnect`, `connection_reconnect`, …), with when and who. */
  readonly connection: { pid: number; at: number; type: string; detail?: string }[] = [];
  /** Ownership and pin events (joined, partitions changed, pinned, unpinned, held, lost, idle), with what they said. */
  readonly ownership: { pid: number; at: number; type: string; info?: string }[] = [];
  /** Dead letters and blocked keys the members reported, with the message (`<subject> seq <work-queue seq>`). */
  readonly deadLettered: { pid: number; at: number; type: string; info?: string }[] = [];
  /** Members that stopped on their own, with their error. */
  readonly closed: { pid: number; at: number; error: string | null }[] = [];
  /** End lines without a start line (should be none). */
  orphanEnds = 0;

  /** Adds a file to tail (it may not exist yet). */
  add(file: string): void {
    if (!this.offsets.has(file)) this.offsets.set(file, 0);
  }

  /** Reads what was appended to every file since the last call. */
  poll(): void {
    for (const [file, offset] of this.offsets) {
      let size: number;
      try {
        size = statSync(file).size;
      } catch {
        continue; // not created yet
      }
      if (size <= offset) continue;
      const buf = Buffer.alloc(size - offset);
      const fd = openSync(file, "r");
      try {
        readSync(fd, buf, 0, buf.length, offset);
      } finally {
        closeSync(fd);
      }
      this.offsets.set(file, size);
      const text = (this.partial.get(file) ?? "") + buf.toString("utf8");
      const lines = text.split("\n");
      // A line is complete only once its newline is there.
      this.partial.set(file, lines.pop() ?? "");
      for (const line of lines) if (line) this.take(JSON.parse(line) as SoakLogLine);
    }
  }

  /** Runs whose start was read but whose end was not, by pid. */
  inFlightByPid(): Map<number, number> {
    const counts = new Map<number, number>();
    for (const r of this.runs) if (r.end === undefined) counts.set(r.pid, (counts.get(r.pid) ?? 0) + 1);
    return counts;
  }

  /** Distinct `key/seq` with a successful run. */
  handledOk(): Set<string> {
    const ids = new Set<string>();
    for (const r of this.runs) if (r.ok) ids.add(`${r.key}/${r.seq}`);
    return ids;
  }

  private take(line: SoakLogLine): void {
    switch (line.ev) {
      case "start": {
        const run: HandlerRun = { pid: line.pid, run: line.run, key: line.key, seq: line.seq, dc: line.dc, start: line.at };
        this.runsById.set(`${line.pid}/${line.run}`, run);
        this.runs.push(run);
        break;
      }
      case "end": {
        const run = this.runsById.get(`${line.pid}/${line.run}`);
        if (!run) {
          this.orphanEnds += 1;
          break;
        }
        run.end = line.at;
        run.ok = line.ok;
        run.aborted = line.aborted;
        break;
      }
      case "status":
        this.statusCounts.set(line.type, (this.statusCounts.get(line.type) ?? 0) + 1);
        if (line.type.startsWith("connection_")) this.connection.push({ pid: line.pid, at: line.at, type: line.type, ...(line.detail === undefined ? {} : { detail: line.detail }) });
        else if (line.detail !== undefined) this.errors.push({ pid: line.pid, at: line.at, detail: line.detail });
        if (line.type === "dead_lettered" || line.type === "blocked") this.deadLettered.push({ pid: line.pid, at: line.at, type: line.type, ...(line.info === undefined ? {} : { info: line.info }) });
        if (OWNERSHIP_EVENTS.has(line.type)) this.ownership.push({ pid: line.pid, at: line.at, type: line.type, ...(line.info === undefined ? {} : { info: line.info }) });
        break;
      case "closed":
        this.closed.push({ pid: line.pid, at: line.at, error: line.error });
        break;
    }
  }
}
