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
  const member = startMember({ url: ctx.server.url, flavour: "static", stream, group: "g", member: "m", handlerMs: 0, ackWaitMs: 30_000 });
  try {
    await publishing;
    await until(() => member.handled() >= count, 1_800_000, "the member to handle everything", 100);
  } finally {
    await member.stop();
    await conn.jsm.streams.delete(stream);
  }
  const mb = (b: number): number => b / (1024 * 1024);
  const warm = member.rssSamples.filter((s) => s.n >= count * 0.1);
  const first = warm[0]?.rss ?? NaN;
  const peak = Math.max(...warm.map((s) => s.rss));
  const last = warm[warm.length - 1]?.rss ?? NaN;
  const growth = (last - first) / first;
  ctx.log(`  memory: ${warm.length} samples after warm-up, first ${mb(first).toFixed(1)} MiB, peak ${mb(peak).toFixed(1)} MiB, last ${mb(last).toFixed(1)} MiB`);
  return [
    { scenario: "6 memory", variant: `RSS after warm-up (10% of ${count.toLocaleString("en")})`, value: mb(first), unit: "MiB" },
    { scenario: "6 memory", variant: "RSS peak after warm-up", value: mb(peak), unit: "MiB" },
    { scenario: "6 memory", variant: "RSS at the end", value: mb(last), unit: "MiB", baseline: "RSS after warm-up", ratio: last / first, target: "flat (<= 1.10)", met: last / first <= 1.1, note: `growth ${(growth * 100).toFixed(1)}%` },
  ];
}
