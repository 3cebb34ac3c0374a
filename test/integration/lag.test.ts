/**
 * groupLag against a real server: exact pending counts per partition and per member
 * for a known published set (expected counts from the partition hash), the source lag
 * of a full buffer and of a deleted source, the drain rate measured from a previous
 * reading and over a sample window, the recommendation, groups with no members, a
 * 1,024-partition group, and typed errors for bad input.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  addMembers,
  createElastic,
  createStatic,
  groupLag,
  memberPartitions,
  partitionOf,
  recommendMembers,
  workQueueStreamName,
  type GroupLag,
  type GroupLagOptions,
} from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { Runners, publishAll, rejectsWithCode } from "../helpers/elastic-util.js";

/** Publishes `count` messages on `count % keys` keys and returns the expected count per partition. */
async function publishKnown(env: TestEnv, stream: string, partitions: number, count: number, keys: number): Promise<number[]> {
  const expected = new Array<number>(partitions).fill(0);
  const items = Array.from({ length: count }, (_, i) => ({ subject: `${stream}.k${i % keys}`, data: String(i) }));
  for (const m of items) expected[partitionOf(m.subject, partitions, { filter: `${stream}.*`, wildcards: [1] })]! += 1;
  await publishAll(env.js, items);
  return expected;
}

/** Creates a stream `<name>.*` and an elastic group `g` on it partitioned by the first token. */
async function elasticGroup(env: TestEnv, partitions: number, extra: { maxBufferedMsgs?: number } = {}): Promise<string> {
  const stream = uniqueName("lag");
  await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
  await createElastic(env.js, { stream, group: "g", maxMembers: partitions, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }], ...extra });
  return stream;
}

/** Waits until the work queue holds `messages`. */
async function sourced(env: TestEnv, stream: string, messages: number): Promise<void> {
  await waitFor(async () => (await env.jsm.streams.info(workQueueStreamName(stream, "g"))).state.messages === messages, 15_000, `${messages} messages in the work queue`);
}

const drainedIn = (l: GroupLag): number => Math.round(((l.rate.drainedPerSecond ?? NaN) * (l.rate.windowMs ?? NaN)) / 1000);

