/**
 * An elastic member in a process of its own, for parked-key tests that stop it with
 * signals. argv[2]: JSON { url, stream, group, member }. In `key` mode with retries and
 * no dead-letter subject; the first message of key "stuck" always fails, so that key
 * blocks. Prints one JSON line per handled message ({ handled: "<key>/<n>" }) and
 * { ready: true } once consuming.
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { elasticConsume } from "../../src/index.js";

const settings = JSON.parse(process.argv[2] ?? "{}") as { url: string; stream: string; group: string; member: string };
const nc = await connect({ servers: settings.url });
const member = await elasticConsume(jetstream(nc), {
  stream: settings.stream,
  group: settings.group,
  member: settings.member,
  concurrency: "key",
  retry: { maxDeliver: 2, backoffMs: 50 },
  consumerConfig: { ack_wait: 5_000_000_000 },
  handler: (msg) => {
    const { key, n } = msg.json<{ key: string; n: number }>();
    if (key === "stuck" && n === 0) throw new Error("always fails");
    process.stdout.write(`${JSON.stringify({ handled: `${key}/${n}` })}\n`);
  },
});
process.stdout.write(`${JSON.stringify({ ready: true })}\n`);
process.on("SIGTERM", () => void member.stop().then(() => nc.close()).then(() => process.exit(0)));
