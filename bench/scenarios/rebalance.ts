/**
 * Scenario 5, rebalance: in an elastic group under a steady load, the time from
 * addMembers returning to the new member's first message, and the duplicates the
 * change caused (handled − published, once the work queue is empty).
 */
import { addMembers, createElastic } from "../../src/index.js";
import { plainStream, until } from "../lib/env.js";
import { startMember } from "../lib/process.js";
import { clock, median, percentile } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

/** Scenario 5: with our handoff, and with Go's behaviour (no drain), side by side. */
export async function rebalance(ctx: BenchContext): Promise<Row[]> {
  return [...(await rebalanceWith(ctx, true)), ...(await rebalanceWith(ctx, false))];
}

async function rebalanceWith(ctx: BenchContext, handoff: boolean): Promise<Row[]> {
  const conn = await ctx.server.connect();
  const samples: number[] = [];
  let duplicates = 0;
  const rounds = ctx.quick ? 2 : 10;
  const label = handoff ? "handoff" : "Go's behaviour (handoff: false)";
  for (let run = 0; run < rounds; run++) {
    const stream = ctx.name("rb");
    await plainStream(conn.jsm, stream);
    await createElastic(conn.js, { stream, group: "g", maxMembers: 16, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(conn.js, stream, "g", ["m1"]);
    // A 20 ms handler and a deeper buffer: a change then usually finds messages in flight.
    const settings = { url: ctx.server.url, flavour: "elastic", stream, group: "g", handlerMs: 20, ackWaitMs: 5000, maxAckPending: 20, handoff };
    const m1 = startMember({ ...settings, member: "m1" });
    const m2 = startMember({ ...settings, member: "m2" });
    let published = 0;
    let running = true;
    const load = (async () => {
      while (running) {
        await conn.js.publish(`${stream}.k${published % 200}`, "x");
        published += 1;
        await new Promise((r) => setTimeout(r, 5));
      }
    })();
    try {
      await Promise.all([m1.ready, m2.ready, m1.first]);
      await new Promise((r) => setTimeout(r, 300));
      await addMembers(conn.js, stream, "g", ["m2"]);
      const added = clock();
      samples.push((await m2.first) - added);
      await new Promise((r) => setTimeout(r, 500));
      running = false;
      await load;
      await until(async () => (await conn.jsm.streams.info(`${stream}-g`)).state.messages === 0 && m1.handled() + m2.handled() >= published, 60_000, "the work queue to drain", 50);
      await new Promise((r) => setTimeout(r, 250));
      duplicates += m1.handled() + m2.handled() - published;
    } finally {
      running = false;
      await load;
      await Promise.all([m1.stop(), m2.stop()]);
    }
    ctx.log(`  rebalance (${label}) run ${run + 1}: ${samples[run]?.toFixed(0)} ms, duplicates so far ${duplicates}`);
  }
  return [
    { scenario: "5 rebalance", variant: `${label}: addMembers → new member's first message (median)`, value: median(samples), unit: "ms", ...(handoff ? { target: "< 1000 ms", met: median(samples) < 1000 } : {}), samples },
    { scenario: "5 rebalance", variant: `${label}: same, p95`, value: percentile(samples, 95), unit: "ms", ...(handoff ? { target: "< 2000 ms", met: percentile(samples, 95) < 2000 } : {}) },
    { scenario: "5 rebalance", variant: `${label}: duplicate handlings over ${rounds} rebalances`, value: duplicates, unit: "messages" },
  ];
}
