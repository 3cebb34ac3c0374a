/**
 * A member instance in its own process for the holds scenario (bench/scenarios/holds.ts):
 * `node holds-process.js '<json settings>'`. Its handler may do synchronous work (so
 * the event loop does not read the socket meanwhile) and asynchronous work. Prints one
 * JSON line per event, times as `performance.timeOrigin + performance.now()`:
 * `ready`; `start` of every handler run (key and per-key sequence from the payload's
 * `k<key>:<seq>:` head, delivery count); the member's `status` events (with a hold's
 * reason and duration); the connection's `conn` events.
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { elasticConsume, staticConsume } from "../src/index.js";
import { clock } from "./lib/stats.js";

/** What the scenario asks an instance to run. */
export interface HoldsChildSettings {
  servers: string[];
  flavour: "static" | "elastic";
  stream: string;
  group: string;
  member: string;
  ackWaitMs: number;
  /** Synchronous work per handler run, in ms. */
  syncMs?: number;
  /** Asynchronous work per handler run, in ms. */
  workMs?: number;
  maxBufferedBytes?: number;
}

const s = JSON.parse(process.argv[2] ?? "{}") as HoldsChildSettings;
const out = (o: object): void => void process.stdout.write(JSON.stringify(o) + "\n");
const head = new TextDecoder();

const nc = await connect({ servers: s.servers, ignoreClusterUpdates: true, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
void (async () => {
  for await (const st of nc.status()) out({ ev: "conn", type: st.type, at: clock() });
})();
const consume = s.flavour === "static" ? staticConsume : elasticConsume;
const member = await consume(jetstream(nc), {
  stream: s.stream,
  group: s.group,
  member: s.member,
  consumerConfig: { ack_policy: "explicit", ack_wait: s.ackWaitMs * 1_000_000 },
  ...(s.maxBufferedBytes ? { maxBufferedBytes: s.maxBufferedBytes } : {}),
  handler: async (msg) => {
    // Only the head of a large payload is decoded.
    const [key, seq] = head.decode(msg.data.subarray(0, 40)).split(":");
    out({ ev: "start", key, seq: Number(seq), dc: msg.info.deliveryCount, at: clock() });
    if (s.syncMs) {
      const from = performance.now();
      while (performance.now() - from < (s.syncMs ?? 0)) {
        // synchronous work: nothing else in this process runs meanwhile
      }
    }
    if (s.workMs) await new Promise((r) => setTimeout(r, s.workMs));
  },
});
out({ ev: "ready", at: clock() });
void (async () => {
  for await (const e of member.status()) {
    out({ ev: "status", type: e.type, ...(e.type === "starts_held" ? { reason: e.reason, durationMs: e.durationMs } : {}), at: clock() });
  }
})();
process.on("SIGTERM", () => {
  void member
    .stop()
    .then(() => nc.close())
    .finally(() => process.exit(0));
});
await member.closed();
await nc.close();
