/**
 * Static groups against a real nats-server: partition assignment, the member's
 * consumer config, Go's TestStatic, config changes under running members, a
 * consumer deleted under a running member, and handler failures.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import type { Msg, Subscription } from "@nats-io/transport-node";
import {
  ConsumerGroupError,
  STATIC_BUCKET,
  createStatic,
  deleteStatic,
  generatePartitionFilters,
  memberPartitions,
  partitionOf,
  staticConsume,
  type ConsumerGroupMember,
  type ConsumerGroupMessage,
} from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import {
  createKeyedStream,
  keys,
  missing,
  orderViolations,
  publishKeyed,
  recordStatus,
  recordingHandler,
  within,
  type Handled,
} from "../helpers/static-fixtures.js";

const NS = 1_000_000;

describe("static - behaviour: consuming", () => {
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
    await Promise.all(running.splice(0).map((m) => m.stop()));
  });
  after(async () => {
    await env.close();
  });

  async function consumerExists(stream: string, name: string): Promise<boolean> {
    try {
      await env.jsm.consumers.info(stream, name);
      return true;
    } catch (err) {
      if ((err as { code?: number }).code === 10014) return false;
      throw err;
    }
  }

  /** Waits until the consumer has nothing left to deliver or to be acked, so counts are final. */
  async function drained(stream: string, consumer: string): Promise<void> {
    await waitFor(
      async () => {
        const ci = await env.jsm.consumers.info(stream, consumer);
        return ci.num_pending === 0 && ci.num_ack_pending === 0 && ci.num_redelivered === 0;
      },
      15_000,
      `${consumer} to have nothing pending`,
    );
  }

  test("static - behaviour: two members on 10 partitions get exactly their partitions, every message once, per-key order", async () => {
    const stream = uniqueName("orders");
    const group = "g";
    const prefix = await createKeyedStream(env.jsm, stream, 10, "orders");
    await createStatic(env.js, { stream, group, maxMembers: 10, members: ["m1", "m2"] });
    const sinks: Record<string, Handled[]> = { m1: [], m2: [] };
    for (const member of ["m1", "m2"]) {
      const c = await env.connect();
      track(await staticConsume(c.js, { stream, group, member, handler: recordingHandler(member, sinks[member] ?? []) }));
    }
    const sent = await publishKeyed(env.js, prefix, keys(100), 10);
    assert.equal(sent.length, 1000);
    await waitFor(() => (sinks["m1"]?.length ?? 0) + (sinks["m2"]?.length ?? 0) >= 1000, 30_000, "1000 messages handled");
    await drained(stream, "g-m1");
    await drained(stream, "g-m2");

    const all = [...(sinks["m1"] ?? []), ...(sinks["m2"] ?? [])];
    assert.equal(all.length, 1000, "every message handled exactly once (no redeliveries)");
    assert.deepEqual(missing(sent, all), []);
    const keyPartition = (key: string): number => partitionOf(`orders.${key}`, 10, { filter: "orders.*", wildcards: [1] });
    for (const member of ["m1", "m2"]) {
      const owned = memberPartitions(["m1", "m2"], 10, undefined, member);
      assert.deepEqual(owned, member === "m1" ? [0, 1, 2, 3, 4] : [5, 6, 7, 8, 9]);
      const records = sinks[member] ?? [];
      for (const r of records) {
        assert.equal(r.partition, keyPartition(r.key), `${r.key} was delivered from the partition the server's transform gave it`);
        assert.ok(owned.includes(r.partition), `${member} got ${r.key} from partition ${r.partition}, which it does not own`);
        assert.equal(r.subject, `orders.${r.key}`, "the handler sees the subject without the partition token");
        assert.equal(r.deliveryCount, 1);
      }
      const expectedPartitions = [...new Set(keys(100).map(keyPartition).filter((p) => owned.includes(p)))].sort((a, b) => a - b);
      assert.deepEqual([...new Set(records.map((r) => r.partition))].sort((a, b) => a - b), expectedPartitions, `${member} received exactly its partitions`);
      assert.deepEqual(orderViolations(records), [], `${member} handled every key in order`);
    }
    const ci = await env.jsm.consumers.info(stream, "g-m1");
    assert.deepEqual(ci.config.filter_subjects, generatePartitionFilters(["m1", "m2"], 10, undefined, "m1", ">"));
    assert.deepEqual(running[0]?.partitions(), [0, 1, 2, 3, 4]);
    assert.deepEqual(running[1]?.partitions(), [5, 6, 7, 8, 9]);
    await Promise.all(running.splice(0).map((m) => m.stop()));
    await env.jsm.streams.delete(stream);
  });

  test("static - behaviour: the member's consumer config and pulls are Go's", async () => {
    const stream = uniqueName("cfg");
    const foo = `${stream}_foo`;
    const bar = `${stream}_bar`;
    await env.jsm.streams.add({
      name: stream,
      subjects: [`${foo}.*`, `${bar}.*`],
      storage: "memory",
      subject_transform: { src: "*.*", dest: "{{partition(4,2)}}.{{wildcard(1)}}.{{wildcard(2)}}" },
    });
    const noop = (): void => undefined;
    const pulls: Record<string, unknown>[] = [];
    const sub: Subscription = env.nc.subscribe(`$JS.API.CONSUMER.MSG.NEXT.${stream}.>`, {
      callback: (_err: Error | null, m: Msg) => {
        pulls.push({ subject: m.subject, ...(m.json<Record<string, unknown>>() ?? {}) });
      },
    });
    await env.nc.flush();
    try {
      // Balanced membership with two filters: filter first, then partition ascending.
      await createStatic(env.js, { stream, group: "bal", maxMembers: 4, filters: [`${foo}.*`, `${bar}.*`], members: ["m3", "m1", "m2"] });
      track(await staticConsume(env.js, { stream, group: "bal", member: "m1", handler: noop }));
      const bal = await env.jsm.consumers.info(stream, "bal-m1");
      assert.equal(bal.config.durable_name, "bal-m1");
      assert.equal(bal.name, "bal-m1");
      assert.deepEqual(bal.config.filter_subjects, [`0.${foo}.*`, `3.${foo}.*`, `0.${bar}.*`, `3.${bar}.*`]);
      assert.deepEqual(bal.config.filter_subjects, [
        ...generatePartitionFilters(["m3", "m1", "m2"], 4, undefined, "m1", `${foo}.*`),
        ...generatePartitionFilters(["m3", "m1", "m2"], 4, undefined, "m1", `${bar}.*`),
      ]);
      assert.equal(bal.config.filter_subject, undefined);
      assert.deepEqual(bal.config.priority_groups, ["PCG"]);
      assert.equal(bal.config.priority_policy, "pinned_client");
      assert.equal(bal.config.ack_wait, 5000 * NS, "default AckWait is 5 s");
      assert.equal(bal.config.priority_timeout, 5000 * NS, "PinnedTTL = max(AckWait, 1 s)");
      assert.equal(bal.config.ack_policy, "explicit", "an empty template acks explicitly, as Go's zero AckPolicy");
      assert.equal(bal.config.deliver_policy, "all");
      // Pulls: group PCG, expires = max(AckWait/2, 1 s).
      const pull = await waitFor(() => pulls.find((p) => p["subject"] === `$JS.API.CONSUMER.MSG.NEXT.${stream}.bal-m1`), 5000, "a pull from bal-m1");
      assert.equal(pull["group"], "PCG");
      assert.equal(pull["expires"], 2500 * NS);

      // Member mappings: always "<p>.>" in listed order, once per filter; and a short AckWait.
      await createStatic(env.js, {
        stream,
        group: "map",
        maxMembers: 4,
        memberMappings: [
          { member: "a", partitions: [3, 0] },
          { member: "b", partitions: [1, 2] },
        ],
      });
      track(await staticConsume(env.js, { stream, group: "map", member: "a", handler: noop, consumerConfig: { ack_wait: 500 * NS, max_ack_pending: 7 } }));
      const map = await env.jsm.consumers.info(stream, "map-a");
      assert.deepEqual(map.config.filter_subjects, ["3.>", "0.>"]);
      assert.equal(map.config.ack_wait, 500 * NS);
      assert.equal(map.config.priority_timeout, 1000 * NS, "PinnedTTL is at least 1 s");
      assert.equal(map.config.max_ack_pending, 7, "the rest of the template is kept");
      const mapPull = await waitFor(() => pulls.find((p) => p["subject"] === `$JS.API.CONSUMER.MSG.NEXT.${stream}.map-a`), 5000, "a pull from map-a");
      assert.equal(mapPull["expires"], 1000 * NS, "pull expiry is at least 1 s");

      track(await staticConsume(env.js, { stream, group: "map", member: "b", handler: noop, consumerConfig: { ack_wait: 2000 * NS } }));
      const mapB = await env.jsm.consumers.info(stream, "map-b");
      assert.equal(mapB.config.priority_timeout, 2000 * NS);
      assert.deepEqual(mapB.config.filter_subjects, ["1.>", "2.>"]);
    } finally {
      sub.unsubscribe();
      await Promise.all(running.splice(0).map((m) => m.stop()));
      await env.jsm.streams.delete(stream);
    }
  });

  test("static - behaviour: pulls carry a byte limit only when a window of the largest possible messages could pass maxBufferedBytes", async () => {
    const stream = uniqueName("bytes");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], storage: "memory", subject_transform: { src: `${stream}.*`, dest: "{{partition(2,1)}}.{{wildcard(1)}}" } });
    for (let i = 0; i < 400; i++) await env.js.publish(`${stream}.k${i % 20}`, String(i));
    const pulls: { consumer: string; maxBytes: unknown }[] = [];
    const sub: Subscription = env.nc.subscribe(`$JS.API.CONSUMER.MSG.NEXT.${stream}.>`, {
      callback: (_err: Error | null, m: Msg) => {
        const request = m.json<{ max_bytes?: unknown; no_wait?: boolean }>();
        // The pin's keep-alives (one message of at most 1 byte, no wait) are not pulls for messages.
        if (request.no_wait !== true) pulls.push({ consumer: m.subject.split(".").pop() ?? "", maxBytes: request.max_bytes });
      },
    });
    await env.nc.flush();
    try {
      // 2 members, one per partition, 256 buffered (serial's default): the default budget (16 MiB) cannot hold 256 messages
      // of 1 MiB (the server's max_payload) and more, so every pull is bounded; 512 MiB can, so only the first pull
      // (sent from inside nats.js's consume, before the gate) is. Each on a connection of its own: instances on one
      // connection share their budgets.
      await createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["small", "large"] });
      const handled = { small: 0, large: 0 };
      track(await staticConsume((await env.connect()).js, { stream, group: "g", member: "small", handler: () => void (handled.small += 1) }));
      track(await staticConsume((await env.connect()).js, { stream, group: "g", member: "large", maxBufferedBytes: 512 * 1024 * 1024, handler: () => void (handled.large += 1) }));
      await waitFor(() => handled.small + handled.large === 400, 20_000, "all 400 handled");
      await env.nc.flush();
      const of = (c: string): unknown[] => pulls.filter((p) => p.consumer === c).map((p) => p.maxBytes);
      const small = of("g-small");
      const large = of("g-large");
      assert.ok(small.length > 2 && small.every((b) => typeof b === "number" && b > 0), `every pull of the default budget carries max_bytes: ${JSON.stringify(small)}`);
      assert.ok(large.length > 2, `several pulls of the large budget: ${JSON.stringify(large)}`);
      assert.equal(large[0], 512 * 1024 * 1024, "the first pull carries the budget");
      assert.deepEqual(large.slice(1).filter((b) => b !== undefined), [], "later pulls of a budget that holds the window carry no max_bytes");
    } finally {
      sub.unsubscribe();
    }
  });

  test("static - behaviour: Go's TestStatic (filters foo.* and bar.*, 2 partitions, bad.* never delivered)", async () => {
    const stream = uniqueName("test");
    await env.jsm.streams.add({
      name: stream,
      subjects: ["foo.*", "bar.*", "bad.*"],
      storage: "memory",
      subject_transform: { src: "*.*", dest: "{{partition(2,2)}}.{{wildcard(1)}}.{{wildcard(2)}}" },
    });
    for (const p of ["foo", "bad", "bar"]) for (let i = 0; i < 10; i++) await env.js.publish(`${p}.${i}`, `${p}.${i}`);
    await createStatic(env.js, { stream, group: "cg", maxMembers: 2, filters: ["foo.*", "bar.*"], members: ["m1", "m2"] });
    const template = { max_ack_pending: 1, ack_wait: 1000 * NS, ack_policy: "explicit" as const };
    const got: Record<string, string[]> = { m1: [], m2: [] };
    const members: Record<string, ConsumerGroupMember> = {};
    for (const member of ["m1", "m2"]) {
      members[member] = track(
        await staticConsume(env.js, {
          stream,
          group: "cg",
          member,
          consumerConfig: template,
          handler: (msg: ConsumerGroupMessage) => {
            got[member]?.push(msg.subject);
          },
        }),
      );
    }
    await waitFor(() => got["m1"]?.length === 10 && got["m2"]?.length === 10, 20_000, "10 messages per member");
    await drained(stream, "cg-m1");
    await drained(stream, "cg-m2");
    // partition(2,2) hashes the digit: even digits -> partition 1 (m2), odd -> partition 0 (m1).
    const expect = (parity: number): string[] =>
      ["foo", "bar"].flatMap((p) => [0, 1, 2, 3, 4, 5, 6, 7, 8, 9].filter((d) => d % 2 === parity).map((d) => `${p}.${d}`));
    assert.deepEqual(got["m1"], expect(1), "m1 handled exactly foo/bar with odd digits, in stream order");
    assert.deepEqual(got["m2"], expect(0), "m2 handled exactly foo/bar with even digits, in stream order");

    await deleteStatic(env.js, stream, "cg");
    assert.equal(await within(members["m1"]!.closed(), 10_000, "m1 to stop"), undefined);
    assert.equal(await within(members["m2"]!.closed(), 10_000, "m2 to stop"), undefined);
    assert.equal(await consumerExists(stream, "cg-m1"), false);
    assert.equal(await consumerExists(stream, "cg-m2"), false);
    const kv = await new Kvm(env.js).open(STATIC_BUCKET);
    assert.equal((await kv.get(`${stream}.cg`))?.operation, "DEL", "the config was deleted with a delete marker");
    await env.jsm.streams.delete(stream);
  });

  /** A group with two running members (m1 with two instances), for the config-change tests. */
  async function runningGroup(): Promise<{ stream: string; prefix: string; members: ConsumerGroupMember[]; sink: Handled[] }> {
    const stream = uniqueName("life");
    const prefix = await createKeyedStream(env.jsm, stream, 2, stream);
    await createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["m1", "m2"] });
    const sink: Handled[] = [];
    const members: ConsumerGroupMember[] = [];
    for (const member of ["m1", "m1", "m2"]) {
      const c = await env.connect();
      members.push(track(await staticConsume(c.js, { stream, group: "g", member, handler: recordingHandler(member, sink), consumerConfig: { ack_wait: 1000 * NS } })));
    }
    assert.equal(await consumerExists(stream, "g-m1"), true);
    assert.equal(await consumerExists(stream, "g-m2"), true);
    return { stream, prefix, members, sink };
  }

  async function configBucket() {
    return new Kvm(env.js).open(STATIC_BUCKET);
  }

  test("static - behaviour: deleting the config stops members cleanly and they delete their consumers", async () => {
    const { stream, members } = await runningGroup();
    const statuses = members.map(recordStatus);
    await (await configBucket()).delete(`${stream}.g`);
    for (const m of members) assert.equal(await within(m.closed(), 10_000, "the member to stop"), undefined);
    for (const s of statuses) {
      const stopped = await s.next("stopped", 1000);
      assert.equal("error" in stopped ? stopped.error : undefined, undefined);
    }
    assert.equal(await consumerExists(stream, "g-m1"), false, "the members deleted g-m1");
    assert.equal(await consumerExists(stream, "g-m2"), false, "the members deleted g-m2");
    await env.jsm.streams.delete(stream);
  });

  test("static - behaviour: changing the config stops members with CONFIG_CHANGED and deletes their consumers", async () => {
    const { stream, members } = await runningGroup();
    await (await configBucket()).put(`${stream}.g`, '{"max_members":2,"members":["m1","m2","m3"]}');
    for (const m of members) {
      const err = await within(m.closed(), 10_000, "the member to stop");
      assert.ok(err instanceof ConsumerGroupError, `expected a ConsumerGroupError, got ${String(err)}`);
      assert.equal(err.code, "CONFIG_CHANGED");
    }
    assert.equal(await consumerExists(stream, "g-m1"), false);
    assert.equal(await consumerExists(stream, "g-m2"), false);
    await env.jsm.streams.delete(stream);
  });

  test("static - behaviour: purging the config key stops members with CONFIG_DECODE", async () => {
    const { stream, members } = await runningGroup();
    await (await configBucket()).purge(`${stream}.g`);
    for (const m of members) {
      const err = await within(m.closed(), 10_000, "the member to stop");
      assert.ok(err instanceof ConsumerGroupError, `expected a ConsumerGroupError, got ${String(err)}`);
      assert.equal(err.code, "CONFIG_DECODE");
    }
    assert.equal(await consumerExists(stream, "g-m1"), false);
    assert.equal(await consumerExists(stream, "g-m2"), false);
    await env.jsm.streams.delete(stream);
  });

  test("static - behaviour: an invalid config stops members with its validation code", async () => {
    const { stream, members } = await runningGroup();
    await (await configBucket()).put(`${stream}.g`, '{"max_members":2,"members":["m1"],"member_mappings":[{"member":"m2","partitions":[0,1]}]}');
    for (const m of members) {
      const err = await within(m.closed(), 10_000, "the member to stop");
      assert.ok(err instanceof ConsumerGroupError, `expected a ConsumerGroupError, got ${String(err)}`);
      assert.equal(err.code, "MEMBERS_AND_MAPPINGS");
    }
    assert.equal(await consumerExists(stream, "g-m1"), false);
    await env.jsm.streams.delete(stream);
  });

  test("static - behaviour: rewriting the same config bytes keeps members running", async () => {
    const { stream, prefix, members, sink } = await runningGroup();
    const kv = await configBucket();
    const entry = await kv.get(`${stream}.g`);
    assert.ok(entry && entry.operation === "PUT");
    const rev = await kv.put(`${stream}.g`, entry.value);
    assert.ok(rev > entry.revision);
    const sent = await publishKeyed(env.js, prefix, keys(10), 3);
    await waitFor(() => missing(sent, sink).length === 0, 10_000, "messages published after the rewrite to be handled");
    // Had the rewrite stopped them, they would have stopped with an error; a delete now stops them cleanly.
    await deleteStatic(env.js, stream, "g");
    for (const m of members) assert.equal(await within(m.closed(), 10_000, "the member to stop"), undefined);
    await env.jsm.streams.delete(stream);
  });

  test("static - behaviour: a durable deleted under a running instance stops it with CONSUMER_LOST, and nothing is handled again", async () => {
    const stream = uniqueName("lost");
    const prefix = await createKeyedStream(env.jsm, stream, 1, stream);
    await createStatic(env.js, { stream, group: "g", maxMembers: 1, members: ["m1"] });
    const sink: Handled[] = [];
    const member = track(await staticConsume(env.js, { stream, group: "g", member: "m1", handler: recordingHandler("m1", sink), consumerConfig: { ack_wait: 1000 * NS } }));
    const status = recordStatus(member);
    const first = await publishKeyed(env.js, prefix, keys(25), 2);
    await waitFor(() => missing(first, sink).length === 0, 10_000, "the first messages to be handled");
    await drained(stream, "g-m1");
    const handledBefore = sink.length;

    await env.jsm.consumers.delete(stream, "g-m1");
    const stopped = await status.next("stopped", 15_000);
    const error = await member.closed();
    assert.equal((error as { code?: string } | undefined)?.code, "CONSUMER_LOST");
    assert.match(String(error?.message), /"g-m1".*was deleted while it ran.*replay the stream/);
    assert.equal((stopped as { error?: { code?: string } }).error?.code, "CONSUMER_LOST");
    assert.equal(status.events.some((e) => e.type === "joined" && e.at > stopped.at), false);
    assert.equal(await consumerExists(stream, "g-m1"), false, "the durable was not recreated (it would replay the stream)");
    assert.equal(sink.length, handledBefore, "0 messages handled again");
    await env.jsm.streams.delete(stream).catch(() => undefined);
  });

  test("static - behaviour: a throwing handler is reported and its message redelivered, never lost", async () => {
    const stream = uniqueName("throw");
    const prefix = await createKeyedStream(env.jsm, stream, 2, stream);
    await createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["m1"] });
    const sink: Handled[] = [];
    const record = recordingHandler("m1", sink);
    const member = track(
      await staticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        consumerConfig: { ack_wait: 1000 * NS, max_ack_pending: 1 },
        handler: async (msg) => {
          const { k, s } = msg.json<{ k: string; s: number }>();
          if (k === "k3" && s === 2 && msg.info.deliveryCount === 1) throw new Error("boom");
          await record(msg);
        },
      }),
    );
    const status = recordStatus(member);
    const sent = await publishKeyed(env.js, prefix, keys(5), 4);
    await waitFor(() => missing(sent, sink).length === 0, 15_000, "every message handled");
    const failure = await status.next("handler_error", 1000);
    assert.equal((failure.error as Error).message, "boom");
    assert.equal(failure.subject, `${prefix}.k3`);
    assert.equal(failure.partition, partitionOf(`${prefix}.k3`, 2, { filter: `${prefix}.*`, wildcards: [1] }));
    const retried = sink.filter((r) => r.key === "k3" && r.seq === 2);
    assert.equal(retried.length, 1);
    assert.equal(retried[0]?.deliveryCount, 2, "handled on its second delivery");
    assert.deepEqual(orderViolations(sink), [], "with max_ack_pending 1 the retry keeps per-key order");
    await member.stop();
    await env.jsm.streams.delete(stream);
  });
});
