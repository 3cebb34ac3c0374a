/**
 * One elastic member instance in its own process, for the randomized soak test
 * (test/integration/soak.test.ts), so the test can kill it with SIGKILL.
 *
 *   node dist/test/helpers/soak-member-child.js '<json SoakChildSettings>'
 *
 * The handler sleeps for the latency the publisher drew (`ms` in the payload) and
 * throws for poison messages. Every handler run is written to the instance's log file
 * as two NDJSON lines, `start` and `end`, with a synchronous `writeSync` on a regular
 * file: the `end` line is in the kernel before the handler returns, i.e. before the
 * engine acks, so a kill -9 after the ack can never lose the record of a handled
 * message (a pipe to the parent would leave that to the stream's buffering). Status
 * events, and the connection's own events, go to the same file. stdout carries only `{"ev":"ready"}`.
 *
 * The instance stops cleanly on SIGTERM or when its stdin closes, so it never
 * outlives the test. With `autoJoin` (test/integration/autoscale-soak.test.ts) it adds
 * its member to the group by itself and takes it out when the member's last instance
 * stops; without `deadLetterSubject` a poison key blocks and is parked.
 */
import { openSync, writeSync } from "node:fs";
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { elasticConsume, type AutoJoinOptions, type ConcurrencyMode } from "../../src/index.js";
import type { SoakLogLine, SoakPayload } from "./soak-log.js";

/** What the parent passes in argv[2]. */
export interface SoakChildSettings {
  url: string;
  stream: string;
  group: string;
  member: string;
  ackWaitMs: number;
  mode: ConcurrencyMode;
  /** Where a poison message goes after `maxDeliver` attempts; without one its key blocks (and is parked). */
  deadLetterSubject?: string;
  maxDeliver: number;
  backoffMs: number[];
  /** Count each attempt before it starts (`retry.exactAttempts`). */
  exactAttempts?: boolean;
  /** The NDJSON file this instance appends its records to. */
  logFile: string;
  /** Join the group by itself (a lease per instance) instead of being added by the test. */
  autoJoin?: AutoJoinOptions;
}

const s = JSON.parse(process.argv[2] ?? "{}") as SoakChildSettings;
const fd = openSync(s.logFile, "a");
const pid = process.pid;
const now = (): number => performance.timeOrigin + performance.now();
const record = (line: SoakLogLine): void => void writeSync(fd, JSON.stringify(line) + "\n");
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// A scale-down may come while the instance is still starting (its consume waits for its consumer):
// it is noted now and carried out once the member exists, as a process with a SIGTERM handler does.
const stopping: { asked: boolean; exit?: () => void } = { asked: false };
const askStop = (): void => {
  stopping.asked = true;
  stopping.exit?.();
};
process.on("SIGTERM", askStop);
const nc = await connect({ servers: s.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
// The connection's own events (disconnect, reconnect, a server error such as a slow-consumer
// cut) go into the log as `connection_<type>` status lines: an ack written just before a cut
// can be lost with the socket, and a failed run's timeline must show that.
void (async () => {
  for await (const c of nc.status()) {
    const detail = "error" in c && c.error instanceof Error ? c.error.message : undefined;
    record({ ev: "status", pid, at: now(), type: `connection_${c.type}`, ...(detail === undefined ? {} : { detail }) });
  }
})();
let runs = 0;
const member = await elasticConsume(jetstream(nc), {
  stream: s.stream,
  group: s.group,
  member: s.member,
  concurrency: s.mode,
  consumerConfig: { ack_wait: s.ackWaitMs * 1_000_000 },
  retry: { maxDeliver: s.maxDeliver, backoffMs: s.backoffMs, ...(s.exactAttempts ? { exactAttempts: true } : {}) },
  ...(s.deadLetterSubject === undefined ? {} : { deadLetterSubject: s.deadLetterSubject }),
  ...(s.autoJoin === undefined ? {} : { autoJoin: s.autoJoin }),
  // The handler ignores msg.signal on purpose: a handler that does not cooperate with
  // the drain timeout is the case where the engine must keep the message to itself.
  handler: async (msg) => {
    // The start's time is read first: the engine decided to start this run right before this line. Reading it
    // after parsing the payload (milliseconds for a large one) would date a run the engine started before a
    // SIGSTOP to after the SIGCONT, a start that the checker never excuses.
    const at = now();
    const p = msg.json<SoakPayload>();
    const run = ++runs;
    record({ ev: "start", pid, run, key: p.key, seq: p.seq, at, dc: msg.info.deliveryCount });
    let ok = false;
    try {
      if (p.ms > 0) await sleep(p.ms);
      if (p.poison) throw new Error(`poison message ${p.key}/${p.seq}`);
      ok = true;
    } finally {
      record({ ev: "end", pid, run, key: p.key, seq: p.seq, at: now(), ok, aborted: msg.signal.aborted });
    }
  },
});
process.stdout.write(JSON.stringify({ ev: "ready", pid }) + "\n");
void (async () => {
  for await (const e of member.status()) {
    // An error's code and message go into the log: a failed run names what the server said.
    const detail = e.type === "consumer_error" ? `${e.error.code}: ${e.error.message}` : undefined;
    // What the instance owned and when it was pinned or held: a failed run's timeline follows a key's partition with it.
    const info =
      e.type === "joined" || e.type === "partitions_changed"
        ? `partitions ${e.partitions.join(",") || "none"}`
        : e.type === "pinned"
          ? `pin ${e.pinId}`
          : e.type === "consumer_lost" || e.type === "idle"
            ? e.reason
            : e.type === "starts_held"
              ? `${e.reason} ${e.durationMs} ms`
              : // Which message a failure, a dead letter, a block or a failed ack was about: a poison message's attempts can be followed across instances.
                e.type === "handler_error" || e.type === "dead_lettered" || e.type === "blocked" || e.type === "unblocked" || e.type === "ack_failed"
                ? `${e.subject} seq ${e.seq}${"attempt" in e ? ` attempt ${e.attempt}` : ""}${"outcome" in e ? ` ${e.outcome}` : ""}${e.type === "ack_failed" ? `: ${e.error instanceof Error ? e.error.message : String(e.error)}` : ""}`
                : undefined;
    record({ ev: "status", pid, at: now(), type: e.type, ...(detail === undefined ? {} : { detail }), ...(info === undefined ? {} : { info }) });
  }
})();

let exiting = false;
const exit = async (): Promise<void> => {
  if (exiting) return;
  exiting = true;
  await member.stop();
  await nc.close();
  process.exit(0);
};
stopping.exit = () => void exit();
if (stopping.asked) stopping.exit();
process.stdin.on("end", () => void exit());
process.stdin.on("close", () => void exit());
process.stdin.resume();
const err = await member.closed();
// The member stopped on its own (not via exit()): the parent counts this as an unexpected exit.
if (!exiting) {
  record({ ev: "closed", pid, at: now(), error: err?.message ?? null });
  process.exit(3);
}
