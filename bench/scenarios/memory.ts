/**
 * Scenario 6, memory: the RSS of one member process while it handles 1,000,000
 * messages. Flat means no growth after warm-up.
 */
import { createStatic } from "../../src/index.js";
import { partitionedStream, publishKeyed, until } from "../lib/env.js";
import { startMember } from "../lib/process.js";
import type { BenchContext, Row } from "../lib/types.js";

/** Scenario 6. */
export async function memory(ctx: BenchContext): Promise<Row[]> {
  const conn = await ctx.server.connect();
  const count = ctx.quick ? 20_000 : 1_000_000;
  const stream = ctx.name("mem");
  await partitionedStream(conn.jsm, stream, 16);
  const publishing = publishKeyed(conn.js, stream, count, ctx.keys);
  await createStatic(conn.js, { stream, group: "g", maxMembers: 16, members: ["m"] });
  const member = startMember({ url: ctx.server.url, flavour: "static", stream, group: "g", member: "m", handlerMs: 0, ackWaitMs: 30_000, target: count, sampleMs: ctx.quick ? 50 : 1000 }, ["--expose-gc"]);
  try {
    await publishing;
    await until(() => member.handled() >= count, 1_800_000, "the member to handle everything", 100);
  } finally {
    await member.stop();
    await conn.jsm.streams.delete(stream);
  }
  const mb = (b: number): number => b / (1024 * 1024);
  // Warm-up is the first half: V8 sizes its heap and nats.js its buffers; flat means no growth after it.
  const at = (fraction: number): { rss: number; heap: number } | undefined => member.rssSamples.find((s) => s.n >= count * fraction);
  const half = at(0.5);
  const last = member.rssSamples[member.rssSamples.length - 1];
  const afterWarmup = member.rssSamples.filter((s) => s.n >= count * 0.5);
  const peak = Math.max(...afterWarmup.map((s) => s.rss));
  if (!half || !last) throw new Error("memory: too few samples");
  const rssGrowth = last.rss / half.rss;
  const heapGrowth = last.heap / half.heap;
  ctx.log(`  memory: ${member.rssSamples.length} samples; at 50%: RSS ${mb(half.rss).toFixed(1)} MiB, live heap ${mb(half.heap).toFixed(1)} MiB; at the end: RSS ${mb(last.rss).toFixed(1)} MiB, live heap ${mb(last.heap).toFixed(1)} MiB`);
  const n = count.toLocaleString("en");
  return [
    { scenario: "6 memory", variant: `RSS halfway through ${n} messages (after warm-up)`, value: mb(half.rss), unit: "MiB" },
    { scenario: "6 memory", variant: "RSS peak in the second half", value: mb(peak), unit: "MiB" },
    { scenario: "6 memory", variant: "RSS at the end", value: mb(last.rss), unit: "MiB", baseline: "RSS halfway", ratio: rssGrowth, target: "flat (<= 1.10)", met: rssGrowth <= 1.1 },
    {
      scenario: "6 memory",
      variant: "live heap after a full GC, at the end",
      value: mb(last.heap),
      unit: "MiB",
      baseline: "live heap halfway",
      ratio: heapGrowth,
      target: "flat (<= 1.10)",
      met: heapGrowth <= 1.1,
      note: `${mb(half.heap).toFixed(1)} MiB halfway`,
    },
  ];
}
