/**
 * A member instance in a child process, for crash tests: `node member-child.js '<json settings>'`.
 * Prints `{"ev":"ready"}`, then one `{"ev":"msg","key","seq","at","pin"}` line per
 * handled message (at the start of its handler), and status events.
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { elasticConsume, staticConsume } from "../../src/index.js";
import type { LoadPayload } from "./keyed-load.js";
import type { ChildSettings } from "./member-process.js";

const s = JSON.parse(process.argv[2] ?? "{}") as ChildSettings;
const out = (o: object): void => void process.stdout.write(JSON.stringify(o) + "\n");
const nc = await connect({ servers: s.url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
const consume = s.flavour === "static" ? staticConsume : elasticConsume;
let poisonStarts = 0;
const member = await (consume as typeof elasticConsume)(jetstream(nc), {
  stream: s.stream,
  group: s.group,
  member: s.member,
  // Without a depth: Go cg's strict template (one message outstanding). With one: that many buffered, in the mode asked.
  consumerConfig: { ack_policy: "explicit", max_ack_pending: s.maxBuffered ?? 1, ack_wait: s.ackWaitMs * 1_000_000 },
  ...(s.concurrency ? { concurrency: s.concurrency } : {}),
  ...(s.maxBuffered ? { maxBuffered: s.maxBuffered } : {}),
  ...(s.maxInFlight ? { maxInFlight: s.maxInFlight } : {}),
  ...(s.autoJoin ? { autoJoin: s.autoJoin } : {}),
  ...(s.retry ? { retry: s.retry } : {}),
  ...(s.deadLetterSubject ? { deadLetterSubject: s.deadLetterSubject } : {}),
  handler: async (msg) => {
    const { key, seq } = msg.json<LoadPayload>();
    out({ ev: "msg", key, seq, p: msg.partition, at: performance.timeOrigin + performance.now(), pin: msg.pinId });
    if (s.poison && key === s.poison.key) {
      poisonStarts += 1;
      if (poisonStarts === s.poison.hangOnAttempt) await new Promise(() => undefined);
      throw new Error("poison");
    }
    if (s.handlerMs) await new Promise((r) => setTimeout(r, s.handlerMs));
  },
});
out({ ev: "ready" });
void (async () => {
  for await (const e of member.status()) {
    const detail = e.type === "membership_written" ? { added: e.added, removed: e.removed, revision: e.revision } : e.type === "joined" || e.type === "partitions_changed" ? { partitions: e.partitions } : e.type === "idle" ? { reason: e.reason } : {};
    out({ ev: "status", type: e.type, at: Date.now(), ...detail });
  }
})();
process.on("SIGTERM", () => void member.stop().then(() => nc.close()).then(() => process.exit(0)));
const err = await member.closed();
out({ ev: "closed", error: err?.message ?? null });
await nc.close();
