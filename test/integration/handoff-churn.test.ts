/**
 * Membership churn on an elastic group: 20,000 keyed messages (200 keys) published
 * while five in-process members (one instance each, own connections) are added,
 * dropped and stopped-then-restarted every second. Run twice: with the drained
 * handoff (default) and with `handoff: false` (Go's behaviour). The checker reports
 * lost messages, per-key order of first handling, and duplicate handler runs.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { startEnv, type TestEnv } from "../helpers/nats.js";
import { runChurn, type ChurnOptions, type ChurnResult } from "../helpers/load-churn.js";

const churn = (handoff: boolean): ChurnOptions => ({
  handoff,
  seed: 7,
  members: ["m1", "m2", "m3", "m4", "m5"],
  minMembers: 3,
  maxMembers: 5,
  partitions: 16,
  keys: 200,
  perKey: 100,
  publishRate: 1500,
  churnEveryMs: 1000,
  ackWaitMs: 5000,
  mode: "key",
  latencyMs: [0, 3],
});

function summary(name: string, r: ChurnResult): string {
  const { report } = r;
  return (
    `${name}: published ${report.published}, handled ${report.handled} (unique ${report.unique}), ` +
    `DUPLICATES ${report.duplicates}, lost ${report.lost.length}, keys out of order ${report.outOfOrder.length}, ` +
    `cross-instance overlaps of a key ${r.crossInstanceOverlaps}, ${Math.round(r.throughput)} msg/s over ${(r.durationMs / 1000).toFixed(1)} s\n` +
    `  churn: ${r.actions.join(" | ")}`
  );
}

describe("handoff - membership churn", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  test("handoff - churn with the drained handoff: nothing lost, per-key order holds, no duplicates", async () => {
    const r = await runChurn(env, churn(true));
    console.log(summary("handoff on ", r));
    for (const action of ["add", "drop", "stop", "restarted"]) {
      assert.ok(r.actions.some((a) => a.includes(` ${action} `)), `the churn included "${action}"`);
    }
    assert.deepEqual(r.report.lost.slice(0, 5), [], "nothing lost");
    assert.equal(r.report.unexpected, 0);
    assert.deepEqual(r.report.outOfOrder.slice(0, 5), [], "per key, first handlings follow the publish order");
    // Reliably 0 across repeated runs (also under CPU contention): in-flight handlers finish and their
    // acks are confirmed before a consumer is deleted, deliveries already on the wire are given back
    // rather than dropped, and everything is given back in stream order.
    assert.equal(r.report.duplicates, 0, "no message handled twice");
    assert.equal(r.crossInstanceOverlaps, 0, "two instances never handle one key at the same time");
  });

  test("handoff - the same churn with handoff: false (Go's behaviour) loses nothing; its duplicates are reported", async () => {
    const r = await runChurn(env, churn(false));
    console.log(summary("handoff off", r));
    assert.deepEqual(r.report.lost.slice(0, 5), [], "nothing lost");
    assert.equal(r.report.unexpected, 0);
    // Not asserted: without the drain, handlers still running when their partition moves may ack
    // after the consumer is deleted, so the next owner handles those messages again (usually a few).
  });
});
