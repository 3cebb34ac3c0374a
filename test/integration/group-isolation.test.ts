/**
 * Two elastic groups A and B on one stream, and principals built from the generated
 * permission sets (`groupPermissions`, the user entries exactly as `cg … permissions`
 * prints them): a member of A with its own inbox prefix, a viewer of A and an admin
 * of A. Each role does its job (positive), and none reaches B or changes what it may
 * not (negative). The attacks that break isolation with the lists docs/permissions.md
 * gave before (`test/helpers/security-perms.ts`) are run with those too, and succeed
 * there: reading B's config through `STREAM.MSG.GET` on the bucket, reading B's
 * payloads through `_INBOX.>`, and deleting B's config watch.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import {
  ELASTIC_BUCKET,
  addMembers,
  STATIC_BUCKET,
  createElastic,
  createStatic,
  deleteElastic,
  deleteStatic,
  getStaticConsumerGroupConfig,
  listStaticActiveMembers,
  staticConsume,
  staticMemberStepDown,
  deleteMembers,
  describeGroup,
  elasticConsume,
  elasticMemberStepDown,
  getElasticConsumerGroupConfig,
  groupLag,
  groupPermissions,
  listElasticActiveMembers,
  userConfigEntry,
  type ConsumerGroupMember,
  type PermissionSet,
} from "../../src/index.js";
import { isPermissionError } from "../../src/nats/server-errors.js";
import { NatsServer, waitFor, type Client } from "../helpers/nats.js";
import { recordStatus } from "../helpers/static-fixtures.js";
import { thrownBy } from "../helpers/security-state.js";
import { memberPermissions, userEntry, type Permissions } from "../helpers/security-perms.js";

const S = "orders";
const A = "A";
const B = "B";
const KV_STREAM = `KV_${ELASTIC_BUCKET}`;
const keyOf = (group: string): string => `$KV.${ELASTIC_BUCKET}.${S}.${group}`;
const ACK_WAIT = 2_000_000_000;
const TIMEOUT = 180_000;

const SETS = {
  memberA: groupPermissions({ kind: "elastic", role: "member", stream: S, group: A, member: "m1" }),
  viewerA: groupPermissions({ kind: "elastic", role: "viewer", stream: S, group: A }),
  adminA: groupPermissions({ kind: "elastic", role: "admin", stream: S, group: A }),
} satisfies Record<string, PermissionSet>;
/** The member list docs/permissions.md gave before: the documented member list with `_INBOX.>`, plus the bucket's MSG.GET and CONSUMER.DELETE it listed then. */
const oldMember = (group: string, member: string): Permissions => {
  const documented = memberPermissions({ kind: "elastic", stream: S, group, member });
  return { ...documented, publish: [...documented.publish, `$JS.API.STREAM.MSG.GET.${KV_STREAM}`, `$JS.API.CONSUMER.DELETE.${KV_STREAM}.*`] };
};
/** Old lists: today's B member (default inbox), and an attacker of A. */
const OLD = { oldB: oldMember(B, "b1"), oldA: oldMember(A, "m1") };

/** Every permission violation a connection reports on its status, from now on. */
function violations(nc: NatsConnection): { list: string[]; stop(): void } {
  const list: string[] = [];
  const statuses = nc.status();
  void (async () => {
    for await (const s of statuses) if (s.type === "error") list.push(String((s as { error?: unknown }).error));
  })();
  return { list, stop: () => (statuses as unknown as { stop(): void }).stop() };
}

/** Asserts that `fn` fails because the server refused a publish or subscribe. */
async function assertDenied(fn: () => unknown, what: string): Promise<void> {
  const err = await thrownBy(fn);
  assert.ok(err !== undefined, `${what}: expected a permission error, it succeeded`);
  const code = (err as { code?: unknown }).code;
  assert.ok(code === "PERMISSION_DENIED" || isPermissionError(err), `${what}: ${err instanceof Error ? err.message : JSON.stringify(err)}`);
}

