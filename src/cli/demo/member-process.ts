/**
 * One member instance of the demo, run as its own process so that the demo can
 * really kill it. Prints one JSON line per handled message and per status event.
 *
 *   node member-process.js <server-url> <stream> <group> <member> <instance> <handler-ms>
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { elasticConsume } from "../../index.js";

const [url = "", stream = "", group = "", member = "", instance = "", handlerMs = "5"] = process.argv.slice(2);
const delay = Number(handlerMs);
const emit = (line: object): void => {
  process.stdout.write(JSON.stringify(line) + "\n");
};

const nc = await connect({ servers: url, name: `demo-${instance}` });
const consumer = await elasticConsume(jetstream(nc), {
  stream,
  group,
  member,
  consumerConfig: { ack_policy: "explicit", max_ack_pending: 1, ack_wait: 2_000_000_000 },
  handler: async (msg) => {
    const at = performance.timeOrigin + performance.now();
    const order = msg.json<{ customer: string; seq: number }>();
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    emit({ ev: "msg", member, instance, key: order.customer, seq: order.seq, partition: msg.partition, at });
  },
});
emit({ ev: "ready", member, instance });
void (async () => {
  for await (const s of consumer.status()) {
    const { type } = s;
    emit({ ev: "status", member, instance, type, ...(s.type === "partitions_changed" || s.type === "joined" ? { partitions: s.partitions } : {}) });
  }
})();
const shutdown = (): void => {
  void consumer.stop().then(() => nc.close()).then(() => process.exit(0));
};
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
const error = await consumer.closed();
if (error) {
  emit({ ev: "error", member, instance, message: error.message });
  process.exit(1);
}
