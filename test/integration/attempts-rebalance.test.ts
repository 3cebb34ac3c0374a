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
import { HandledLog } from "../helpers/keyed-load.js";
import { startChildMember } from "../helpers/member-process.js";

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

  /**
   * m1 runs in its own process: the poison message's first attempt fails, its second never
   * returns and the process is killed -9 during it; then m2 joins and m1 is removed, so the
   * message comes back on m2's consumer with delivery count 1. Returns the handler starts
   * of the poison message on each member and how many dead letters were stored.
   */
  async function killedMidAttempt(name: string, exactAttempts: boolean): Promise<{ m1: number; m2: number; deadLetters: number }> {
    const stream = uniqueName(name);
    const dlq = uniqueName("DLQ");
    await env.jsm.streams.add({ name: dlq, subjects: [`${dlq}.letters`], storage: "memory" });
    const subjectOf = await createLoadGroup(env, "elastic", stream, "g", 2, ["m1"]);
    const retry = { maxDeliver: 3, backoffMs: 200, exactAttempts };
    const log = new HandledLog();
    const child = startChildMember(
      { url: env.server.url, flavour: "elastic", stream, group: "g", member: "m1", ackWaitMs: 3000, concurrency: "key", maxBuffered: 16, retry, deadLetterSubject: `${dlq}.letters`, poison: { key: "poison", hangOnAttempt: 2 } },
      log,
    );
    let m2Starts = 0;
    let m2: ConsumerGroupMember | undefined;
    try {
      await child.ready;
      m2 = await elasticConsume(env.js, {
        stream,
        group: "g",
        member: "m2",
        concurrency: "key",
        retry,
        deadLetterSubject: `${dlq}.letters`,
        consumerConfig: { ack_wait: nanos(3000) },
        handler: (msg) => {
          if (msg.json<{ key: string }>().key !== "poison") return;
          m2Starts += 1;
          throw new Error("poison");
        },
      });
      await env.js.publish(subjectOf("poison"), JSON.stringify({ key: "poison", seq: 1 }));
      const deadline = performance.now() + 20_000;
      while (performance.now() < deadline && child.records.length < 2) await sleep(50);
      assert.equal(child.records.length, 2, "m1 made two attempts, the second still running");
      await child.kill();
      await addMembers(env.js, stream, "g", ["m2"]);
      await deleteMembers(env.js, stream, "g", ["m1"]);
      while (performance.now() < deadline + 10_000 && (await env.jsm.streams.info(dlq)).state.messages === 0) await sleep(200);
      await sleep(1000); // another attempt would come within its backoff
      return { m1: child.records.length, m2: m2Starts, deadLetters: (await env.jsm.streams.info(dlq)).state.messages };
    } finally {
      await child.kill();
      await m2?.stop();
      await deleteElastic(env.js, stream, "g");
    }
  }

  test("attempts - exactAttempts: a kill -9 during an attempt, then a rebalance: the cut attempt counts, and the handler starts exactly maxDeliver (3) times in all", async () => {
    const r = await killedMidAttempt("atk", true);
    assert.deepEqual(r, { m1: 2, m2: 1, deadLetters: 1 }, "2 starts on the killed m1 (one cut), 1 on m2, then the dead letter");
  });

  test("attempts - without exactAttempts the same cut attempt goes uncounted: one start more than maxDeliver, never two (the documented bound)", async () => {
    const r = await killedMidAttempt("atn", false);
    assert.deepEqual(r, { m1: 2, m2: 2, deadLetters: 1 }, "2 starts on m1, 2 on m2: 4 with maxDeliver 3");
  });

  test("attempts - exactAttempts: messages given back unstarted by two stops (delivery count 3 when they come back, maxDeliver 2) are run and handled, none dead-lettered (autoscale soak seed 101: two good messages dead-lettered without ever running)", async () => {
    const stream = uniqueName("atg");
    const dlq = uniqueName("DLQ");
    await env.jsm.streams.add({ name: dlq, subjects: [`${dlq}.letters`], storage: "memory" });
    const subjectOf = await createLoadGroup(env, "elastic", stream, "g", 1, ["m1"]);
    for (let i = 1; i <= 6; i++) await env.js.publish(subjectOf("k"), JSON.stringify({ key: "k", i }));
    const handled: { i: number; deliveryCount: number }[] = [];
    try {
      // Round r blocks on the key's r-th message (until the stop aborts it), so the messages
      // behind it are given back without running; the third round blocks on nothing.
      for (const round of [1, 2, 3]) {
        let blocking: (() => void) | undefined;
        const blocked = new Promise<void>((resolve) => (blocking = resolve));
        const member = await elasticConsume(env.js, {
          stream,
          group: "g",
          member: "m1",
          concurrency: "key",
          retry: { maxDeliver: 2, backoffMs: 100, exactAttempts: true },
          deadLetterSubject: `${dlq}.letters`,
          drainTimeoutMs: 200,
          consumerConfig: { ack_wait: nanos(5000) },
          handler: async (msg) => {
            const { i } = msg.json<{ i: number }>();
            if (i === round && round < 3) {
              blocking?.();
              await new Promise((_, reject) => msg.signal.addEventListener("abort", () => reject(new Error("stopped"))));
            }
            handled.push({ i, deliveryCount: msg.info.deliveryCount });
          },
        });
        if (round < 3) {
          await blocked;
          await member.stop();
          continue;
        }
        const deadline = performance.now() + 15_000;
        while (performance.now() < deadline && new Set(handled.map((h) => h.i)).size < 6) await sleep(50);
        await sleep(300);
        await member.stop();
      }
      const third = handled.find((h) => h.i === 3);
      assert.ok(third && third.deliveryCount >= 3, `the 3rd message came back given back twice: ${JSON.stringify(handled)}`);
      assert.deepEqual([...new Set(handled.map((h) => h.i))].sort(), [1, 2, 3, 4, 5, 6], "every message handled");
      assert.equal((await env.jsm.streams.info(dlq)).state.messages, 0, "nothing dead-lettered");
    } finally {
      await deleteElastic(env.js, stream, "g");
    }
  });

  test("attempts - exactAttempts on an attempts bucket that denies deletes (made by nats kv add): refused with a typed error saying what to do; nothing consumed", async () => {
    const own = await startEnv();
    try {
      await own.jsm.streams.add({ name: `KV_${ATTEMPTS_BUCKET}`, subjects: [`$KV.${ATTEMPTS_BUCKET}.>`], max_msgs_per_subject: 1, deny_delete: true, allow_rollup_hdrs: true, allow_direct: true });
      const stream = uniqueName("atd");
      await createLoadGroup(own, "elastic", stream, "g", 2, ["m1"]);
      await assert.rejects(
        elasticConsume(own.js, { stream, group: "g", member: "m1", concurrency: "key", retry: { exactAttempts: true }, handler: () => undefined }),
        (err: Error & { code?: string }) => err.code === "ATTEMPTS_BUCKET_KEEPS_RECORDS" && /deny_delete/.test(err.message) && /nats stream rm KV_elastic-consumer-group-attempts/.test(err.message),
      );
      const consumers = await own.jsm.consumers.list(workQueueStreamName(stream, "g")).next();
      assert.deepEqual(consumers.map((c) => c.name), [], "no consumer was made");
      // Without the option the same bucket serves (records are deleted with markers).
      const member = await elasticConsume(own.js, { stream, group: "g", member: "m1", concurrency: "key", retry: { maxDeliver: 2 }, handler: () => undefined });
      await member.stop();
    } finally {
      await own.close();
    }
  });

  test("attempts - exactAttempts leaves no record behind for messages handled (a settled record is removed outright, no delete marker)", async () => {
    const stream = uniqueName("atr");
    const subjectOf = await createLoadGroup(env, "elastic", stream, "g", 2, ["m1"]);
    const handled: number[] = [];
    const member = await elasticConsume(env.js, {
      stream,
      group: "g",
      member: "m1",
      concurrency: "key",
      retry: { maxDeliver: 3, exactAttempts: true },
      handler: (msg) => void handled.push(msg.seq),
    });
    try {
      for (let i = 0; i < 50; i++) await env.js.publish(subjectOf(`k${i % 7}`), JSON.stringify({ key: `k${i % 7}`, seq: i }));
      const deadline = performance.now() + 15_000;
      while (performance.now() < deadline && handled.length < 50) await sleep(50);
      assert.equal(handled.length, 50);
      await sleep(500); // the deletes are not awaited by the handlers
      const left = (await env.jsm.streams.getMessage(`KV_${ATTEMPTS_BUCKET}`, { last_by_subj: `$KV.${ATTEMPTS_BUCKET}.${stream}.g.>` }).catch(() => null));
      assert.equal(left, null, "nothing stored for the group's messages: no records, no delete markers");
    } finally {
      await member.stop();
      await deleteElastic(env.js, stream, "g");
    }
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
