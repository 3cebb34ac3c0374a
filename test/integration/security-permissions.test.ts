/**
 * Least privilege: users restricted to exactly the subjects docs/permissions.md
 * lists (test/helpers/security-perms.ts builds them).
 *
 * - A member with the member list consumes (static and elastic, the elastic one
 *   through a private inbox prefix and across a rebalance), and stops with an unpin,
 *   without a single permission violation on its connection.
 * - A member cannot change its group: a KV put to the config key is refused, and
 *   addMembers, createStatic and deleteStatic fail with PERMISSION_DENIED naming the subject.
 * - Where a permission is missing, the error or status event names the subject and
 *   the operation: no UNPIN (step-down, and stop), no MSG.NEXT (pulls), no ACK,
 *   no inbox subscription, no KV watch.
 * - An admin with the admin list runs every admin operation (creating the buckets
 *   in a fresh account too), and `cg` shows the missing permission of a member.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import {
  ELASTIC_BUCKET,
  STATIC_BUCKET,
  addMembers,
  createElastic,
  createStatic,
  deleteElastic,
  deleteMemberMappings,
  deleteMembers,
  deleteStatic,
  describeGroup,
  elasticConsume,
  elasticIsInMembershipAndActive,
  elasticMemberStepDown,
  getElasticConsumerGroupConfig,
  getStaticConsumerGroupConfig,
  listParkedKeys,
  listElasticActiveMembers,
  listElasticConsumerGroups,
  listStaticActiveMembers,
  listStaticConsumerGroups,
  partitionOf,
  setMemberMappings,
  staticConsume,
  staticMemberStepDown,
  type ConsumerGroupMember,
  type ConsumerGroupMessage,
  type MemberStatus,
} from "../../src/index.js";
import { NatsServer, waitFor, type Client } from "../helpers/nats.js";
import { killAllCg, runCg } from "../helpers/cli-run.js";
import { recordStatus } from "../helpers/static-fixtures.js";
import { sleep } from "../helpers/load-harness.js";
import { assertTypedError, thrownBy } from "../helpers/security-state.js";
import { adminPermissions, autoMemberPermissions, memberPermissions, userEntry, withoutPermission, type Permissions } from "../helpers/security-perms.js";

const S = "orders";
const G = "billing";
const E = "events";
const EG = "shipping";
const ACK_WAIT = 2_000_000_000;
const TIMEOUT = 120_000;

/** The static members: each owns one of the 4 partitions; each test uses its own. */
const STATIC_MEMBERS = ["m1", "m2", "m3", "m4"];
const staticPerms = (member: string): Permissions => memberPermissions({ kind: "static", stream: S, group: G, member });
const ELASTIC_INBOX = "_INBOX_em1";
/** The elastic group whose member may not read the work queue's messages. */
const NODIRECT_GROUP = "audit";

/** The elastic group whose member may not use the attempts bucket. */
const NOATTEMPTS_GROUP = "billing";
/** The elastic group an auto member joins by itself. */
const AUTO_GROUP = "autog";
/** Users of the MAIN account: root (everything), then members restricted to the documented list, some with one subject removed. */
const MAIN_USERS: Record<string, Permissions | undefined> = {
  root: undefined,
  smember: staticPerms("m1"),
  emember: memberPermissions({ kind: "elastic", stream: E, group: EG, member: "m1" }, ELASTIC_INBOX),
  emember2: memberPermissions({ kind: "elastic", stream: E, group: EG, member: "m2" }),
  nounpin: withoutPermission(staticPerms("m2"), (s) => s.startsWith("$JS.API.CONSUMER.UNPIN.")),
  nonext: withoutPermission(staticPerms("m3"), (s) => s.startsWith("$JS.API.CONSUMER.MSG.NEXT.")),
  noack: withoutPermission(staticPerms("m4"), (s) => s.startsWith("$JS.ACK.")),
  noinbox: { ...staticPerms("m1"), subscribe: ["not.an.inbox"] },
  nowatch: withoutPermission(staticPerms("m1"), (s) => s.startsWith(`$JS.API.CONSUMER.CREATE.KV_`)),
  noattempts: withoutPermission(memberPermissions({ kind: "elastic", stream: E, group: NOATTEMPTS_GROUP, member: "m1" }), (s) => s.includes("elastic-consumer-group-attempts")),
  automember: autoMemberPermissions({ stream: E, group: AUTO_GROUP, member: "a1" }),
  nodirect: withoutPermission(memberPermissions({ kind: "elastic", stream: E, group: NODIRECT_GROUP, member: "m1" }), (s) => s === `$JS.API.STREAM.MSG.GET.${E}-${NODIRECT_GROUP}`),
};
/** Users of the ADM account (no bucket yet): root, and admins restricted to the documented admin list. */
const ADM_USERS: Record<string, Permissions | undefined> = {
  root2: undefined,
  sadmin: adminPermissions({ kind: "static", stream: "S2", group: "GA", members: ["a1", "a2"] }),
  eadmin: adminPermissions({ kind: "elastic", stream: "E2", group: "GE", members: ["e1", "e2"] }),
};

