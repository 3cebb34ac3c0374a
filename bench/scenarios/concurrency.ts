/**
 * Ordered concurrency inside one member: 16 partitions, 200 keys, a 5 ms handler.
 * Throughput of `serial`, `partition` and `key`, as ratios to `serial` measured in
 * the same run and to the ideal (in-flight limit ÷ latency).
 */
import { createStatic, staticConsume, type ConcurrencyMode } from "../../src/index.js";
import { partitionedStream, publishKeyed } from "../lib/env.js";
import { clock, median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

const LATENCY_MS = 5;
const PARTITIONS = 16;
const KEYS = 200;

interface Mode {
  mode: ConcurrencyMode;
  maxInFlight: number;
  /** Messages per run: about four seconds at the ideal rate. */
  count: (quick: boolean) => number;
}

const modes: Mode[] = [
  { mode: "serial", maxInFlight: 1, count: (q) => (q ? 200 : 800) },
  { mode: "partition", maxInFlight: 16, count: (q) => (q ? 1600 : 12_800) },
  { mode: "key", maxInFlight: 64, count: (q) => (q ? 4000 : 40_000) },
];

/** Scenario 7 (ordered concurrency). */
export async function concurrency(ctx: BenchContext): Promise<Row[]> {
  const conn = await ctx.server.connect();
  const results = new Map<ConcurrencyMode, number[]>();
  const handlerTimes: number[] = [];
  for (const m of modes) {
    const count = m.count(ctx.quick);
    const stream = ctx.name(`cc_${m.mode}`);
    await partitionedStream(conn.jsm, stream, PARTITIONS);
    await publishKeyed(conn.js, stream, count * ctx.runs, KEYS);
    const samples: number[] = [];
    for (let run = 0; run < ctx.runs; run++) {
      const group = `g${run}`;
      await createStatic(conn.js, { stream, group, maxMembers: PARTITIONS, members: ["m"] });
      let n = 0;
      let done!: () => void;
      const finished = new Promise<void>((r) => (done = r));
      const start = clock();
      const member = await staticConsume(conn.js, {
        stream,
        group,
        member: "m",
        concurrency: m.mode,
        maxInFlight: m.maxInFlight,
        consumerConfig: { ack_wait: 30_000_000_000 },
        handler: async () => {
          const t = clock();
          await new Promise((r) => setTimeout(r, LATENCY_MS));
          if (handlerTimes.length < 2000) handlerTimes.push(clock() - t);
          if (++n === count) done();
        },
      });
      await finished;
      samples.push(count / ((clock() - start) / 1000));
      await member.stop();
      ctx.log(`  concurrency ${m.mode} run ${run + 1}: ${samples[run]?.toFixed(0)} msgs/s`);
    }
    results.set(m.mode, samples);
  }
  const serial = median(results.get("serial") ?? []);
  const realLatency = median(handlerTimes);
  return modes.map((m) => {
    const value = median(results.get(m.mode) ?? []);
    const ideal = (m.maxInFlight / LATENCY_MS) * 1000;
    const idealRatio = value / ideal;
    const target = m.mode === "serial" ? undefined : ">= 0.80 of ideal";
    return {
      scenario: "7 concurrency",
      variant: `${m.mode}${m.mode === "serial" ? "" : `, maxInFlight ${m.maxInFlight}`}`,
      value,
      unit: "msgs/s",
      baseline: "serial",
      ratio: value / serial,
      ...(target ? { target, met: idealRatio >= 0.8 } : {}),
      samples: results.get(m.mode) ?? [],
      note: `ideal ${ideal.toFixed(0)} msgs/s (${m.maxInFlight} ÷ ${LATENCY_MS} ms): ${(idealRatio * 100).toFixed(0)}% of ideal; a 5 ms setTimeout really took ${realLatency.toFixed(2)} ms (median)`,
    };
  });
}
