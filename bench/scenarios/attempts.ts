/**
 * Scenario "attempts": the cost of `retry.exactAttempts` (each attempt counted in the
 * attempts bucket before its handler starts, the record removed once the message is
 * settled). One elastic member, 4 partitions, 100 keys, a no-op async handler, in
 * `serial` and `key` modes; throughput with `exactAttempts` as a ratio to the same
 * retry policy without it, in interleaved runs of the same process.
 */
import { addMembers, createElastic, elasticConsume, workQueueStreamName, type ConcurrencyMode } from "../../src/index.js";
import { plainStream, publishKeyed, until } from "../lib/env.js";
import { clock, median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

const PARTITIONS = 4;
const KEYS = 100;

const modes: { mode: ConcurrencyMode; maxInFlight: number }[] = [
  { mode: "serial", maxInFlight: 1 },
  { mode: "key", maxInFlight: 64 },
];

/** Messages per second one member handles from a filled work queue. */
async function oneRun(ctx: BenchContext, mode: ConcurrencyMode, maxInFlight: number, exactAttempts: boolean, count: number): Promise<number> {
  const conn = await ctx.server.connect();
  const stream = ctx.name(`att_${mode}`);
  await plainStream(conn.jsm, stream);
  await createElastic(conn.js, { stream, group: "g", maxMembers: PARTITIONS, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
  await addMembers(conn.js, stream, "g", ["m"]);
  await publishKeyed(conn.js, stream, count, KEYS);
  const wq = workQueueStreamName(stream, "g");
  await until(async () => (await conn.jsm.streams.info(wq)).state.messages >= count, 60_000, "sourcing", 50);
  let n = 0;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  let start = 0;
  const member = await elasticConsume(conn.js, {
    stream,
    group: "g",
    member: "m",
    concurrency: mode,
    ...(mode === "serial" ? {} : { maxInFlight }),
    retry: { maxDeliver: 5, exactAttempts },
    consumerConfig: { ack_wait: 30_000_000_000 },
    handler: async () => {
      if (n === 0) start = clock();
      if (++n === count) done();
      await Promise.resolve();
    },
  });
  await finished;
  const rate = (count - 1) / ((clock() - start) / 1000);
  await member.stop();
  await conn.jsm.streams.delete(stream);
  await conn.jsm.streams.delete(wq);
  return rate;
}

/** Scenario "attempts". */
export async function attempts(ctx: BenchContext): Promise<Row[]> {
  const count = ctx.quick ? 1000 : 10_000;
  const rows: Row[] = [];
  for (const m of modes) {
    const plain: number[] = [];
    const exact: number[] = [];
    for (let run = 0; run < ctx.runs; run++) {
      plain.push(await oneRun(ctx, m.mode, m.maxInFlight, false, count));
      exact.push(await oneRun(ctx, m.mode, m.maxInFlight, true, count));
      ctx.log(`  attempts ${m.mode} run ${run + 1}: ${plain[run]?.toFixed(0)} msgs/s without exactAttempts, ${exact[run]?.toFixed(0)} with`);
    }
    const base = median(plain);
    const value = median(exact);
    rows.push(
      { scenario: "attempts", variant: `${m.mode}, retry without exactAttempts`, value: base, unit: "msgs/s", samples: plain },
      {
        scenario: "attempts",
        variant: `${m.mode}, retry.exactAttempts`,
        value,
        unit: "msgs/s",
        baseline: `${m.mode} without exactAttempts`,
        ratio: value / base,
        samples: exact,
        note: "one awaited KV write before each attempt and a message delete after it",
      },
    );
  }
  return rows;
}