const users = (table: Record<string, Permissions | undefined>): string =>
  Object.entries(table)
    .map(([name, perms]) => `      ${userEntry(name, `${name}-pw`, perms)}`)
    .join(",\n");

/** A key of the static stream per partition, so that every member has messages. */
function keyFor(partition: number, partitions = 4): string {
  for (let i = 0; ; i++) if (partitionOf(`${S}.k${i}`, partitions, { filter: `${S}.*`, wildcards: [1] }) === partition) return `k${i}`;
}

/** Every permission violation a connection reports on its status, from now on. */
function violations(nc: NatsConnection): { list: string[]; stop(): void } {
  const list: string[] = [];
  const statuses = nc.status();
  void (async () => {
    for await (const s of statuses) if (s.type === "error") list.push(String((s as { error?: unknown }).error));
  })();
  return { list, stop: () => (statuses as unknown as { stop(): void }).stop() };
}

const pinnedOf = async (c: Client, stream: string, consumer: string): Promise<string | undefined> => {
  const info = (await c.jsm.consumers.info(stream, consumer)) as unknown as { priority_groups?: { group: string; pinned_client_id?: string }[] };
  return info.priority_groups?.find((g) => g.group === "PCG")?.pinned_client_id || undefined;
};

/** Resolves with the reason of the next "unpinned" advisory of a consumer ("admin" after an unpin request). */
async function unpinAdvisory(c: Client, stream: string, consumer: string): Promise<{ reason: Promise<string> }> {
  const sub = c.nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.${stream}.${consumer}`, { max: 1 });
  await c.nc.flush();
  const reason = (async () => {
    for await (const m of sub) return m.json<{ reason?: string }>().reason ?? "";
    return "";
  })();
  return { reason };
}

const consumerErrors = (events: MemberStatus[]): string[] => events.flatMap((e) => (e.type === "consumer_error" ? [`${e.error.code}: ${e.error.message}`] : []));

describe("security - least privilege", () => {
  let server: NatsServer;
  const clients: Client[] = [];
  const running: ConsumerGroupMember[] = [];
  let root: Client;
  let root2: Client;
  /** Connects as a user. The manager skips nats.js's `$JS.API.INFO` check, which the library does not need. */
  const as = async (user: string, options: { inboxPrefix?: string } = {}): Promise<Client> => {
    const nc = await connect({ servers: server.url, user, pass: `${user}-pw`, ...options });
    const c: Client = { nc, js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }) };
    clients.push(c);
    return c;
  };

  before(async () => {
    server = await NatsServer.start({
      extraConfig: [
        "accounts {",
        "  MAIN: { jetstream: enabled, users: [",
        users(MAIN_USERS),
        "  ] }",
        "  ADM: { jetstream: enabled, users: [",
        users(ADM_USERS),
        "  ] }",
        "}",
      ].join("\n"),
    });
    root = await as("root");
    root2 = await as("root2");
    await root.jsm.streams.add({ name: S, subjects: [`${S}.*`], subject_transform: { src: `${S}.*`, dest: `{{partition(4,1)}}.${S}.{{wildcard(1)}}` } });
    await root.jsm.streams.add({ name: E, subjects: [`${E}.>`] });
    await createStatic(root.js, { stream: S, group: G, maxMembers: 4, members: STATIC_MEMBERS });
    await createElastic(root.js, { stream: E, group: EG, maxMembers: 4, partitioningFilters: [{ filter: `${E}.*`, partitioning_wildcards: [1] }] });
    await addMembers(root.js, E, EG, ["m1"]);
    await root2.jsm.streams.add({ name: "S2", subjects: ["S2.*"], subject_transform: { src: "S2.*", dest: "{{partition(2,1)}}.S2.{{wildcard(1)}}" } });
    await root2.jsm.streams.add({ name: "E2", subjects: ["E2.>"] });
  });

  after(async () => {
    await killAllCg();
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await server?.stop();
  });

  test("security - a static member with only the member permissions consumes, and stops with an unpin", { timeout: TIMEOUT }, async () => {
    const member = await as("smember");
    const seen = violations(member.nc);
    const handled: string[] = [];
    const m1 = await staticConsume(member.js, { stream: S, group: G, member: "m1", consumerConfig: { ack_wait: ACK_WAIT }, handler: (m) => void handled.push(m.subject) });
    running.push(m1);
    const status = recordStatus(m1);
    const key = keyFor(m1.partitions()[0] ?? 0);
    for (let i = 0; i < 5; i++) await root.js.publish(`${S}.${key}`, String(i));
    await waitFor(() => handled.length >= 5, 60_000, "m1 to handle its 5 messages");
    await waitFor(async () => (await pinnedOf(root, S, `${G}-m1`)) !== undefined, 30_000, "m1 to be pinned");
    const unpinned = await unpinAdvisory(root, S, `${G}-m1`);
    await m1.stop();
    assert.equal(await unpinned.reason, "admin", "stop() unpinned the member's consumer");
    assert.deepEqual(consumerErrors(status.events), []);
    assert.deepEqual(status.events.filter((e) => e.type === "attempts_unrecorded"), [], "the attempt was counted");
    assert.deepEqual(seen.list, [], "no permission violation on the member's connection");
    seen.stop();
  });

  test("security - an elastic member with only the member permissions (private inbox prefix) consumes across a rebalance and stops with an unpin", { timeout: TIMEOUT }, async () => {
    const member = await as("emember", { inboxPrefix: ELASTIC_INBOX });
    const seen = violations(member.nc);
    const handled: string[] = [];
    let failedOnce = false;
    const m1 = await elasticConsume(member.js, {
      stream: E,
      group: EG,
      member: "m1",
      consumerConfig: { ack_wait: ACK_WAIT },
      // One failure: its attempt is counted in the attempts bucket (created here), then deleted.
      retry: { maxDeliver: 3, backoffMs: 50 },
      handler: (m) => {
        if (m.subject === `${E}.k3` && !failedOnce) {
          failedOnce = true;
          throw new Error("fails once");
        }
        handled.push(m.subject);
      },
    });
    running.push(m1);
    const status = recordStatus(m1);
    for (let i = 0; i < 8; i++) await root.js.publish(`${E}.k${i}`, String(i));
    await waitFor(() => handled.length >= 8, 60_000, "m1 (every partition) to handle 8 messages");
    const failure = status.events.find((e) => e.type === "handler_error");
    assert.ok(failure?.type === "handler_error", "k3 failed once");
    const attempts = await new Kvm(root.js).open("elastic-consumer-group-attempts");
    // Removed outright (the bucket this library makes allows message deletes): no entry, not even a delete marker.
    await waitFor(async () => (await attempts.get(`${E}.${EG}.${failure.seq}`)) === null, 10_000, "the failed message's attempt record deleted once it succeeded");
    // A membership change: m1 gives up partitions, deletes and recreates its consumer.
    await addMembers(root.js, E, EG, ["m2"]);
    await status.next("partitions_changed", 30_000);
    await status.next("joined", 60_000, status.events.findIndex((e) => e.type === "partitions_changed"));
    const mine = new Set(m1.partitions());
    const keys = Array.from({ length: 40 }, (_, i) => `${E}.r${i}`).filter((s) => mine.has(partitionOf(s, 4, { filter: `${E}.*`, wildcards: [1] })));
    for (const s of keys) await root.js.publish(s, "after");
    await waitFor(() => keys.every((s) => handled.includes(s)), 60_000, "m1 to handle its messages after the rebalance");
    await waitFor(async () => (await pinnedOf(root, `${E}-${EG}`, "m1")) !== undefined, 30_000, "m1 to be pinned");
    const unpinned = await unpinAdvisory(root, `${E}-${EG}`, "m1");
    await m1.stop();
    assert.equal(await unpinned.reason, "admin", "stop() unpinned the member's consumer");
    assert.deepEqual(consumerErrors(status.events), []);
    assert.deepEqual(seen.list, [], "no permission violation on the member's connection");
    seen.stop();
  });

  test("security - an elastic member without STREAM.MSG.GET on its work queue consumes, and says once that the skip check is off", { timeout: TIMEOUT }, async () => {
    await createElastic(root.js, { stream: E, group: NODIRECT_GROUP, maxMembers: 2, partitioningFilters: [{ filter: `${E}.*`, partitioning_wildcards: [1] }] });
    await addMembers(root.js, E, NODIRECT_GROUP, ["m1"]);
    const member = await as("nodirect");
    const handled: string[] = [];
    const m1 = await elasticConsume(member.js, { stream: E, group: NODIRECT_GROUP, member: "m1", consumerConfig: { ack_wait: ACK_WAIT }, handler: (m) => void handled.push(m.subject) });
    running.push(m1);
    const status = recordStatus(m1);
    for (let i = 0; i < 8; i++) await root.js.publish(`${E}.d${i}`, String(i));
    await waitFor(() => handled.length >= 8, 60_000, "m1 to handle 8 messages");
    await waitFor(() => consumerErrors(status.events).length > 0, 30_000, "the skip check to report its missing permission");
    await sleep(3000); // more holds and idle looks: still said once
    for (let i = 0; i < 4; i++) await root.js.publish(`${E}.e${i}`, String(i));
    await waitFor(() => handled.length >= 12, 60_000, "m1 to go on handling");
    const errors = consumerErrors(status.events);
    assert.equal(errors.length, 1, `one report (${errors.join(" | ")})`);
    assert.match(errors[0] ?? "", /^PERMISSION_DENIED: the work queue's messages cannot be read .*\$JS\.API\.STREAM\.MSG\.GET/);
    await m1.stop();
  });

  test("security - an elastic member without the attempts bucket retries and dead-letters by the delivery count, and names the subject to grant", { timeout: TIMEOUT }, async () => {
    await createElastic(root.js, { stream: E, group: NOATTEMPTS_GROUP, maxMembers: 2, partitioningFilters: [{ filter: `${E}.*`, partitioning_wildcards: [1] }] });
    await addMembers(root.js, E, NOATTEMPTS_GROUP, ["m1"]);
    const member = await as("noattempts");
    const handled: string[] = [];
    const attempts: string[] = [];
    const m1 = await elasticConsume(member.js, {
      stream: E,
      group: NOATTEMPTS_GROUP,
      member: "m1",
      consumerConfig: { ack_wait: ACK_WAIT },
      retry: { maxDeliver: 2, backoffMs: 50 },
      handler: (m) => {
        if (m.subject === `${E}.n1` && attempts.push(m.subject) <= 1) throw new Error("fails once");
        handled.push(m.subject);
      },
    });
    running.push(m1);
    const status = recordStatus(m1);
    for (let i = 0; i < 4; i++) await root.js.publish(`${E}.n${i}`, String(i));
    // (The group's work queue sources the stream from its start: the earlier tests' messages come first.)
    await waitFor(() => [0, 1, 2, 3].every((i) => handled.includes(`${E}.n${i}`)), 60_000, "m1 to handle its 4 messages (one after a retry)");
    const unrecorded = status.events.flatMap((e) => (e.type === "attempts_unrecorded" ? [e.error] : []));
    assert.equal(unrecorded.length, 1, "one report for the one failed attempt");
    assertTypedError(unrecorded[0], "PERMISSION_DENIED", /\$JS\.API\.STREAM\.INFO\.KV_elastic-consumer-group-attempts/, /attempts bucket/, /docs\/permissions\.md/);
    assert.equal(attempts.length, 2, "retried once, in place");
    await m1.stop();
  });

  test("security - an auto member with the member and auto-join lists creates the lease bucket, joins, consumes and leaves, without a violation (no $JS.API.INFO)", { timeout: TIMEOUT }, async () => {
    await createElastic(root.js, { stream: E, group: AUTO_GROUP, maxMembers: 2, partitioningFilters: [{ filter: `${E}.*`, partitioning_wildcards: [1] }] });
    const member = await as("automember");
    const seen = violations(member.nc);
    const handled: string[] = [];
    const a1 = await elasticConsume(member.js, { stream: E, group: AUTO_GROUP, member: "a1", autoJoin: true, consumerConfig: { ack_wait: ACK_WAIT }, handler: (m) => void handled.push(m.subject) });
    running.push(a1);
    assert.ok((await root.jsm.streams.info("KV_elastic-consumer-group-leases")).config.allow_msg_ttl, "the lease bucket was made, with per-message TTLs");
    await waitFor(async () => (await getElasticConsumerGroupConfig(root.js, E, AUTO_GROUP)).members?.includes("a1"), 30_000, "a1 to write itself into the membership");
    for (let i = 0; i < 4; i++) await root.js.publish(`${E}.auto${i}`, String(i));
    await waitFor(() => [0, 1, 2, 3].every((i) => handled.includes(`${E}.auto${i}`)), 60_000, "a1 to handle its 4 messages");
    await a1.stop();
    assert.deepEqual((await getElasticConsumerGroupConfig(root.js, E, AUTO_GROUP)).members ?? [], [], "its stop wrote its leave");
    assert.deepEqual(seen.list, [], "no permission violation on the auto member's connection");
    seen.stop();
  });

  test("security - asking for blocked keys without publish permission on the presence subject: PERMISSION_DENIED naming it", { timeout: TIMEOUT }, async () => {
    const member = await as("emember2");
    const err = await thrownBy(() => listParkedKeys(member.nc, E, EG, { waitMs: 500 }));
    assertTypedError(err, "PERMISSION_DENIED", new RegExp(`\\$PCG\\.presence\\.${E}\\.${EG}`), /grant publish permission/);
  });

  test("security - a member cannot modify its group: a KV put is refused and admin calls fail with PERMISSION_DENIED naming the subject", { timeout: TIMEOUT }, async () => {
    const smember = await as("smember");
    const emember = await as("emember", { inboxPrefix: ELASTIC_INBOX });
    const staticBefore = await getStaticConsumerGroupConfig(root.js, S, G);
    const elasticBefore = await getElasticConsumerGroupConfig(root.js, E, EG);

    // The config itself can be read (members follow it) but not written.
    assert.deepEqual(await getStaticConsumerGroupConfig(smember.js, S, G), staticBefore);
    const kv = await new Kvm(smember.js).open(STATIC_BUCKET);
    await assert.rejects(kv.put(`${S}.${G}`, '{"max_members":1}'), (err: Error) => {
      assert.match(String(err.message), new RegExp(`Permissions Violation for Publish to "\\$KV\\.${STATIC_BUCKET}\\.${S}\\.${G}"`));
      return true;
    });

    const kvSubject = (bucket: string, stream: string, group: string): RegExp =>
      new RegExp(`no permission to publish to "\\$KV\\.${bucket}\\.${stream}\\.${group}"; grant it publish permission on that subject`);
    assertTypedError(await thrownBy(() => addMembers(emember.js, E, EG, ["m9"])), "PERMISSION_DENIED", kvSubject(ELASTIC_BUCKET, E, EG), /putting the elastic consumer group's config/, /docs\/permissions\.md/);
    assertTypedError(await thrownBy(() => deleteMembers(emember.js, E, EG, ["m1"])), "PERMISSION_DENIED", kvSubject(ELASTIC_BUCKET, E, EG));
    assertTypedError(await thrownBy(() => setMemberMappings(emember.js, E, EG, [{ member: "m1", partitions: [0, 1, 2, 3] }])), "PERMISSION_DENIED", kvSubject(ELASTIC_BUCKET, E, EG));
    assertTypedError(await thrownBy(() => deleteStatic(smember.js, S, G)), "PERMISSION_DENIED", kvSubject(STATIC_BUCKET, S, G));
    // (refused at the read already: the member may read its own group's key only)
    assertTypedError(
      await thrownBy(() => createStatic(smember.js, { stream: S, group: "rogue", maxMembers: 4, members: ["x"] })),
      "PERMISSION_DENIED",
      /no permission to publish to "\$(KV|JS\.API\.DIRECT\.GET\.KV_static-consumer-groups\.\$KV)\.static-consumer-groups\.orders\.rogue"/,
    );
    assertTypedError(await thrownBy(() => deleteElastic(emember.js, E, EG)), "PERMISSION_DENIED", kvSubject(ELASTIC_BUCKET, E, EG));

    assert.deepEqual(await getStaticConsumerGroupConfig(root.js, S, G), staticBefore, "the static config is unchanged");
    assert.deepEqual(await getElasticConsumerGroupConfig(root.js, E, EG), elasticBefore, "the elastic config is unchanged");
    await root.jsm.streams.info(`${E}-${EG}`); // the work-queue stream is still there
  });

  test("security - without UNPIN: step-down fails naming $JS.API.CONSUMER.UNPIN.<stream>.<consumer>, and stop() reports it", { timeout: TIMEOUT }, async () => {
    const member = await as("nounpin");
    const unpin = /no permission to publish to "\$JS\.API\.CONSUMER\.UNPIN\.orders\.billing-m2"; grant it publish permission on that subject/;
    assertTypedError(await thrownBy(() => staticMemberStepDown(member.js, S, G, "m2")), "PERMISSION_DENIED", unpin, /unpin/);

    const handled: string[] = [];
    const m2 = await staticConsume(member.js, { stream: S, group: G, member: "m2", consumerConfig: { ack_wait: ACK_WAIT }, handler: (m) => void handled.push(m.subject) });
    running.push(m2);
    const status = recordStatus(m2);
    await root.js.publish(`${S}.${keyFor(m2.partitions()[0] ?? 0)}`, "x");
    await waitFor(() => handled.length >= 1, 60_000, "m2 to handle a message");
    await waitFor(async () => (await pinnedOf(root, S, `${G}-m2`)) !== undefined, 30_000, "m2 to be pinned");
    await m2.stop();
    const reported = status.events.find((e) => e.type === "consumer_error");
    assert.ok(reported?.type === "consumer_error", `stop() reported the missing permission (events: ${status.events.map((e) => e.type).join(", ")})`);
    assertTypedError(reported.error, "PERMISSION_DENIED", unpin, /on stop/);
  });

  test("security - without MSG.NEXT: the member reports which subject it may not publish its pulls to", { timeout: TIMEOUT }, async () => {
    const member = await as("nonext");
    const onError: unknown[] = [];
    const m3 = await staticConsume(member.js, { stream: S, group: G, member: "m3", consumerConfig: { ack_wait: ACK_WAIT }, handler: () => undefined, onError: (e) => void onError.push(e) });
    running.push(m3);
    const status = recordStatus(m3);
    const event = await status.next("consumer_error", 30_000);
    assertTypedError(event.error, "PERMISSION_DENIED", /pulling messages from "billing-m3" \(member "m3"\)/, /no permission to publish to "\$JS\.API\.CONSUMER\.MSG\.NEXT\.orders\.billing-m3"/);
    assert.ok(onError.some((e) => e === event.error), "onError got it too");
    await m3.stop();
  });

  test("security - without ACK: the member names $JS.ACK.<stream>.<consumer>.> and the message is redelivered, not lost", { timeout: TIMEOUT }, async () => {
    const member = await as("noack");
    const deliveries: number[] = [];
    const m4 = await staticConsume(member.js, {
      stream: S,
      group: G,
      member: "m4",
      consumerConfig: { ack_wait: ACK_WAIT },
      handler: (m: ConsumerGroupMessage) => void deliveries.push(m.info.deliveryCount),
    });
    running.push(m4);
    const status = recordStatus(m4);
    await root.js.publish(`${S}.${keyFor(m4.partitions()[0] ?? 0)}`, "x");
    const event = await status.next("consumer_error", 60_000);
    assertTypedError(
      event.error,
      "PERMISSION_DENIED",
      /acknowledging messages of "billing-m4" \(member "m4"\), which the server will redeliver/,
      /no permission to publish to "\$JS\.ACK\.orders\.billing-m4\.[^"]+"; grant it publish permission on "\$JS\.ACK\.orders\.billing-m4\.>"/,
    );
    // The server keeps redelivering it (the instance settles a redelivery of a message it handled
    // without handling it twice): it stays pending until the permission is granted, never lost.
    await waitFor(
      async () => {
        const ci = await root.jsm.consumers.info(S, `${G}-m4`);
        return ci.num_ack_pending === 1 && ci.num_redelivered >= 1;
      },
      60_000,
      "the unacked message to be redelivered",
    );
    assert.deepEqual(deliveries, [1], "handled once");
    assert.equal(status.events.filter((e) => e.type === "consumer_error").length, 1, "reported once, not once per message");
    await m4.stop();
  });

  test("security - without an inbox subscription: consume fails naming the inbox and suggesting <prefix>.>", { timeout: TIMEOUT }, async () => {
    const member = await as("noinbox");
    const err = await thrownBy(() => staticConsume(member.js, { stream: S, group: G, member: "m1", handler: () => undefined }));
    assertTypedError(err, "PERMISSION_DENIED", /no permission to subscribe to "_INBOX\.[^"]+"; grant it subscribe permission on "_INBOX\.>"/);
  });

  test("security - without the KV watch: consume fails naming the consumer-create subject of the config key", { timeout: TIMEOUT }, async () => {
    const member = await as("nowatch");
    const seen = violations(member.nc);
    const before = (await root.jsm.streams.info(S)).state.consumer_count;
    const err = await thrownBy(() => staticConsume(member.js, { stream: S, group: G, member: "m1", handler: () => undefined }));
    assertTypedError(
      err,
      "PERMISSION_DENIED",
      /starting the watch of the static consumer group's config "orders\.billing"/,
      /no permission to publish to "\$JS\.API\.CONSUMER\.CREATE\.KV_static-consumer-groups\.oc_[^"]+\.\$KV\.static-consumer-groups\.orders\.billing"/,
      /grant it publish permission on "\$JS\.API\.CONSUMER\.CREATE\.KV_static-consumer-groups\.\*\.\$KV\.static-consumer-groups\.orders\.billing"/,
    );
    assert.equal((await root.jsm.streams.info(S)).state.consumer_count, before, "no consumer was created");
    await waitFor(() => seen.list.length > 0, 10_000, "the connection to report the violation too");
    assert.match(seen.list[0] ?? "", /Permissions Violation for Publish to "\$JS\.API\.CONSUMER\.CREATE\.KV_static-consumer-groups\./);
    seen.stop();
  });

  test("security - an admin with only the admin permissions runs every static operation, buckets included", { timeout: TIMEOUT }, async () => {
    const admin = await as("sadmin");
    const seen = violations(admin.nc);
    const { js } = admin;
    await createStatic(js, { stream: "S2", group: "GA", maxMembers: 2, members: ["a1", "a2"] });
    assert.deepEqual(await getStaticConsumerGroupConfig(js, "S2", "GA"), { max_members: 2, members: ["a1", "a2"] });
    assert.deepEqual(await listStaticConsumerGroups(js, "S2"), ["GA"]);
    const a1 = await staticConsume(root2.js, { stream: "S2", group: "GA", member: "a1", consumerConfig: { ack_wait: ACK_WAIT }, handler: () => undefined });
    running.push(a1);
    await waitFor(async () => (await listStaticActiveMembers(js, "S2", "GA")).includes("a1"), 30_000, "a1 to be active");
    for (let i = 0; i < 4; i++) await root2.js.publish(`S2.k${i}`, "x"); // the pin is given with a delivery
    const d = await describeGroup(js, "static", "S2", "GA");
    assert.equal(d.partitions.length, 2);
    await waitFor(async () => (await pinnedOf(root2, "S2", "GA-a1")) !== undefined, 30_000, "a1 to be pinned");
    await staticMemberStepDown(js, "S2", "GA", "a1");
    await a1.stop();
    await deleteStatic(js, "S2", "GA");
    await assert.rejects(getStaticConsumerGroupConfig(js, "S2", "GA"), /not found/);
    assert.deepEqual(seen.list, [], "no permission violation on the admin's connection");
    seen.stop();
  });

  test("security - an admin with only the admin permissions runs every elastic operation, buckets included", { timeout: TIMEOUT }, async () => {
    const admin = await as("eadmin");
    const seen = violations(admin.nc);
    const { js } = admin;
    await createElastic(js, { stream: "E2", group: "GE", maxMembers: 2, partitioningFilters: [{ filter: "E2.*", partitioning_wildcards: [1] }] });
    assert.deepEqual(await addMembers(js, "E2", "GE", ["e1", "e2"]), ["e1", "e2"]);
    assert.deepEqual(await deleteMembers(js, "E2", "GE", ["e2"]), ["e1"]);
    await setMemberMappings(js, "E2", "GE", [{ member: "e1", partitions: [0, 1] }]);
    await deleteMemberMappings(js, "E2", "GE");
    await addMembers(js, "E2", "GE", ["e1"]);
    assert.deepEqual(await listElasticConsumerGroups(js, "E2"), ["GE"]);
    const e1 = await elasticConsume(root2.js, { stream: "E2", group: "GE", member: "e1", consumerConfig: { ack_wait: ACK_WAIT }, handler: () => undefined });
    running.push(e1);
    await waitFor(async () => (await listElasticActiveMembers(js, "E2", "GE")).includes("e1"), 30_000, "e1 to be active");
    await root2.js.publish("E2.k1", "x"); // the pin is given with a delivery
    assert.deepEqual(await elasticIsInMembershipAndActive(js, "E2", "GE", "e1"), { inMembership: true, active: true });
    const d = await describeGroup(js, "elastic", "E2", "GE");
    assert.equal(d.partitions.length, 2);
    await waitFor(async () => (await pinnedOf(root2, "E2-GE", "e1")) !== undefined, 30_000, "e1 to be pinned");
    await elasticMemberStepDown(js, "E2", "GE", "e1");
    await e1.stop();
    await deleteElastic(js, "E2", "GE");
    await assert.rejects(root2.jsm.streams.info("E2-GE"), /stream not found/);
    assert.deepEqual(seen.list, [], "no permission violation on the admin's connection");
    seen.stop();
  });

  test("security - cg says which permission a member lacks (exit 1, PERMISSION_DENIED)", { timeout: TIMEOUT }, async () => {
    const add = await runCg(["-s", server.url, "--user", "emember2", "--password", "emember2-pw", "--json", "elastic", "add", E, EG, "m9"]);
    assert.equal(add.code, 1, add.stderr);
    const addErr = (JSON.parse(add.stderr.trim()) as { error: { code: string; message: string } }).error;
    assert.equal(addErr.code, "PERMISSION_DENIED");
    assert.match(addErr.message, /no permission to publish to "\$KV\.elastic-consumer-groups\.events\.shipping"/);

    const info = await runCg(["-s", server.url, "--user", "smember", "--password", "smember-pw", "static", "info", S, G]);
    assert.equal(info.code, 1, info.stderr);
    assert.match(info.stderr, /^error: permission denied while .*no permission to publish to "\$JS\.API\.CONSUMER\.LIST\.orders"/m);

    // emember may only use its private inbox prefix, which cg does not use
    const ls = await runCg(["-s", server.url, "--user", "emember", "--password", "emember-pw", "elastic", "ls", E]);
    assert.equal(ls.code, 1, ls.stderr);
    assert.match(ls.stderr, /no permission to subscribe to "_INBOX\.[^"]+"; grant it subscribe permission on "_INBOX\.>"/);
  });
});
