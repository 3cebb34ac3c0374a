/**
 * A static-group member instance in its own process, for crash (kill -9) tests.
 *
 *   node dist/test/helpers/static-member-child.js '<json args>'
 *
 * args: { url, stream, group, member, ackWaitMs, maxAckPending?, delayMs? }.
 * Writes NDJSON lines on stdout: `{"event":"ready"}` once consuming,
 * `{"event":"msg","key","seq","partition","pinId","deliveryCount"}` for each handled
 * message (written before the handler returns, i.e. before the ack), and
 * `{"event":"status","type"}` for the member's status events. It stops cleanly and
 * exits when its stdin closes (so it never outlives the test).
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { staticConsume } from "../../src/index.js";

interface ChildArgs {
  url: string;
  stream: string;
  group: string;
  member: string;
  ackWaitMs: number;
  maxAckPending?: number;
  delayMs?: number;
}

const args = JSON.parse(process.argv[2] ?? "{}") as ChildArgs;
const out = (o: object): void => {
  process.stdout.write(JSON.stringify(o) + "\n");
};

const nc = await connect({ servers: args.url });
const js = jetstream(nc);
const member = await staticConsume(js, {
  stream: args.stream,
  group: args.group,
  member: args.member,
  consumerConfig: {
    ack_wait: args.ackWaitMs * 1_000_000,
    ...(args.maxAckPending === undefined ? {} : { max_ack_pending: args.maxAckPending }),
  },
  handler: async (msg) => {
    const { k, s } = msg.json<{ k: string; s: number }>();
    out({ event: "msg", key: k, seq: s, partition: msg.partition, pinId: msg.pinId, deliveryCount: msg.info.deliveryCount });
    if (args.delayMs) await new Promise((r) => setTimeout(r, args.delayMs));
  },
});
void (async () => {
  for await (const s of member.status()) out({ event: "status", type: s.type });
})();
out({ event: "ready" });

let exiting = false;
const exit = async (): Promise<void> => {
  if (exiting) return;
  exiting = true;
  await member.stop();
  await nc.close();
  process.exit(0);
};
process.stdin.on("end", () => void exit());
process.stdin.on("close", () => void exit());
process.stdin.resume();
