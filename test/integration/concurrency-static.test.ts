/**
 * Ordered concurrency under load, static groups, in each mode: 16 partitions, 200
 * keys, two members; a handler with random latency, 5 % injected failures (retried
 * in place), a few messages slower than AckWait (kept alive with working()) and a
 * few the handler nak's itself (re-handled before the rest of their key). Per key,
 * the successful handlings must be exactly the publish order.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createStatic, staticConsume, type ConcurrencyMode, type ConsumerGroupMember } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { assertOrderedRun, createLoadGroup, loadOptions, nanos, runOrderedLoad } from "../helpers/load-scenario.js";
import { LoadTracker, Published, prng, publishKeyed } from "../helpers/load-harness.js";

describe("concurrency - static groups under load", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  test("concurrency - static serial: one handler at a time per member, per-key order through failures, slow handlers and naks", async () => {
    // Serial handlers are slow (avg 5 ms each): 3,000 messages, and a shallow buffer so nothing waits an AckWait in it.
    const o = loadOptions("static", "serial", 11, { perKey: 15, template: { max_ack_pending: 50 } });
    const r = await runOrderedLoad(env, o);
    console.log(assertOrderedRun(r, o));
  });

  test("concurrency - static partition: partitions in parallel, never two of one partition", async () => {
    const o = loadOptions("static", "partition", 12, { maxInFlight: 6 });
    const r = await runOrderedLoad(env, o);
    console.log(assertOrderedRun(r, o));
  });

  test("concurrency - static key: keys in parallel, never two of one key", async () => {
    const o = loadOptions("static", "key", 13);
    const r = await runOrderedLoad(env, o);
    console.log(assertOrderedRun(r, o));
    assert.ok(r.tracker.partitionOverlaps > 0, "key mode runs keys of one partition concurrently");
  });

  test("concurrency - static: a message its handler nak'ed is handled again before the rest of its key, in every mode", async () => {
    // One key's messages all buffered at once and an idle instance: nothing hides a lane that moves on too early.
    const stream = uniqueName("nak");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    const published = await publishKeyed(env.js, subjectOf, ["a", "b"], 10, new Published());
    for (const mode of ["serial", "partition", "key"] as ConcurrencyMode[]) {
      const tracker = new LoadTracker({ rng: prng(1), latencyMs: [0, 0], failRate: 0, nakOnce: new Set(["a/3", "a/7", "b/1"]) });
      let member: ConsumerGroupMember | undefined;
      const group = `g_${mode}`;
      await createStatic(env.js, { stream, group, maxMembers: 4, members: ["m1"] });
      try {
        member = await staticConsume(env.js, {
          stream,
          group,
          member: "m1",
          handler: tracker.handler("m1"),
          concurrency: mode,
          ...(mode === "serial" ? { retry: { maxDeliver: 5, backoffMs: 5 } } : {}),
          consumerConfig: { ack_wait: nanos(2000) },
        });
        await waitFor(() => tracker.handled >= 20, 20_000, `${mode}: 20 handled (${tracker.handled})`);
        assert.deepEqual(tracker.orderProblems(published), [], `${mode}: nak'ed messages were re-handled in place`);
        assert.equal(tracker.nakRedone.length, 3, `${mode}: every nak'ed message came back`);
      } finally {
        await member?.stop();
      }
    }
  });
});
