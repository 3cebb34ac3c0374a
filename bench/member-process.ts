/**
 * A member instance in its own process, for the scaling, failover and memory
 * scenarios. Reads its settings as JSON from argv[2]; prints JSON lines:
 * `ready`, `first` (its first handled message), `count` (every 100 ms while
 * handling), `rss` (every second) and `stopped`.
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { elasticConsume, staticConsume, type ConcurrencyMode } from "../src/index.js";
import { clock } from "./lib/stats.js";

interface Settings {
  url: string;
  flavour: "static" | "elastic";
  stream: string;
  group: string;
  member: string;
  handlerMs: number;
  ackWaitMs: number;
  maxAckPending?: number;
  concurrency?: ConcurrencyMode;
  maxInFlight?: number;
  /** Emit `done` (with its time) when this many messages were handled. */
  target?: number;
  /** False: Go's behaviour on a rebalance (no drain before giving partitions up). */
  handoff?: boolean;
  /** How often to report memory, in ms (default 1000). */
  sampleMs?: number;
}

const settings = JSON.parse(process.argv[2] ?? "{}") as Settings;
const emit = (line: object): void => void process.stdout.write(JSON.stringify(line) + "\n");
let handled = 0;
let reported = 0;

const nc = await connect({ servers: settings.url, name: `bench-${settings.member}` });
const consume = settings.flavour === "static" ? staticConsume : elasticConsume;
const member = await consume(jetstream(nc), {
  stream: settings.stream,
  group: settings.group,
  member: settings.member,
  consumerConfig: {
    ack_policy: "explicit",
    ack_wait: settings.ackWaitMs * 1_000_000,
    ...(settings.maxAckPending ? { max_ack_pending: settings.maxAckPending } : {}),
  },
  ...(settings.concurrency ? { concurrency: settings.concurrency } : {}),
  ...(settings.maxInFlight ? { maxInFlight: settings.maxInFlight } : {}),
  ...(settings.handoff === false ? { handoff: false } : {}),
  handler: async () => {
    if (handled === 0) emit({ ev: "first", at: clock() });
    if (settings.handlerMs > 0) await new Promise((r) => setTimeout(r, settings.handlerMs));
    handled += 1;
    if (handled === settings.target) {
      emit({ ev: "done", n: handled, at: clock() });
      sample();
    }
  },
});
const counter = setInterval(() => {
  if (handled !== reported) {
    reported = handled;
    emit({ ev: "count", n: handled, at: clock() });
  }
}, 100);
// With --expose-gc the live heap is measured after a full collection, which tells a leak from heap sizing.
const gc = (globalThis as { gc?: () => void }).gc;
function sample(): void {
  gc?.();
  const usage = process.memoryUsage();
  emit({ ev: "rss", n: handled, rss: usage.rss, heap: usage.heapUsed });
}
const rss = setInterval(sample, settings.sampleMs ?? 1000);
emit({ ev: "ready" });
const stop = (): void => {
  clearInterval(counter);
  clearInterval(rss);
  void member
    .stop()
    .then(() => nc.close())
    .then(() => {
      emit({ ev: "stopped", n: handled, at: clock() });
      process.exit(0);
    });
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
