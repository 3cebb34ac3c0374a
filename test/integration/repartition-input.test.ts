/**
 * Issue 18, the edges of `repartition` on a real server: bad input gives a typed
 * error and changes nothing (the group's KV entry, bytes and revision, and its
 * work-queue stream `<stream>-<group>` with its consumers are compared before and
 * after); a repartition in progress to another count is refused and the one in
 * progress resumes; Go members block it unless forced; groups with explicit member
 * mappings grow without moving a partition and with the gcd gating of a count that
 * is not a multiple (4 -> 6); and the CLI (`cg elastic repartition`, `cg static
 * repartition`) end to end.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { StreamConfig } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import {
  addMembers,
  ConsumerGroupError,
  ELASTIC_BUCKET,
  STATIC_BUCKET,
  createStatic,
  describeGroup,
  elasticConsume,
  elasticGetPartitionFilters,
  feedingPartitions,
  getElasticConsumerGroupConfig,
  listElasticConsumerGroups,
  partitionOf,
  repartition,
  type RepartitionOptions,
  setMemberMappings,
  workQueueStreamName,
  type ConcurrencyMode,
  type ConsumerGroupMember,
  type RepartitionProgress,
  type RepartitionResult,
} from "../../src/index.js";
import { checkDelivery } from "../../src/cli/demo/delivery-check.js";
import { connectTo, deferred, startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { createKeyedElasticGroup, findOrderBreaks, publishSteadily, type HandlerSpan } from "../helpers/repartition-run.js";
import { putRawElasticConfig, rawElasticConfig, withTimeout } from "../helpers/elastic-util.js";
import { GoMember, driverBinary, publishKeyed } from "../helpers/interop-go.js";
import { addStaticStream, killAllCg, runCg } from "../helpers/cli-run.js";
import { now, sleep } from "../helpers/load-harness.js";

/** Everything a repartition could change, as stored: the config entry and the work-queue stream with its consumers. */
interface GroupSnapshot {
  config: { text: string; revision: number; operation: string } | undefined;
  workQueue: StreamConfig | undefined;
  consumers: { name: string; filters: string[]; metadata: Record<string, string> | undefined }[];
}

const isNotFound = (err: unknown): boolean => err instanceof Error && /not found/i.test(err.message);

