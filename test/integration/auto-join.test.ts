/**
 * Auto-join against a real server: instances that add their member to the group by
 * themselves, keep leases, leave on stop, and remove members whose leases expired;
 * manual members untouched; bad input refused with typed errors.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import {
  addMembers,
  createElastic,
  createStatic,
  elasticConsume,
  partitionOwners,
  setMemberMappings,
  staticConsume,
  LEASE_BUCKET,
  type ConsumerGroupMember,
  type ElasticConsumerGroupConfig,
  type MemberStatus,
} from "../../src/index.js";
import { connectTo, startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { startTcpProxy } from "../helpers/tcp-proxy.js";
import { nanos, rejectsWithCode, sleep } from "../helpers/elastic-util.js";

describe("auto-join", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await Promise.allSettled(running.map((m) => m.stop()));
    await env.close();
  });

  async function group(maxMembers: number): Promise<{ stream: string; group: string }> {
    const stream = uniqueName("aj");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    await createElastic(env.js, { stream, group: "g", maxMembers, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    return { stream, group: "g" };
  }

  const listedOf = (c: ElasticConsumerGroupConfig): string[] => ((c.members ?? []).length > 0 ? (c.members ?? []) : (c.member_mappings ?? []).map((m) => m.member));

  async function config(stream: string): Promise<{ config: ElasticConsumerGroupConfig; revision: number }> {
    const kv = await new Kvm(env.js).open("elastic-consumer-groups");
    const e = await kv.get(`${stream}.g`);
    assert.ok(e);
    return { config: e.json<ElasticConsumerGroupConfig>(), revision: e.revision };
  }

  async function auto(stream: string, member: string, opts: { settleMs?: number; leaseTtlMs?: number; assignment?: "balanced" | "sticky"; events?: MemberStatus[] } = {}): Promise<ConsumerGroupMember> {
    const c = await env.connect();
    const m = await elasticConsume(c.js, {
      stream,
      group: "g",
      member,
      consumerConfig: { ack_wait: nanos(1000) },
      autoJoin: { settleMs: opts.settleMs ?? 500, leaseTtlMs: opts.leaseTtlMs ?? 2000, assignment: opts.assignment ?? "balanced" },
      handler: () => undefined,
    });
    running.push(m);
    if (opts.events) {
      const events = opts.events;
      void (async () => {
        for await (const e of m.status()) events.push(e);
      })();
    }
    return m;
  }

  test("auto-join - three instances from nothing: all members in, every partition owned, one or two membership writes", async () => {
    const { stream } = await group(6);
    const before = (await config(stream)).revision;
    const started = performance.now();
    const ms = await Promise.all(["a", "b", "c"].map((n) => auto(stream, n, { settleMs: 1000 })));
    await waitFor(async () => ((await config(stream)).config.members ?? []).length === 3, 10_000, "3 members");
    const owned = performance.now() - started;
    await waitFor(() => ms.every((m) => m.partitions().length === 2), 10_000, "2 partitions each");
    await sleep(2000);
    const after = await config(stream);
    const writes = after.revision - before;
    console.log(`3 auto instances: membership of 3 after ${Math.round(owned)} ms, ${writes} membership write(s)`);
    assert.ok(writes >= 1 && writes <= 2, `1 or 2 membership writes, got ${writes}`);
    assert.deepEqual(partitionOwners(after.config).filter((o) => o === undefined), []);
    await Promise.all(ms.map((m) => m.stop()));
    const left = await config(stream);
    assert.deepEqual(left.config.members ?? [], [], "the last instance of each member took it out");
  });

  test("auto-join - bad input: typed errors for the lease TTL, static groups, manual member names, policies, modes and option shapes", async () => {
    const { stream } = await group(4);
    const handler = (): undefined => undefined;
    const base = { stream, group: "g", handler, consumerConfig: { ack_wait: nanos(3000) } };
    const ttl = await rejectsWithCode(elasticConsume(env.js, { ...base, member: "x", autoJoin: { leaseTtlMs: 2000 } }), "INVALID_ARGUMENT");
    assert.match(ttl.message, /below the consumer's AckWait \(3000 ms\)/);
    await rejectsWithCode(elasticConsume(env.js, { ...base, member: "x", autoJoin: { leaseTtlMs: 500 } }), "INVALID_ARGUMENT");
    await rejectsWithCode(elasticConsume(env.js, { ...base, member: "x", autoJoin: { settleMs: -1 } }), "INVALID_ARGUMENT");
    await rejectsWithCode(elasticConsume(env.js, { ...base, member: "x", autoJoin: { assignment: "round-robin" as "sticky" } }), "INVALID_ARGUMENT");
    await rejectsWithCode(elasticConsume(env.js, { ...base, member: "x", autoJoin: "yes" as unknown as true }), "INVALID_ARGUMENT");
    await rejectsWithCode(elasticConsume(env.js, { ...base }), "INVALID_NAME");
    const saved = process.env["HOSTNAME"];
    try {
      process.env["HOSTNAME"] = "not a*valid>name";
      const named = await rejectsWithCode(elasticConsume(env.js, { ...base, autoJoin: true }), "INVALID_NAME");
      assert.match(named.message, /HOSTNAME/);
    } finally {
      if (saved === undefined) delete process.env["HOSTNAME"];
      else process.env["HOSTNAME"] = saved;
    }

    const sstream = uniqueName("ajs");
    await env.jsm.streams.add({ name: sstream, subjects: [`${sstream}.*`], subject_transform: { src: `${sstream}.*`, dest: `{{partition(2,1)}}.${sstream}.{{wildcard(1)}}` } });
    await createStatic(env.js, { stream: sstream, group: "g", maxMembers: 2, members: ["a"] });
    const stat = await rejectsWithCode(staticConsume(env.js, { stream: sstream, group: "g", member: "a", handler, autoJoin: true } as Parameters<typeof staticConsume>[1]), "STATIC_GROUP");
    assert.match(stat.message, /elastic/);

    await addMembers(env.js, stream, "g", ["manual"]);
    const manual = await rejectsWithCode(elasticConsume(env.js, { ...base, member: "manual", autoJoin: true }), "MEMBER_NOT_AUTO");
    assert.match(manual.message, /added by hand/);
    const mode = await rejectsWithCode(elasticConsume(env.js, { ...base, member: "s1", autoJoin: { assignment: "sticky" } }), "ASSIGNMENT_CONFLICT");
    assert.match(mode.message, /manual|by hand/);

    const other = await group(4);
    const first = await auto(other.stream, "p1", { assignment: "sticky" });
    const policy = await rejectsWithCode(elasticConsume(env.js, { ...base, stream: other.stream, member: "p2", autoJoin: { assignment: "balanced" } }), "AUTO_POLICY_CONFLICT");
    assert.match(policy.message, /"sticky"/);
    await first.stop();
    // The last auto member left: no running instance follows the policy, so another fleet may choose another.
    const second = await auto(other.stream, "p3", { assignment: "balanced" });
    await second.stop();
  });

  test("auto-join - more auto members than partitions: the extra ones idle, say so, and take over when a member leaves", async () => {
    const { stream } = await group(2);
    const events: MemberStatus[] = [];
    const ms = [await auto(stream, "a"), await auto(stream, "b")];
    await waitFor(async () => ((await config(stream)).config.members ?? []).length === 2, 10_000, "a and b listed");
    ms.push(await auto(stream, "c", { events }));
    await waitFor(() => events.some((e) => e.type === "idle" && /more auto members than partitions/.test(e.reason)), 10_000, "c says why it idles");
    assert.deepEqual(ms[2]?.partitions(), []);
    assert.deepEqual((await config(stream)).config.members, ["a", "b"], "no more members listed than partitions");
    await ms[0]?.stop();
    await waitFor(() => (ms[2]?.partitions().length ?? 0) === 1, 10_000, "c takes a partition when a leaves");
    assert.deepEqual((await config(stream)).config.members, ["b", "c"]);
  });

  test("auto-join - manual members keep their membership (balanced) and their exact mappings (sticky)", async () => {
    const balanced = await group(6);
    await addMembers(env.js, balanced.stream, "g", ["go1"]);
    const a = await auto(balanced.stream, "a");
    const b = await auto(balanced.stream, "b");
    await waitFor(async () => ((await config(balanced.stream)).config.members ?? []).length === 3, 10_000, "a and b added");
    assert.deepEqual((await config(balanced.stream)).config.members, ["go1", "a", "b"], "the manual member keeps its place");
    await a.stop();
    await b.stop();
    assert.deepEqual((await config(balanced.stream)).config.members, ["go1"], "only the auto members left");

    const sticky = await group(8);
    const s1 = await auto(sticky.stream, "s1", { assignment: "sticky" });
    const s2 = await auto(sticky.stream, "s2", { assignment: "sticky" });
    await waitFor(async () => ((await config(sticky.stream)).config.member_mappings ?? []).length === 2, 10_000, "s1 and s2 mapped");
    // Somebody gives a Go member two partitions by hand.
    const mapped = (await config(sticky.stream)).config.member_mappings ?? [];
    const taken = mapped[0]?.partitions?.slice(0, 2) ?? [];
    await setMemberMappings(env.js, sticky.stream, "g", [
      ...mapped.map((m) => ({ member: m.member, partitions: (m.partitions ?? []).filter((p) => !taken.includes(p)) })),
      { member: "go1", partitions: taken },
    ]);
    const go1 = (): number[] | undefined => undefined;
    void go1;
    const s3 = await auto(sticky.stream, "s3", { assignment: "sticky" });
    const goPartitions = async (): Promise<number[]> => ((await config(sticky.stream)).config.member_mappings ?? []).find((m) => m.member === "go1")?.partitions ?? [];
    await waitFor(async () => ((await config(sticky.stream)).config.member_mappings ?? []).length === 4, 10_000, "s3 mapped");
    assert.deepEqual(await goPartitions(), taken);
    const sizes = ((await config(sticky.stream)).config.member_mappings ?? []).filter((m) => m.member !== "go1").map((m) => m.partitions?.length ?? 0);
    assert.ok(Math.max(...sizes) - Math.min(...sizes) <= 1, `auto members balanced ±1: ${sizes.join(",")}`);
    await s1.stop();
    await waitFor(async () => ((await config(sticky.stream)).config.member_mappings ?? []).length === 3, 10_000, "s1 gone");
    assert.deepEqual(await goPartitions(), taken, "the manual mapping is untouched");
    await s2.stop();
    await s3.stop();
    const left = (await config(sticky.stream)).config.member_mappings ?? [];
    assert.deepEqual(left.map((m) => m.member), ["go1", "s3"], "the last auto member stays: the manual mapping does not cover every partition");
    assert.deepEqual(await goPartitions(), taken);
  });

  test("auto-join - an instance that dies without stopping leaves the group after its lease TTL and settle; a second instance of a member keeps it in", async () => {
    const { stream } = await group(4);
    const c1 = await env.connect();
    const c2 = await env.connect();
    const c3 = await env.connect();
    const start = async (c: { js: typeof env.js }, member: string): Promise<ConsumerGroupMember> => {
      const m = await elasticConsume(c.js, { stream, group: "g", member, consumerConfig: { ack_wait: nanos(1000) }, autoJoin: { settleMs: 300, leaseTtlMs: 2000 }, handler: () => undefined });
      running.push(m);
      return m;
    };
    const a = await start(c1, "a");
    const b1 = await start(c2, "b");
    const b2 = await start(c3, "b");
    await waitFor(async () => ((await config(stream)).config.members ?? []).length === 2, 10_000, "a and b in");
    // b's first instance dies (its connection goes, nothing is cleaned up): b stays, its standby is there.
    await c2.nc.close();
    await sleep(3500);
    assert.deepEqual((await config(stream)).config.members, ["a", "b"]);
    void b1;
    // b's last instance dies: b leaves after the lease TTL, and a owns everything.
    const killed = performance.now();
    await c3.nc.close();
    await waitFor(async () => ((await config(stream)).config.members ?? []).join() === "a", 10_000, "b removed");
    const removedAfter = performance.now() - killed;
    console.log(`member removed ${Math.round(removedAfter)} ms after its last instance died (lease TTL 2000 ms, settle 300 ms)`);
    assert.ok(removedAfter >= 1500, `not before the lease could expire (${Math.round(removedAfter)} ms)`);
    await waitFor(() => a.partitions().length === 4, 10_000, "a owns all partitions");
    void b2;
    // b's registration is gone with it: a member of that name joining by hand is no longer taken for an auto one.
    const leases = await new Kvm(env.js).open(LEASE_BUCKET);
    await waitFor(async () => (await leases.get(`${stream}.g.auto.Yg`))?.operation !== "PUT", 10_000, "b's registration deleted (Yg is b in base64url)");
    assert.equal((await leases.get(`${stream}.g.auto.YQ`))?.operation, "PUT", "a's registration stays");
  });

  test("auto-join - review: a peer behind a slow link never brings back a member that left (it would look manual and stay)", async () => {
    const { stream } = await group(6);
    const proxy = await startTcpProxy(Number(new URL(env.server.url).port), 0, true);
    try {
      const a = await auto(stream, "a", { settleMs: 300, leaseTtlMs: 3000, assignment: "sticky" });
      void a;
      const slow = await connectTo(proxy.url);
      const g = await elasticConsume(slow.js, { stream, group: "g", member: "g", consumerConfig: { ack_wait: nanos(1000) }, autoJoin: { settleMs: 300, leaseTtlMs: 3000, assignment: "sticky" }, handler: () => undefined });
      running.push(g);
      await waitFor(async () => listedOf((await config(stream)).config).length === 2, 15_000, "a and g listed");
      await sleep(1000);
      proxy.setDelay(400);
      await sleep(1500);
      const x = await auto(stream, "x", { settleMs: 300, leaseTtlMs: 3000, assignment: "sticky" });
      await waitFor(async () => listedOf((await config(stream)).config).includes("x"), 10_000, "x listed");
      await x.stop();
      await sleep(6000);
      assert.ok(!listedOf((await config(stream)).config).includes("x"), `x, stopped, is not listed again: ${JSON.stringify(listedOf((await config(stream)).config))}`);
      proxy.setDelay(0);
      await g.stop();
      await slow.nc.close();
    } finally {
      await proxy.close();
    }
  });

  test("auto-join - review: every instance stopped at once leaves no registration behind; a member of that name added later by hand is never removed", async () => {
    const { stream } = await group(4);
    const ms = [await auto(stream, "a"), await auto(stream, "b")];
    await waitFor(async () => listedOf((await config(stream)).config).length === 2, 10_000, "a and b listed");
    await Promise.all(ms.map((m) => m.stop()));
    assert.deepEqual(listedOf((await config(stream)).config), []);
    const leases = await new Kvm(env.js).open(LEASE_BUCKET);
    for (const token of ["YQ", "Yg"]) assert.notEqual((await leases.get(`${stream}.g.auto.${token}`))?.operation, "PUT", `registration ${token} deleted`);
    await addMembers(env.js, stream, "g", ["a"]);
    await auto(stream, "d");
    await waitFor(async () => listedOf((await config(stream)).config).includes("d"), 10_000, "d listed");
    await sleep(1500);
    assert.deepEqual(listedOf((await config(stream)).config), ["a", "d"], "the manual a stays");
  });

  test("auto-join - review: a refused instance leaves no policy behind, and a policy no live instance follows is replaced", async () => {
    const { stream } = await group(4);
    await addMembers(env.js, stream, "g", ["go1"]);
    await rejectsWithCode(elasticConsume(env.js, { stream, group: "g", member: "s", consumerConfig: { ack_wait: nanos(1000) }, autoJoin: { assignment: "sticky" }, handler: () => undefined }), "ASSIGNMENT_CONFLICT");
    const b = await auto(stream, "b", { assignment: "balanced" });
    await waitFor(async () => listedOf((await config(stream)).config).join() === "go1,b", 10_000, "b listed after go1");
    await b.stop();
    // A policy left behind by instances that are all gone (here: written by hand) does not bind a new fleet.
    const leases = await new Kvm(env.js).open(LEASE_BUCKET);
    await leases.put(`${stream}.g.policy`, JSON.stringify({ assignment: "sticky" }));
    const c = await auto(stream, "c", { assignment: "balanced" });
    await c.stop();
  });

  test("auto-join - review: a start slower than the lease TTL keeps its lease and its registration", async () => {
    const { stream } = await group(4);
    const a = await auto(stream, "a", { settleMs: 300, leaseTtlMs: 2000 });
    void a;
    const proxy = await startTcpProxy(Number(new URL(env.server.url).port), 300, true);
    try {
      const slow = await connectTo(proxy.url);
      const events: MemberStatus[] = [];
      const m = await elasticConsume(slow.js, { stream, group: "g", member: "slow", consumerConfig: { ack_wait: nanos(1000) }, autoJoin: { settleMs: 300, leaseTtlMs: 2000 }, handler: () => undefined });
      running.push(m);
      void (async () => {
        for await (const e of m.status()) events.push(e);
      })();
      await waitFor(async () => listedOf((await config(stream)).config).includes("slow"), 20_000, "slow listed");
      await sleep(3000);
      const leases = await new Kvm(env.js).open(LEASE_BUCKET);
      assert.equal((await leases.get(`${stream}.g.auto.${Buffer.from("slow").toString("base64url")}`))?.operation, "PUT", "its registration stays");
      assert.deepEqual(events.filter((e) => e.type === "lease_lost"), [], "no lease lost");
      assert.deepEqual(listedOf((await config(stream)).config).sort(), ["a", "slow"]);
      proxy.setDelay(0);
      await m.stop();
      await slow.nc.close();
    } finally {
      await proxy.close();
    }
  });
});
