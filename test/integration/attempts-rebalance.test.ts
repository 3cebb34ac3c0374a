/**
 * Issue 25 item 2: `retry.maxDeliver` bounds a message's attempts while membership
 * changes. A rebalance recreates the members' consumers, so the server's delivery
 * count starts over, and an attempt that fails during a drain is given back; the
 * attempts are counted in the attempts bucket instead, across members and consumers.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import { addMembers, ATTEMPTS_BUCKET, deleteElastic, deleteMembers, elasticConsume, workQueueStreamName, type ConsumerGroupMember, type MemberStatus } from "../../src/index.js";
import { startEnv, uniqueName, type TestEnv } from "../helpers/nats.js";
import { createLoadGroup, nanos } from "../helpers/load-scenario.js";
import { sleep } from "../helpers/load-harness.js";

describe("attempts across rebalances (issue 25 item 2)", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  /**
   * Two members on two partitions; m2 leaves and joins every `churnMs`, so the poison
   * key's partition moves between them. Its attempts take `failAfterMs` and fail; the
   * backoff is longer than an ownership, so most attempts are cut by a rebalance.
   */
  async function churnScenario(name: string, deadLetter: boolean): Promise<{ attempts: { member: string; deliveryCount: number }[]; events: MemberStatus[]; handled: string[]; stream: string; dlq: string }> {
    const stream = uniqueName(name);
    const dlq = uniqueName("DLQ");
    await env.jsm.streams.add({ name: dlq, subjects: [`${dlq}.letters`], storage: "memory" });
    const subjectOf = await createLoadGroup(env, "elastic", stream, "g", 2, ["m1", "m2"]);
    const attempts: { member: string; deliveryCount: number }[] = [];
    const handled: string[] = [];
    const events: MemberStatus[] = [];
    const members: ConsumerGroupMember[] = [];
    for (const member of ["m1", "m2"]) {
      const instance = await elasticConsume(env.js, {
        stream,
        group: "g",
        member,
        concurrency: "key",
        retry: { maxDeliver: 3, backoffMs: 1500 },
        ...(deadLetter ? { deadLetterSubject: `${dlq}.letters` } : {}),
        consumerConfig: { ack_wait: nanos(5000) },
        drainTimeoutMs: 2000,
        handler: async (msg) => {
          const { key } = msg.json<{ key: string }>();
          if (key !== "poison") {
            handled.push(key);
            return;
          }
          attempts.push({ member, deliveryCount: msg.info.deliveryCount });
          await sleep(200);
          throw new Error("poison");
        },
      });
      members.push(instance);
      void (async () => {
        for await (const e of instance.status()) events.push(e);
      })();
    }
    try {
      await env.js.publish(subjectOf("poison"), JSON.stringify({ key: "poison" }));
      for (let i = 0; i < 10; i++) await env.js.publish(subjectOf(`k${i}`), JSON.stringify({ key: `k${i}` }));
      const deadline = performance.now() + 30_000;
      let inside = true;
      while (performance.now() < deadline && attempts.length < 8) {
        if (deadLetter && (await env.jsm.streams.info(dlq)).state.messages > 0) break;
        await sleep(700);
        if (inside) await deleteMembers(env.js, stream, "g", ["m2"]);
        else await addMembers(env.js, stream, "g", ["m2"]);
        inside = !inside;
      }
    } finally {
      await Promise.allSettled(members.map((m) => m.stop()));
    }
    return { attempts, events, handled, stream, dlq };
  }

  test("attempts - one poison message, maxDeliver 3, its partition moving between members every 0.7 s (attempts cut by drains): dead-lettered after exactly 3 attempts, and its record is gone", async () => {
    const r = await churnScenario("att", true);
    assert.equal((await env.jsm.streams.info(r.dlq)).state.messages, 1, `dead-lettered (attempts: ${JSON.stringify(r.attempts)})`);
    assert.equal(r.attempts.length, 3, `exactly maxDeliver attempts, whichever member ran them: ${JSON.stringify(r.attempts)}`);
    assert.equal(new Set(r.handled).size, 10, "the other keys were handled");
    const dead = r.events.filter((e) => e.type === "dead_lettered");
    assert.equal(dead.length, 1);
    const kv = await new Kvm(env.js).open(ATTEMPTS_BUCKET);
    const left: string[] = [];
    for await (const key of await kv.keys(`${r.stream}.g.>`)) left.push(key);
    assert.deepEqual(left, [], "the dead-lettered message's attempt record is deleted");
    await deleteElastic(env.js, r.stream, "g");
  });

  test("attempts - a step-down (admin unpin) during the last allowed attempt: the attempt is dead-lettered by the instance that ran it, not given back for a 4th on the standby (review finding)", async () => {
    const stream = uniqueName("atu");
    const dlq = uniqueName("DLQ");
    await env.jsm.streams.add({ name: dlq, subjects: [`${dlq}.letters`], storage: "memory" });
    const subjectOf = await createLoadGroup(env, "elastic", stream, "g", 2, ["m1"]);
    const wq = workQueueStreamName(stream, "g");
    const starts: { instance: string; deliveryCount: number }[] = [];
    const instances: ConsumerGroupMember[] = [];
    try {
      for (const instance of ["A", "B"]) {
        const client = await env.connect();
        instances.push(
          await elasticConsume(client.js, {
            stream,
            group: "g",
            member: "m1",
            concurrency: "key",
            retry: { maxDeliver: 3, backoffMs: 300 },
            deadLetterSubject: `${dlq}.letters`,
            consumerConfig: { ack_wait: nanos(4000) },
            drainTimeoutMs: 4000,
            handler: async (msg) => {
              if (msg.json<{ key: string }>().key !== "poison") return;
              starts.push({ instance, deliveryCount: msg.info.deliveryCount });
              if (starts.length === 3) {
                // The pin moves to the standby while the last attempt runs; later messages make the server pin it.
                await env.jsm.consumers.unpin(wq, "m1", "PCG");
                for (let i = 0; i < 5; i++) await env.js.publish(subjectOf(`after${i}`), JSON.stringify({ key: `after${i}` }));
                await sleep(1500);
              } else await sleep(100);
              throw new Error("poison");
            },
          }),
        );
      }
      await env.js.publish(subjectOf("poison"), JSON.stringify({ key: "poison" }));
      const deadline = performance.now() + 20_000;
      while (performance.now() < deadline && (await env.jsm.streams.info(dlq)).state.messages === 0) await sleep(200);
      await sleep(2000); // a 4th attempt would come within its backoff
      assert.equal((await env.jsm.streams.info(dlq)).state.messages, 1, "dead-lettered once");
      assert.equal(starts.length, 3, `exactly 3 attempts: ${JSON.stringify(starts)}`);
    } finally {
      await Promise.allSettled(instances.map((m) => m.stop()));
    }
  });
});
