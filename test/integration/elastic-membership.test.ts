/**
 * Elastic member instances over their life: hot standbys and step-down, members
 * leaving and rejoining, members over the cap, a consumer deleted under a running
 * instance, and the config watch stopping members on delete, bad edits and purges.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ConsumerInfo } from "@nats-io/jetstream";
import {
  addMembers,
  createElastic,
  elasticConsume,
  deleteElastic,
  deleteMembers,
  elasticIsInMembershipAndActive,
  elasticMemberStepDown,
  listElasticActiveMembers,
  partitionOf,
  type ConsumerGroupError,
} from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { elasticConsumerName } from "../../src/core/names.js";

/** A promise resolved by hand. */
function gate(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}
import { Runners, rejectsWithCode, putRawElasticConfig, purgeElasticConfig, rawElasticConfig, sleep, waitUntil, withTimeout, type Runner } from "../helpers/elastic-util.js";

type PinState = { priority_groups?: { group: string; pinned_client_id?: string }[] };
const pinOf = (ci: ConsumerInfo): string | undefined => (ci as unknown as PinState).priority_groups?.find((g) => g.group === "PCG")?.pinned_client_id;

describe("elastic - membership", () => {
  let env: TestEnv;
  const runners = new Runners();
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await runners.stopAll();
    await env.close();
  });

  /** A source stream with subjects `<stream>.<n>` and a group over it. */
  async function group(maxMembers: number, members?: string[]): Promise<{ stream: string; group: string; wq: string }> {
    const stream = uniqueName("ms");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    await createElastic(env.js, { stream, group: "g", maxMembers, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    if (members) await addMembers(env.js, stream, "g", members);
    return { stream, group: "g", wq: `${stream}-g` };
  }

  const datas = (...rs: Runner[]): Set<string> => new Set(rs.flatMap((r) => r.handled.map((h) => h.data)));

  test("elastic - an instance that found its consumer unused does not delete it once another instance got pinned meanwhile (during its onRevoked)", async () => {
    const { stream, group: g, wq } = await group(4, ["m1"]);
    const revoking = gate();
    const release = gate();
    const member = await elasticConsume(env.js, {
      stream,
      group: g,
      member: "m1",
      handler: () => undefined,
      onRevoked: async () => {
        revoking.resolve();
        await release.promise;
      },
    });
    try {
      const consumer = elasticConsumerName("m1");
      await waitFor(async () => (await env.jsm.consumers.info(wq, consumer).catch(() => undefined)) !== undefined, 10_000, "m1's consumer");
      const before = await env.jsm.consumers.info(wq, consumer);
      // m1 gives partitions up; its consumer never delivered anything, so it judges it unused and drains.
      await addMembers(env.js, stream, g, ["m2"]);
      await withTimeout(revoking.promise, 10_000, "m1's onRevoked");
      // Meanwhile another instance of m1 takes the pin and a message, and runs it (unacked). Here a raw
      // pinned pull of one message: afterwards no pull of it waits, as for an instance at its buffer
      // cap (a review found a delete rule that trusted a waiting pull).
      const other = await env.js.consumers.get(wq, consumer);
      const key = [...Array(40).keys()].find((n) => partitionOf(`${stream}.${n}`, 4, { filter: `${stream}.*`, wildcards: [1] }) === 0) as number;
      await env.js.publish(`${stream}.${key}`, "held by the other instance");
      const got = await other.next({ group: "PCG", expires: 5000 } as never);
      assert.ok(got, "the other instance got the message");
      assert.equal((await env.jsm.consumers.info(wq, consumer)).num_waiting, 0, "no pull of it waits");
      assert.ok(pinOf(await env.jsm.consumers.info(wq, consumer)), "the other instance is pinned");
      release.resolve();
      await sleep(1000);
      const after = await env.jsm.consumers.info(wq, consumer).catch(() => undefined);
      assert.equal(after?.created, before.created, "the consumer the other instance is pinned to was not deleted");
      assert.equal(await got.ackAck({ timeout: 5000 }), true, "its ack still lands");
    } finally {
      release.resolve();
      await member.stop();
    }
  });

  for (const ackWaitMs of [1000, 2000]) test(`elastic - hot standby (AckWait ${ackWaitMs} ms): only the pinned instance receives, step-down moves the pin, stop() and a dropped connection hand over`, async () => {
    const { stream, group: g, wq } = await group(2, ["m1"]);
    const ca = await env.connect();
    const cb = await env.connect();
    const a = await runners.start(ca.js, { stream, group: g, member: "m1", ackWaitMs });
    const b = await runners.start(cb.js, { stream, group: g, member: "m1", ackWaitMs });
    let n = 0;
    const published: string[] = [];
    const publish = async (count: number): Promise<void> => {
      for (let i = 0; i < count; i++, n++) {
        published.push(`msg-${n}`);
        await env.js.publish(`${stream}.${n % 10}`, `msg-${n}`);
      }
    };

    // Only one instance receives.
    await publish(20);
    await waitFor(() => datas(a, b).size >= 20, 20_000, "20 messages handled");
    await sleep(300);
    const [pinned, standby] = a.handled.length > 0 ? [a, b] : [b, a];
    assert.equal(datas(pinned).size, 20, "the pinned instance gets everything");
    assert.equal(standby.handled.length, 0, "the standby gets nothing");
    const pin1 = pinned.handled[0]?.pinId;
    assert.ok(pin1, "messages carry Nats-Pin-Id");
    assert.ok(pinned.handled.every((h) => h.pinId === pin1));
    assert.equal(pinOf(await env.jsm.consumers.info(wq, "m1")), pin1, "the server's pinned id is the one the instance sees");

    // Step-down: the server unpins, the standby's waiting pull gets the pin.
    await elasticMemberStepDown(env.js, stream, g, "m1");
    await waitFor(async () => pinOf(await env.jsm.consumers.info(wq, "m1")) !== pin1, 10_000, "the pin to change");
    await publish(20);
    await waitFor(() => datas(a, b).size >= 40, 20_000, "40 messages handled");
    await sleep(300);
    assert.equal(datas(standby).size, 20, `after step-down the standby receives the next 20 (pinned ${datas(pinned).size}, standby ${datas(standby).size})`);
    assert.equal(datas(pinned).size, 20, "and the formerly pinned instance nothing more");
    const pin2 = standby.handled[standby.handled.length - 1]?.pinId;
    assert.ok(pin2 && pin2 !== pin1, "under a new pin id");

    // stop() of the pinned instance (now the former standby): the other one takes over at once.
    const [p2, s2] = [standby, pinned];
    const s2Before = s2.handled.length;
    const pump = startPump(env, stream, published, () => n++);
    await sleep(500);
    const stoppedAt = Date.now();
    await p2.instance.stop();
    const stopReturned = Date.now();
    await waitFor(() => s2.handled.length > s2Before, 20_000, "the standby to take over after stop()");
    const stopTakeover = (s2.handled[s2Before]?.at ?? NaN) - stoppedAt;
    assert.equal(await p2.closedWith, undefined, "stop() resolves closed() with undefined");
    console.log(`elastic hot standby (AckWait ${ackWaitMs} ms): stop() took ${stopReturned - stoppedAt} ms, standby's first message ${stopTakeover} ms after stop() was called`);

    // A third instance joins as standby; then the pinned one's connection drops.
    const cc = await env.connect();
    const c = await runners.start(cc.js, { stream, group: g, member: "m1", ackWaitMs });
    await sleep(1000);
    assert.equal(c.handled.length, 0, "a new instance is a standby while another is pinned");
    const closedAt = Date.now();
    await (s2 === a ? ca : cb).nc.close();
    await waitFor(() => c.handled.length > 0, 30_000, "the standby to take over after the pinned connection closed");
    const dropTakeover = (c.handled[0]?.at ?? NaN) - closedAt;
    console.log(`elastic hot standby (AckWait ${ackWaitMs} ms, PinnedTTL ${Math.max(ackWaitMs, 1000)} ms): standby's first message ${dropTakeover} ms after the pinned connection closed`);
    await pump.stop();
    // The instance whose connection closed stops by itself (its config watch ended).
    const dropped = await withTimeout(s2.closedWith, 15_000, "the dropped instance to stop");
    assert.ok(dropped instanceof Error, "an instance whose connection closes stops with an error");

    // Nothing lost.
    await waitUntil(() => published.every((d) => datas(a, b, c).has(d)), 30_000, () => `every published message handled (${datas(a, b, c).size}/${published.length})`);
    await c.instance.stop();
    await deleteElastic(env.js, stream, g);
  });

  test("elastic - membership: a removed member idles and rejoins, membership/activity queries, members over the cap idle", async () => {
    const { stream, group: g, wq } = await group(2, ["m1", "m2"]);
    const m1 = await runners.start(env.js, { stream, group: g, member: "m1", ackWaitMs: 1000 });
    await waitFor(() => env.jsm.consumers.info(wq, "m1"), 15_000, "m1's consumer");

    // m1 runs, m2 is a member with no instance, m3 is nobody.
    assert.deepEqual(await elasticIsInMembershipAndActive(env.js, stream, g, "m1"), { inMembership: true, active: true });
    assert.deepEqual(await elasticIsInMembershipAndActive(env.js, stream, g, "m2"), { inMembership: true, active: false }, "answers for m2, not for any member (Go bug)");
    assert.deepEqual(await elasticIsInMembershipAndActive(env.js, stream, g, "m3"), { inMembership: false, active: false });
    assert.deepEqual(await listElasticActiveMembers(env.js, stream, g), ["m1"]);
    // Step-down needs a member with a running instance.
    await rejectsWithCode(elasticMemberStepDown(env.js, stream, g, "m3"), "NOT_IN_MEMBERSHIP");
    await rejectsWithCode(elasticMemberStepDown(env.js, stream, g, "m2"), "GROUP_NOT_FOUND");

    // Publish to both partitions; m1 handles partition 0 (sorted first of m1, m2).
    const subjects = Array.from({ length: 10 }, (_, i) => `${stream}.${i}`);
    const p = (s: string): number => partitionOf(s, 2, { filter: `${stream}.*`, wildcards: [1] });
    for (const s of subjects) await env.js.publish(s, `one:${s}`);
    const p0 = subjects.filter((s) => p(s) === 0);
    assert.ok(p0.length > 0 && p0.length < subjects.length, "the test subjects span both partitions");
    await waitFor(() => datas(m1).size >= p0.length, 15_000, "m1 to handle partition 0");

    // Removed: m1's instance goes idle and its consumer is deleted.
    const idleBefore = m1.eventCount("idle");
    await deleteMembers(env.js, stream, g, ["m1"]);
    await waitFor(() => m1.eventCount("idle") > idleBefore, 15_000, "m1 to report idle");
    await waitFor(async () => !(await listElasticActiveMembers(env.js, stream, g)).includes("m1"), 15_000, "m1's consumer to go");
    assert.deepEqual(await elasticIsInMembershipAndActive(env.js, stream, g, "m1"), { inMembership: false, active: false });
    assert.equal(m1.isClosed(), false, "an idle member keeps running");
    const handledBefore = m1.handled.length;
    for (const s of subjects) await env.js.publish(s, `two:${s}`);
    await sleep(1500);
    assert.equal(m1.handled.length, handledBefore, "an idle member handles nothing");

    // Added back: it rejoins and handles its partition's backlog.
    const joinedBefore = m1.eventCount("joined");
    await addMembers(env.js, stream, g, ["m1"]);
    await waitFor(() => m1.eventCount("joined") > joinedBefore, 15_000, "m1 to rejoin");
    await waitFor(() => new Set(m1.handled.filter((h) => h.data.startsWith("two:")).map((h) => h.data)).size >= p0.length, 15_000, "m1 to handle the backlog of partition 0");
    await sleep(300);
    const two = m1.handled.filter((h) => h.data.startsWith("two:"));
    assert.deepEqual([...new Set(two.map((h) => h.subject))].sort(), [...p0].sort(), "m1 gets exactly partition 0 again (members m2, m1)");
    assert.deepEqual(m1.instance.partitions(), [0]);
    await m1.instance.stop();
    await deleteElastic(env.js, stream, g);

    // More members than partitions: allowed; the last in sorted order idles.
    const over = await group(2);
    const [a, b, c] = await Promise.all(["a", "b", "c"].map((m) => runners.start(env.js, { stream: over.stream, group: over.group, member: m, ackWaitMs: 1000 })));
    assert.ok(a && b && c);
    assert.deepEqual(await addMembers(env.js, over.stream, over.group, ["c", "b", "a"]), ["c", "b", "a"]);
    await waitFor(async () => (await listElasticActiveMembers(env.js, over.stream, over.group)).join() === "a,b", 15_000, "a and b active");
    for (const s of Array.from({ length: 20 }, (_, i) => `${over.stream}.${i}`)) await env.js.publish(s, s);
    await waitFor(() => a.handled.length + b.handled.length >= 20, 15_000, "a and b to handle everything");
    assert.equal(c.handled.length, 0);
    assert.deepEqual(c.instance.partitions(), []);
    assert.deepEqual(await elasticIsInMembershipAndActive(env.js, over.stream, over.group, "c"), { inMembership: true, active: false });
    await assert.rejects(env.jsm.consumers.info(`${over.stream}-${over.group}`, "c"), "c has no consumer");
    // When a leaves, c takes over a partition.
    await deleteMembers(env.js, over.stream, over.group, ["a"]);
    await waitFor(async () => (await listElasticActiveMembers(env.js, over.stream, over.group)).join() === "b,c", 15_000, "b and c active");
    assert.deepEqual(c.instance.partitions(), [1]);
    await deleteElastic(env.js, over.stream, over.group);
    await Promise.all([a, b, c].map((r) => withTimeout(r.closedWith, 10_000, `${r.name} to stop`)));
  });

  test("elastic - a consumer deleted under a running instance is recreated and consumption goes on (no zombie)", async () => {
    const { stream, group: g, wq } = await group(2, ["m1"]);
    const m1 = await runners.start(env.js, { stream, group: g, member: "m1", ackWaitMs: 1000 });
    const first = await waitFor(() => env.jsm.consumers.info(wq, "m1"), 15_000, "m1's consumer");
    for (let i = 0; i < 10; i++) await env.js.publish(`${stream}.${i}`, `a${i}`);
    await waitFor(() => m1.handled.length >= 10, 15_000, "10 handled");

    for (let round = 0; round < 3; round++) {
      await env.jsm.consumers.delete(wq, "m1");
      const again = await waitFor(async () => {
        const ci = await env.jsm.consumers.info(wq, "m1");
        return ci.created !== first.created ? ci : undefined;
      }, 20_000, "m1's consumer to be recreated");
      assert.deepEqual(again.config.filter_subjects, first.config.filter_subjects);
      for (let i = 0; i < 10; i++) await env.js.publish(`${stream}.${i}`, `r${round}-${i}`);
      // Counted by payload: a message in flight when its consumer vanished is redelivered (a duplicate).
      await waitFor(
        () => Array.from({ length: 10 }, (_, i) => `r${round}-${i}`).every((d) => m1.handled.some((h) => h.data === d)),
        20_000,
        `round ${round}: messages published after the deletion handled`,
      );
    }
    assert.ok(m1.eventCount("consumer_lost") >= 1, `consumer_lost reported (${m1.events.map((e) => e.type).join(",")})`);
    assert.equal(m1.isClosed(), false);
    assert.equal(new Set(m1.handled.map((h) => h.data)).size, 40);
    await m1.instance.stop();
    await deleteElastic(env.js, stream, g);
  });

  test("elastic - config watch: delete stops members cleanly; a max_members edit, a purge or bad JSON stops them with an error", async () => {
    const start = async (members: string[]): Promise<{ stream: string; g: string; runners: Runner[] }> => {
      const { stream, group: g, wq } = await group(2, members);
      const rs = await Promise.all(members.map((m) => runners.start(env.js, { stream, group: g, member: m, ackWaitMs: 1000 })));
      for (const m of members) await waitFor(() => env.jsm.consumers.info(wq, m), 15_000, `consumer ${m}`);
      return { stream, g, runners: rs };
    };
    const stopsWith = async (rs: Runner[], code: string | undefined): Promise<void> => {
      for (const r of rs) {
        const err = (await withTimeout(r.closedWith, 15_000, `${r.name} to stop`)) as ConsumerGroupError | undefined;
        if (code === undefined) assert.equal(err, undefined, `${r.name} stops without error`);
        else assert.equal(err?.code, code, `${r.name}: ${err?.message}`);
        const stopped = r.events.filter((e) => e.type === "stopped");
        assert.equal(stopped.length, 1, "one stopped event");
      }
    };

    // deleteElastic → closed() resolves undefined.
    const d = await start(["m1", "m2"]);
    await deleteElastic(env.js, d.stream, d.g);
    await stopsWith(d.runners, undefined);

    // A hand edit of max_members → CONFIG_IMMUTABLE.
    const e = await start(["m1", "m2"]);
    const text = (await rawElasticConfig(env.js, e.stream, e.g))?.text ?? "";
    assert.match(text, /"max_members":2/);
    await putRawElasticConfig(env.js, e.stream, e.g, text.replace('"max_members":2', '"max_members":3'));
    await stopsWith(e.runners, "CONFIG_IMMUTABLE");

    // A hand edit of the partitioning filters → CONFIG_IMMUTABLE too.
    const f = await start(["m1"]);
    const ftext = (await rawElasticConfig(env.js, f.stream, f.g))?.text ?? "";
    await putRawElasticConfig(env.js, f.stream, f.g, ftext.replace('"partitioning_wildcards":[1]', '"partitioning_wildcards":[]'));
    await stopsWith(f.runners, "CONFIG_IMMUTABLE");

    // A purge → CONFIG_DECODE (Go: "bad JSON").
    const p = await start(["m1", "m2"]);
    await purgeElasticConfig(env.js, p.stream, p.g);
    await stopsWith(p.runners, "CONFIG_DECODE");

    // Invalid JSON → CONFIG_DECODE.
    const j = await start(["m1"]);
    await putRawElasticConfig(env.js, j.stream, j.g, "{not json");
    await stopsWith(j.runners, "CONFIG_DECODE");

    // A membership-only hand edit is not an error: the member follows it.
    const ok = await start(["m1"]);
    const okText = (await rawElasticConfig(env.js, ok.stream, ok.g))?.text ?? "";
    await putRawElasticConfig(env.js, ok.stream, ok.g, okText.replace('"members":["m1"]', '"members":["m1","zz"]'));
    const r = ok.runners[0];
    assert.ok(r);
    await waitFor(() => r.eventCount("partitions_changed") > 0, 15_000, "m1 to follow the edit");
    assert.deepEqual(r.instance.partitions(), [0]);
    assert.equal(r.isClosed(), false);
    await deleteElastic(env.js, ok.stream, ok.g);
    await stopsWith(ok.runners, undefined);
  });
});

/** Publishes one message every ~20 ms until stopped, recording what it published. */
function startPump(env: TestEnv, stream: string, published: string[], next: () => number): { stop(): Promise<void> } {
  let running = true;
  const loop = (async () => {
    while (running) {
      const n = next();
      published.push(`msg-${n}`);
      await env.js.publish(`${stream}.${n % 10}`, `msg-${n}`);
      await sleep(20);
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
    },
  };
}
