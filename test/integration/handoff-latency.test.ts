/**
 * Rebalance latency on an elastic group with AckWait 5 s: from `addMembers`
 * returning to the new owner handling its first message of a moved partition,
 * 20 samples, with the drained handoff and without it (Go's behaviour). Reported,
 * not asserted (the target is median < 1 s, p95 < 2 s); the test only checks that
 * every sample completed.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { startEnv, type TestEnv } from "../helpers/nats.js";
import { measureRebalanceLatency } from "../helpers/load-latency.js";

const fmt = (ms: number): string => `${Math.round(ms)} ms`;

describe("handoff - rebalance latency", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  for (const handoff of [true, false]) {
    test(`handoff - rebalance latency, AckWait 5 s, handoff ${handoff ? "on" : "off (Go's behaviour)"}: 20 samples`, async () => {
      const r = await measureRebalanceLatency(env, { handoff, samples: 20, partitions: 16, ackWaitMs: 5000, publishRate: 800 });
      console.log(
        `rebalance latency (handoff ${handoff ? "on " : "off"}): median ${fmt(r.medianMs)}, p95 ${fmt(r.p95Ms)}, ` +
          `min ${fmt(Math.min(...r.samplesMs))}, max ${fmt(Math.max(...r.samplesMs))} ` +
          `(target median < 1000 ms, p95 < 2000 ms) samples: ${r.samplesMs.map((s) => Math.round(s)).join(" ")}`,
      );
      assert.equal(r.samplesMs.length, 20);
    });
  }
});
