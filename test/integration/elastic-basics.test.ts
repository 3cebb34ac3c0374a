/**
 * Elastic groups, the basics: Go's TestElastic reproduced step by step, and the
 * member consumer each instance creates on the work-queue stream.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ConsumerInfo } from "@nats-io/jetstream";
import { addMembers, createElastic, deleteElastic, deleteMembers, elasticConsume, partitionOf, setMemberMappings } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { Runners, nanos, publishAll, rejectsWithCode, sleep, waitUntil, withTimeout, type Runner } from "../helpers/elastic-util.js";

describe("elastic - basics", () => {
  let env: TestEnv;
  const runners = new Runners();
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await runners.stopAll();
    await env.close();
  });

  /** 10 each of foo.0-9, bad.0-9, bar.0-9, as Go's test publishes them; payloads are unique per batch. */
  const batch = (n: number): { subject: string; data: string }[] =>
    ["foo", "bad", "bar"].flatMap((p) => Array.from({ length: 10 }, (_, i) => ({ subject: `${p}.${i}`, data: `b${n}:${p}.${i}` })));

  /** Distinct messages a runner handled (a redelivery after an AckWait stall is not a second message). */
  const distinct = (r: Runner): number => new Set(r.handled.map((h) => h.data)).size;
  const counts = (...rs: Runner[]): string => rs.map((r) => `${r.name}=${distinct(r)} (${r.handled.length} deliveries)`).join(" ");

  test("elastic - TestElastic: members added and dropped live, then whole-subject partitioning over the whole history", async () => {
    const stream = "test";
    await env.jsm.streams.add({ name: stream, subjects: ["foo.*", "bar.*", "bad.*"] });
    await publishAll(env.js, batch(1));

    const filters = [
      { filter: "foo.*", partitioning_wildcards: [1] },
      { filter: "bar.*", partitioning_wildcards: [1] },
    ];
    await createElastic(env.js, { stream, group: "group", maxMembers: 2, partitioningFilters: filters, maxBufferedMsgs: -1, maxBufferedBytes: -1 });

    // Two connections, as two processes would have.
    const c1 = await env.connect();
    const c2 = await env.connect();
    const m1 = await runners.start(c1.js, { stream, group: "group", member: "m1", ackWaitMs: 1000, maxAckPending: 1 });
    const m2 = await runners.start(c2.js, { stream, group: "group", member: "m2", ackWaitMs: 1000, maxAckPending: 1 });
    // Not in the membership yet: nothing is handled.
    await sleep(300);
    assert.equal(m1.handled.length + m2.handled.length, 0, "members outside the membership must not consume");

    // Step 1: m1 alone gets every foo and bar message (20), never bad.
    assert.deepEqual(await addMembers(env.js, stream, "group", ["m1"]), ["m1"]);
    await waitUntil(() => distinct(m1) >= 20, 20_000, () => `m1 to handle 20 messages (${counts(m1, m2)})`);
    await sleep(300);
    assert.equal(distinct(m1), 20, counts(m1, m2));
    assert.equal(distinct(m2), 0, counts(m1, m2));

    // Step 2: m2 joins; of 30 more (20 sourced), each gets its partition's 10.
    assert.deepEqual(await addMembers(env.js, stream, "group", ["m2"]), ["m1", "m2"]);
    await sleep(50);
    await publishAll(env.js, batch(2));
    await waitUntil(() => distinct(m1) >= 30 && distinct(m2) >= 10, 20_000, () => `c1=30 c2=10 (${counts(m1, m2)})`);
    await sleep(300);
    assert.equal(distinct(m1), 30, counts(m1, m2));
    assert.equal(distinct(m2), 10, counts(m1, m2));
    // m1 (sorted first) owns partition 0, m2 partition 1, with the digit as the key.
    for (const h of m1.handled.slice(20)) assert.equal(h.partition, 0, `m1 got ${h.rawSubject} after m2 joined`);
    for (const h of m2.handled) assert.equal(h.partition, 1, `m2 got ${h.rawSubject}`);

    // Step 3: m1 leaves; m2 gets all 20 sourced messages of the next 30.
    const idleBefore = m1.eventCount("idle");
    assert.deepEqual(await deleteMembers(env.js, stream, "group", ["m1"]), ["m2"]);
    // Go's test sleeps 50 ms here; on a loaded machine m1 may not have read the change by then (it is a watch, not a barrier).
    await waitUntil(() => m1.eventCount("idle") > idleBefore, 10_000, () => `m1 to go idle after its removal (${counts(m1, m2)})`);
    await publishAll(env.js, batch(3));
    await waitUntil(() => distinct(m2) >= 30, 20_000, () => `c2=30 (${counts(m1, m2)})`);
    await sleep(300);
    assert.equal(distinct(m1), 30, counts(m1, m2));
    assert.equal(distinct(m2), 30, counts(m1, m2));

    // Every message is where the server's partition hash put it, and bad.* never arrives.
    for (const h of [...m1.handled, ...m2.handled]) {
      assert.ok(!h.subject.startsWith("bad."), `bad.* must not be sourced, got ${h.subject}`);
      const filter = h.subject.startsWith("foo.") ? "foo.*" : "bar.*";
      assert.equal(h.partition, partitionOf(h.subject, 2, { filter, wildcards: [1] }), h.rawSubject);
      assert.equal(h.data.slice(h.data.indexOf(":") + 1), h.subject, "the handler's subject has the partition token stripped");
    }
    if (m1.handled.length + m2.handled.length !== 60) console.log(`elastic TestElastic: redeliveries seen (${counts(m1, m2)})`);
    const unique = new Set([...m1.handled, ...m2.handled].map((h) => h.data));
    assert.equal(unique.size, 60, "60 distinct foo/bar messages over the three batches");

    // Deleting the group stops its members cleanly (closed() resolves undefined).
    await deleteElastic(env.js, stream, "group");
    assert.equal(await withTimeout(m1.closedWith, 10_000, "m1 to close"), undefined);
    assert.equal(await withTimeout(m2.closedWith, 10_000, "m2 to close"), undefined);
    await assert.rejects(env.jsm.streams.info(`${stream}-group`), "the work-queue stream is deleted");

    // A second group with no partitioning filters hashes the whole subject, bad.* included,
    // and starts from the beginning of the source stream: 90 messages, 15/15 per batch.
    await createElastic(env.js, { stream, group: "group2", maxMembers: 2, partitioningFilters: [], maxBufferedMsgs: -1, maxBufferedBytes: -1 });
    const m3 = await runners.start(c1.js, { stream, group: "group2", member: "m1", ackWaitMs: 1000, maxAckPending: 1 });
    const m4 = await runners.start(c2.js, { stream, group: "group2", member: "m2", ackWaitMs: 1000, maxAckPending: 1 });
    assert.deepEqual(await addMembers(env.js, stream, "group2", ["m1", "m2"]), ["m1", "m2"]);
    await waitUntil(() => distinct(m3) >= 45 && distinct(m4) >= 45, 30_000, () => `c3=45 c4=45 (${counts(m3, m4)})`);
    await sleep(300);
    assert.equal(distinct(m3), 45, counts(m3, m4));
    assert.equal(distinct(m4), 45, counts(m3, m4));
    for (const h of [...m3.handled, ...m4.handled]) assert.equal(h.partition, partitionOf(h.subject, 2), h.rawSubject);
    assert.ok(m3.handled.some((h) => h.subject.startsWith("bad.")), "whole-subject partitioning sources bad.* too");
    assert.equal(new Set([...m3.handled, ...m4.handled].map((h) => h.data)).size, 90);

    await deleteElastic(env.js, stream, "group2");
    assert.equal(await withTimeout(m3.closedWith, 10_000, "m3 to close"), undefined);
    assert.equal(await withTimeout(m4.closedWith, 10_000, "m4 to close"), undefined);
    await env.jsm.streams.delete(stream);
  });

  test("elastic - member consumer: name, not durable, timings from AckWait, PCG/pinned_client, filters in Go order", async () => {
    const stream = uniqueName("cfg");
    await env.jsm.streams.add({ name: stream, subjects: ["cfoo.*", "cbar.*"] });
    const group = "g";
    await createElastic(env.js, {
      stream,
      group,
      maxMembers: 4,
      partitioningFilters: [
        { filter: "cfoo.*", partitioning_wildcards: [1] },
        { filter: "cbar.*", partitioning_wildcards: [1] },
      ],
    });
    const wq = `${stream}-${group}`;
    await addMembers(env.js, stream, group, ["m1", "m2"]);
    // m1: AckWait 2 s, and a template that tries to set what the library owns.
    await runners.start(env.js, {
      stream,
      group,
      member: "m1",
      ackWaitMs: 2000,
      maxAckPending: 3,
      template: { durable_name: "not-this", name: "nor-this", inactive_threshold: nanos(60_000), description: "kept" },
    });
    // m2: AckWait 500 ms, so PinnedTTL is floored at 1 s.
    await runners.start(env.js, { stream, group, member: "m2", ackWaitMs: 500, maxAckPending: 1 });

    const info = (name: string): Promise<ConsumerInfo> => waitFor(() => env.jsm.consumers.info(wq, name), 15_000, `consumer ${name} on ${wq}`);
    const c1 = (await info("m1")).config;
    assert.equal(c1.name, "m1");
    assert.equal(c1.durable_name, undefined, "elastic member consumers are not durable");
    assert.equal(c1.ack_policy, "explicit");
    assert.equal(c1.ack_wait, nanos(2000));
    assert.equal(c1.inactive_threshold, nanos(2000), "inactive_threshold is forced to AckWait");
    assert.equal(c1.max_ack_pending, 3);
    assert.equal(c1.description, "kept", "other template fields are kept");
    assert.deepEqual(c1.priority_groups, ["PCG"]);
    assert.equal(c1.priority_policy, "pinned_client");
    assert.equal(c1.priority_timeout, nanos(2000), "PinnedTTL = max(AckWait, 1 s)");
    assert.equal(c1.filter_subject, undefined);
    // P=4, members m1,m2 → m1 {0,1}; one block per filter, in config order.
    assert.deepEqual(c1.filter_subjects, ["0.cfoo.*", "1.cfoo.*", "0.cbar.*", "1.cbar.*"]);

    const c2 = (await info("m2")).config;
    assert.equal(c2.name, "m2");
    assert.equal(c2.ack_wait, nanos(500));
    assert.equal(c2.inactive_threshold, nanos(500));
    assert.equal(c2.priority_timeout, nanos(1000), "PinnedTTL is at least 1 s");
    assert.deepEqual(c2.filter_subjects, ["2.cfoo.*", "3.cfoo.*", "2.cbar.*", "3.cbar.*"]);

    // The consumer with the short AckWait is kept alive by its pulls.
    await env.js.publish("cfoo.x", "x");
    await env.js.publish("cbar.y", "y");
    await sleep(2500);
    await env.jsm.consumers.info(wq, "m2");
    await env.jsm.consumers.info(wq, "m1");

    // Mapping mode with one filter: "<p>.>" in the order the mapping lists them;
    // no AckWait in the template means 5 s.
    const stream2 = uniqueName("cfgmap");
    await env.jsm.streams.add({ name: stream2, subjects: ["mfoo.*"] });
    await createElastic(env.js, { stream: stream2, group, maxMembers: 3, partitioningFilters: [{ filter: "mfoo.*", partitioning_wildcards: [1] }] });
    await setMemberMappings(env.js, stream2, group, [
      { member: "m3", partitions: [2, 0] },
      { member: "m4", partitions: [1] },
    ]);
    const m3 = await elasticConsume(env.js, { stream: stream2, group, member: "m3", handler: () => undefined });
    try {
      const c3 = (await waitFor(() => env.jsm.consumers.info(`${stream2}-${group}`, "m3"), 15_000, "consumer m3")).config;
      assert.deepEqual(c3.filter_subjects, ["2.>", "0.>"]);
      assert.equal(c3.ack_wait, nanos(5000));
      assert.equal(c3.inactive_threshold, nanos(5000));
      assert.equal(c3.priority_timeout, nanos(5000));
      assert.equal(c3.ack_policy, "explicit", "explicit ack is filled in when the template has none");
    } finally {
      await m3.stop();
    }

    // Elastic requires explicit acks.
    for (const policy of ["none", "all"] as const) {
      await rejectsWithCode(
        elasticConsume(env.js, { stream: stream2, group, member: "m4", consumerConfig: { ack_policy: policy }, handler: () => undefined }),
        "INVALID_CONSUMER_TEMPLATE",
      );
    }
    // Nothing was created for m4 by the rejected calls.
    await assert.rejects(env.jsm.consumers.info(`${stream2}-${group}`, "m4"));
    await deleteElastic(env.js, stream, group);
    await deleteElastic(env.js, stream2, group);
  });
});

