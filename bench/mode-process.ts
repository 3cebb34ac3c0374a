/**
 * One timed consume in its own process, for the engine A/B (bench/ab.ts): imports the
 * engine from the `dist/src/index.js` it is given (this tree's or an older build's),
 * consumes `count` messages with a no-op synchronous handler in one concurrency mode,
 * and prints one JSON line: msgs/s from the first handled message to the last, and
 * this process's CPU (user + system) per message over the same span.
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import type * as Engine from "../src/index.js";
import { clock } from "./lib/stats.js";

/** What the parent asks for. */
export interface ModeRunSettings {
  /** Absolute path of the engine's `dist/src/index.js`. */
  engine: string;
  url: string;
  flavour: "static" | "elastic";
  stream: string;
  group: string;
  member: string;
  mode: Engine.ConcurrencyMode;
  count: number;
}

/** What the child prints. */
export interface ModeRunResult {
  rate: number;
  cpuUsPerMsg: number;
}

const s = JSON.parse(process.argv[2] ?? "{}") as ModeRunSettings;
const engine = (await import(s.engine)) as typeof Engine;
const nc = await connect({ servers: s.url, name: `ab-${s.mode}` });
const js = jetstream(nc);
let n = 0;
let first = 0;
let cpuFirst = 0;
let done!: (r: ModeRunResult) => void;
const finished = new Promise<ModeRunResult>((r) => (done = r));
const cpu = (): number => {
  const u = process.cpuUsage();
  return u.user + u.system;
};
const consume = s.flavour === "static" ? engine.staticConsume : engine.elasticConsume;
const member = await consume(js, {
  stream: s.stream,
  group: s.group,
  member: s.member,
  consumerConfig: { ack_policy: "explicit" },
  ...(s.mode === "serial" ? {} : { concurrency: s.mode }),
  handler: () => {
    if (n === 0) {
      first = clock();
      cpuFirst = cpu();
    }
    if (++n === s.count) {
      const seconds = (clock() - first) / 1000;
      done({ rate: (s.count - 1) / seconds, cpuUsPerMsg: (cpu() - cpuFirst) / (s.count - 1) });
    }
  },
});
const result = await finished;
process.stdout.write(JSON.stringify(result) + "\n");
await member.stop();
await nc.close();
