/**
 * A member instance in its own process, for fault tests whose fault stalls a whole
 * process (an event-loop block): `node fault-member-child.js '<json settings>'`.
 * Prints one JSON line per event: `ready`, `start` and `end` of every handler run (with
 * key, sequence, delivery count and pin id), `block` (a synchronous block, from and
 * to), the member's `status` events and the connection's `conn` events. Times are
 * `performance.timeOrigin + performance.now()`.
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { elasticConsume } from "../../src/index.js";
import type { FaultChildSettings } from "./fault-member.js";
import type { FaultPayload } from "./fault-check.js";

const s = JSON.parse(process.argv[2] ?? "{}") as FaultChildSettings;
const clock = (): number => performance.timeOrigin + performance.now();
const out = (o: object): void => void process.stdout.write(JSON.stringify(o) + "\n");

const nc = await connect({ servers: s.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
void (async () => {
  for await (const st of nc.status()) out({ ev: "conn", type: st.type, at: clock() });
})();
let runs = 0;
const member = await elasticConsume(jetstream(nc), {
  stream: s.stream,
  group: s.group,
  member: s.member,
  consumerConfig: { ack_wait: s.ackWaitMs * 1_000_000 },
  ...(s.concurrency ? { concurrency: s.concurrency } : {}),
  handler: async (msg) => {
    const p = msg.json<FaultPayload>();
    const n = ++runs;
    out({ ev: "start", n, key: p.key, seq: p.seq, dc: msg.info.deliveryCount, pin: msg.pinId ?? null, at: clock() });
    try {
      if (s.syncMs) {
        // Synchronous work before the first await: the dispatch loop runs it before it starts the next lane.
        const from = clock();
        while (clock() - from < s.syncMs) {
          // busy
        }
      }
      if (s.honourBlock && p.block && msg.info.deliveryCount === 1) {
        // A synchronous block: nothing else in this process runs meanwhile (timers, sockets).
        const from = clock();
        while (clock() - from < p.block) {
          // busy
        }
        out({ ev: "block", key: p.key, seq: p.seq, from, to: clock() });
      }
      if (s.workMs) await new Promise((r) => setTimeout(r, s.workMs));
    } finally {
      out({ ev: "end", n, at: clock() });
    }
  },
});
out({ ev: "ready" });
void (async () => {
  for await (const e of member.status()) out({ ev: "status", type: e.type, at: clock() });
})();
process.on("SIGTERM", () => {
  void member
    .stop()
    .then(() => nc.close())
    .finally(() => process.exit(0));
});
await member.closed();
out({ ev: "closed" });
await nc.close();
