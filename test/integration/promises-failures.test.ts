/**
 * Regression tests for issue 14, items 3, 5, 6 and 8: failures hold only what failed,
 * on a real server.
 *
 * 3. a throwing `keyOf` is a failure of that message (dead letter, or a blocked
 *    key), not of the consume;
 * 5. blocked and backing-off keys do not hold in-flight slots;
 * 6. serial mode backs off (nak with a delay), and `status()` is bounded;
 * 8. the local buffer is bounded whatever `max_ack_pending` is, and messages waiting
 *    in it are not redelivered.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { staticConsume, type ConsumerGroupMember, type MemberStatus } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { createLoadGroup, nanos } from "../helpers/load-scenario.js";
import { Published, keyNames, now, publishKeyed, sleep, type KeyedMessage } from "../helpers/load-harness.js";
import { recordStatus, within } from "../helpers/promises.js";

describe("promises - failures hold only what failed (issue 14)", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];
  const track = (m: ConsumerGroupMember): ConsumerGroupMember => {
    running.push(m);
    return m;
  };

  before(async () => {
    env = await startEnv();
  });
  afterEach(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
  });
  after(async () => {
    await env.close();
  });

  /** A static group of one member on a stream with `partitions` partitions. */
  async function group(prefix: string, partitions = 1): Promise<{ stream: string; subjectOf: (key: string) => string }> {
    const stream = uniqueName(prefix);
    const subjectOf = await createLoadGroup(env, "static", stream, "g", partitions, ["m1"]);
    return { stream, subjectOf };
  }

  const publish = async (subject: string, key: string, seq: number): Promise<number> => (await env.js.publish(subject, JSON.stringify({ key, seq }))).seq;

  // --- item 3 -------------------------------------------------------------------

  for (const variant of ["dead letter", "blocked"] as const) {
    test(`failures - item 3: a keyOf that throws sends its message through the failure policy (${variant}); the rest of the partition keeps flowing and the consume never restarts`, async () => {
      const { stream, subjectOf } = await group(variant === "blocked" ? "kob" : "kod");
      const dlq = uniqueName("dlq");
      if (variant === "dead letter") await env.jsm.streams.add({ name: dlq, subjects: [`${dlq}.>`], storage: "memory" });
      const handled: { id: string; dc: number }[] = [];
      const badSeqs: number[] = [];
      badSeqs.push(await publish(subjectOf("bad"), "bad", 1));
      const published = await publishKeyed(env.js, subjectOf, keyNames(4), 3, new Published());
      badSeqs.push(await publish(subjectOf("bad"), "bad", 2));
      await publishKeyed(env.js, subjectOf, keyNames(4), 2, published, { from: 4 });
      const m = track(
        await staticConsume(env.js, {
          stream,
          group: "g",
          member: "m1",
          concurrency: "key",
          consumerConfig: { ack_wait: nanos(2000) },
          retry: { maxDeliver: 2, backoffMs: 10 },
          ...(variant === "dead letter" ? { deadLetterSubject: `${dlq}.dead` } : {}),
          keyOf: (msg) => {
            const { key } = msg.json<KeyedMessage>();
            if (key === "bad") throw new Error("this message has no key");
            return key;
          },
          handler: (msg) => {
            const { key, seq } = msg.json<KeyedMessage>();
            handled.push({ id: `${key}/${seq}`, dc: msg.info.deliveryCount });
          },
        }),
      );
      const status = recordStatus(m);
      const startedAt = now();
      const good = published.total;
      await waitFor(() => new Set(handled.filter((h) => !h.id.startsWith("bad/")).map((h) => h.id)).size >= good, 8000, `the ${good} good messages handled`).catch(() => undefined);
      if (variant === "dead letter") await waitFor(async () => (await env.jsm.streams.info(dlq)).state.messages >= 2, 8000, "2 dead letters").catch(() => undefined);
      else await waitFor(() => status.of("blocked").length > 0, 8000, "a blocked event").catch(() => undefined);
      await sleep(2500); // past AckWait: a consume that died and restarted would show it now

      const goodHandled = handled.filter((h) => !h.id.startsWith("bad/"));
      const restarts = status.events.filter((e) => e.type === "consumer_lost" || e.type === "consumer_error");
      assert.equal(restarts.length, 0, `the consume died and restarted ${restarts.length} times in ${Math.round((now() - startedAt) / 1000)} s (first: ${JSON.stringify(restarts[0])})`);
      assert.equal(new Set(goodHandled.map((h) => h.id)).size, good, `every good message was handled (${new Set(goodHandled.map((h) => h.id)).size} of ${good})`);
      assert.deepEqual(goodHandled.filter((h) => h.dc !== 1).map((h) => `${h.id}#${h.dc}`), [], "good messages were handled on their first delivery");
      assert.equal(goodHandled.length, good, "each good message was handled once");
      const errors = status.of("handler_error").map((e) => e.seq);
      assert.ok(errors.includes(badSeqs[0] ?? -1), `a handler_error event for the first message without a key (seqs ${badSeqs.join(", ")}; reported ${errors.join(", ")})`);
      if (variant === "dead letter") {
        assert.equal((await env.jsm.streams.info(dlq)).state.messages, 2, "both messages without a key were dead-lettered, once each");
        assert.deepEqual(status.of("dead_lettered").map((e) => e.seq).sort((a, b) => a - b), badSeqs, "dead_lettered events for both");
      } else {
        assert.ok(status.of("blocked").some((e) => e.seq === badSeqs[0]), `the first message without a key is reported blocked (events: ${status.events.map((e) => e.type).join(", ")})`);
      }
    });
  }

  // --- item 5 -------------------------------------------------------------------

  for (const variant of ["backing off", "blocked"] as const) {
    test(`failures - item 5: maxInFlight poison keys (${variant}) do not stall the other keys`, async () => {
      const { stream, subjectOf } = await group(variant === "blocked" ? "pkb" : "pko");
      const handled: string[] = [];
      const m = track(
        await staticConsume(env.js, {
          stream,
          group: "g",
          member: "m1",
          concurrency: "key",
          maxInFlight: 2,
          consumerConfig: { ack_wait: nanos(2000) },
          // Backing off: retried forever, every 500 ms. Blocked: 2 attempts, no dead-letter subject.
          retry: variant === "blocked" ? { maxDeliver: 2, backoffMs: 10 } : { maxDeliver: 1_000_000, backoffMs: 500 },
          handler: (msg) => {
            const { key, seq } = msg.json<KeyedMessage>();
            if (key.startsWith("poison")) throw new Error(`${key} always fails`);
            handled.push(`${key}/${seq}`);
          },
        }),
      );
      const status = recordStatus(m);
      await publish(subjectOf("poison1"), "poison1", 1);
      await publish(subjectOf("poison2"), "poison2", 1);
      const wanted: MemberStatus["type"] = variant === "blocked" ? "blocked" : "handler_error";
      await waitFor(() => new Set(status.events.filter((e) => e.type === wanted).map((e) => (e as { seq: number }).seq)).size >= 2, 10_000, `both poison keys ${variant}`);
      const at = now();
      const good = keyNames(5);
      for (const key of good) await publish(subjectOf(key), key, 1);
      await waitFor(() => handled.length >= 5, 5000, "5 good messages handled").catch(() => undefined);
      assert.equal(handled.length, 5, `${handled.length} of 5 good messages were handled within 5 s of being published (${Math.round(now() - at)} ms)`);
    });
  }

  // --- item 6 -------------------------------------------------------------------

  test("failures - item 6: serial mode without retry naks a failing message with a growing delay (default backoff)", async () => {
    const { stream, subjectOf } = await group("nb");
    const runs: number[] = [];
    track(
      await staticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        handler: () => {
          runs.push(now());
          throw new Error("always fails");
        },
      }),
    );
    await publish(subjectOf("k"), "k", 1);
    await waitFor(() => runs.length > 0, 10_000, "the first run");
    await sleep(3000); // a window: how often it runs in 3 s is what is measured
    const first = runs[0] ?? 0;
    const inWindow = runs.filter((t) => t <= first + 3000).length;
    console.log(`item 6: an always-failing message ran ${inWindow} times in 3 s with the default nak backoff`);
    assert.ok(inWindow >= 2, `it was retried (${inWindow} runs)`);
    assert.ok(inWindow <= 8, `an always-failing message ran ${inWindow} times in 3 s (the default nak backoff is 100, 500, 1000, 2000, 5000 ms)`);
  });

  test("failures - item 6: serial mode's nak delay is configurable (nakBackoffMs)", async () => {
    const { stream, subjectOf } = await group("nbc");
    const runs: number[] = [];
    track(
      await staticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        nakBackoffMs: 1000,
        handler: () => {
          runs.push(now());
          throw new Error("always fails");
        },
      }),
    );
    await publish(subjectOf("k"), "k", 1);
    await waitFor(() => runs.length > 0, 10_000, "the first run");
    await sleep(3500); // a window: how often it runs is what is measured
    const gaps = runs.slice(1).map((t, i) => Math.round(t - (runs[i] ?? 0)));
    console.log(`item 6: with nakBackoffMs 1000 it ran ${runs.length} times in 3.5 s (gaps ${gaps.join(", ")} ms)`);
    assert.ok(runs.length >= 2 && runs.length <= 5, `with nakBackoffMs 1000 it ran ${runs.length} times in 3.5 s`);
    assert.ok(gaps.every((g) => g >= 900), `runs are at least ~1 s apart (gaps ${gaps.slice(0, 10).join(", ")} ms)`);
  });

  test("failures - item 6: an unread status() iterator stays bounded: the oldest events are dropped and counted", async () => {
    const { stream, subjectOf } = await group("sb");
    let runs = 0;
    const m = await staticConsume(env.js, {
      stream,
      group: "g",
      member: "m1",
      // Go's immediate nak: a failure event as fast as the server redelivers.
      nakBackoffMs: 0,
      handler: () => {
        runs += 1;
        throw new Error("always fails");
      },
    });
    running.push(m);
    const unread = m.status()[Symbol.asyncIterator]();
    await publish(subjectOf("k"), "k", 1);
    await waitFor(() => runs >= 3000, 20_000, `3000 failed runs (${runs})`);
    await m.stop();
    const queued: MemberStatus[] = [];
    for (;;) {
      const r = await within(unread.next(), 5000, "the iterator to yield its queued events");
      if (r.done) break;
      queued.push(r.value);
    }
    const dropped = queued.filter((e): e is Extract<MemberStatus, { type: "events_dropped" }> => e.type === "events_dropped");
    console.log(`item 6: an unread iterator held ${queued.length} events after ${runs} failures`);
    assert.ok(queued.length <= 1001, `an unread iterator held ${queued.length} events after ${runs} failures (cap 1000 plus the drop notice)`);
    assert.ok(dropped.length > 0 && dropped.reduce((n, e) => n + e.count, 0) > 0, "an events_dropped event says how many were dropped");
    assert.equal(queued.at(-1)?.type, "stopped", "the newest events are kept");
  });

  // --- item 8 -------------------------------------------------------------------

  test("failures - item 8: with max_ack_pending -1, the process never holds more than its local cap (serial, default 256)", async () => {
    const { stream, subjectOf } = await group("cap", 4);
    await publishKeyed(env.js, subjectOf, keyNames(30), 100, new Published());
    let handled = 0;
    track(
      await staticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        consumerConfig: { max_ack_pending: -1, ack_wait: nanos(30_000) },
        handler: async () => {
          handled += 1;
          await sleep(10);
        },
      }),
    );
    let most = 0;
    const deadline = now() + 4000;
    // Polled for 4 s while a 10 ms handler works through 3,000 messages.
    while (now() < deadline) {
      most = Math.max(most, (await env.jsm.consumers.info(stream, "g-m1")).num_ack_pending);
      await sleep(50);
    }
    console.log(`item 8: at most ${most} messages delivered and unacked with max_ack_pending -1 (local cap 256)`);
    assert.ok(handled > 0, "the member was consuming");
    // The process frees a message's slot once its ack is sent; the server counts it until the ack is
    // processed, so it may see one more than the process holds: the one ack on the wire (serial mode).
    assert.ok(most <= 256 + 1, `the consumer had ${most} messages delivered and unacked with max_ack_pending -1; the process holds at most its local cap of 256 (plus the one ack on the wire)`);
  });

  test("failures - item 8: messages waiting in the local buffer are not redelivered (60 messages, a handler slower than AckWait in total)", async () => {
    const { stream, subjectOf } = await group("wait");
    const published = await publishKeyed(env.js, subjectOf, keyNames(6), 10, new Published());
    const handled: { id: string; dc: number }[] = [];
    track(
      await staticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        consumerConfig: { ack_wait: nanos(1000) },
        handler: async (msg) => {
          const { key, seq } = msg.json<KeyedMessage>();
          handled.push({ id: `${key}/${seq}`, dc: msg.info.deliveryCount });
          await sleep(100); // 60 × 100 ms = 6 s, six times AckWait
        },
      }),
    );
    await waitFor(() => new Set(handled.map((h) => h.id)).size >= published.total, 30_000, "all 60 handled");
    await sleep(1500); // past AckWait: a late redelivery would be handled again now
    const ci = await env.jsm.consumers.info(stream, "g-m1");
    assert.equal(ci.delivered.consumer_seq, 60, `60 messages took ${ci.delivered.consumer_seq} deliveries`);
    assert.deepEqual(handled.filter((h) => h.dc !== 1).map((h) => `${h.id}#${h.dc}`).slice(0, 10), [], "every message was handled with delivery count 1");
    assert.equal(handled.length, 60, "each message was handled once");
  });
});
