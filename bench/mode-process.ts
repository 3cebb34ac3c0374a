/**
 * One timed consume in its own process, for the engine A/B (bench/ab.ts): imports the
 * engine from the `dist/src/index.js` it is given (this tree's or an older build's),
 * consumes `count` messages with a no-op synchronous handler in one concurrency mode,
 * and prints one JSON line: msgs/s from the first handled message to the last, this
 * process's CPU (user + system) per message over the same span, and its connection's
 * traffic over that span (see bench/ab.ts for the diagnostics it can add on stderr).
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
  /** The member's `pullBatch`, when not its default. */
  pullBatch?: number;
  /** The member's `maxBufferedBytes`, when not its default. */
  maxBufferedBytes?: number;
}

/** What the child prints. */
export interface ModeRunResult {
  rate: number;
  cpuUsPerMsg: number;
  /** Protocol messages this connection published (pulls, acks, keep-alives, requests) per 1,000 handled. */
  outPerThousand?: number;
  /** Protocol messages this connection received (deliveries, status messages, replies) per 1,000 handled. */
  inPerThousand?: number;
  /** Socket writes of this connection per 1,000 handled (counted on nats.js's transport). */
  writesPerThousand?: number;
}

const s = JSON.parse(process.argv[2] ?? "{}") as ModeRunSettings;
const engine = (await import(s.engine)) as typeof Engine;
const nc = await connect({ servers: s.url, name: `ab-${s.mode}` });
const js = jetstream(nc);
/** Diagnostics on stderr (bench/ab.ts): the status messages received, the sizes of the socket writes. */
const tallyStatuses = Boolean(process.env.AB_STATUS);
const recordWriteSizes = Boolean(process.env.AB_WRITE_SIZES);
let writes = 0;
const sizes: number[] = [];
// Counts the connection's socket writes (bench only: nats.js's transport is not public API).
const transport = (nc as unknown as { protocol?: { transport?: { send?: (frame: Uint8Array) => unknown } } }).protocol?.transport;
const send = transport?.send?.bind(transport);
if (transport && send) {
  transport.send = (frame: Uint8Array) => {
    writes += 1;
    if (recordWriteSizes) sizes.push(frame.length);
    return send(frame);
  };
}
let writesFirst = 0;
const statuses = new Map<string, number>();
const protocol = (nc as unknown as { protocol?: { processMsg?: (msg: { sid: number; hdr: number }, data: Uint8Array) => void } }).protocol;
const processMsg = protocol?.processMsg?.bind(protocol);
if (tallyStatuses && protocol && processMsg) {
  protocol.processMsg = (msg, data) => {
    if (msg.hdr > 0 && msg.hdr === data.length) {
      const line = new TextDecoder().decode(data.subarray(0, Math.min(data.length, 60))).split("\r\n")[0] ?? "";
      statuses.set(line, (statuses.get(line) ?? 0) + 1);
    }
    processMsg(msg, data);
  };
}
let n = 0;
let first = 0;
let cpuFirst = 0;
let outFirst = 0;
let inFirst = 0;
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
  ...(s.pullBatch !== undefined ? { pullBatch: s.pullBatch } : {}),
  ...(s.maxBufferedBytes !== undefined ? { maxBufferedBytes: s.maxBufferedBytes } : {}),
  handler: () => {
    if (n === 0) {
      first = clock();
      cpuFirst = cpu();
      outFirst = nc.stats().outMsgs;
      inFirst = nc.stats().inMsgs;
      writesFirst = writes;
    }
    if (++n === s.count) {
      const seconds = (clock() - first) / 1000;
      const outPerThousand = ((nc.stats().outMsgs - outFirst) / (s.count - 1)) * 1000;
      done({ rate: (s.count - 1) / seconds, cpuUsPerMsg: (cpu() - cpuFirst) / (s.count - 1), outPerThousand, inPerThousand: ((nc.stats().inMsgs - inFirst) / (s.count - 1)) * 1000, writesPerThousand: ((writes - writesFirst) / (s.count - 1)) * 1000 });
    }
  },
});
const result = await finished;
if (tallyStatuses) process.stderr.write(`statuses: ${JSON.stringify([...statuses])}\n`);
if (recordWriteSizes) {
  const sorted = [...sizes].sort((a, b) => a - b);
  process.stderr.write(`write sizes: n ${sorted.length}, median ${sorted[sorted.length >> 1]}, p90 ${sorted[Math.floor(sorted.length * 0.9)]}, max ${sorted[sorted.length - 1]}, small(<200) ${sorted.filter((x) => x < 200).length}\n`);
}
process.stdout.write(JSON.stringify(result) + "\n");
await member.stop();
await nc.close();