/** Subscribes to `subject` and returns what arrives, with whether the server refused the subscription. */
async function tap(c: Client, subject: string): Promise<{ got: { subject: string; reply: string; data: string }[]; denied: () => boolean; stop(): void }> {
  const got: { subject: string; reply: string; data: string }[] = [];
  const seen = violations(c.nc);
  const sub = c.nc.subscribe(subject, { callback: (e, m) => {
      if (!e) got.push({ subject: m.subject, reply: m.reply ?? "", data: m.string() });
    }, });
  await c.nc.flush();
  return {
    got,
    denied: () => seen.list.some((v) => v.includes(subject)),
    stop: () => {
      seen.stop();
      sub.unsubscribe();
    },
  };
}

/** The config-watch consumers (ordered consumers on the bucket) that follow `group`'s key. */
async function watchesOf(root: Client, group: string): Promise<string[]> {
  const names: string[] = [];
  for await (const ci of root.jsm.consumers.list(KV_STREAM)) if (ci.config.filter_subject === keyOf(group) || ci.config.filter_subjects?.includes(keyOf(group))) names.push(ci.name);
  return names;
}

describe("group isolation - generated permission sets", () => {
  let server: NatsServer;
  const clients: Client[] = [];
  const running: ConsumerGroupMember[] = [];
  let root: Client;
  let b1Status: ReturnType<typeof recordStatus>;
  const handledB: string[] = [];
  const handledA: string[] = [];

  const as = async (user: string, inboxPrefix?: string): Promise<Client> => {
    const nc = await connect({ servers: server.url, user, pass: `${user}-pw`, ...(inboxPrefix ? { inboxPrefix } : {}) });
    const c: Client = { nc, js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }) };
    clients.push(c);
    return c;
  };
  const asRole = (name: keyof typeof SETS): Promise<Client> => as(name, SETS[name].inboxPrefix);

  before(async () => {
    const generated = Object.entries(SETS).map(([user, set]) => userConfigEntry(set, { user, password: `${user}-pw` }));
    const old = Object.entries(OLD).map(([user, perms]) => `    ${userEntry(user, `${user}-pw`, perms)}`);
    server = await NatsServer.start({ extraConfig: ["authorization {", "  users: [", `    ${userEntry("root", "root-pw")}`, ...generated, ...old, "  ]", "}"].join("\n") });
    root = await as("root");
    await root.jsm.streams.add({ name: S, subjects: [`${S}.*`] });
    for (const g of [A, B]) await createElastic(root.js, { stream: S, group: g, maxMembers: 4, partitioningFilters: [{ filter: `${S}.*`, partitioning_wildcards: [1] }] });
    await addMembers(root.js, S, A, ["m1"]);
    await addMembers(root.js, S, B, ["b1"]);
    // B's member as members run today: the documented list, the default inbox.
    const b = await as("oldB");
    const b1 = await elasticConsume(b.js, { stream: S, group: B, member: "b1", consumerConfig: { ack_wait: ACK_WAIT }, handler: (m) => void handledB.push(m.string()) });
    running.push(b1);
    b1Status = recordStatus(b1);
  });

  after(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await server?.stop();
  });

  test("group isolation - a member of A (own inbox prefix, no bucket MSG.GET or CONSUMER.DELETE) consumes and follows a membership change", { timeout: TIMEOUT }, async () => {
    const member = await asRole("memberA");
    const seen = violations(member.nc);
    const m1 = await elasticConsume(member.js, { stream: S, group: A, member: "m1", consumerConfig: { ack_wait: ACK_WAIT }, handler: (m) => void handledA.push(m.string()) });
    running.push(m1);
    const status = recordStatus(m1);
    for (let i = 0; i < 20; i++) await root.js.publish(`${S}.k${i}`, `p${i}`);
    await waitFor(() => handledA.length >= 20, 60_000, "m1 to handle 20 messages");
    const admin = await asRole("adminA");
    const from = status.events.length;
    const changed = Date.now();
    await addMembers(admin.js, S, A, ["m2"]);
    const followed = await status.next("partitions_changed", 30_000, from);
    console.log(`# member of A followed a membership change after ${followed.at - changed} ms`);
    assert.deepEqual(m1.partitions().length, 2, "m1 gave two partitions to m2");
    assert.deepEqual(status.events.filter((e) => e.type === "consumer_error"), []);
    assert.deepEqual(seen.list, [], "no permission violation on the member's connection");
    seen.stop();
  });

  test("group isolation - the member's config watch survives a reset without CONSUMER.DELETE on the bucket", { timeout: TIMEOUT }, async () => {
    const m1 = running.find((m) => m.member === "m1");
    assert.ok(m1, "the first test's member runs");
    const status = recordStatus(m1);
    const member = clients.find((c) => (c.nc as unknown as { options: { inboxPrefix?: string } }).options.inboxPrefix === SETS.memberA.inboxPrefix);
    assert.ok(member);
    const seen = violations(member.nc);
    const watches = await waitFor(() => watchesOf(root, A).then((w) => (w.length > 0 ? w : undefined)), 10_000, "A's watch");
    // Its ordered consumer is gone (as an attacker with the old lists would do): nats.js resets it, and its delete of the old one is refused.
    for (const w of watches) await root.jsm.consumers.delete(KV_STREAM, w);
    const admin = await asRole("adminA");
    const changed = Date.now();
    // m1 goes back from 2 partitions to all 4
    await deleteMembers(admin.js, S, A, ["m2"]);
    const followed = await status.next("partitions_changed", 90_000);
    console.log(`# after its watch was deleted, the member of A followed the next change after ${followed.at - changed} ms; violations: ${seen.list.length} (${seen.list.join(" | ")})`);
    assert.deepEqual(status.events.filter((e) => e.type === "consumer_error"), [], "no consumer_error");
    assert.equal(m1.partitions().length, 4);
    seen.stop();
  });

  test("group isolation - a viewer of A reads A's config, members, description and lag", { timeout: TIMEOUT }, async () => {
    const viewer = await asRole("viewerA");
    const seen = violations(viewer.nc);
    const config = await getElasticConsumerGroupConfig(viewer.js, S, A);
    assert.ok(config.members?.includes("m1"));
    // (m1 recreates its consumer after the last membership change: wait for it)
    await waitFor(async () => (await listElasticActiveMembers(viewer.js, S, A)).includes("m1"), 30_000, "the viewer to list m1 as active");
    const described = await describeGroup(viewer.js, "elastic", S, A);
    assert.equal(described.group, A);
    const lag = await groupLag(viewer.js, S, A, { sampleMs: 0 });
    assert.equal(lag.partitions.length, 4);
    console.log(`# viewer violations: ${seen.list.length} (${seen.list.join(" | ")})`);
    assert.ok(
      seen.list.every((v) => v.includes("$PCG.presence")),
      `the only refused subject is the presence request (blocked keys are for operators): ${seen.list.join(" | ")}`,
    );
    seen.stop();
  });

  test("group isolation - an admin of A adds and removes A's members, and cannot touch B", { timeout: TIMEOUT }, async () => {
    const admin = await asRole("adminA");
    await addMembers(admin.js, S, A, ["m9"]);
    assert.ok((await getElasticConsumerGroupConfig(admin.js, S, A)).members?.includes("m9"));
    await deleteMembers(admin.js, S, A, ["m9"]);
    assert.ok(!(await getElasticConsumerGroupConfig(admin.js, S, A)).members?.includes("m9"));
    assert.equal((await describeGroup(admin.js, "elastic", S, A)).group, A);
    await assertDenied(() => getElasticConsumerGroupConfig(admin.js, S, B), "admin of A reads B's config");
    await assertDenied(() => addMembers(admin.js, S, B, ["x"]), "admin of A adds a member to B");
    await assertDenied(() => deleteElastic(admin.js, S, B), "admin of A deletes B");
    await assertDenied(() => admin.jsm.consumers.delete(`${S}-${B}`, "b1"), "admin of A deletes B's member consumer");
    await assertDenied(() => admin.jsm.streams.getMessage(KV_STREAM, { last_by_subj: keyOf(B) }), "admin of A gets B's config with MSG.GET");
  });

  test("group isolation - a member of A cannot read B's config; with the old list it could (STREAM.MSG.GET)", { timeout: TIMEOUT }, async () => {
    const member = await asRole("memberA");
    await assertDenied(() => member.jsm.streams.getMessage(KV_STREAM, { last_by_subj: keyOf(B) }), "MSG.GET of B's key");
    await assertDenied(() => member.jsm.direct.getMessage(KV_STREAM, { last_by_subj: keyOf(B) }), "direct get of B's key");
    await assertDenied(() => getElasticConsumerGroupConfig(member.js, S, B), "getElasticConsumerGroupConfig of B");
    const old = await as("oldA");
    const stolen = await old.jsm.streams.getMessage(KV_STREAM, { last_by_subj: keyOf(B) });
    assert.ok(stolen?.string().includes('"b1"'), "the old list reads B's config");
    await assertDenied(() => old.jsm.direct.getMessage(KV_STREAM, { last_by_subj: keyOf(B) }), "the old list's direct get was narrowed already");
  });

  test("group isolation - a member or viewer of A cannot read B's payloads; with the old list's _INBOX.> it could", { timeout: TIMEOUT }, async () => {
    const member = await asRole("memberA");
    const viewer = await asRole("viewerA");
    const old = await as("oldA");
    const taps = {
      member: await tap(member, "_INBOX.>"),
      memberB: await tap(member, `_INBOX_PCG.${S}.${B}.>`),
      viewer: await tap(viewer, "_INBOX.>"),
      old: await tap(old, "_INBOX.>"),
    };
    const before = handledB.length;
    for (let i = 0; i < 50; i++) await root.js.publish(`${S}.x${i}`, `secret-${i}`);
    await waitFor(() => handledB.length >= before + 50, 60_000, "B's member to handle 50 messages");
    const bPayloads = (t: { got: { reply: string; data: string }[] }): number => new Set(t.got.filter((m) => m.reply.startsWith(`$JS.ACK.${S}-${B}.`) && m.data.startsWith("secret-")).map((m) => m.data)).size;
    await waitFor(() => taps.member.denied() && taps.memberB.denied() && taps.viewer.denied(), 10_000, "the server to refuse the subscriptions");
    // (a delivery reaches the tap and B's member at the same time; give the tap's last ones a moment)
    await waitFor(() => bPayloads(taps.old) === 50, 10_000, "the old list's tap to see B's 50 payloads").catch(() => undefined);
    console.log(`# B's payloads read: old member list ${bPayloads(taps.old)}/50, generated member ${bPayloads(taps.member)}/50, generated viewer ${bPayloads(taps.viewer)}/50`);
    assert.equal(bPayloads(taps.member), 0);
    assert.equal(bPayloads(taps.memberB), 0);
    assert.equal(bPayloads(taps.viewer), 0);
    assert.equal(bPayloads(taps.old), 50, "the old list reads every one of B's payloads");
    for (const t of Object.values(taps)) t.stop();
  });

  test("group isolation - a member of A writes no config and deletes nothing of B's or another member's", { timeout: TIMEOUT }, async () => {
    const member = await asRole("memberA");
    const kv = await new Kvm(member.js).open(ELASTIC_BUCKET);
    await assertDenied(() => kv.put(`${S}.${A}`, "{}"), "put A's config");
    await assertDenied(() => kv.put(`${S}.${B}`, "{}"), "put B's config");
    await assertDenied(() => addMembers(member.js, S, A, ["x"]), "add a member to A");
    await assertDenied(() => member.jsm.consumers.delete(`${S}-${B}`, "b1"), "delete B's member consumer");
    await assertDenied(() => member.jsm.consumers.delete(`${S}-${A}`, "m2"), "delete another member's consumer of A");
    await assertDenied(() => member.jsm.streams.delete(`${S}-${B}`), "delete B's work queue");
    await assertDenied(() => elasticMemberStepDown(member.js, S, B, "b1"), "step B's member down");
  });

  test("group isolation - a viewer of A changes nothing", { timeout: TIMEOUT }, async () => {
    const viewer = await asRole("viewerA");
    const kv = await new Kvm(viewer.js).open(ELASTIC_BUCKET);
    await assertDenied(() => kv.put(`${S}.${A}`, "{}"), "put A's config");
    await assertDenied(() => addMembers(viewer.js, S, A, ["x"]), "add a member");
    await assertDenied(() => deleteMembers(viewer.js, S, A, ["m1"]), "drop a member");
    await assertDenied(() => deleteElastic(viewer.js, S, A), "delete the group");
    await assertDenied(() => elasticMemberStepDown(viewer.js, S, A, "m1"), "step a member down");
    await assertDenied(() => viewer.jsm.consumers.delete(`${S}-${A}`, "m1"), "delete a member consumer");
    await assertDenied(() => viewer.jsm.streams.delete(`${S}-${A}`), "delete the work queue");
    await assertDenied(() => viewer.jsm.consumers.add(`${S}-${A}`, { name: "spy", filter_subjects: ["0.>"] }), "create a consumer");
    await assertDenied(() => viewer.jsm.streams.getMessage(KV_STREAM, { last_by_subj: keyOf(B) }), "MSG.GET of B's config");
    const watches = await watchesOf(root, A);
    for (const w of watches) await assertDenied(() => viewer.jsm.consumers.delete(KV_STREAM, w), "delete A's config watch");
  });

  test("group isolation - a member of A cannot delete B's config watch; with the old list it learns its name from _INBOX.> and deletes it, and B follows late", { timeout: TIMEOUT }, async () => {
    const member = await asRole("memberA");
    const watches = await waitFor(() => watchesOf(root, B).then((w) => (w.length > 0 ? w : undefined)), 10_000, "B's watch");
    for (const w of watches) await assertDenied(() => member.jsm.consumers.delete(KV_STREAM, w), "delete B's config watch");
    // Unharmed, B follows a change at once.
    let from = b1Status.events.length;
    let changed = Date.now();
    await addMembers(root.js, S, B, ["b2"]);
    const prompt = await b1Status.next("partitions_changed", 30_000, from);
    const promptMs = prompt.at - changed;
    // The old list: B's watch deliveries reach _INBOX.>, with the watch's name in their ack subject.
    const old = await as("oldA");
    const spy = await tap(old, "_INBOX.>");
    // (b1 keeps its 2 partitions of 4 with three members: only the watch's delivery matters here)
    await addMembers(root.js, S, B, ["b3"]);
    const learned = await waitFor(() => spy.got.map((m) => new RegExp(`^\\$JS\\.ACK\\.${KV_STREAM}\\.([^.]+)\\.`).exec(m.reply)?.[1]).find((n) => n !== undefined), 30_000, "a delivery of B's watch");
    spy.stop();
    await old.jsm.consumers.delete(KV_STREAM, learned);
    from = b1Status.events.length;
    changed = Date.now();
    await deleteMembers(root.js, S, B, ["b2", "b3"]);
    // b1 goes back to all 4 partitions, once its watch notices it was deleted
    const late = await waitFor(() => b1Status.events.slice(from).find((e) => e.type === "partitions_changed" && e.partitions.length === 4), 120_000, "b1 to follow the change");
    console.log(`# B followed a change after ${promptMs} ms with its watch, and ${late.at - changed} ms after the old list deleted it (${learned})`);
    assert.ok(late.at - changed > promptMs, "the deleted watch delayed B");
  });
});

