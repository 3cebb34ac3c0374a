/**
 * describeGroup against known states: exact per-partition numbers, standbys, a member
 * without an instance, and a full elastic buffer.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { addMembers, createElastic, createStatic, describeGroup, elasticConsume, partitionOf, staticConsume, type ConsumerGroupMember } from "../../src/index.js";
import { staticConsumerName } from "../../src/core/names.js";
import { deferred, startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";

describe("describe - group state, backlog and health", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  for (const allowDirect of [false, true]) {
  test(`describe - static${allowDirect ? " (allow_direct: counted with direct gets, no temporary consumer)" : " (no allow_direct: counted with temporary consumers)"}: exact pending and in-flight per partition, pins, standbys, a member with no instance`, async () => {
    const stream = uniqueName("desc");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], allow_direct: allowDirect, subject_transform: { src: `${stream}.*`, dest: `{{partition(4,1)}}.${stream}.{{wildcard(1)}}` } });
    // Every consumer created on the stream from here on, the members' and describe's own.
    const created: string[] = [];
    const advisories = env.nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.CREATED.${stream}.*`, {
      callback: (_err, m) => {
        created.push(m.subject.split(".").pop() ?? "");
      },
    });
    await createStatic(env.js, { stream, group: "g", maxMembers: 4, members: ["m1", "m2"], onWarning: () => undefined });
    // m2's durable exists but no instance runs: start it once and stop it.
    const m2 = await staticConsume(env.js, { stream, group: "g", member: "m2", handler: () => undefined });
    await m2.stop();

    const perPartition = [0, 0, 0, 0];
    for (let i = 0; i < 1000; i++) {
      const subject = `${stream}.k${i % 97}`;
      perPartition[partitionOf(subject, 4, { filter: `${stream}.*`, wildcards: [1] })]! += 1;
      await env.js.publish(subject, String(i));
    }
    const m1Total = perPartition[0]! + perPartition[1]!;
    assert.ok(m1Total > 301, "the key spread gives m1 more than 301 messages");

    let handled = 0;
    const release = deferred();
    const instances: ConsumerGroupMember[] = [];
    const handler = async (): Promise<void> => {
      handled += 1;
      if (handled > 300) await release.promise; // the 301st stays in flight
    };
    const template = { max_ack_pending: 1, ack_wait: 30_000_000_000 };
    instances.push(await staticConsume(env.js, { stream, group: "g", member: "m1", handler, consumerConfig: template }));
    await waitFor(() => handled === 301, 30_000, "m1 to handle 300 and hold the 301st");
    const standby = await env.connect();
    instances.push(await staticConsume(standby.js, { stream, group: "g", member: "m1", handler, consumerConfig: template }));

    const d = await waitFor(async () => {
      const x = await describeGroup(env.js, "static", stream, "g");
      return (x.members.find((m) => m.member === "m1")?.waitingPulls ?? 0) >= 2 ? x : undefined;
    }, 10_000, "the standby's pull to show up");
    assert.deepEqual(d.assignment, { m1: [0, 1], m2: [2, 3] });
    const m1 = d.members.find((m) => m.member === "m1");
    const m2d = d.members.find((m) => m.member === "m2");
    assert.ok(m1?.active && m1.pinnedId && m1.pinnedAt, "m1 is active and pinned");
    assert.equal(m1.ackPending, 1);
    assert.equal(m2d?.active, false);
    assert.equal(m2d?.pending, perPartition[2]! + perPartition[3]!);
    const pending = d.partitions.map((p) => p.pending);
    assert.equal(pending[0]! + pending[1]!, m1Total - 301, "m1's partitions: everything past the 301st is pending");
    assert.equal(d.partitions[0]!.ackPending! + d.partitions[1]!.ackPending!, 1, "one message in flight");
    assert.deepEqual(pending.slice(2), [perPartition[2], perPartition[3]], "m2's partitions: all pending");
    assert.deepEqual(
      d.findings.filter((f) => f.code === "NO_ACTIVE_INSTANCE").map((f) => f.member),
      ["m2"],
    );
    const stalled = await describeGroup(env.js, "static", stream, "g", { stallAfterMs: 0 });
    assert.ok(stalled.findings.some((f) => f.code === "PARTITION_STALLED" && f.member === "m2"));

    await env.nc.flush();
    const temporary = created.filter((name) => !name.startsWith("g-"));
    if (allowDirect) assert.deepEqual(temporary, [], "with allow_direct, describe made no consumer");
    else assert.ok(temporary.length >= 4, `without it, describe counted with temporary consumers (${temporary.length})`);
    advisories.unsubscribe();

    release.resolve();
    await Promise.all(instances.map((i) => i.stop()));
  });
  }

  test("describe - elastic: the last message in flight counts as in flight, then nothing is left (counts the consumer's totals answer are not asked again)", async () => {
    const stream = uniqueName("desclast");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    await createElastic(env.js, { stream, group: "g", maxMembers: 2, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, stream, "g", ["a"]);
    let handled = 0;
    const release = deferred();
    const member = await elasticConsume(env.js, {
      stream,
      group: "g",
      member: "a",
      handler: async () => {
        handled += 1;
        if (handled === 20) await release.promise;
      },
    });
    for (let i = 0; i < 20; i++) await env.js.publish(`${stream}.k${i}`);
    await waitFor(() => handled === 20, 10_000, "the 20th message to be held");
    const held = await describeGroup(env.js, "elastic", stream, "g");
    assert.deepEqual(held.partitions.map((p) => p.pending), [0, 0], "nothing is left to deliver");
    assert.equal(held.partitions.reduce((n, p) => n + (p.ackPending ?? 0), 0), 1, "the held message is in flight, in its partition");
    release.resolve();
    const done = await waitFor(async () => {
      const x = await describeGroup(env.js, "elastic", stream, "g");
      return x.members[0]?.ackPending === 0 ? x : undefined;
    }, 10_000, "the last ack");
    assert.deepEqual(done.partitions.map((p) => [p.pending, p.ackPending]), [[0, 0], [0, 0]]);
    await member.stop();
  });

  test("describe - static: a consumer whose filters miss a partition its member owns (mid-change) does not make that partition look empty", async () => {
    const stream = uniqueName("descmiss");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], allow_direct: true, subject_transform: { src: `${stream}.*`, dest: `{{partition(2,1)}}.${stream}.{{wildcard(1)}}` } });
    await createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["m1"], onWarning: () => undefined });
    const partition = (subject: string): number => partitionOf(subject, 2, { filter: `${stream}.*`, wildcards: [1] });
    const published: { seq: number; partition: number }[] = [];
    const publish = async (i: number): Promise<void> => {
      const subject = `${stream}.k${i}`;
      published.push({ seq: (await env.js.publish(subject)).seq, partition: partition(subject) });
    };
    for (let i = 0; i < 40; i++) await publish(i);
    // m1's durable as an older layout left it: partition 0 only, all of it delivered and acked.
    const consumer = staticConsumerName("g", "m1");
    await env.jsm.consumers.add(stream, { durable_name: consumer, ack_policy: "explicit", filter_subjects: ["0.>"] });
    const c = await env.js.consumers.get(stream, consumer);
    for (const _ of published.filter((p) => p.partition === 0)) {
      const m = await c.next({ expires: 2000 });
      assert.ok(m, "partition 0's message");
      await m.ackAck();
    }
    // Then partition 1 alone gets more: the consumer's totals still say nothing is pending.
    for (let i = 40; published.filter((p) => p.seq > 40).length < 10; i++) {
      const subject = `${stream}.k${i}`;
      if (partition(subject) === 1) await publish(i);
    }
    const lastOfPartition0 = Math.max(...published.filter((p) => p.partition === 0).map((p) => p.seq));
    const d = await describeGroup(env.js, "static", stream, "g");
    assert.equal(d.members[0]?.pending, 0, "the consumer itself has nothing pending");
    assert.deepEqual(
      d.partitions.map((p) => p.pending),
      [0, published.filter((p) => p.partition === 1 && p.seq > lastOfPartition0).length],
      "partition 1 is counted, not taken from the consumer's totals",
    );
  });

  test("describe - static with allow_direct: in flight split by partition from the member's window, also when the window is too big for one batch", async () => {
    const stream = uniqueName("descwin");
    // `01.<stream>.*` is stored as published: a first token `<p>.>` never selects, inside the windows below.
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`, `01.${stream}.*`], allow_direct: true, subject_transform: { src: `${stream}.*`, dest: `{{partition(2,1)}}.${stream}.{{wildcard(1)}}` } });
    await createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["m1"], onWarning: () => undefined });
    const partitions: number[] = [];
    const payload = new Uint8Array(40 * 1024);
    for (let i = 0; i < 30; i++) {
      if (i === 29) await env.js.publish(`01.${stream}.x`);
      const subject = `${stream}.k${i}`;
      partitions.push(partitionOf(subject, 2, { filter: `${stream}.*`, wildcards: [1] }));
      await env.js.publish(subject, payload);
    }
    // m1's durable as its instances make it; 30 messages of 40 KiB delivered, none acked: a 1.2 MB window.
    await env.jsm.consumers.add(stream, { durable_name: staticConsumerName("g", "m1"), ack_policy: "explicit", ack_wait: 60_000_000_000, filter_subjects: ["0.>", "1.>"] });
    const c = await env.js.consumers.get(stream, staticConsumerName("g", "m1"));
    const held = [];
    for (let i = 0; i < 30; i++) {
      const m = await c.next({ expires: 2000 });
      assert.ok(m);
      held.push(m);
    }
    const inPartition = (p: number, from = 0): number => partitions.slice(from).filter((x) => x === p).length;
    const wide = await describeGroup(env.js, "static", stream, "g");
    assert.deepEqual(wide.partitions.map((p) => [p.pending, p.ackPending]), [[0, inPartition(0)], [0, inPartition(1)]], "counted per partition past the batch's byte limit");
    // All but the last two acked: a window of two messages, read in one batch.
    for (const m of held.slice(0, 28)) await m.ackAck();
    const narrow = await describeGroup(env.js, "static", stream, "g");
    assert.deepEqual(narrow.partitions.map((p) => [p.pending, p.ackPending]), [[0, inPartition(0, 28)], [0, inPartition(1, 28)]], "the last two, in their partitions");
    for (const m of held.slice(28)) await m.ackAck();
  });

  test("describe - static with config filters: a partition's backlog counts only what its filters select", async () => {
    const stream = uniqueName("descflt");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*.*`], allow_direct: true, subject_transform: { src: `${stream}.*.*`, dest: `{{partition(2,2)}}.${stream}.{{wildcard(1)}}.{{wildcard(2)}}` } });
    await createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["m1", "m2"], filters: [`${stream}.a.*`], onWarning: () => undefined });
    const selected = [0, 0];
    for (let i = 0; i < 60; i++) {
      const kind = i % 3 === 0 ? "b" : "a"; // one in three is outside the group's filter
      await env.js.publish(`${stream}.${kind}.k${i}`);
      if (kind === "a") selected[partitionOf(`${stream}.${kind}.k${i}`, 2, { filter: `${stream}.*.*`, wildcards: [2] })]! += 1;
    }
    const before = await describeGroup(env.js, "static", stream, "g");
    assert.deepEqual(before.partitions.map((p) => p.pending), selected, "no instance yet: the filtered messages of each partition");
    let handled = 0;
    const instances = [
      await staticConsume(env.js, { stream, group: "g", member: "m1", handler: () => void (handled += 1) }),
      await staticConsume(env.js, { stream, group: "g", member: "m2", handler: () => void (handled += 1) }),
    ];
    await waitFor(() => handled === selected[0]! + selected[1]!, 10_000, "every selected message handled");
    const after = await waitFor(async () => {
      const d = await describeGroup(env.js, "static", stream, "g");
      return d.members.every((m) => m.ackPending === 0) ? d : undefined;
    }, 10_000, "the last acks");
    assert.deepEqual(after.partitions.map((p) => [p.pending, p.ackPending]), [[0, 0], [0, 0]], "the messages outside the filter are nobody's backlog");
    await Promise.all(instances.map((i) => i.stop()));
  });

  test("describe - elastic: a full buffer, the source lag, and members beyond the partition count", async () => {
    const stream = uniqueName("descel");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    for (let i = 0; i < 100; i++) await env.js.publish(`${stream}.k${i}`);
    await createElastic(env.js, { stream, group: "g", maxMembers: 2, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }], maxBufferedMsgs: 10 });
    await addMembers(env.js, stream, "g", ["a", "b", "c"]);
    const d = await waitFor(async () => {
      const x = await describeGroup(env.js, "elastic", stream, "g");
      return x.buffer?.messages === 10 ? x : undefined;
    }, 10_000, "the buffer to fill up");
    assert.equal(d.buffer?.maxMessages, 10);
    assert.ok(d.findings.some((f) => f.code === "BUFFER_FULL"));
    assert.deepEqual(d.members.filter((m) => m.overCap).map((m) => m.member), ["c"]);
    assert.equal(d.partitions.reduce((n, p) => n + (p.pending ?? 0), 0), 10, "all 10 buffered messages are pending");
    assert.ok(d.findings.some((f) => f.code === "NO_ACTIVE_INSTANCE" && f.member === "a"));
    assert.equal(typeof d.sourceLag, "number");
    const grown = await describeGroup(env.js, "elastic", stream, "g", { previous: { ...d, sourceLag: 0 } });
    assert.equal(grown.findings.some((f) => f.code === "SOURCE_LAG_GROWING"), (grown.sourceLag ?? 0) > 0);
  });
});
