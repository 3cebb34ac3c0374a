/**
 * Scenario 4, failover: two instances of one member under a steady load. The time
 * from killing (SIGKILL) or stopping (SIGTERM → stop(), which unpins) the pinned
 * instance to the standby handling its first message, for AckWait 2 s and 5 s.
 */
import type { JetStreamClient } from "@nats-io/jetstream";
import { createStatic } from "../../src/index.js";
import { partitionedStream } from "../lib/env.js";
import { startMember, startProcess, type MemberProcess } from "../lib/process.js";
import { fileURLToPath } from "node:url";

const DRIVER = fileURLToPath(new URL("../../../.tools/go-driver/pcg-driver", import.meta.url));
import { clock, median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

/** Publishes about `rate` messages per second until stopped. */
function steadyLoad(js: JetStreamClient, prefix: string, rate: number): { stop(): Promise<void> } {
  let running = true;
  const loop = (async () => {
    for (let i = 0; running; i++) {
      await js.publish(`${prefix}.k${i % 100}`, "x");
      await new Promise((r) => setTimeout(r, 1000 / rate));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
    },
  };
}

async function once(ctx: BenchContext, ackWaitMs: number, how: "kill" | "stop", impl: "ours" | "go"): Promise<number> {
  const conn = await ctx.server.connect();
  const stream = ctx.name("fo");
  await partitionedStream(conn.jsm, stream, 4);
  await createStatic(conn.js, { stream, group: "g", maxMembers: 4, members: ["m"] });
  const settings = { url: ctx.server.url, flavour: "static", stream, group: "g", member: "m", handlerMs: 0, ackWaitMs, maxAckPending: 1 };
  const start = (): MemberProcess =>
    impl === "ours" ? startMember(settings) : startProcess(DRIVER, [ctx.server.url, "bench-static", stream, "g", "m", String(ackWaitMs), "1"]);
  const a = start();
  await a.ready;
  const load = steadyLoad(conn.js, stream, 200);
  const b = start();
  let procs: MemberProcess[] = [a, b];
  try {
    await b.ready;
    // Whoever handles first is pinned; the other is the standby.
    const pinned = await Promise.race([a.first.then(() => a), b.first.then(() => b)]);
    const standby = pinned === a ? b : a;
    const at = clock();
    if (how === "kill") await pinned.kill();
    else await pinned.stop();
    const took = (await standby.first) - at;
    procs = [standby];
    return took;
  } finally {
    await load.stop();
    await Promise.all(procs.map((p) => p.stop()));
    await conn.jsm.streams.delete(stream);
  }
}

/** Scenario 4. */
export async function failover(ctx: BenchContext): Promise<Row[]> {
  const rows: Row[] = [];
  for (const ackWaitMs of ctx.quick ? [2000] : [2000, 5000]) {
    for (const [impl, how] of [["ours", "kill"], ["go", "kill"], ["ours", "stop"], ["go", "stop"]] as const) {
      const samples: number[] = [];
      for (let run = 0; run < ctx.runs; run++) samples.push(await once(ctx, ackWaitMs, how, impl));
      const value = median(samples);
      ctx.log(`  failover ${impl} ${how} AckWait ${ackWaitMs} ms: ${samples.map((s) => s.toFixed(0)).join(", ")} ms`);
      const what = how === "kill" ? "kill -9 of the pinned instance" : impl === "ours" ? "planned stop() (drains, unpins)" : "planned Stop() (Go does not unpin)";
      rows.push({
        scenario: "4 failover",
        variant: `${impl === "ours" ? "ours" : "Go pcgroups"}: ${what}, AckWait ${ackWaitMs / 1000} s`,
        value,
        unit: "ms",
        baseline: `PinnedTTL ${ackWaitMs} ms`,
        ratio: value / ackWaitMs,
        samples,
      });
    }
  }
  return rows;
}