/** Two static groups SA and SB on one partitioned stream: a member, a viewer and an admin of SA. */
describe("group isolation - generated permission sets, static groups", () => {
  const SS = "ledger";
  const SA = "SA";
  const SB = "SB";
  const SKV = `KV_${STATIC_BUCKET}`;
  const skey = (group: string): string => `$KV.${STATIC_BUCKET}.${SS}.${group}`;
  const STATIC_SETS = {
    smember: groupPermissions({ kind: "static", role: "member", stream: SS, group: SA, member: "m1" }),
    sviewer: groupPermissions({ kind: "static", role: "viewer", stream: SS, group: SA, members: ["m1"] }),
    sadmin: groupPermissions({ kind: "static", role: "admin", stream: SS, group: SA, members: ["m1"] }),
  } satisfies Record<string, PermissionSet>;
  let server: NatsServer;
  const clients: Client[] = [];
  const running: ConsumerGroupMember[] = [];
  let root: Client;
  const as = async (user: keyof typeof STATIC_SETS | "root"): Promise<Client> => {
    const inboxPrefix = user === "root" ? undefined : STATIC_SETS[user].inboxPrefix;
    const nc = await connect({ servers: server.url, user, pass: `${user}-pw`, ...(inboxPrefix ? { inboxPrefix } : {}) });
    const c: Client = { nc, js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }) };
    clients.push(c);
    return c;
  };

  before(async () => {
    const generated = Object.entries(STATIC_SETS).map(([user, set]) => userConfigEntry(set, { user, password: `${user}-pw` }));
    server = await NatsServer.start({ extraConfig: ["authorization {", "  users: [", `    ${userEntry("root", "root-pw")}`, ...generated, "  ]", "}"].join("\n") });
    root = await as("root");
    await root.jsm.streams.add({ name: SS, subjects: [`${SS}.*`], subject_transform: { src: `${SS}.*`, dest: `{{partition(2,1)}}.${SS}.{{wildcard(1)}}` } });
    for (const g of [SA, SB]) await createStatic(root.js, { stream: SS, group: g, maxMembers: 2, members: ["m1"] });
  });

  after(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await server?.stop();
  });

  test("group isolation - a static member of SA consumes with its own inbox prefix, and reaches nothing of SB", { timeout: TIMEOUT }, async () => {
    const member = await as("smember");
    const seen = violations(member.nc);
    const handled: string[] = [];
    const m1 = await staticConsume(member.js, { stream: SS, group: SA, member: "m1", consumerConfig: { ack_wait: ACK_WAIT }, handler: (m) => void handled.push(m.subject) });
    running.push(m1);
    for (let i = 0; i < 10; i++) await root.js.publish(`${SS}.k${i}`, String(i));
    await waitFor(() => handled.length >= 10, 60_000, "m1 (both partitions) to handle 10 messages");
    assert.deepEqual(seen.list, [], "no permission violation on the member's connection");
    seen.stop();
    await assertDenied(() => member.jsm.streams.getMessage(SKV, { last_by_subj: skey(SB) }), "MSG.GET of SB's key");
    await assertDenied(() => member.jsm.direct.getMessage(SKV, { last_by_subj: skey(SB) }), "direct get of SB's key");
    await assertDenied(() => member.jsm.consumers.delete(SS, `${SB}-m1`), "delete SB's durable");
    await assertDenied(() => member.jsm.consumers.delete(SS, `${SA}-m2`), "delete another member's durable");
    const kv = await new Kvm(member.js).open(STATIC_BUCKET);
    await assertDenied(() => kv.put(`${SS}.${SA}`, "{}"), "put SA's config");
    await assertDenied(() => deleteStatic(member.js, SS, SA), "delete SA");
    const tapped = await tap(member, "_INBOX.>");
    await waitFor(() => tapped.denied(), 10_000, "the server to refuse _INBOX.>");
    tapped.stop();
  });

  test("group isolation - a static viewer of SA reads SA and changes nothing", { timeout: TIMEOUT }, async () => {
    const viewer = await as("sviewer");
    assert.deepEqual((await getStaticConsumerGroupConfig(viewer.js, SS, SA)).members, ["m1"]);
    assert.deepEqual(await listStaticActiveMembers(viewer.js, SS, SA), ["m1"]);
    assert.equal((await describeGroup(viewer.js, "static", SS, SA)).group, SA);
    await assertDenied(() => getStaticConsumerGroupConfig(viewer.js, SS, SB), "read SB's config");
    const kv = await new Kvm(viewer.js).open(STATIC_BUCKET);
    await assertDenied(() => kv.put(`${SS}.${SA}`, "{}"), "put SA's config");
    await assertDenied(() => deleteStatic(viewer.js, SS, SA), "delete SA");
    await assertDenied(() => staticMemberStepDown(viewer.js, SS, SA, "m1"), "step m1 down");
    await assertDenied(() => viewer.jsm.consumers.delete(SS, `${SA}-m1`), "delete m1's durable");
  });

  test("group isolation - a static admin of SA steps its member down and deletes SA, and cannot touch SB", { timeout: TIMEOUT }, async () => {
    const admin = await as("sadmin");
    await assertDenied(() => getStaticConsumerGroupConfig(admin.js, SS, SB), "read SB's config");
    await assertDenied(() => deleteStatic(admin.js, SS, SB), "delete SB");
    await assertDenied(() => admin.jsm.consumers.delete(SS, `${SB}-m1`), "delete SB's durable");
    await waitFor(async () => (await listStaticActiveMembers(admin.js, SS, SA)).includes("m1"), 30_000, "m1 active");
    await staticMemberStepDown(admin.js, SS, SA, "m1");
    assert.equal((await describeGroup(admin.js, "static", SS, SA)).group, SA);
    await deleteStatic(admin.js, SS, SA);
    const gone = await thrownBy(() => getStaticConsumerGroupConfig(admin.js, SS, SA));
    assert.equal((gone as { code?: string }).code, "GROUP_NOT_FOUND", "SA is gone");
    assert.ok((await getStaticConsumerGroupConfig(root.js, SS, SB)).members?.includes("m1"), "SB untouched");
  });
});
