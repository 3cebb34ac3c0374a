/**
 * Scenario 3, scaling with members: a 5 ms handler, 16 partitions, 1 to 16 members
 * in separate processes. Throughput against the ideal members ÷ latency.
 */
import { createStatic } from "../../src/index.js";
import { partitionedStream, publishKeyed, until } from "../lib/env.js";
import { startMember } from "../lib/process.js";
import { clock, median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

const LATENCY_MS = 5;
const PARTITIONS = 16;

/** Scenario 3. */
export async function scaling(ctx: BenchContext): Promise<Row[]> {
  const conn = await ctx.server.connect();
  const rows: Row[] = [];
  for (const members of ctx.quick ? [1, 4] : [1, 2, 4, 8, 16]) {
    const ideal = (members / LATENCY_MS) * 1000;
    const count = Math.round(ideal * (ctx.quick ? 1 : 4));
    const samples: number[] = [];
    for (let run = 0; run < ctx.runs; run++) {
      const stream = ctx.name(`sc${members}`);
      await partitionedStream(conn.jsm, stream, PARTITIONS);
      await publishKeyed(conn.js, stream, count, ctx.keys);
      const names = Array.from({ length: members }, (_, i) => `m${String(i).padStart(2, "0")}`);
      await createStatic(conn.js, { stream, group: "g", maxMembers: PARTITIONS, members: names });
      const procs = names.map((member) =>
        startMember({ url: ctx.server.url, flavour: "static", stream, group: "g", member, handlerMs: LATENCY_MS, ackWaitMs: 30_000 }),
      );
      try {
        await Promise.all(procs.map((p) => p.ready));
        const firsts = await Promise.all(procs.map((p) => p.first));
        const start = Math.min(...firsts);
        await until(() => procs.reduce((n, p) => n + p.handled(), 0) >= count, 600_000, "all messages handled", 20);
        samples.push(count / ((clock() - start) / 1000));
      } finally {
        await Promise.all(procs.map((p) => p.stop()));
      }
      ctx.log(`  scaling ${members} members run ${run + 1}: ${samples[run]?.toFixed(0)} msgs/s (ideal ${ideal})`);
    }
    const value = median(samples);
    rows.push({ scenario: "3 scaling", variant: `${members} member${members > 1 ? "s" : ""}`, value, unit: "msgs/s", baseline: `ideal ${ideal} msgs/s`, ratio: value / ideal, samples });
  }
  return rows;
}