describe("lag - groupLag", () => {
  let env: TestEnv;
  const runners = new Runners();
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await runners.stopAll();
    await env.close();
  });

  test("lag - exact pending per partition and per member for a known published set; source lag, backlog and the recommendation from a given rate", async () => {
    const stream = await elasticGroup(env, 6);
    const members = ["a", "b", "c", "d"];
    await addMembers(env.js, stream, "g", members);
    const expected = await publishKnown(env, stream, 6, 500, 37);
    await sourced(env, stream, 500);

    const lag = await groupLag(env.js, stream, "g", { sampleMs: 0, ratePerMember: 2, targetDrainMs: 50_000 });
    assert.equal(lag.workQueue, `${stream}-g`);
    assert.equal(lag.partitionCount, 6);
    assert.deepEqual(lag.partitions.map((p) => p.pending), expected, "pending per partition, as the hash spreads the keys");
    assert.deepEqual(lag.members.map((m) => m.member), members);
    for (const m of lag.members) {
      const owned = memberPartitions(members, 6, null, m.member);
      assert.deepEqual(m.partitions, owned, `${m.member}'s partitions`);
      assert.equal(m.pending, owned.reduce((n, p) => n + (expected[p] ?? 0), 0), `${m.member}'s pending is its partitions'`);
      assert.equal(m.active, false, "no instance runs");
      for (const p of owned) assert.equal(lag.partitions[p]?.owner, m.member);
    }
    assert.equal(lag.pending, 500);
    assert.equal(lag.sourceLag, 0);
    assert.deepEqual({ stream: lag.source?.stream, lag: lag.source?.lag, active: lag.source?.active }, { stream, lag: 0, active: true });
    assert.equal(lag.backlog, 500);
    assert.deepEqual(lag.rate, { source: "given", perMember: 2, activeMembers: 0 }, "no window: nothing measured");
    // ceil(500 / (2 msgs/s × 50 s)) = 5 members, within the 6 partitions
    assert.equal(lag.recommendedMembers, 5);
    assert.deepEqual(lag.recommendation, { recommended: 5, needed: 5, capped: false, basis: "rate" });
    assert.deepEqual(lag.notes, []);

    const capped = await groupLag(env.js, stream, "g", { sampleMs: 0, ratePerMember: 1, targetDrainMs: 50_000 });
    assert.deepEqual(capped.recommendation, { recommended: 6, needed: 10, capped: true, basis: "rate" });
    assert.deepEqual(capped.notes.map((n) => n.code), ["CAPPED"]);
    assert.match(capped.notes[0]?.message ?? "", /needs 10 members, more than the 6 partitions.*cg elastic repartition/);

    const noRate = await groupLag(env.js, stream, "g", { sampleMs: 0 });
    assert.deepEqual(noRate.recommendation, { recommended: 4, needed: 4, capped: false, basis: "hold" }, "no rate: the current members");
    assert.deepEqual(noRate.notes.map((n) => n.code), ["NO_RATE"]);
    assert.equal(noRate.targetDrainMs, 60_000, "the default target");
  });

  test("lag - the drain rate from a previous reading is exactly what was acknowledged in between, over the active members", async () => {
    const stream = await elasticGroup(env, 4);
    await addMembers(env.js, stream, "g", ["a", "b"]);
    await publishKnown(env, stream, 4, 200, 50);
    await sourced(env, stream, 200);
    const before = await groupLag(env.js, stream, "g", { sampleMs: 0 });
    assert.equal(before.pending, 200);

    const a = await runners.start(env.js, { stream, group: "g", member: "a", maxAckPending: 50 });
    const b = await runners.start(env.js, { stream, group: "g", member: "b", maxAckPending: 50 });
    await waitFor(() => a.handled.length + b.handled.length >= 200, 30_000, "200 handled");
    await sourced(env, stream, 0);
    // both keep a pull waiting while idle: both count as consuming
    const after = await waitFor(async () => {
      const l = await groupLag(env.js, stream, "g", { previous: before });
      return l.rate.activeMembers === 2 ? l : undefined;
    }, 10_000, "both members active");
    assert.equal(drainedIn(after), 200, "Δ last sequence − Δ messages over the window");
    assert.equal(after.rate.inflowPerSecond, 0, "nothing arrived");
    assert.equal(after.rate.windowMs, after.sample.atMs - before.sample.atMs);
    assert.equal(after.rate.source, "measured");
    assert.equal(after.rate.measuredPerMember, (after.rate.drainedPerSecond ?? NaN) / 2);
    assert.equal(after.rate.perMember, after.rate.measuredPerMember);
    assert.equal(after.pending, 0);
    assert.deepEqual(after.recommendation, { recommended: 1, needed: 1, capped: false, basis: "idle" }, "nothing waits: one member is enough");
    assert.ok(after.members.every((m) => m.active));
  });

  test("lag - over a sample window: slow members draining a backlog give a measured rate and a recommendation from it", async () => {
    const stream = await elasticGroup(env, 4);
    await addMembers(env.js, stream, "g", ["a", "b"]);
    await publishKnown(env, stream, 4, 600, 80);
    await sourced(env, stream, 600);
    const slow = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 10));
    const a = await runners.start(env.js, { stream, group: "g", member: "a", maxAckPending: 1, onMessage: slow });
    const b = await runners.start(env.js, { stream, group: "g", member: "b", maxAckPending: 1, onMessage: slow });
    await waitFor(() => a.handled.length > 0 && b.handled.length > 0, 15_000, "both members consuming");

    const started = Date.now();
    const lag = await groupLag(env.js, stream, "g", { sampleMs: 800, targetDrainMs: 1000 });
    assert.ok(Date.now() - started >= 800, "the call watches the queue for the window");
    assert.ok((lag.rate.windowMs ?? 0) >= 800, `window ${lag.rate.windowMs}`);
    assert.equal(lag.rate.source, "measured");
    assert.ok(drainedIn(lag) > 0, "the members drained during the window");
    assert.equal(lag.rate.activeMembers, 2);
    assert.ok(lag.backlog > 0, "a backlog is left");
    assert.deepEqual(
      lag.recommendation,
      recommendMembers({ backlog: lag.backlog, members: 2, partitionCount: 4, targetDrainMs: 1000, ratePerMember: lag.rate.perMember }),
      "the recommendation is the rule applied to the reported numbers",
    );
    assert.equal(lag.recommendation.basis, "rate");
    await runners.stopAll();
  });

  test("lag - a full buffer leaves the rest as source lag; a deleted source is reported inactive; no members", async () => {
    const stream = uniqueName("lagbuf");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    await publishAll(env.js, Array.from({ length: 100 }, (_, i) => ({ subject: `${stream}.k${i}`, data: "x" })));
    await createElastic(env.js, { stream, group: "g", maxMembers: 2, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }], maxBufferedMsgs: 10 });
    await sourced(env, stream, 10);
    // the source stalls on the full buffer: its lag settles
    const lag = await waitFor(async () => {
      const l = await groupLag(env.js, stream, "g", { sampleMs: 0 });
      const info = await env.jsm.streams.info(workQueueStreamName(stream, "g"));
      return l.sourceLag > 0 && l.sourceLag === info.sources?.[0]?.lag ? l : undefined;
    }, 10_000, "a settled source lag");
    assert.equal(lag.pending, 10);
    assert.ok(lag.sourceLag >= 80 && lag.sourceLag <= 90, `the source lag is what the buffer left in the stream (${lag.sourceLag})`);
    assert.equal(lag.backlog, 10 + lag.sourceLag, "the backlog counts both");
    assert.deepEqual(lag.members, []);
    assert.ok(lag.partitions.every((p) => p.owner === undefined));
    assert.deepEqual(lag.recommendation, { recommended: 1, needed: 1, capped: false, basis: "hold" }, "one member to start");
    assert.deepEqual(lag.notes.map((n) => n.code), ["NO_MEMBERS", "NO_RATE"]);
    assert.match(lag.notes[0]?.message ?? "", /no members.*cg elastic add .* or run instances that join by themselves \(autoJoin\)/);

    await env.jsm.streams.delete(stream);
    const gone = await waitFor(async () => {
      const l = await groupLag(env.js, stream, "g", { sampleMs: 0 });
      return l.source && !l.source.active ? l : undefined;
    }, 15_000, "the source reported inactive");
    assert.match(gone.source?.error ?? "", /stream not found/);
    assert.ok(gone.notes.some((n) => n.code === "SOURCE_INACTIVE" && n.message.includes("stream not found")));
  });

  test("lag - an empty group with no members recommends 0; with members 1", async () => {
    const stream = await elasticGroup(env, 3);
    const fresh = await groupLag(env.js, stream, "g", { sampleMs: 0 });
    if (fresh.source?.lastActiveMs === undefined) {
      assert.equal(fresh.source?.active, false, "a source not heard from yet is not active");
      assert.match(fresh.notes.find((n) => n.code === "SOURCE_INACTIVE")?.message ?? "", /has not heard from its source yet/);
    }
    const empty = await waitFor(async () => {
      const l = await groupLag(env.js, stream, "g", { sampleMs: 0 });
      return l.source?.active ? l : undefined;
    }, 10_000, "the source to start");
    assert.equal(empty.backlog, 0);
    assert.equal(empty.recommendedMembers, 0);
    assert.deepEqual(empty.notes.map((n) => n.code), ["NO_MEMBERS"]);
    await addMembers(env.js, stream, "g", ["a", "b"]);
    const idle = await groupLag(env.js, stream, "g", { sampleMs: 0, ratePerMember: 10 });
    assert.equal(idle.recommendedMembers, 1);
    assert.deepEqual(idle.notes, []);
  });

  test("lag - 1,024 partitions: exact counts in one reading", async (t) => {
    const stream = await elasticGroup(env, 1024);
    await addMembers(env.js, stream, "g", Array.from({ length: 16 }, (_, i) => `m${String(i).padStart(2, "0")}`));
    const expected = await publishKnown(env, stream, 1024, 8000, 5000);
    await sourced(env, stream, 8000);
    const started = performance.now();
    const lag = await groupLag(env.js, stream, "g", { sampleMs: 0 });
    const ms = performance.now() - started;
    t.diagnostic(`groupLag of 1,024 partitions, 16 members, 8,000 messages: ${ms.toFixed(0)} ms`);
    assert.deepEqual(lag.partitions.map((p) => p.pending), expected);
    assert.equal(lag.members.reduce((n, m) => n + m.pending, 0), 8000);
    assert.ok(lag.members.every((m) => m.partitions.length === 64));
  });

  test("lag - bad input: typed errors for a missing group, a static group, bad names, bad options, an abort, a missing work queue", async () => {
    const stream = await elasticGroup(env, 2);
    const missing = await rejectsWithCode(groupLag(env.js, stream, "nope"), "GROUP_NOT_FOUND");
    assert.match(missing.message, /no group "nope" on stream/);

    const s = uniqueName("lagst");
    await env.jsm.streams.add({ name: s, subjects: [`${s}.*`], subject_transform: { src: `${s}.*`, dest: `{{partition(2,1)}}.${s}.{{wildcard(1)}}` } });
    await createStatic(env.js, { stream: s, group: "sg", maxMembers: 2, members: ["m1"], onWarning: () => undefined });
    const isStatic = await rejectsWithCode(groupLag(env.js, s, "sg"), "STATIC_GROUP");
    assert.match(isStatic.message, /static consumer group: groupLag reads an elastic group's work queue.*cg static describe/);

    await rejectsWithCode(groupLag(env.js, "a.b", "g"), "INVALID_NAME");
    const badOptions: [GroupLagOptions, RegExp][] = [
      [{ targetDrainMs: 0 }, /targetDrainMs must be a positive number/],
      [{ targetDrainMs: Number.NaN }, /targetDrainMs/],
      [{ ratePerMember: -3 }, /ratePerMember must be a positive number.*got -3/],
      [{ sampleMs: -1 }, /sampleMs must be a number of milliseconds from 0/],
      [{ sampleMs: 60_001 }, /to 60000, got 60001/],
    ];
    for (const [options, message] of badOptions) {
      const err = await rejectsWithCode(groupLag(env.js, stream, "g", options), "INVALID_ARGUMENT");
      assert.match(err.message, message);
    }
    const other = await groupLag(env.js, stream, "g", { sampleMs: 0 });
    const wrongPrevious = await rejectsWithCode(groupLag(env.js, stream, "other", { previous: other }), "INVALID_ARGUMENT");
    assert.match(wrongPrevious.message, /previous must be an earlier groupLag result of .*\.other/);
    await rejectsWithCode(groupLag(env.js, stream, "g", null as unknown as GroupLagOptions), "INVALID_ARGUMENT");

    await rejectsWithCode(groupLag(env.js, stream, "g", { signal: AbortSignal.abort() }), "STOPPED");
    const controller = new AbortController();
    const started = Date.now();
    setTimeout(() => controller.abort(), 200);
    await rejectsWithCode(groupLag(env.js, stream, "g", { sampleMs: 30_000, signal: controller.signal }), "STOPPED");
    assert.ok(Date.now() - started < 5000, "the abort ends the sample window");

    await env.jsm.streams.delete(workQueueStreamName(stream, "g"));
    const noQueue = await rejectsWithCode(groupLag(env.js, stream, "g"), "STREAM_NOT_FOUND");
    assert.match(noQueue.message, /work-queue stream .* does not exist/);
  });
});
