/**
 * Failures in the ordered modes against a real server: dead letters (static and
 * elastic, with their origin headers), a blocked key when there is no dead-letter
 * subject, and two instances of one member in different concurrency modes.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { JetStreamManager } from "@nats-io/jetstream";
import {
  ConsumerGroupError,
  elasticConsume,
  partitionOf,
  staticConsume,
  workQueueStreamName,
  type ConsumerGroupMember,
  type ConsumeOptions,
  type MemberStatus,
} from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { createLoadGroup, nanos } from "../helpers/load-scenario.js";
import { LoadTracker, Published, prng, publishKeyed, sleep } from "../helpers/load-harness.js";

/** Every message of a stream, with its headers. */
async function storedMessages(jsm: JetStreamManager, stream: string): Promise<{ data: string; headers: Record<string, string> }[]> {
  const info = await jsm.streams.info(stream);
  const out: { data: string; headers: Record<string, string> }[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    const m = await jsm.streams.getMessage(stream, { seq });
    if (!m) continue;
    const headers: Record<string, string> = {};
    for (const k of m.header?.keys() ?? []) headers[k] = m.header?.get(k) ?? "";
    out.push({ data: new TextDecoder().decode(m.data), headers });
  }
  return out;
}

function recordEvents(member: ConsumerGroupMember): MemberStatus[] {
  const events: MemberStatus[] = [];
  void (async () => {
    for await (const e of member.status()) events.push(e);
  })();
  return events;
}

