/**
 * Instances on one connection share one watch of their group's config: sixteen
 * elastic members on one connection open one KV watcher (one consumer on the KV
 * stream, a bounded number of subscriptions on the server), a config change still
 * reaches all sixteen, and stopping fifteen keeps the last one's watch alive.
 */
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { askPresence } from "../../src/elastic/presence.js";
import { ELASTIC_BUCKET, addMembers, createElastic, deleteMembers, elasticConsume, type ConsumerGroupMember } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type Client, type TestEnv } from "../helpers/nats.js";

const MEMBERS = 16;

interface Connz {
  connections: { name?: string; subscriptions: number }[];
}

let env: TestEnv;
before(async () => {
  env = await startEnv();
});
after(async () => {
  await env.close();
});

/** The subscriptions the server counts for the connection named `name`. */
async function serverSubscriptions(name: string): Promise<number> {
  const connz = await env.server.monitor<Connz>(`/connz?subs=1&limit=1024`);
  const conn = connz.connections.find((c) => c.name === name);
  assert.ok(conn, `the server lists the connection "${name}"`);
  return conn.subscriptions;
}

/** The consumers on the elastic KV bucket's stream: one per open watch of any of its keys. */
async function kvWatchers(): Promise<number> {
  return (await env.jsm.streams.info(`KV_${ELASTIC_BUCKET}`)).state.consumer_count;
}

test("shared config watch - sixteen members on one connection open one KV watcher; a change reaches all; the last one keeps it after fifteen stop", async () => {
  const stream = uniqueName("sw");
  await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
  const members = Array.from({ length: MEMBERS }, (_, i) => `m${String(i).padStart(2, "0")}`);
  await createElastic(env.js, { stream, group: "g", maxMembers: 2 * MEMBERS, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
  await addMembers(env.js, stream, "g", members);
  const name = uniqueName("fleet");
  const shared: Client = await env.connect({ name });
  const instances: ConsumerGroupMember[] = [];
  try {
    const idle = await serverSubscriptions(name);
    for (const member of members) {
      instances.push(await elasticConsume(shared.js, { stream, group: "g", member, handler: () => undefined }));
    }
    await waitFor(() => instances.every((m) => m.partitions().length === 2), 20_000, "every member to own 2 partitions");
    assert.equal(await kvWatchers(), 1, "one KV watcher for sixteen instances on one connection");
    const subscriptions = await serverSubscriptions(name);
    // Each instance's consume has its subscription; the watches add one, not sixteen.
    assert.ok(subscriptions <= MEMBERS + 4, `the connection has ${subscriptions} subscriptions (at most ${MEMBERS + 4} expected)`);
    // Their presence answers share one subscription too, and every instance answers.
    assert.deepEqual([...(await askPresence(env.nc, stream, "g"))].sort(), members, "all sixteen answer presence");

    // A change reaches all sixteen: half leave, the other half get 4 partitions each.
    await deleteMembers(env.js, stream, "g", members.slice(MEMBERS / 2));
    await waitFor(
      () => instances.every((m, i) => m.partitions().length === (i < MEMBERS / 2 ? 4 : 0)),
      20_000,
      "every instance to follow the new membership",
    );

    // Stopping fifteen leaves the last one's watch open, and it still follows the config.
    for (const m of instances.slice(1)) await m.stop();
    assert.equal(await kvWatchers(), 1, "the last instance's watch is still open");
    const last = instances[0] as ConsumerGroupMember;
    await deleteMembers(env.js, stream, "g", members.slice(2, MEMBERS / 2));
    await waitFor(() => last.partitions().length === 16, 20_000, "the last instance to follow a change after fifteen stopped");
    await last.stop();
    // The server drops an unsubscribed watch's ephemeral consumer only later; its subscription goes at once.
    await waitFor(async () => (await serverSubscriptions(name)) === idle, 10_000, "the watch to close with its last user");
  } finally {
    await Promise.allSettled(instances.map((m) => m.stop()));
  }
});

test("shared config watch - instances on different connections each have their own watch", async () => {
  const stream = uniqueName("sw");
  await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
  await createElastic(env.js, { stream, group: "g", maxMembers: 4, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
  await addMembers(env.js, stream, "g", ["a", "b"]);
  const before = await kvWatchers();
  const ca = await env.connect();
  const cb = await env.connect();
  const instances: ConsumerGroupMember[] = [];
  try {
    instances.push(await elasticConsume(ca.js, { stream, group: "g", member: "a", handler: () => undefined }));
    instances.push(await elasticConsume(cb.js, { stream, group: "g", member: "b", handler: () => undefined }));
    assert.equal((await kvWatchers()) - before, 2, "two connections, two watches");
    await ca.nc.close();
    // The closed connection's instance stops; the other still follows changes.
    await instances[0]?.closed();
    await addMembers(env.js, stream, "g", ["c"]);
    await waitFor(() => (instances[1]?.partitions().length ?? 0) < 2, 20_000, "b to follow the change");
  } finally {
    await Promise.allSettled(instances.map((m) => m.stop()));
  }
});