/** Asserts that `p` rejects with a ConsumerGroupError of `code`; returns it. */
async function rejectsTyped(p: Promise<unknown>, code: string, what: string): Promise<ConsumerGroupError> {
  let caught: unknown;
  try {
    await p;
  } catch (err) {
    caught = err;
  }
  assert.ok(caught !== undefined, `${what}: expected ${code}, but it resolved`);
  assert.ok(caught instanceof ConsumerGroupError, `${what}: expected a ConsumerGroupError ${code}, got ${caught instanceof Error ? caught.message : JSON.stringify(caught)}`);
  assert.equal(caught.code, code, `${what}: ${caught.message}`);
  return caught;
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

/** The `{"error":{…}}` line `cg --json` writes on stderr. */
function jsonError(stderr: string): { code: string; message: string; exit_code: number } {
  const line = stderr.split("\n").find((l) => l.startsWith('{"error"'));
  assert.ok(line, `a JSON error on stderr, got:\n${stderr}`);
  return (JSON.parse(line) as { error: { code: string; message: string; exit_code: number } }).error;
}

describe("repartition - bad input, work in progress, Go members, mappings and the CLI (issue 18)", () => {
  let env: TestEnv;
  let url: string;
  const members: { stop(): Promise<void> }[] = [];
  const track = <T extends { stop(): Promise<void> }>(m: T): T => {
    members.push(m);
    return m;
  };

  before(async () => {
    env = await startEnv();
    url = env.server.url;
  });
  afterEach(async () => {
    await Promise.allSettled(members.splice(0).map((m) => m.stop()));
  });
  after(async () => {
    await killAllCg();
    await env.close();
  });

  async function snapshot(stream: string, group: string): Promise<GroupSnapshot> {
    const wq = workQueueStreamName(stream, group);
    const config = await rawElasticConfig(env.js, stream, group);
    let workQueue: StreamConfig | undefined;
    try {
      workQueue = structuredClone((await env.jsm.streams.info(wq)).config);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    const consumers: GroupSnapshot["consumers"] = [];
    if (workQueue) {
      for await (const ci of env.jsm.consumers.list(wq)) {
        consumers.push({ name: ci.name, filters: ci.config.filter_subjects ?? (ci.config.filter_subject ? [ci.config.filter_subject] : []), metadata: ci.config.metadata });
      }
      consumers.sort((a, b) => a.name.localeCompare(b.name));
    }
    return { config, workQueue, consumers };
  }

  async function rawStaticConfig(stream: string, group: string): Promise<{ text: string; revision: number } | undefined> {
    const kv = await new Kvm(env.js).open(STATIC_BUCKET);
    const entry = await kv.get(`${stream}.${group}`);
    return entry ? { text: new TextDecoder().decode(entry.value), revision: entry.revision } : undefined;
  }

  async function bucketExists(bucket: string): Promise<boolean> {
    try {
      await env.jsm.streams.info(`KV_${bucket}`);
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  /**
   * A member that handles `{key, seq}` messages at once. In `key` mode by default: its
   * consumer carries this library's metadata. A `serial` member's consumer is exactly
   * Go's, so `repartition` counts it as a possible Go member.
   */
  async function quickMember(stream: string, group: string, member: string, handled: string[] = [], concurrency: ConcurrencyMode = "key"): Promise<ConsumerGroupMember> {
    return track(
      await elasticConsume(env.js, {
        stream,
        group,
        member,
        concurrency,
        handler: (msg) => {
          const { key, seq } = msg.json<{ key: string; seq: number }>();
          handled.push(`${key}/${seq}`);
        },
      }),
    );
  }

  async function consumerExists(wq: string, name: string): Promise<boolean> {
    try {
      await env.jsm.consumers.info(wq, name);
      return true;
    } catch (err) {
      if (isNotFound(err)) return false;
      throw err;
    }
  }

  /** The state a finished repartition to `to` leaves: config, Go's layout, no record. */
  async function assertFinished(stream: string, group: string, to: number): Promise<void> {
    assert.equal((await getElasticConsumerGroupConfig(env.js, stream, group)).max_members, to);
    const wq = await env.jsm.streams.info(workQueueStreamName(stream, group));
    assert.deepEqual(wq.config.sources?.[0]?.subject_transforms, [{ src: `${stream}.*`, dest: `{{Partition(${to},1)}}.${stream}.{{Wildcard(1)}}` }], `Go's layout for ${to}`);
    assert.equal(wq.config.metadata?.["pcg_repartition"], undefined, "the record is gone");
  }

  // --- 1. bad input: a typed error, nothing changed ----------------------------------

  test("repartition input - a static group: STATIC_GROUP pointing at `cg static repartition`, with and without an elastic bucket; nothing changes", async () => {
    const stream = uniqueName("rs");
    await addStaticStream(env.jsm, stream, 4);
    await createStatic(env.js, { stream, group: "sg", maxMembers: 4, members: ["m1", "m2"] });
    const staticBefore = await rawStaticConfig(stream, "sg");
    const streamBefore = (await env.jsm.streams.info(stream)).config;

    // This is the file's first test: no elastic group was ever created on the server.
    assert.equal(await bucketExists(ELASTIC_BUCKET), false, "no elastic bucket yet");
    const noBucket = await rejectsTyped(repartition(env.js, stream, "sg", 8), "STATIC_GROUP", "static group, no elastic bucket");
    assert.match(noBucket.message, new RegExp(`cg static repartition ${stream} sg <partitions>`));
    // An unknown elastic group when no elastic group exists at all: the bucket's error (as every elastic admin call).
    const noGroup = await rejectsTyped(repartition(env.js, stream, "nope", 8), "BUCKET_NOT_FOUND", "unknown group, no elastic bucket");
    assert.match(noGroup.message, /no elastic group was ever created/);
    assert.equal(await bucketExists(ELASTIC_BUCKET), false, "the elastic bucket was not created");
    await assert.rejects(env.jsm.streams.info(workQueueStreamName(stream, "nope")), isNotFound, "no work-queue stream created");

    // With an elastic bucket (another group on another stream) the static group is still recognised.
    await createKeyedElasticGroup(env, uniqueName("rse"), "g", 4, []);
    const withBucket = await rejectsTyped(repartition(env.js, stream, "sg", 8), "STATIC_GROUP", "static group, elastic bucket present");
    assert.match(withBucket.message, new RegExp(`cg static repartition ${stream} sg <partitions>`));
    assert.equal(await rawElasticConfig(env.js, stream, "sg"), undefined, "no elastic config written for the static group");
    await assert.rejects(env.jsm.streams.info(workQueueStreamName(stream, "sg")), isNotFound, "no work-queue stream created");

    assert.deepEqual(await rawStaticConfig(stream, "sg"), staticBefore, "the static config is unchanged");
    assert.deepEqual((await env.jsm.streams.info(stream)).config, streamBefore, "the static stream (its transform) is unchanged");
  });

  test("repartition input - not larger, not an integer, unknown group, invalid names: typed errors, and the group's config and work-queue stream are unchanged", async () => {
    const stream = uniqueName("ri");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const handled: string[] = [];
    await quickMember(stream, "g", "m1", handled);
    const wq = workQueueStreamName(stream, "g");
    await waitFor(() => consumerExists(wq, "m1"), 10_000, "m1's consumer");
    const before = await snapshot(stream, "g");
    assert.ok(before.config && before.workQueue, "the group exists");

    const cases: { what: string; n: number; code: string; message: RegExp }[] = [
      { what: "a smaller count", n: 2, code: "INVALID_MAX_MEMBERS", message: /has 4 partitions; a repartition only grows the count \(got 2\)/ },
      { what: "the same count", n: 4, code: "INVALID_MAX_MEMBERS", message: /has 4 partitions; a repartition only grows the count \(got 4\)/ },
      { what: "a non-integer", n: 6.5, code: "INVALID_MAX_MEMBERS", message: /must be >= 1 \(got 6\.5\)/ },
      { what: "zero", n: 0, code: "INVALID_MAX_MEMBERS", message: /must be >= 1 \(got 0\)/ },
      { what: "a negative count", n: -8, code: "INVALID_MAX_MEMBERS", message: /must be >= 1 \(got -8\)/ },
      { what: "NaN", n: NaN, code: "INVALID_MAX_MEMBERS", message: /got NaN/ },
      { what: "Infinity", n: Infinity, code: "INVALID_MAX_MEMBERS", message: /got Infinity/ },
      { what: "more than MAX_PARTITIONS", n: 4097, code: "INVALID_MAX_MEMBERS", message: /must be at most 4096 \(got 4097\)/ },
    ];
    for (const c of cases) {
      const err = await rejectsTyped(repartition(env.js, stream, "g", c.n, { pollMs: 50 }), c.code, c.what);
      assert.match(err.message, c.message, c.what);
      assert.deepEqual(await snapshot(stream, "g"), before, `${c.what}: nothing changed`);
    }

    // A group that does not exist, on a stream with a group and on a stream that does not exist.
    for (const [s, g] of [
      [stream, "nope"],
      [uniqueName("nostream"), "g"],
    ] as const) {
      await rejectsTyped(repartition(env.js, s, g, 8), "GROUP_NOT_FOUND", `unknown group ${s}.${g}`);
      const after = await snapshot(s, g);
      assert.equal(after.config, undefined, "no config was written for the unknown group");
      assert.equal(after.workQueue, undefined, "no work-queue stream was created for the unknown group");
    }

    // Invalid names, each checked before anything is read.
    for (const [s, g] of [
      [stream, "g.x"],
      [stream, "g*"],
      [stream, "g>"],
      [stream, ""],
      [`${stream}.x`, "g"],
      [stream, "a b"],
      [stream, "x".repeat(300)],
    ] as const) {
      await rejectsTyped(repartition(env.js, s, g, 8), "INVALID_NAME", `invalid name ${s}.${g.slice(0, 20)}`);
    }
    assert.deepEqual(await snapshot(stream, "g"), before, "after every bad call, the group is as it was");

    // Options of the wrong type: a force that is not a boolean must not count as one.
    const badOptions: { what: string; options: unknown; message: RegExp }[] = [
      { what: 'force "x"', options: { force: "x" }, message: /force must be true or false, got "x"/ },
      { what: "force 1", options: { force: 1 }, message: /force must be true or false, got 1/ },
      { what: "pollMs -1", options: { pollMs: -1 }, message: /pollMs must be a positive number of ms up to 2147483647 .*got -1/ },
      { what: "onProgress a string", options: { onProgress: "log" }, message: /onProgress must be a function, got "log"/ },
      { what: "signal an object", options: { signal: {} }, message: /signal must be an AbortSignal, got \{\}/ },
      { what: "null options", options: null, message: /repartition options must be an object, got null/ },
    ];
    for (const c of badOptions) {
      const err = await rejectsTyped(repartition(env.js, stream, "g", 8, c.options as RepartitionOptions), "INVALID_ARGUMENT", c.what);
      assert.match(err.message, c.message, c.what);
      assert.deepEqual(await snapshot(stream, "g"), before, `${c.what}: nothing changed`);
    }

    // The group still works, in its old layout.
    await env.js.publish(`${stream}.k1`, JSON.stringify({ key: "k1", seq: 1 }));
    await waitFor(() => handled.includes("k1/1"), 10_000, "m1 to handle a message after the bad calls");
  });

  test("repartition input - a stored config above MAX_PARTITIONS (a hand edit, another tool): a running member stops with INVALID_MAX_MEMBERS and elasticConsume refuses, instead of crashing the process", async () => {
    const stream = uniqueName("rmax");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const member = await quickMember(stream, "g", "m1");
    const stored = await rawElasticConfig(env.js, stream, "g");
    assert.ok(stored);
    const huge = stored.text.replace('"max_members":4', '"max_members":1000000000');
    assert.notEqual(huge, stored.text);
    await putRawElasticConfig(env.js, stream, "g", huge);
    const error = await withTimeout(member.closed(), 10_000, "the member to stop");
    assert.ok(error instanceof ConsumerGroupError && error.code === "INVALID_MAX_MEMBERS", `stopped with ${String(error)}`);
    assert.match(error.message, /must be at most 4096 \(got 1000000000\)/);
    await rejectsTyped(elasticConsume(env.js, { stream, group: "g", member: "m1", handler: () => undefined }), "INVALID_MAX_MEMBERS", "joining a group whose stored config is above the maximum");
    await rejectsTyped(repartition(env.js, stream, "g", 12), "INVALID_MAX_MEMBERS", "repartitioning it");
  });

  test("repartition input - two repartitions started at once: to different counts, one runs and the other gets REPARTITION_IN_PROGRESS before changing anything; the lock never shows as a group and is gone at the end", async () => {
    const stream = uniqueName("rlk");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const handled: string[] = [];
    await quickMember(stream, "g", "m1", handled);
    for (let i = 0; i < 200; i++) await env.js.publish(`${stream}.k${i % 20}`, JSON.stringify({ key: `k${i % 20}`, seq: Math.floor(i / 20) + 1 }));
    const [a, b] = await Promise.allSettled([repartition(env.js, stream, "g", 8, { pollMs: 50 }), repartition(env.js, stream, "g", 12, { pollMs: 50 })]);
    const won = [a, b].filter((r) => r.status === "fulfilled");
    const lost = [a, b].filter((r): r is PromiseRejectedResult => r.status === "rejected");
    assert.equal(won.length, 1, `exactly one runs: ${JSON.stringify([a, b].map((r) => (r.status === "rejected" ? String(r.reason) : r.value)))}`);
    assert.ok(lost[0]?.reason instanceof ConsumerGroupError && lost[0].reason.code === "REPARTITION_IN_PROGRESS", String(lost[0]?.reason));
    const to = (won[0] as PromiseFulfilledResult<RepartitionResult>).value.to;
    await assertFinished(stream, "g", to);
    assert.deepEqual(await listElasticConsumerGroups(env.js, stream), ["g"], "the lock key is not listed as a group");
    const kv = await new Kvm(env.js).open(ELASTIC_BUCKET);
    assert.equal(await kv.get(`pcg/repartition.${stream}.g`).then((e) => (e && e.operation === "PUT" ? e : null)), null, "the lock is released");
    await waitFor(() => handled.length >= 200, 10_000, "every message handled");

    // A lock left behind by a run that finished everything but releasing it: running it again says done; a later, larger repartition replaces it.
    await kv.put(`pcg/repartition.${stream}.g`, JSON.stringify({ from: 4, to, started: new Date().toISOString() }));
    const again = await repartition(env.js, stream, "g", to);
    assert.deepEqual({ from: again.from, to: again.to, resumed: again.resumed }, { from: 4, to, resumed: true });
    await kv.put(`pcg/repartition.${stream}.g`, JSON.stringify({ from: 4, to, started: new Date().toISOString() }));
    const larger = await repartition(env.js, stream, "g", to * 2, { pollMs: 50 });
    assert.equal(larger.to, to * 2);
    await assertFinished(stream, "g", to * 2);
  });

  test("repartition input - two runs of the same repartition at once (issue 18, fourth review): the second waits for the first's heartbeat to go stale, gets REPARTITION_IN_PROGRESS and changes nothing; once the first stops, the next run takes over at once", async () => {
    const stream = uniqueName("rsame");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const handled: string[] = [];
    await quickMember(stream, "g", "m1", handled);
    const wq = workQueueStreamName(stream, "g");
    // A consumer that is no member's holds the first run in "moving" (it waits for every consumer to follow).
    await env.jsm.consumers.add(wq, { durable_name: "hold", ack_policy: "explicit", filter_subject: "hold.>" });
    const published = new Map<string, number>();
    let publishing = true;
    const load = (async () => {
      for (let i = 0; publishing; i++) {
        const key = `k${i % 20}`;
        const seq = (published.get(key) ?? 0) + 1;
        published.set(key, seq);
        await env.js.publish(`${stream}.${key}`, JSON.stringify({ key, seq }));
        await sleep(5);
      }
    })();
    const stopFirst = new AbortController();
    const first = repartition(env.js, stream, "g", 8, { pollMs: 50, force: true, signal: stopFirst.signal }).catch((err: unknown) => err);
    await waitFor(async () => (await env.jsm.streams.info(wq)).config.metadata?.["pcg_repartition"] !== undefined, 10_000, "the first run's cut");
    const updatesBefore = (await env.jsm.streams.info(wq)).config;
    const startedAt = now();
    await rejectsTyped(repartition(env.js, stream, "g", 8, { pollMs: 50, force: true }), "REPARTITION_IN_PROGRESS", "a second run while the first is alive");
    assert.ok(now() - startedAt >= 4000, "it waited for the first run's heartbeat to go stale before refusing");
    assert.equal((await env.jsm.streams.info(wq)).config.metadata?.["pcg_repartition"], updatesBefore.metadata?.["pcg_repartition"], "the second run switched nothing (the record keeps the first run's anchor)");
    stopFirst.abort();
    assert.equal(((await first) as { code?: string }).code, "STOPPED");
    await env.jsm.consumers.delete(wq, "hold");
    const takeover = now();
    const result = await repartition(env.js, stream, "g", 8, { pollMs: 50, force: true });
    assert.equal(result.resumed, true);
    assert.ok(now() - takeover < 4000, "a run that stopped leaves the lock ownerless: the next one takes over at once");
    publishing = false;
    await load;
    const total = [...published.values()].reduce((a, b) => a + b, 0);
    await waitFor(() => new Set(handled).size >= total, 20_000, "every message handled");
    await sleep(300);
    assert.equal(handled.length, total, "nothing handled twice");
    await assertFinished(stream, "g", 8);
  });

  test("repartition input - a poison message (its key blocked, no dead-letter subject) holds back only the new partitions its old partition feeds; with a dead-letter subject the same repartition finishes", async () => {
    const stream = uniqueName("rpois");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const deadLetters = uniqueName("rdlq");
    await env.jsm.streams.add({ name: deadLetters, subjects: [`${deadLetters}.*`] });
    const handled: string[] = [];
    const poisonMember = (deadLetterSubject?: string): Promise<ConsumerGroupMember> =>
      elasticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        concurrency: "key",
        retry: { maxDeliver: 3, backoffMs: 50 },
        ...(deadLetterSubject ? { deadLetterSubject } : {}),
        handler: (msg) => {
          const { key, seq } = msg.json<{ key: string; seq: number }>();
          if (key === "k1") throw new Error("poison");
          handled.push(`${key}/${seq}`);
        },
      });
    let member = track(await poisonMember());
    const publish = async (round: number, keys: number[]): Promise<void> => {
      for (const k of keys) await env.js.publish(`${stream}.k${k}`, JSON.stringify({ key: `k${k}`, seq: round }));
    };
    for (let round = 1; round <= 4; round++) await publish(round, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    await waitFor(() => handled.length === 36, 10_000, "every message but the poison key's");
    const filter = { filter: `${stream}.*`, wildcards: [1] };
    const poisonOld = partitionOf(`${stream}.k1`, 4, filter);
    // Held back: the new partitions its old partition feeds, other than the one of the same number
    // (that one takes the old partition's messages and its own in stream order, on one consumer).
    const fedByPoison = Array.from({ length: 8 }, (_, q) => q).filter((q) => q !== poisonOld && feedingPartitions(4, 8, q).includes(poisonOld));
    const stop = new AbortController();
    let last: RepartitionProgress | undefined;
    const running = repartition(env.js, stream, "g", 8, { pollMs: 50, signal: stop.signal, onProgress: (p) => (last = p) }).catch((err: unknown) => err);
    await waitFor(() => last?.phase === "moving" && last.heldBack.length === 1 && last.oldLeft.reduce((a, b) => a + b, 0) === 4, 10_000, "the repartition held back by the poison key only");
    assert.deepEqual(last?.heldBack, fedByPoison, "only the new partitions the poison key's old partition feeds are held back");
    assert.equal(last?.oldLeft[poisonOld], 4, "its old partition keeps the poison message and the three behind it");
    // Keys in the partitions not held back go on, in the transition layout; the held ones wait with the poison key.
    const others = [0, 2, 3, 4, 5, 6, 7, 8, 9];
    const flowing = others.filter((k) => !fedByPoison.includes(partitionOf(`${stream}.k${k}`, 8, filter)));
    assert.ok(flowing.length > 0 && flowing.length < others.length, `some keys flow, some wait (${flowing.length} of ${others.length} flow)`);
    for (let round = 5; round <= 6; round++) await publish(round, others);
    await waitFor(() => handled.length === 36 + 2 * flowing.length, 10_000, "the flowing keys' new messages handled during the repartition");
    await sleep(500);
    assert.equal(last?.phase, "moving", "still held back");
    stop.abort();
    assert.equal(((await running) as { code?: string }).code, "STOPPED");
    // With a dead-letter subject, the poison messages go there and the repartition finishes.
    await member.stop();
    member = track(await poisonMember(`${deadLetters}.poison`));
    const result = await repartition(env.js, stream, "g", 8, { pollMs: 50 });
    assert.equal(result.resumed, true);
    await waitFor(async () => (await env.jsm.streams.info(deadLetters)).state.messages === 4, 10_000, "the four poison messages dead-lettered");
    assert.equal(new Set(handled).size, handled.length, "nothing handled twice");
    await assertFinished(stream, "g", 8);
  });

  test("repartition input - a repartition in progress to 12: another count gets REPARTITION_IN_PROGRESS and changes nothing; the call with 12 resumes and finishes once the member can drain", async () => {
    const stream = uniqueName("rp");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const wq = workQueueStreamName(stream, "g");
    const gate = deferred();
    const entered = deferred();
    const handled = new Set<string>();
    track(
      await elasticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        concurrency: "key",
        consumerConfig: { ack_wait: 10_000_000_000 },
        drainTimeoutMs: 1_000,
        handler: async (msg) => {
          entered.resolve();
          // Blocks until released: the old-layout messages stay in the stream, so the repartition cannot finish.
          await gate.promise;
          const { key, seq } = msg.json<{ key: string; seq: number }>();
          handled.add(`${key}/${seq}`);
        },
      }),
    );
    // stop() awaits a running handler even after the drain timeout: never leave it blocked.
    members.push({ stop: () => Promise.resolve(gate.resolve()) });
    await waitFor(() => consumerExists(wq, "m1"), 10_000, "m1's consumer");
    const sent: string[] = [];
    for (let i = 0; i < 8; i++) {
      await env.js.publish(`${stream}.k${i}`, JSON.stringify({ key: `k${i}`, seq: 1 }));
      sent.push(`k${i}/1`);
    }
    await withTimeout(entered.promise, 10_000, "m1's handler to start");

    // Start the repartition to 12 and abort it once it reports old-layout messages left.
    const stop = new AbortController();
    const seen: RepartitionProgress[] = [];
    const first = repartition(env.js, stream, "g", 12, {
      pollMs: 100,
      signal: stop.signal,
      onProgress: (p) => {
        seen.push(p);
        if (p.phase === "moving" && sum(p.oldLeft) > 0) stop.abort();
      },
    });
    const stopped = await withTimeout(rejectsTyped(first, "STOPPED", "the aborted repartition"), 20_000, "the aborted repartition to end");
    assert.match(stopped.message, /run it again to finish it/);
    assert.ok(seen.length > 0 && seen.every((p) => p.phase === "moving" && p.from === 4 && p.to === 12 && !p.resumed), JSON.stringify(seen.at(-1)));

    const inProgress = await snapshot(stream, "g");
    const record = JSON.parse(inProgress.workQueue?.metadata?.["pcg_repartition"] ?? "null") as { from: number; to: number; phase: string } | null;
    assert.deepEqual(record && { from: record.from, to: record.to, phase: record.phase }, { from: 4, to: 12, phase: "moving" }, "the record says 4 -> 12, moving");
    assert.deepEqual(inProgress.workQueue?.sources?.[0]?.subject_transforms, [{ src: `${stream}.*`, dest: `pcg-repartition.{{Partition(12,1)}}.${stream}.{{Wildcard(1)}}` }], "the transition layout of 12");
    assert.equal((JSON.parse(inProgress.config?.text ?? "{}") as { max_members?: number }).max_members, 12, "the config already says 12");

    for (const n of [8, 16, 2]) {
      const err = await rejectsTyped(repartition(env.js, stream, "g", n, { pollMs: 50 }), "REPARTITION_IN_PROGRESS", `a repartition to ${n} while one to 12 runs`);
      assert.match(err.message, /from 4 to 12 partitions .* is in progress: finish it first by running it again with 12/);
      assert.deepEqual(await snapshot(stream, "g"), inProgress, `the call with ${n} changed nothing: the record and transform still say 12`);
    }
    assert.equal(handled.size, 0, "the handler is still blocked");
    const described = await describeGroup(env.js, "elastic", stream, "g");
    const finding = described.findings.find((f) => f.code === "REPARTITION_IN_PROGRESS");
    assert.match(finding?.message ?? "", /from 4 to 12 partitions is in progress \(phase moving.*run it again with 12 to finish/, "describe says a repartition waits to be finished");

    // Release the handler: the call with 12 resumes and finishes.
    gate.resolve();
    const progress: RepartitionProgress[] = [];
    const result = await withTimeout(repartition(env.js, stream, "g", 12, { pollMs: 100, onProgress: (p) => progress.push(p) }), 40_000, "the resumed repartition to finish");
    assert.deepEqual({ from: result.from, to: result.to, resumed: result.resumed, unverifiedMembers: result.unverifiedMembers }, { from: 4, to: 12, resumed: true, unverifiedMembers: [] });
    assert.ok(progress.every((p) => p.resumed), "every progress report says resumed");
    assert.equal(progress.at(-1)?.phase, "done");
    await assertFinished(stream, "g", 12);
    await waitFor(() => sent.every((id) => handled.has(id)), 10_000, "every message published before the cut to be handled");

    // And the group consumes in the new layout.
    await env.js.publish(`${stream}.k99`, JSON.stringify({ key: "k99", seq: 1 }));
    await waitFor(() => handled.has("k99/1"), 10_000, "a message published after the repartition to be handled");
  });

  // --- 2. Go members ------------------------------------------------------------------

  test("repartition input - a Go member's consumer on the work-queue stream: GO_MEMBERS_PRESENT naming it and nothing changed; with force it finishes and reports it", async () => {
    driverBinary(); // fails loudly when the Go driver was not built
    const stream = uniqueName("rg");
    await createKeyedElasticGroup(env, stream, "g", 4, ["go1", "ts1"]);
    const wq = workQueueStreamName(stream, "g");
    await quickMember(stream, "g", "ts1");
    const go = track(new GoMember("go:go1", url, "elastic", stream, "g", "go1", { ackWaitMs: 2000, maxAckPending: 1 }));
    await withTimeout(go.started, 15_000, "the Go member to start");
    await waitFor(async () => (await consumerExists(wq, "go1")) && (await consumerExists(wq, "ts1")), 10_000, "both members' consumers");
    const config4 = await getElasticConsumerGroupConfig(env.js, stream, "g");
    assert.ok(elasticGetPartitionFilters(config4, "go1").length > 0, "the Go member owns partitions");
    const before = await snapshot(stream, "g");

    const err = await rejectsTyped(repartition(env.js, stream, "g", 8, { pollMs: 50 }), "GO_MEMBERS_PRESENT", "a Go member present");
    assert.match(err.message, /: go1 \(/, "it names the Go member's consumer");
    assert.doesNotMatch(err.message, /ts1/, "and not the TypeScript member's (key mode: it carries this library's metadata)");
    assert.match(err.message, /--force/);
    assert.deepEqual(await snapshot(stream, "g"), before, "nothing changed");

    // force: the repartition runs past the Go member's consumer, which cannot follow the transition
    // layout. What that means for the Go member: Go treats a changed max_members as a change of an
    // immutable setting, so its instance stops with an error (it must be restarted; it then joins
    // the new count). Until its consumer is gone (Go's consumers expire after AckWait of inactivity,
    // 2 s here), the consumer is "behind" and holds the finish back: its partitions' new messages
    // would wait rather than be reordered. Nothing is published here.
    const progress: RepartitionProgress[] = [];
    const result: RepartitionResult = await withTimeout(
      repartition(env.js, stream, "g", 8, { force: true, pollMs: 100, onProgress: (p) => progress.push(p) }),
      30_000,
      "the forced repartition",
    );
    assert.deepEqual({ from: result.from, to: result.to, resumed: result.resumed, unverifiedMembers: result.unverifiedMembers }, { from: 4, to: 8, resumed: false, unverifiedMembers: ["go1"] });
    await assertFinished(stream, "g", 8);
    assert.ok(
      progress.some((p) => p.phase === "moving" && p.membersBehind.includes("go1")),
      `the Go member's consumer held the finish back while it was there: ${JSON.stringify(progress.map((p) => [p.phase, p.membersBehind]))}`,
    );
    assert.ok(!progress.some((p) => p.membersBehind.includes("ts1") && p.phase === "finishing"), "ts1 followed the layout");
    await withTimeout(go.exited, 15_000, "the Go member to stop on the changed partition count");
    assert.ok(
      go.errors().some((e) => /bad change in the configuration/.test(e)),
      `the Go member stopped with Go's config-change error: ${JSON.stringify(go.events)} ${go.stderr}`,
    );
    assert.equal(await consumerExists(wq, "go1"), false, "the forced run finished once the stopped Go member's consumer was gone");

    // Restarted, the Go member joins the 8-partition layout and consumes next to ts1.
    const again = track(new GoMember("go:go1b", url, "elastic", stream, "g", "go1", { ackWaitMs: 2000, maxAckPending: 1 }));
    await withTimeout(again.started, 15_000, "the restarted Go member to start");
    const config8 = await getElasticConsumerGroupConfig(env.js, stream, "g");
    const goFilters = elasticGetPartitionFilters(config8, "go1");
    await waitFor(
      async () => {
        const ci = await env.jsm.consumers.info(wq, "go1");
        return JSON.stringify([...(ci.config.filter_subjects ?? [])].sort()) === JSON.stringify([...goFilters].sort());
      },
      15_000,
      "the restarted Go member's consumer to have its filters for 8 partitions",
    );
  });

  test("repartition input - a member whose pinned instance is Go's and whose standby runs this library: GO_MEMBERS_PRESENT naming it (the standby's answer does not vouch for the pinned one)", async () => {
    driverBinary();
    const stream = uniqueName("rgp");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const wq = workQueueStreamName(stream, "g");
    const go = track(new GoMember("go:m1", url, "elastic", stream, "g", "m1", { ackWaitMs: 2000, maxAckPending: 1 }));
    await withTimeout(go.started, 15_000, "the Go instance to start");
    await waitFor(() => consumerExists(wq, "m1"), 10_000, "m1's consumer");
    // The Go instance pins first: a message is delivered to it.
    await env.js.publish(`${stream}.k1`, JSON.stringify({ key: "k1", seq: 1 }));
    const pinnedId = async (): Promise<string | undefined> =>
      ((await env.jsm.consumers.info(wq, "m1")) as unknown as { priority_groups?: { group: string; pinned_client_id?: string }[] }).priority_groups?.find((g) => g.group === "PCG")?.pinned_client_id || undefined;
    const goPin = await waitFor(pinnedId, 10_000, "the Go instance to be pinned");
    // A TypeScript instance of m1 in serial mode (Go's consumer config) stands by.
    const handled: string[] = [];
    track(
      await elasticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        consumerConfig: { ack_wait: 2000 * 1_000_000, max_ack_pending: 1 },
        handler: (msg) => void handled.push(msg.subject),
      }),
    );
    await sleep(500);
    assert.equal(await pinnedId(), goPin, "the Go instance is still the pinned one");
    const before = await snapshot(stream, "g");
    const err = await rejectsTyped(repartition(env.js, stream, "g", 8, { pollMs: 50 }), "GO_MEMBERS_PRESENT", "the pinned Go instance");
    assert.match(err.message, /: m1 \(/, "it names m1");
    assert.deepEqual(await snapshot(stream, "g"), before, "nothing changed");
    assert.equal(handled.length, 0, "the standby handled nothing");
    assert.equal(await Promise.race([go.exited.then(() => true), sleep(200).then(() => false)]), false, "the Go instance runs on");
  });

  // --- 3. explicit member mappings -------------------------------------------------------

  test("repartition input - mapping mode, 4 -> 6 while consuming: mappings cover 0..5, no old partition moves, gcd gating holds, delivery is clean", async (t) => {
    const stream = uniqueName("rm");
    await createKeyedElasticGroup(env, stream, "g", 4, []);
    const oldMappings = [
      { member: "a", partitions: [0, 3] },
      { member: "b", partitions: [1, 2] },
    ];
    await setMemberMappings(env.js, stream, "g", oldMappings);
    const spans: (HandlerSpan & { streamSeq: number })[] = [];
    for (const member of ["a", "b"]) {
      track(
        await elasticConsume(env.js, {
          stream,
          group: "g",
          member,
          concurrency: "key",
          maxInFlight: 4,
          consumerConfig: { ack_wait: 5_000_000_000 },
          handler: async (msg) => {
            const { key, seq } = msg.json<{ key: string; seq: number }>();
            const span = { key, seq, member, partition: msg.partition, transition: msg.rawSubject.startsWith("pcg-repartition."), start: now(), end: undefined as number | undefined, streamSeq: msg.seq };
            spans.push(span);
            await sleep(8);
            span.end = now();
          },
        }),
      );
    }
    await waitFor(async () => (await consumerExists(workQueueStreamName(stream, "g"), "a")) && (await consumerExists(workQueueStreamName(stream, "g"), "b")), 10_000, "both consumers");

    // About 1,000 messages/s handled (2 members x 4 handlers of 8 ms) against 1,500/s published: a backlog is there at the cut.
    const MESSAGES = 3_000;
    const published = new Map<string, number>();
    const progress: RepartitionProgress[] = [];
    const publishing = publishSteadily(env.js, stream, MESSAGES, 120, 1_500, published);
    await sleep(900);
    const result = await withTimeout(repartition(env.js, stream, "g", 6, { pollMs: 100, onProgress: (p) => progress.push(p) }), 60_000, "the repartition 4 -> 6");
    await publishing;
    await waitFor(() => new Set(spans.filter((s) => s.end !== undefined).map((s) => `${s.key}/${s.seq}`)).size >= MESSAGES, 40_000, "every message to be handled");
    await Promise.allSettled(members.splice(0).map((m) => m.stop()));

    assert.deepEqual({ from: result.from, to: result.to, resumed: result.resumed }, { from: 4, to: 6, resumed: false });
    await assertFinished(stream, "g", 6);
    const grown = (await getElasticConsumerGroupConfig(env.js, stream, "g")).member_mappings ?? [];
    assert.deepEqual(
      grown.flatMap((m) => m.partitions ?? []).sort((x, y) => x - y),
      [0, 1, 2, 3, 4, 5],
      `the mappings cover 0..5 once each: ${JSON.stringify(grown)}`,
    );
    for (const old of oldMappings) {
      const now6 = grown.find((m) => m.member === old.member)?.partitions ?? [];
      assert.ok(
        old.partitions.every((p) => now6.includes(p)),
        `${old.member} keeps its old partitions ${JSON.stringify(old.partitions)}: ${JSON.stringify(now6)}`,
      );
      assert.equal(now6.length, 3, "the new partitions are spread evenly");
    }
    assert.equal(grown.length, 2, "no member added");
    assert.ok(progress.some((p) => p.phase === "moving" && sum(p.oldLeft) > 0), "old-layout messages were waiting at the cut (the gating had work to do)");
    t.diagnostic(
      `4 -> 6 in ${result.durationMs} ms; old-layout messages at the first check ${sum(progress[0]?.oldLeft ?? [])}; held back at the first check: ${JSON.stringify(progress[0]?.heldBack)}; transition-layout messages handled ${spans.filter((s) => s.transition).length}`,
    );

    const delivery = checkDelivery(
      published,
      spans.map((s) => ({ key: s.key, seq: s.seq, at: s.start })),
    );
    assert.deepEqual(delivery.lost.slice(0, 5), [], "nothing lost");
    assert.equal(delivery.unexpected, 0);
    assert.deepEqual(delivery.outOfOrder.slice(0, 5), [], "first handlings in publish order per key");
    assert.deepEqual(findOrderBreaks(spans).slice(0, 5), [], "no message of a key starts while an earlier one of that key is unhandled");
    assert.equal(delivery.duplicates, 0, "no duplicates");

    // Every message was handled by the owner of its partition under the grown mappings:
    // old-layout messages too, so no old partition moved.
    const owner = new Map<number, string>();
    for (const m of grown) for (const p of m.partitions ?? []) owner.set(p, m.member);
    const misrouted = spans.filter((s) => owner.get(s.partition) !== s.member).map((s) => `${s.key}/${s.seq} p${s.partition} by ${s.member}`);
    assert.deepEqual(misrouted.slice(0, 5), [], "each message handled by its partition's owner");

    // gcd(4, 6) = 2: new partition q starts its transition-layout messages only after every
    // other old partition p ≡ q (mod 2) was emptied (old 0 and 2 feed new 0, 2, 4; old 1 and 3 feed 1, 3, 5).
    const transition = spans.filter((s) => s.transition);
    assert.ok(transition.length > 0, "messages were handled in the transition layout");
    const cutSeq = Math.min(...transition.map((s) => s.streamSeq));
    const old = spans.filter((s) => !s.transition && s.streamSeq < cutSeq);
    assert.ok(old.length > 0, "messages were handled in the old layout");
    for (let q = 0; q < 6; q++) {
      const firstStart = Math.min(...transition.filter((s) => s.partition === q).map((s) => s.start));
      assert.ok(Number.isFinite(firstStart), `new partition ${q} got transition-layout messages`);
      const waitsFor = feedingPartitions(4, 6, q).filter((p) => p !== q);
      const lastOldEnd = Math.max(...old.filter((s) => waitsFor.includes(s.partition)).map((s) => s.end ?? Infinity));
      assert.ok(firstStart >= lastOldEnd, `new partition ${q} started ${(lastOldEnd - firstStart).toFixed(1)} ms before old partitions ${waitsFor.join(",")} were handled`);
    }
  });

  // --- 4. the CLI -------------------------------------------------------------------------

  test("repartition input - cg elastic repartition, human: progress lines with phases and a bar on stderr, the result on stdout, exit 0", async () => {
    const stream = uniqueName("rc");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const handled: string[] = [];
    await quickMember(stream, "g", "m1", handled);
    await waitFor(() => consumerExists(workQueueStreamName(stream, "g"), "m1"), 10_000, "m1's consumer");
    await publishKeyed(env.js, stream, ["a", "b", "c"], 3);

    const r = await runCg(["-s", url, "elastic", "repartition", stream, "g", "8"], { timeoutMs: 40_000 });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^repartitioned from 4 to 8 partitions in \d+\.\ds\n$/);
    const lines = r.stderr.split("\n").filter((l) => l !== "");
    assert.ok(lines.length >= 3, r.stderr);
    for (const line of lines) assert.match(line, /^(moving|finishing|done)\s+\[[#-]{24}\] /, `a progress line: ${line}`);
    assert.match(lines[0] ?? "", /^moving\s+\[[#-]{24}\] \d+ old-layout messages left {2}\(p0 \d+ · p1 \d+ · p2 \d+ · p3 \d+\)/);
    assert.ok(lines.some((l) => /^finishing\s+\[[#-]{24}\] \d+ transition messages left/.test(l)), r.stderr);
    assert.match(lines.at(-1) ?? "", /^done\s+\[#{24}\] done$/);
    assert.ok(!r.stderr.includes("\u001b["), "no colour or redraw codes off a terminal");
    await assertFinished(stream, "g", 8);

    await env.js.publish(`${stream}.z`, JSON.stringify({ key: "z", seq: 1 }));
    await waitFor(() => handled.includes("z/1"), 10_000, "m1 to keep consuming after the CLI repartition");
  });

  test("repartition input - cg --json elastic repartition: the result document on stdout, progress JSON lines on stderr; bad counts exit != 0 with the typed code", async () => {
    const stream = uniqueName("rj");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    await quickMember(stream, "g", "m1");
    await waitFor(() => consumerExists(workQueueStreamName(stream, "g"), "m1"), 10_000, "m1's consumer");

    const r = await runCg(["--json", "-s", url, "elastic", "repartition", stream, "g", "8"], { timeoutMs: 40_000 });
    assert.equal(r.code, 0, r.stderr);
    const doc = JSON.parse(r.stdout) as Record<string, unknown>;
    assert.deepEqual(Object.keys(doc).sort(), ["durationMs", "from", "resumed", "to", "unverifiedMembers"]);
    assert.deepEqual({ ...doc, durationMs: typeof doc["durationMs"] }, { from: 4, to: 8, resumed: false, unverifiedMembers: [], durationMs: "number" });
    const events = r.stderr
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => JSON.parse(l) as { progress: RepartitionProgress });
    assert.ok(events.length >= 3, r.stderr);
    for (const e of events) {
      assert.ok(["moving", "finishing", "done"].includes(e.progress.phase), JSON.stringify(e));
      assert.equal(e.progress.from, 4);
      assert.equal(e.progress.to, 8);
      assert.ok(Array.isArray(e.progress.oldLeft) && Array.isArray(e.progress.heldBack) && Array.isArray(e.progress.membersBehind));
    }
    assert.equal(events[0]?.progress.phase, "moving");
    assert.equal(events.at(-1)?.progress.phase, "done");
    await assertFinished(stream, "g", 8);
    // After the record goes, the member drops its transition filters on its next check.
    await waitFor(
      async () => !(await env.jsm.consumers.info(workQueueStreamName(stream, "g"), "m1")).config.filter_subjects?.some((f) => f.startsWith("pcg-repartition.")),
      10_000,
      "m1 to drop the transition filters",
    );

    const before = await snapshot(stream, "g");
    // Not larger: the library's typed error, exit 1.
    const human = await runCg(["-s", url, "elastic", "repartition", stream, "g", "6"]);
    assert.equal(human.code, 1, human.stderr);
    assert.equal(human.stdout, "");
    assert.match(human.stderr, /^error: .*has 8 partitions; a repartition only grows the count \(got 6\)/m);
    const json = await runCg(["--json", "-s", url, "elastic", "repartition", stream, "g", "6"]);
    assert.equal(json.code, 1, json.stderr);
    assert.equal(json.stdout, "");
    const jsonErr = jsonError(json.stderr);
    assert.equal(jsonErr.code, "INVALID_MAX_MEMBERS", json.stderr);
    assert.equal(jsonErr.exit_code, 1);
    assert.match(jsonErr.message, /a repartition only grows the count \(got 6\)/);
    // Not a count at all: a usage error, exit 2, before anything connects.
    for (const bad of ["0", "abc", "4.5"]) {
      const usage = await runCg(["--json", "-s", url, "elastic", "repartition", stream, "g", bad]);
      assert.equal(usage.code, 2, `${bad}: ${usage.stderr}`);
      assert.equal(usage.stdout, "");
      const e = jsonError(usage.stderr);
      assert.equal(e.code, "USAGE", usage.stderr);
      assert.equal(e.exit_code, 2);
      assert.match(e.message, /'partitions'/, "it names the argument");
      const plain = await runCg(["-s", url, "elastic", "repartition", stream, "g", bad]);
      assert.equal(plain.code, 2);
      assert.match(plain.stderr, /^error: /m);
    }
    assert.deepEqual(await snapshot(stream, "g"), before, "the bad counts changed nothing");
  });

  test("repartition input - cg elastic repartition with a serial-mode member (Go's exact consumer config): its running instance answers presence, so no --force is needed; a member with partitions and no instance is refused, --force repartitions past it", async () => {
    const stream = uniqueName("rcf");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const handled: string[] = [];
    await quickMember(stream, "g", "m1", handled, "serial");
    await waitFor(() => consumerExists(workQueueStreamName(stream, "g"), "m1"), 10_000, "m1's consumer");
    const consumer = await env.jsm.consumers.info(workQueueStreamName(stream, "g"), "m1");
    assert.equal(consumer.config.metadata?.["pcg_concurrency"], undefined, "a serial consumer carries no metadata (Go's exact config)");

    const unattended = await runCg(["-s", url, "elastic", "repartition", stream, "g", "8"], { timeoutMs: 40_000 });
    assert.equal(unattended.code, 0, unattended.stderr);
    assert.match(unattended.stdout, /^repartitioned from 4 to 8 partitions in \d+\.\ds\n$/, "no member was forced past");
    await assertFinished(stream, "g", 8);
    await env.js.publish(`${stream}.z`, JSON.stringify({ key: "z", seq: 1 }));
    await waitFor(() => handled.includes("z/1"), 10_000, "m1 to keep consuming after the repartition");

    // A member that owns partitions and runs nowhere could be a Go member started later.
    await addMembers(env.js, stream, "g", ["m2"]);
    const config8 = await getElasticConsumerGroupConfig(env.js, stream, "g");
    assert.ok(elasticGetPartitionFilters(config8, "m2").length > 0, "m2 owns partitions");
    const m1Filters = JSON.stringify([...elasticGetPartitionFilters(config8, "m1")].sort());
    await waitFor(
      async () => JSON.stringify([...((await env.jsm.consumers.info(workQueueStreamName(stream, "g"), "m1").catch(() => undefined))?.config.filter_subjects ?? [])].sort()) === m1Filters,
      15_000,
      "m1's consumer to follow the new membership",
    );
    const before = await snapshot(stream, "g");
    const refused = await runCg(["--json", "-s", url, "elastic", "repartition", stream, "g", "16"]);
    assert.equal(refused.code, 1, refused.stderr);
    assert.equal(refused.stdout, "");
    const e = jsonError(refused.stderr);
    assert.equal(e.code, "GO_MEMBERS_PRESENT", refused.stderr);
    assert.match(e.message, /: m2 \(/, "it names the member without an instance");
    assert.doesNotMatch(e.message, /m1/, "and not the serial member whose instance answered");
    assert.deepEqual(await snapshot(stream, "g"), before, "nothing changed");

    const forced = await runCg(["-s", url, "elastic", "repartition", stream, "g", "16", "--force"], { timeoutMs: 40_000 });
    assert.equal(forced.code, 0, forced.stderr);
    assert.match(forced.stdout, /^repartitioned from 8 to 16 partitions in \d+\.\ds \(forced past members not shown to be nats-pcgroups: m2\)\n$/);
    await assertFinished(stream, "g", 16);
  });

  test("repartition input - an auto member in serial mode whose process died (its lease still running out) is this library's: the repartition runs unattended", async () => {
    const stream = uniqueName("rad");
    await createKeyedElasticGroup(env, stream, "g", 4, []);
    const wq = workQueueStreamName(stream, "g");
    const handled: string[] = [];
    const auto = { settleMs: 300, leaseTtlMs: 20_000, assignment: "balanced" as const };
    const handler = (msg: { json<T>(): T }): void => {
      const { key, seq } = msg.json<{ key: string; seq: number }>();
      handled.push(`${key}/${seq}`);
    };
    const dying = await connectTo(env.server);
    await elasticConsume(dying.js, { stream, group: "g", member: "a2", concurrency: "serial", autoJoin: auto, handler });
    track(await elasticConsume(env.js, { stream, group: "g", member: "a1", concurrency: "serial", autoJoin: auto, handler }));
    await waitFor(async () => {
      const config = await getElasticConsumerGroupConfig(env.js, stream, "g");
      return elasticGetPartitionFilters(config, "a1").length > 0 && elasticGetPartitionFilters(config, "a2").length > 0 && (await consumerExists(wq, "a1")) && (await consumerExists(wq, "a2"));
    }, 15_000, "both auto members to own partitions and run their consumers");
    // The process dies: no leave, no unpin; its lease runs 20 s more, its consumer stays until its inactive threshold.
    await dying.nc.close();

    const result = await withTimeout(repartition(env.js, stream, "g", 8, { pollMs: 100 }), 60_000, "the repartition with a dying auto member");
    assert.deepEqual(result.unverifiedMembers, [], "nothing was forced past");
    await assertFinished(stream, "g", 8);
    await env.js.publish(`${stream}.y`, JSON.stringify({ key: "y", seq: 1 }));
    await waitFor(() => handled.includes("y/1"), 30_000, "the group to consume after the repartition");
  });

  test("repartition input - cg static repartition prints the numbered steps with the exact nats stream edit line and changes nothing; cg elastic repartition --help shows the examples", async () => {
    const stream = uniqueName("rcs");
    await addStaticStream(env.jsm, stream, 4);
    await createStatic(env.js, { stream, group: "sg", maxMembers: 4, members: ["m1", "m2"] });
    const staticBefore = await rawStaticConfig(stream, "sg");
    const streamBefore = (await env.jsm.streams.info(stream)).config;

    const r = await runCg(["-s", url, "static", "repartition", stream, "sg", "8"]);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.split("\n");
    assert.match(lines[0] ?? "", new RegExp(`^${stream}\\.sg is a static group: .*To go from 4 to 8 partitions:$`));
    const numbered = lines.filter((l) => /^\d+\. /.test(l)).map((l) => Number(l.slice(0, l.indexOf("."))));
    assert.deepEqual(numbered, [1, 2, 3, 4, 5, 6, 7, 8], r.stdout);
    assert.ok(lines.includes(`     nats stream edit ${stream} --transform-source '${stream}.*' --transform-destination '{{partition(8,1)}}.${stream}.{{wildcard(1)}}'`), r.stdout);
    assert.ok(lines.includes(`     cg static create balanced ${stream} sg 8 m1 m2`), r.stdout);
    assert.ok(lines.includes(`     cg static delete ${stream} sg`), r.stdout);
    assert.deepEqual((await env.jsm.streams.info(stream)).config, streamBefore, "the stream (its transform) is unchanged");
    assert.deepEqual(await rawStaticConfig(stream, "sg"), staticBefore, "the static config is unchanged");

    const same = await runCg(["-s", url, "static", "repartition", stream, "sg", "4"]);
    assert.equal(same.code, 1);
    assert.match(same.stderr, /^error: .*already has 4 partitions/m);

    const help = await runCg(["elastic", "repartition", "--help"]);
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /--force/);
    assert.match(help.stdout, /\nExamples:\n {2}\$ cg elastic repartition orders shipping 12\n {2}\$ cg elastic repartition orders shipping 12 --json\n/);
  });
});
