/**
 * Lifecycle callbacks against a real server: on a membership change the old owner's
 * onRevoked (awaited, after its handlers of those partitions finished) resolves
 * before the new owner's onAssigned for the same partitions and before it handles
 * any of their messages; onPinned/onUnpinned on a step-down; onError on a handler error.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  addMembers,
  elasticConsume,
  memberPartitions,
  staticConsume,
  staticMemberStepDown,
  workQueueStreamName,
  type ConsumerGroupMember,
} from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { createLoadGroup, nanos } from "../helpers/load-scenario.js";
import { keyNames, now, sleep, type KeyedMessage } from "../helpers/load-harness.js";

/** Publishes on every key in the background until stopped. */
function backgroundPublisher(env: TestEnv, subjectOf: (key: string) => string, perSecond: number): { stop(): Promise<void> } {
  let on = true;
  const keys = keyNames(100);
  const done = (async () => {
    for (let seq = 1; on; seq++) {
      await Promise.all(keys.slice((seq * 10) % 100, ((seq * 10) % 100) + 10).map((key) => env.js.publish(subjectOf(key), JSON.stringify({ key, seq }))));
      await sleep((10 / perSecond) * 1000);
    }
  })();
  return {
    async stop() {
      on = false;
      await done;
    },
  };
}

describe("handoff - lifecycle callbacks", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    await env.close();
  });

  test("handoff - m1's slow onRevoked(moved) resolves before m2's onAssigned(moved), after m1's handlers of them, and before m2 handles any of them", async () => {
    const stream = uniqueName("cb");
    const subjectOf = await createLoadGroup(env, "elastic", stream, "g", 8, ["m1"]);
    type Event = { who: string; what: string; partitions: number[]; at: number; end?: number };
    const events: Event[] = [];
    const runs: { who: string; partition: number; start: number; end: number }[] = [];
    const consume = async (who: string): Promise<ConsumerGroupMember> => {
      const c = await env.connect();
      const m = await elasticConsume(c.js, {
        stream,
        group: "g",
        member: who,
        concurrency: "key",
        consumerConfig: { ack_wait: nanos(5000) },
        handler: async (msg) => {
          msg.json<KeyedMessage>();
          const start = now();
          await sleep(2 + Math.random() * 8);
          runs.push({ who, partition: msg.partition, start, end: now() });
        },
        onAssigned: (partitions) => void events.push({ who, what: "assigned", partitions: [...partitions].sort((a, b) => a - b), at: now() }),
        onRevoked: async (partitions) => {
          const e: Event = { who, what: "revoked", partitions: [...partitions].sort((a, b) => a - b), at: now() };
          events.push(e);
          await sleep(300);
          e.end = now();
        },
      });
      running.push(m);
      return m;
    };
    const publisher = backgroundPublisher(env, subjectOf, 500);
    try {
      await consume("m1");
      await consume("m2");
      await waitFor(() => runs.filter((r) => r.who === "m1").length >= 50, 20_000, "m1 to consume");
      await addMembers(env.js, stream, "g", ["m2"]);
      const moved = memberPartitions(["m1", "m2"], 8, undefined, "m2");
      const assigned = await waitFor(() => events.find((e) => e.who === "m2" && e.what === "assigned"), 20_000, "m2's onAssigned");
      await waitFor(() => runs.some((r) => r.who === "m2"), 20_000, "m2 to handle messages");

      assert.deepEqual(events.filter((e) => e.who === "m1").map((e) => `${e.what} ${e.partitions.join(",")}`), ["assigned 0,1,2,3,4,5,6,7", `revoked ${moved.join(",")}`], "m1: assigned everything, then revoked exactly the moved partitions (and not re-assigned what it kept)");
      assert.deepEqual(assigned.partitions, moved, "m2 is assigned exactly what m1 revoked");
      const revoked = events.find((e) => e.who === "m1" && e.what === "revoked");
      assert.ok(revoked?.end !== undefined, "m1's onRevoked finished");
      assert.ok(revoked.end <= assigned.at, `m1's onRevoked resolved (${Math.round(revoked.end)}) before m2's onAssigned was called (${Math.round(assigned.at)})`);
      const firstM2 = Math.min(...runs.filter((r) => r.who === "m2" && moved.includes(r.partition)).map((r) => r.start));
      assert.ok(firstM2 >= revoked.end, "m2 handled no message of a revoked partition before m1's onRevoked finished");
      const lateM1 = runs.filter((r) => r.who === "m1" && moved.includes(r.partition) && r.end > revoked.at);
      assert.deepEqual(lateM1, [], "m1's handlers of the revoked partitions had all finished when onRevoked was called");
      assert.ok(!runs.some((r) => r.who === "m1" && moved.includes(r.partition) && r.start > revoked.at), "m1 started nothing of the revoked partitions after onRevoked");
    } finally {
      await publisher.stop();
    }
    await Promise.all(running.splice(0).map((m) => m.stop()));
    await env.jsm.streams.delete(workQueueStreamName(stream, "g"));
  });

  test("handoff - onPinned and onUnpinned fire on a step-down", async () => {
    const stream = uniqueName("pin");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    const log: { who: string; what: string; id?: string; at: number }[] = [];
    const consume = async (who: string): Promise<ConsumerGroupMember> => {
      const c = await env.connect();
      const m = await staticConsume(c.js, {
        stream,
        group: "g",
        member: "m1",
        consumerConfig: { ack_wait: nanos(2000) },
        handler: () => undefined,
        onPinned: (id) => void log.push({ who, what: "pinned", id, at: now() }),
        onUnpinned: () => void log.push({ who, what: "unpinned", at: now() }),
      });
      running.push(m);
      return m;
    };
    const publisher = backgroundPublisher(env, subjectOf, 200);
    try {
      await consume("A");
      await consume("B");
      const first = await waitFor(() => log.find((e) => e.what === "pinned"), 20_000, "an instance to be pinned");
      const t = now();
      await staticMemberStepDown(env.js, stream, "g", "m1");
      const unpinned = await waitFor(() => log.find((e) => e.what === "unpinned" && e.at >= t), 20_000, "onUnpinned after the step-down");
      assert.equal(unpinned.who, first.who, "the instance that was pinned is told it lost the pin");
      const repinned = await waitFor(() => log.find((e) => e.what === "pinned" && e.at >= t), 20_000, "onPinned after the step-down");
      assert.notEqual(repinned.id, first.id, "with a new pin id");
      console.log(`pin log: ${log.map((e) => `${e.who} ${e.what}`).join(", ")}`);
    } finally {
      await publisher.stop();
    }
    await Promise.all(running.splice(0).map((m) => m.stop()));
  });

  test("handoff - onError receives a handler's error (and the message is retried)", async () => {
    const stream = uniqueName("err");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    const errors: unknown[] = [];
    const attempts: number[] = [];
    const boom = new Error("boom");
    const m = await staticConsume(env.js, {
      stream,
      group: "g",
      member: "m1",
      concurrency: "partition",
      retry: { maxDeliver: 3, backoffMs: 5 },
      handler: () => {
        attempts.push(now());
        if (attempts.length === 1) throw boom;
      },
      onError: (e) => void errors.push(e),
    });
    running.push(m);
    await env.js.publish(subjectOf("k"), JSON.stringify({ key: "k", seq: 1 }));
    await waitFor(() => attempts.length >= 2, 10_000, "the retry");
    assert.equal(errors[0], boom, "onError got the handler's error itself");
    assert.equal(errors.length, 1);
    await m.stop();
  });
});