describe("concurrency - failures: dead letters, blocked keys, mode conflicts", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    await env.close();
  });

  for (const flavour of ["static", "elastic"] as const) {
    test(`concurrency - ${flavour} dead letters: after maxDeliver attempts the message goes to the DLQ stream with its origin, is terminated, and its key moves on`, async () => {
      const stream = uniqueName("dl");
      const dlqStream = uniqueName("DLQ");
      const dlqSubject = `${dlqStream}.letters`;
      await env.jsm.streams.add({ name: dlqStream, subjects: [dlqSubject], storage: "memory" });
      const subjectOf = await createLoadGroup(env, flavour, stream, "g", 8, ["m1"]);
      const published = await publishKeyed(env.js, subjectOf, ["a", "b", "c"], 5, new Published());
      const failing = new Set(["a/2", "c/4"]);
      const tracker = new LoadTracker({ rng: prng(3), latencyMs: [0, 2], failRate: 0, alwaysFail: failing });
      const errors: unknown[] = [];
      const consume = flavour === "static" ? staticConsume : elasticConsume;
      const member = await consume(env.js, {
        stream,
        group: "g",
        member: "m1",
        handler: tracker.handler("m1"),
        concurrency: "key",
        retry: { maxDeliver: 3, backoffMs: [5, 10] },
        deadLetterSubject: dlqSubject,
        consumerConfig: { ack_wait: nanos(2000) },
        onError: (e) => void errors.push(e),
      });
      running.push(member);
      const events = recordEvents(member);
      await waitFor(() => tracker.handled >= 13, 20_000, `13 handled (${tracker.handled})`);
      await waitFor(async () => (await env.jsm.streams.info(dlqStream)).state.messages >= 2, 10_000, "2 dead letters");

      assert.deepEqual(tracker.orderProblems(published, failing), [], "the keys moved on past their dead letters, in order");
      const letters = await storedMessages(env.jsm, dlqStream);
      assert.equal(letters.length, 2);
      const consumerStream = flavour === "static" ? stream : workQueueStreamName(stream, "g");
      for (const id of failing) {
        const [key, seq] = id.split("/") as [string, string];
        const letter = letters.find((l) => l.headers["Pcg-Key"] === key);
        assert.ok(letter, `a dead letter for ${id}`);
        assert.deepEqual(JSON.parse(letter.data), { key, seq: Number(seq) }, "the payload is the original");
        assert.equal(letter.headers["Pcg-Origin-Stream"], stream, "the origin stream (not the work-queue stream)");
        assert.equal(letter.headers["Pcg-Origin-Sequence"], String(published.streamSeq.get(id)), "the sequence in the origin stream");
        assert.equal(letter.headers["Pcg-Partition"], String(partitionOf(`${stream}.${key}`, 8, { filter: `${stream}.*`, wildcards: [1] })));
        assert.equal(letter.headers["Pcg-Delivery-Count"], "3");
        assert.equal(letter.headers["Pcg-Error"], `${id} always fails`);
        assert.equal(letter.headers["Pcg-Subject"], `${stream}.${key}`);
      }
      assert.equal(tracker.invocations, 15 - 2 + 2 * 3, "each failing message was attempted exactly maxDeliver times");
      // Terminated: nothing pending or waiting for an ack; an elastic work queue is empty.
      await waitFor(
        async () => {
          if (flavour === "elastic") return (await env.jsm.streams.info(consumerStream)).state.messages === 0;
          const ci = await env.jsm.consumers.info(stream, "g-m1");
          return ci.num_pending === 0 && ci.num_ack_pending === 0 && ci.num_redelivered === 0;
        },
        10_000,
        "every message settled",
      );
      const dead = events.filter((e) => e.type === "dead_lettered");
      assert.equal(dead.length, 2);
      assert.equal(events.filter((e) => e.type === "handler_error").length, 6, "each attempt is reported");
      assert.equal(errors.length, 6, "onError fires for each handler error");
      await member.stop();
    });
  }

  test("concurrency - without a dead-letter subject a key that keeps failing blocks (reported), its later messages wait, other keys go on", async () => {
    const stream = uniqueName("blk");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 8, ["m1"]);
    const keys = ["stuck", "k1", "k2", "k3", "k4"];
    const published = await publishKeyed(env.js, subjectOf, keys, 6, new Published());
    const tracker = new LoadTracker({ rng: prng(4), latencyMs: [0, 2], failRate: 0, alwaysFail: new Set(["stuck/2"]) });
    const member = await staticConsume(env.js, {
      stream,
      group: "g",
      member: "m1",
      handler: tracker.handler("m1"),
      concurrency: "key",
      retry: { maxDeliver: 3, backoffMs: 20 },
      consumerConfig: { ack_wait: nanos(1000) },
    });
    running.push(member);
    const events = recordEvents(member);
    await waitFor(() => tracker.handled >= 1 + 4 * 6, 20_000, `the other keys handled (${tracker.handled})`);
    const blocked = await waitFor(() => events.find((e) => e.type === "blocked"), 10_000, "a blocked event");
    assert.equal(blocked.lane, "stuck");
    assert.equal(blocked.seq, published.streamSeq.get("stuck/2"));
    assert.equal(blocked.subject, `${stream}.stuck`);
    // Keep going past AckWait: the blocked message keeps retrying in place (and working() keeps it from redelivery).
    const attemptsBefore = tracker.invocations;
    await sleep(1500);
    assert.ok(tracker.invocations > attemptsBefore, "the blocked message is still retried");
    assert.deepEqual(tracker.successes.get("stuck"), [1], "nothing after the blocked message of its key was handled");
    for (const k of keys.slice(1)) assert.deepEqual(tracker.successes.get(k), [1, 2, 3, 4, 5, 6], `${k} went on`);
    assert.equal(events.filter((e) => e.type === "blocked").length, 1, "blocked is reported once");
    const ci = await env.jsm.consumers.info(stream, "g-m1");
    assert.equal(ci.num_ack_pending, 5, "the blocked message and the 4 behind it are delivered, unacked");
    await member.stop();
    const after = await env.jsm.consumers.info(stream, "g-m1");
    assert.equal(after.num_ack_pending + after.num_pending, 5, "stop() gave them back");
    assert.deepEqual(tracker.successes.get("stuck"), [1]);
  });

  test("concurrency - two instances of one static member in different modes: the second gets CONSUMER_CONFLICT naming both modes", async () => {
    const stream = uniqueName("mm");
    await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    const base: ConsumeOptions = { stream, group: "g", member: "m1", handler: () => undefined, consumerConfig: { ack_wait: nanos(2000) } };
    const first = await staticConsume(env.js, { ...base, concurrency: "key" });
    running.push(first);
    const ci = await env.jsm.consumers.info(stream, "g-m1");
    assert.equal(ci.config.metadata?.["pcg_concurrency"], "key", "the mode is recorded on the consumer");
    for (const [mode, named] of [
      ["partition", "partition"],
      [undefined, "serial"],
    ] as const) {
      const c = await env.connect();
      await assert.rejects(
        staticConsume(c.js, { ...base, ...(mode ? { concurrency: mode } : {}) }),
        (err: unknown) => {
          assert.ok(err instanceof ConsumerGroupError, String(err));
          assert.equal(err.code, "CONSUMER_CONFLICT");
          assert.match(err.message, /"key"/, "names the running instance's mode");
          assert.match(err.message, new RegExp(`"${named}"`), "names this instance's mode");
          return true;
        },
      );
    }
    // A second instance in the same mode is a standby, not a conflict.
    const same = await staticConsume((await env.connect()).js, { ...base, concurrency: "key" });
    running.push(same);
    await same.stop();
    await first.stop();
  });

  test("concurrency - two instances of one elastic member in different modes: the second reports CONSUMER_CONFLICT and leaves the first alone", async () => {
    const stream = uniqueName("mme");
    const subjectOf = await createLoadGroup(env, "elastic", stream, "g", 4, ["m1"]);
    const tracker = new LoadTracker({ rng: prng(5), latencyMs: [0, 1], failRate: 0 });
    const base: ConsumeOptions = { stream, group: "g", member: "m1", handler: tracker.handler("m1"), consumerConfig: { ack_wait: nanos(1000) } };
    const first = await elasticConsume(env.js, { ...base, concurrency: "partition" });
    running.push(first);
    const errors: unknown[] = [];
    const second = await elasticConsume((await env.connect()).js, { ...base, concurrency: "key", onError: (e) => void errors.push(e) });
    running.push(second);
    const conflict = await waitFor(() => errors.find((e): e is ConsumerGroupError => e instanceof ConsumerGroupError), 10_000, "a consumer error on the second instance");
    assert.equal(conflict.code, "CONSUMER_CONFLICT");
    assert.match(conflict.message, /"partition"/);
    assert.match(conflict.message, /"key"/);
    const published = await publishKeyed(env.js, subjectOf, ["a", "b"], 5, new Published());
    await waitFor(() => tracker.handled >= 10, 10_000, "the first instance still consumes");
    assert.deepEqual(tracker.orderProblems(published), []);
    const ci = await env.jsm.consumers.info(workQueueStreamName(stream, "g"), "m1");
    assert.equal(ci.config.metadata?.["pcg_concurrency"], "partition", "the first instance's consumer was not replaced");
    await second.stop();
    await first.stop();
  });
});
