/**
 * Back-pressure in key mode: the member's consumer gets max_ack_pending = maxBuffered
 * (plus maxParked, room for what waits behind blocked keys), and what an instance holds
 * (buffered plus in flight) never exceeds maxBuffered, while a backlog keeps it full.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { elasticConsume, staticConsume, workQueueStreamName, type ConsumerGroupMember } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { createLoadGroup, nanos } from "../helpers/load-scenario.js";
import { LoadTracker, Published, keyNames, prng, publishKeyed, sleep } from "../helpers/load-harness.js";

/** What the instance holds right now (buffered plus in flight), read from its controller: test instrumentation only. */
function held(member: ConsumerGroupMember): number | undefined {
  return (member as unknown as { held?: number }).held;
}

describe("concurrency - back-pressure", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  for (const flavour of ["static", "elastic"] as const) {
    test(`concurrency - ${flavour} key mode: max_ack_pending is maxBuffered plus maxParked, and buffered + in flight stays within maxBuffered under a backlog`, async () => {
      const stream = uniqueName("bp");
      const subjectOf = await createLoadGroup(env, flavour, stream, "g", 8, ["m1"]);
      const published = await publishKeyed(env.js, subjectOf, keyNames(200), 10, new Published());
      const maxInFlight = 4;
      const maxBuffered = 40;
      const tracker = new LoadTracker({ rng: prng(6), latencyMs: [2, 8], failRate: 0 });
      const consume = flavour === "static" ? staticConsume : elasticConsume;
      const member = await consume(env.js, {
        stream,
        group: "g",
        member: "m1",
        handler: tracker.handler("m1"),
        concurrency: "key",
        maxInFlight,
        maxBuffered,
        consumerConfig: { ack_wait: nanos(5000) },
      });
      const consumerStream = flavour === "static" ? stream : workQueueStreamName(stream, "g");
      const consumerName = flavour === "static" ? "g-m1" : "m1";
      try {
        const ci = await env.jsm.consumers.info(consumerStream, consumerName);
        assert.equal(ci.config.max_ack_pending, maxBuffered + 4 * maxBuffered, "maxBuffered plus the default maxParked (4 × maxBuffered): room for what waits behind a blocked key");
        assert.equal(ci.config.metadata?.["pcg_concurrency"], "key");

        const heldSamples: number[] = [];
        const pendingSamples: number[] = [];
        let sampling = true;
        const sampler = (async () => {
          while (sampling) {
            const h = held(member);
            if (h !== undefined) heldSamples.push(h);
            const info = await env.jsm.consumers.info(consumerStream, consumerName);
            pendingSamples.push(info.num_ack_pending);
            await sleep(15);
          }
        })();
        await waitFor(() => tracker.handled >= published.total, 60_000, `${published.total} handled (${tracker.handled})`, 50);
        sampling = false;
        await sampler;
        assert.ok(heldSamples.length > 10, `the instance's holdings were sampled (${heldSamples.length} samples)`);
        const maxHeld = Math.max(...heldSamples);
        const maxPending = Math.max(...pendingSamples);
        console.log(`${flavour}: held by the instance max ${maxHeld}, server num_ack_pending max ${maxPending} (maxBuffered ${maxBuffered}, ${heldSamples.length} samples)`);
        assert.ok(maxHeld <= maxBuffered, `buffered + in flight never exceeded maxBuffered (max ${maxHeld})`);
        // The server's cap is maxBuffered + maxParked now, so what it counts unacked is bounded by the local
        // gate: what is held (<= maxBuffered) plus the acks on their way to it. A gate that let pulls past the
        // buffer would reach the server's cap (200).
        assert.ok(maxPending <= 1.5 * maxBuffered, `delivered-unacked stayed within maxBuffered plus the acks on their way (max ${maxPending}, maxBuffered ${maxBuffered})`);
        assert.ok(maxHeld >= maxBuffered / 2, `the backlog filled the buffer (max held ${maxHeld})`);
        assert.ok((tracker.maxConcurrent.get("m1") ?? 0) <= maxInFlight);
        assert.ok((tracker.maxConcurrent.get("m1") ?? 0) > 1);
        assert.deepEqual(tracker.orderProblems(published), []);
      } finally {
        await member.stop();
      }
    });
  }

  test("concurrency - the default maxBuffered is max(256, 4 × maxInFlight), max_ack_pending adds maxParked (4 × maxBuffered) where keys can block; serial mode leaves it to the template", async () => {
    const stream = uniqueName("bpd");
    await createLoadGroup(env, "static", stream, "g", 6, ["a", "b", "c", "d", "e"]);
    const noop = (): void => undefined;
    const members = [
      await staticConsume(env.js, { stream, group: "g", member: "a", handler: noop, concurrency: "key", maxInFlight: 100 }),
      await staticConsume(env.js, { stream, group: "g", member: "b", handler: noop, concurrency: "partition" }),
      await staticConsume(env.js, { stream, group: "g", member: "c", handler: noop, consumerConfig: { max_ack_pending: 7 } }),
      await staticConsume(env.js, { stream, group: "g", member: "d", handler: noop, concurrency: "key", maxParked: 0 }),
      await staticConsume(env.js, { stream, group: "g", member: "e", handler: noop, concurrency: "key", deadLetterSubject: `${stream}-dlq` }),
    ];
    try {
      assert.equal((await env.jsm.consumers.info(stream, "g-a")).config.max_ack_pending, 400 + 1600);
      assert.equal((await env.jsm.consumers.info(stream, "g-b")).config.max_ack_pending, 256 + 1024);
      assert.equal((await env.jsm.consumers.info(stream, "g-d")).config.max_ack_pending, 256, "maxParked 0: no parking");
      assert.equal((await env.jsm.consumers.info(stream, "g-e")).config.max_ack_pending, 256, "with a dead-letter subject no key blocks");
      const c = await env.jsm.consumers.info(stream, "g-c");
      assert.equal(c.config.max_ack_pending, 7);
      assert.equal(c.config.metadata?.["pcg_concurrency"], undefined, "serial mode records no mode (Go instances record none)");
    } finally {
      await Promise.all(members.map((m) => m.stop()));
    }
  });
});
