/**
 * Interop with the Go reference (orbit.go/pcgroups v0.2.2), members at work, against
 * one real nats-server: Go members (the Go driver, each in its own process) and
 * TypeScript members in the same groups.
 *
 * - membership edits made by one side while members of the other side run;
 * - a mixed static and a mixed elastic group under keyed load;
 * - one member, two languages: a Go and a TypeScript instance of the same member
 *   sharing one consumer, step-down, and fail-over after a crash.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import {
  ELASTIC_BUCKET,
  addMembers,
  createElastic,
  createStatic,
  deleteMemberMappings,
  deleteMembers,
  elasticGetPartitionFilters,
  elasticMemberStepDown,
  getElasticConsumerGroupConfig,
  getStaticConsumerGroupConfig,
  isConsumerGroupError,
  partitionOf,
  partitionOwners,
  setMemberMappings,
  staticMemberStepDown,
  workQueueStreamName,
  type ElasticConsumerGroupConfig,
} from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import {
  GoMember,
  TsMember,
  distinct,
  driverBinary,
  goDriver,
  keyNames,
  misrouted,
  missing,
  orderViolations,
  partitionsOfFilters,
  publishKeyed,
  sleep,
  type Handled,
  type Instance,
} from "../helpers/interop-go.js";

const json = (v: unknown): string => JSON.stringify(v);
const byTime = (...lists: Handled[][]): Handled[] => lists.flat().sort((a, b) => a.at - b.at);

describe("interop-go - Go and TypeScript members in the same groups (orbit.go/pcgroups v0.2.2)", () => {
  let env: TestEnv;
  let url: string;
  const running: Instance[] = [];
  const track = <T extends Instance>(i: T): T => {
    running.push(i);
    return i;
  };

  before(async () => {
    driverBinary(); // fails loudly when the driver was not built
    env = await startEnv();
    url = env.server.url;
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((i) => i.stop()));
  });
  after(async () => {
    await env?.close();
  });

  /** The consumer's filter subjects, or undefined when it does not exist. */
  async function consumerFilters(stream: string, name: string): Promise<string[] | undefined> {
    try {
      const ci = await env.jsm.consumers.info(stream, name);
      return ci.config.filter_subjects ?? (ci.config.filter_subject ? [ci.config.filter_subject] : []);
    } catch {
      return undefined;
    }
  }

  /** Waits until every member that owns partitions has its consumer with exactly Go's filters. */
  async function settled(stream: string, group: string, members: string[], what: string): Promise<ElasticConsumerGroupConfig> {
    const config = await getElasticConsumerGroupConfig(env.js, stream, group);
    const goFilters = JSON.parse(await goDriver(url, "partition-filters", "elastic", stream, group, json(members))) as Record<string, string[]>;
    const wq = workQueueStreamName(stream, group);
    for (const m of members) {
      const expected = elasticGetPartitionFilters(config, m);
      assert.deepEqual(expected, goFilters[m], `${what}: ${m}'s filters, TypeScript vs Go`);
      if (expected.length === 0) continue;
      await waitFor(async () => json(await consumerFilters(wq, m)) === json(expected), 20_000, `${what}: consumer ${m} with filters ${json(expected)}`);
    }
    return config;
  }

  test("interop-go - membership edits both ways while Go and TypeScript members run: no member quits, partitions move as the assignment says", async () => {
    const stream = uniqueName("me");
    const prefix = stream;
    const group = "g";
    await env.jsm.streams.add({ name: stream, subjects: [`${prefix}.*`], storage: "file" });
    // Created by Go the way its cg CLI does (no partitioning filters: null, whole-subject hashing),
    // the value a TypeScript rewrite must keep byte for byte or every Go member quits.
    await goDriver(url, "create-elastic", stream, group, "4", "null", "0", "0");
    const go = track(new GoMember("go:m1", url, "elastic", stream, group, "m1"));
    const ts = track(await TsMember.start("ts:m2", env.js, "elastic", stream, group, "m2"));
    await go.started;
    const keys = keyNames(20);
    let batch = 0;

    /** Publishes 40 messages and checks each is handled once, by its partition's owner. */
    async function phase(
      what: string,
      config: ElasticConsumerGroupConfig,
      parked: { sent: { k: string; s: number }[]; from: { go: number; ts: number } } | undefined = undefined,
    ): Promise<void> {
      const from = parked?.from ?? { go: go.handled.length, ts: ts.handled.length };
      const alreadySent = parked?.sent ?? [];
      batch += 1;
      const sent = [...alreadySent, ...(await publishKeyed(env.js, prefix, keys, 2, batch * 100))];
      const handled = (): Handled[] => [...go.handled.slice(from.go), ...ts.handled.slice(from.ts)];
      try {
        await waitFor(() => missing(sent, handled()).length === 0, 20_000, `${what}: every message handled`);
      } catch (err) {
        const wq = workQueueStreamName(stream, group);
        const state = (await env.jsm.streams.info(wq)).state;
        const consumers = [];
        for await (const ci of env.jsm.consumers.list(wq)) consumers.push({ name: ci.name, filters: ci.config.filter_subjects, pending: ci.num_pending, ackPending: ci.num_ack_pending, delivered: ci.delivered });
        throw new Error(`${(err as Error).message}; missing ${missing(sent, handled()).slice(0, 8).join(", ")}; work queue ${json(state)}; consumers ${json(consumers)}; go ${json(go.events)} ${go.stderr}`);
      }
      const owners = partitionOwners(config);
      assert.deepEqual(misrouted(handled(), owners), [], `${what}: handled by a member that does not own the partition`);
      for (const h of handled()) assert.equal(h.partition, partitionOf(`${prefix}.${h.key}`, 4), `${what}: ${h.key} partition`);
      assert.ok(go.running, `${what}: the Go member exited: ${json(go.events)} ${go.stderr}`);
      assert.deepEqual(go.errors(), [], `${what}: the Go member reported an error`);
    }
    const alive = (): void => {
      assert.ok(go.running, `the Go member exited: ${json(go.events)} ${go.stderr}`);
      assert.deepEqual(go.errors(), []);
    };

    // 1. Go adds m1: the Go member takes every partition.
    await goDriver(url, "add", stream, group, json(["m1"]));
    await phase("Go add m1", await settled(stream, group, ["m1", "m2"], "Go add m1"));

    // 2. TypeScript adds m2: the partitions split between the Go and the TypeScript member.
    await addMembers(env.js, stream, group, ["m2"]);
    await phase("TS add m2", await settled(stream, group, ["m1", "m2"], "TS add m2"));

    // 3. Go sets mappings.
    await goDriver(url, "set-mappings", stream, group, json([{ member: "m1", partitions: [3] }, { member: "m2", partitions: [0, 1, 2] }]));
    await phase("Go set-mappings", await settled(stream, group, ["m1", "m2"], "Go set-mappings"));

    // 4. TypeScript deletes the mappings: nobody is a member, nothing is handled, nobody quits.
    await deleteMemberMappings(env.js, stream, group);
    const wq = workQueueStreamName(stream, group);
    await waitFor(async () => (await consumerFilters(wq, "m1")) === undefined && (await consumerFilters(wq, "m2")) === undefined, 10_000, "both members to drop their consumers");
    const idleFrom = go.handled.length + ts.handled.length;
    batch += 1;
    const parked = { sent: await publishKeyed(env.js, prefix, keys, 1, batch * 100), from: { go: go.handled.length, ts: ts.handled.length } };
    await sleep(1500); // absence can only be observed over time
    assert.equal(go.handled.length + ts.handled.length, idleFrom, "messages were handled while the group had no members");
    alive();

    // 5. Go adds both back: what waited in the work queue is handled by the new owners.
    await goDriver(url, "add", stream, group, json(["m2", "m1"]));
    await phase("Go add m1 m2", await settled(stream, group, ["m1", "m2"], "Go add m1 m2"), parked);

    // 6. TypeScript sets mappings over Go's members.
    await setMemberMappings(env.js, stream, group, [{ member: "m1", partitions: [0, 1, 2] }, { member: "m2", partitions: [3] }]);
    await phase("TS set-mappings", await settled(stream, group, ["m1", "m2"], "TS set-mappings"));

    // 7. Go deletes the mappings, TypeScript adds m2 alone, then m1; Go drops m2: the Go member has everything.
    await goDriver(url, "delete-mappings", stream, group);
    await addMembers(env.js, stream, group, ["m2"]);
    await phase("TS add m2 alone", await settled(stream, group, ["m1", "m2"], "TS add m2 alone"));
    await addMembers(env.js, stream, group, ["m1"]);
    await goDriver(url, "drop", stream, group, json(["m2"]));
    await phase("Go drop m2", await settled(stream, group, ["m1", "m2"], "Go drop m2"));

    // 8. TypeScript drops m1 and adds m2: the TypeScript member has everything.
    await deleteMembers(env.js, stream, group, ["m1"]);
    await addMembers(env.js, stream, group, ["m2"]);
    await phase("TS drop m1, add m2", await settled(stream, group, ["m1", "m2"], "TS drop m1, add m2"));

    alive();
    let tsClosed = false;
    void ts.instance.closed().then(() => (tsClosed = true));
    await sleep(0);
    assert.equal(tsClosed, false, "the TypeScript member stopped");
    assert.equal(await goDriver(url, "get-elastic", stream, group), '{"max_members":4,"partitioning_filters":null,"members":["m2"]}');
    await go.stop();
    assert.deepEqual(go.events.at(-1), { event: "stopped" });
    assert.equal((await go.exited).code, 0);
  });

  test("interop-go - what stops members stops Go and TypeScript members alike: an immutable change is an error, a deleted group a clean stop", async () => {
    const source = uniqueName("st");
    await env.jsm.streams.add({ name: source, subjects: [`${source}.*`], storage: "file" });
    // Elastic: a change to max_members (written raw, as no API can) stops both with Go's "bad change" error.
    await createElastic(env.js, { stream: source, group: "bad", maxMembers: 2, partitioningFilters: [{ filter: `${source}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, source, "bad", ["m1", "m2"]);
    const go = track(new GoMember("go:m1", url, "elastic", source, "bad", "m1"));
    await go.started;
    const ts = track(await TsMember.start("ts:m2", env.js, "elastic", source, "bad", "m2"));
    const kv = await new Kvm(env.js).open(ELASTIC_BUCKET);
    const raw = new TextDecoder().decode((await kv.get(`${source}.bad`))?.value);
    await kv.put(`${source}.bad`, raw.replace('"max_members":2', '"max_members":3'));
    const tsError = await ts.instance.closed();
    const goExit = await go.exited;
    assert.equal(goExit.code, 1);
    assert.match(go.errors()[0] ?? "", /watcher received a bad change in the configuration: max number of members, buffered messages, filter or partitioning wildcards changed/);
    assert.ok(isConsumerGroupError(tsError) && tsError.code === "CONFIG_IMMUTABLE", String(tsError));
    assert.match(tsError.message, /watcher received a bad change in the configuration: max number of members, buffered messages, filter or partitioning wildcards changed/);

    // Static: deleting the group (from Go) stops both cleanly, and each deletes its member's durable.
    const stream = uniqueName("sd");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], storage: "file", subject_transform: { src: `${stream}.*`, dest: `{{partition(2,1)}}.${stream}.{{wildcard(1)}}` } });
    await createStatic(env.js, { stream, group: "del", maxMembers: 2, members: ["m1", "m2"] });
    const goStatic = track(new GoMember("go:m1", url, "static", stream, "del", "m1"));
    await goStatic.started;
    const tsStatic = track(await TsMember.start("ts:m2", env.js, "static", stream, "del", "m2"));
    await goDriver(url, "delete-static", stream, "del");
    assert.equal(await tsStatic.instance.closed(), undefined);
    assert.equal((await goStatic.exited).code, 0);
    assert.deepEqual(goStatic.events.at(-1), { event: "done" });
    await waitFor(async () => (await consumerFilters(stream, "del-m1")) === undefined && (await consumerFilters(stream, "del-m2")) === undefined, 5000, "both durables deleted");
  });

  test("interop-go - a mapped static group with two filters cannot be consumed by either side (Go emits <p>.> once per filter; we mirror it)", async () => {
    const stream = uniqueName("dup");
    await env.jsm.streams.add({ name: stream, subjects: ["foo.*", "bar.*"], storage: "file", subject_transform: { src: "*.*", dest: "{{partition(2,2)}}.{{wildcard(1)}}.{{wildcard(2)}}" } });
    await goDriver(url, "create-static", stream, "g", "2", "null", json([{ member: "m1", partitions: [0, 1] }]), json(["foo.*", "bar.*"]));
    const go = new GoMember("go:m1", url, "static", stream, "g", "m1");
    await assert.rejects(go.started, /error creating our member's consumer: .*err_code=10138/);
    assert.equal((await go.exited).code, 1);
    await assert.rejects(TsMember.start("ts:m1", env.js, "static", stream, "g", "m1"), (err: unknown) => {
      assert.ok(isConsumerGroupError(err) && err.serverCode === 10138 && err.message.startsWith("error creating our member's consumer"), String(err));
      return true;
    });
  });

  for (const kind of ["static", "elastic"] as const) {
    test(`interop-go - mixed ${kind} group: Go member m1 and TypeScript member m2 under keyed load each handle exactly their partitions, nothing lost, per-key order`, async (t) => {
      const stream = uniqueName(kind === "static" ? "ms" : "mel");
      const prefix = stream;
      const group = "mixed";
      const partitions = 6;
      if (kind === "static") {
        await env.jsm.streams.add({
          name: stream,
          subjects: [`${prefix}.*`],
          storage: "file",
          subject_transform: { src: `${prefix}.*`, dest: `{{partition(${partitions},1)}}.${prefix}.{{wildcard(1)}}` },
        });
        await createStatic(env.js, { stream, group, maxMembers: partitions, members: ["m1", "m2"] }); // TypeScript creates the static group,
      } else {
        await env.jsm.streams.add({ name: stream, subjects: [`${prefix}.*`], storage: "file" });
        await goDriver(url, "create-elastic", stream, group, String(partitions), json([{ filter: `${prefix}.*`, partitioning_wildcards: [1] }]), "-1", "-1"); // Go the elastic one
        await createElastic(env.js, { stream, group, maxMembers: partitions, partitioningFilters: [{ filter: `${prefix}.*`, partitioning_wildcards: [1] }], maxBufferedMsgs: -1, maxBufferedBytes: -1 });
        await addMembers(env.js, stream, group, ["m1", "m2"]);
      }
      // AckWait 5 s (Go's default) leaves room for a loaded CI machine: no redelivery is expected here.
      const go = track(new GoMember("go:m1", url, kind, stream, group, "m1", { maxAckPending: 20, ackWaitMs: 5000 }));
      await go.started;
      const ts = track(await TsMember.start("ts:m2", env.js, kind, stream, group, "m2", { maxAckPending: 20, ackWaitMs: 5000 }));

      const started = Date.now();
      const sent = await publishKeyed(env.js, prefix, keyNames(50), 20);
      assert.equal(sent.length, 1000);
      const all = (): Handled[] => byTime(go.handled, ts.handled);
      await waitFor(() => distinct(all()) === 1000, 45_000, `1000 distinct messages handled (have ${distinct(all())}: go ${go.handled.length}, ts ${ts.handled.length})`);

      const config = kind === "static" ? await getStaticConsumerGroupConfig(env.js, stream, group) : await getElasticConsumerGroupConfig(env.js, stream, group);
      const owners = partitionOwners(config);
      const goPartitions = partitionsOfFilters((JSON.parse(await goDriver(url, "partition-filters", kind, stream, group, json(["m1"]))) as Record<string, string[]>)["m1"] ?? []);
      assert.deepEqual(goPartitions, [0, 1, 2], "Go's view of m1's partitions");
      assert.deepEqual(owners, ["m1", "m1", "m1", "m2", "m2", "m2"]);

      assert.deepEqual(missing(sent, all()), [], "nothing lost");
      assert.deepEqual(misrouted(all(), owners), [], "each member handles exactly its partitions");
      for (const h of all()) {
        assert.equal(h.partition, partitionOf(`${prefix}.${h.key}`, partitions, { filter: `${prefix}.*`, wildcards: [1] }), `${h.key}: the server's partition`);
        assert.equal(h.subject, `${prefix}.${h.key}`, "the handler's subject has the partition token stripped, on both sides");
        assert.equal(h.ackError, undefined, `${h.who}: ack failed for ${h.key}/${h.s}`);
      }
      const keyOwners = new Map<string, Set<string>>();
      for (const h of all()) keyOwners.set(h.key, (keyOwners.get(h.key) ?? new Set()).add(h.who));
      assert.deepEqual([...keyOwners].filter(([, who]) => who.size > 1), [], "every key is handled by one member only");
      assert.ok(go.handled.length > 0 && ts.handled.length > 0, `both handled messages (go ${go.handled.length}, ts ${ts.handled.length})`);
      assert.deepEqual(orderViolations(go.handled), [], "per-key order in the Go member");
      assert.deepEqual(orderViolations(ts.handled), [], "per-key order in the TypeScript member");
      assert.equal(all().length, 1000, "no redeliveries without a rebalance");
      assert.deepEqual(go.errors(), []);
      t.diagnostic(`1000 messages in ${Date.now() - started} ms: Go m1 handled ${go.handled.length}, TypeScript m2 ${ts.handled.length}`);
    });
  }

  for (const [kind, first] of [
    ["static", "go"],
    ["elastic", "ts"],
  ] as const) {
    test(`interop-go - one ${kind} member, two languages (${first === "go" ? "Go" : "TypeScript"} instance first): one shared consumer, step-down moves the pin, the survivor takes over after a crash`, async (t) => {
      const stream = uniqueName(kind === "static" ? "os" : "oe");
      const prefix = stream;
      const group = "one";
      if (kind === "static") {
        await env.jsm.streams.add({
          name: stream,
          subjects: [`${prefix}.*`],
          storage: "file",
          subject_transform: { src: `${prefix}.*`, dest: `{{partition(2,1)}}.${prefix}.{{wildcard(1)}}` },
        });
        await goDriver(url, "create-static", stream, group, "2", json(["m1"]), "null", "null");
      } else {
        await env.jsm.streams.add({ name: stream, subjects: [`${prefix}.*`], storage: "file" });
        await createElastic(env.js, { stream, group, maxMembers: 2, partitioningFilters: [{ filter: `${prefix}.*`, partitioning_wildcards: [1] }] });
        await addMembers(env.js, stream, group, ["m1"]);
      }
      const consumerStream = kind === "static" ? stream : workQueueStreamName(stream, group);
      const consumerName = kind === "static" ? `${group}-m1` : "m1";
      // The TypeScript instance gets its own connection, so that closing it is a crash.
      const tsClient = await env.connect();
      // Go's cg template on both sides: explicit acks, max_ack_pending 1, AckWait 2 s.
      const startTs = (): Promise<TsMember> => TsMember.start("ts:m1", tsClient.js, kind, stream, group, "m1");
      const startGo = async (): Promise<GoMember> => {
        const g = new GoMember("go:m1", url, kind, stream, group, "m1");
        await g.started;
        return g;
      };
      let ts: TsMember;
      let go: GoMember;
      if (first === "go") {
        go = track(await startGo());
        ts = track(await startTs()); // a static create of a different config would fail with 10148 here
      } else {
        ts = track(await startTs());
        await waitFor(() => consumerFilters(consumerStream, consumerName), 10_000, "the TypeScript instance's consumer");
        go = track(await startGo());
      }
      const created = (await env.jsm.consumers.info(consumerStream, consumerName)).created;
      const instances = { "go:m1": go, "ts:m1": ts } as const;
      const keys = keyNames(4);
      let batch = 0;

      /** Publishes 8 messages and returns the instance that handled them (all of them, one instance). */
      async function handledBy(what: string): Promise<"go:m1" | "ts:m1"> {
        const from = { go: go.handled.length, ts: ts.handled.length };
        batch += 1;
        const sent = await publishKeyed(env.js, prefix, keys, 2, batch * 100);
        const handled = (): Handled[] => [...go.handled.slice(from.go), ...ts.handled.slice(from.ts)];
        await waitFor(() => missing(sent, handled()).length === 0, 20_000, `${what}: all 8 handled`);
        const who = [...new Set(handled().map((h) => h.who))];
        assert.equal(who.length, 1, `${what}: one pinned instance handles everything, got ${json(who)}`);
        assert.deepEqual(handled().filter((h) => h.ackError), [], `${what}: acks failed`);
        return who[0] as "go:m1" | "ts:m1";
      }
      const other = (who: "go:m1" | "ts:m1"): "go:m1" | "ts:m1" => (who === "go:m1" ? "ts:m1" : "go:m1");
      const stepDown = (): Promise<void> => (kind === "static" ? staticMemberStepDown : elasticMemberStepDown)(env.js, stream, group, "m1");

      let pinned = await handledBy("before step-down");
      // Step-down (from TypeScript) moves the pin to the other instance, whichever language it
      // is; the last one leaves the pin where this test crashes it: Go (static), TypeScript (elastic).
      const victim = kind === "static" ? "go:m1" : "ts:m1";
      for (let i = 0; i < 2 || pinned !== victim; i++) {
        await stepDown();
        const next = await handledBy(`after step-down ${i + 1}`);
        assert.equal(next, other(pinned), `step-down ${i + 1}: the pin stays on ${pinned}`);
        pinned = next;
      }
      // Both instances used the one consumer all along: never recreated (no 10148, no flapping).
      assert.equal((await env.jsm.consumers.info(consumerStream, consumerName)).created, created, "the shared consumer was recreated");
      assert.doesNotMatch(go.stderr, /error trying to create consumer/);
      assert.deepEqual(go.errors(), []);

      // Crash the pinned instance: SIGKILL the Go process, or close the TypeScript connection.
      const crashed = victim;
      if (crashed === "go:m1") await go.kill();
      else await tsClient.nc.close();
      const crashAt = Date.now();
      const survivor = await handledBy(`after ${crashed} crashed`);
      assert.equal(survivor, other(crashed));
      const tookOverMs = Math.min(...instances[survivor].handled.filter((h) => h.at >= crashAt).map((h) => h.at)) - crashAt;
      assert.ok(tookOverMs < 10_000, `${survivor} took over after ${tookOverMs} ms`);
      t.diagnostic(`${crashed} crashed (${crashed === "go:m1" ? "SIGKILL" : "connection closed"}); ${survivor} handled its first message ${tookOverMs} ms later`);
    });
  }
});
