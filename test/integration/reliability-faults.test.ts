/**
 * Faults under a continuous keyed load, each ending with the delivery checker:
 * a server restart, connections cut and re-established, the config deleted mid-load,
 * and membership churn together with a crash.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import { addMembers, createElastic, createStatic, deleteMembers, elasticConsume, staticConsume, type ConsumerGroupMember } from "../../src/index.js";
import { HandledLog, startKeyedLoad } from "../helpers/keyed-load.js";
import { startChildMember } from "../helpers/member-process.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { startTcpProxy } from "../helpers/tcp-proxy.js";

async function staticGroup(env: TestEnv, stream: string, members: string[]): Promise<void> {
  await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], subject_transform: { src: `${stream}.*`, dest: `{{partition(4,1)}}.${stream}.{{wildcard(1)}}` } });
  await createStatic(env.js, { stream, group: "g", maxMembers: 4, members, onWarning: () => undefined });
}

describe("reliability - faults under load", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  test("reliability - a server restart mid-load: members reconnect, carry on, and the config watch survives", async () => {
    const stream = uniqueName("restart");
    await staticGroup(env, stream, ["m1", "m2"]);
    const log = new HandledLog();
    const clients = await Promise.all([env.connect({ maxReconnectAttempts: -1, reconnectTimeWait: 100 }), env.connect({ maxReconnectAttempts: -1, reconnectTimeWait: 100 })]);
    const members: ConsumerGroupMember[] = [];
    for (const [i, c] of clients.entries()) {
      members.push(await staticConsume(c.js, { stream, group: "g", member: `m${i + 1}`, handler: log.handler(), consumerConfig: { ack_wait: 2_000_000_000 } }));
    }
    const publisher = await env.connect({ maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    const load = startKeyedLoad(publisher.js, (key) => `${stream}.${key}`, { keys: 40, rate: 150, idPrefix: stream });
    await waitFor(() => log.unique() > 100, 20_000, "some messages before the restart");
    await env.server.restart();
    const afterRestart = load.total();
    await waitFor(() => log.unique() > afterRestart + 100, 60_000, "members handling again after the restart");
    await load.stop();
    await waitFor(() => log.unique() >= load.total(), 60_000, "everything handled");
    const report = log.check(load.published);
    console.log(`reliability restart: ${report.published} published, ${report.duplicates} duplicates`);
    assert.deepEqual(report.lost, []);
    assert.deepEqual(report.outOfOrder, []);
    // The config watch survived: deleting the config still stops the members cleanly.
    const kv = await new Kvm(publisher.js).open("static-consumer-groups");
    await kv.delete(`${stream}.g`);
    assert.deepEqual(await Promise.all(members.map((m) => m.closed())), [undefined, undefined]);
  });

  test("reliability - connections cut abruptly and re-established: the standby takes over, nothing is lost", async () => {
    const stream = uniqueName("cut");
    await staticGroup(env, stream, ["m1"]);
    const log = new HandledLog();
    const proxy = await startTcpProxy(env.server.port);
    const viaProxy = await env.connect({ servers: proxy.url, maxReconnectAttempts: -1, reconnectTimeWait: 50 });
    const direct = await env.connect();
    const handledBy = { proxy: 0, direct: 0 };
    const a = await staticConsume(viaProxy.js, { stream, group: "g", member: "m1", handler: log.handler(() => void handledBy.proxy++), consumerConfig: { ack_wait: 1_000_000_000, max_ack_pending: 1 } });
    const load = startKeyedLoad(env.js, (key) => `${stream}.${key}`, { keys: 20, rate: 100, idPrefix: stream });
    await waitFor(() => handledBy.proxy > 20, 20_000, "the proxied instance to be pinned and handling");
    const b = await staticConsume(direct.js, { stream, group: "g", member: "m1", handler: log.handler(() => void handledBy.direct++), consumerConfig: { ack_wait: 1_000_000_000, max_ack_pending: 1 } });
    try {
    // A short cut: the instance reconnects within PinnedTTL and may keep its pin; nothing is lost either way.
    proxy.dropAll();
    const afterCut = log.unique();
    await waitFor(() => log.unique() > afterCut + 30, 30_000, "handling to continue after a short cut");
    // An outage longer than PinnedTTL (1 s): the standby takes over; the cut instance comes back as a standby.
    const directBefore = handledBy.direct;
    await proxy.outage(2500);
    await waitFor(() => handledBy.direct > directBefore + 20, 30_000, "the standby to take over during the outage");
    await waitFor(() => viaProxy.nc.isClosed() === false && viaProxy.nc.info !== undefined, 10_000, "the cut connection to reconnect");
    const afterOutage = log.unique();
    await waitFor(() => log.unique() > afterOutage + 30, 30_000, "handling to continue after the outage");
    await load.stop();
    await waitFor(() => log.unique() >= load.total(), 60_000, "everything handled");
    const report = log.check(load.published);
    console.log(`reliability connection cuts: ${report.published} published, ${report.duplicates} duplicates, by proxied ${handledBy.proxy}, direct ${handledBy.direct}`);
    assert.deepEqual(report.lost, []);
    assert.deepEqual(report.outOfOrder, []);
    assert.ok(handledBy.direct > 0, "the standby took over at least once");
    } finally {
      await load.stop();
      await Promise.all([a.stop(), b.stop()]);
      await proxy.close();
    }
  });

  test("reliability - config deleted mid-load: members stop cleanly and nothing was acked unhandled", async () => {
    const stream = uniqueName("cfgdel");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    await createElastic(env.js, { stream, group: "g", maxMembers: 4, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, stream, "g", ["m1", "m2"]);
    const log = new HandledLog();
    const members = [
      await elasticConsume(env.js, { stream, group: "g", member: "m1", handler: log.handler(() => new Promise((r) => setTimeout(r, 2))) }),
      await elasticConsume(env.js, { stream, group: "g", member: "m2", handler: log.handler(() => new Promise((r) => setTimeout(r, 2))) }),
    ];
    const load = startKeyedLoad(env.js, (key) => `${stream}.${key}`, { keys: 30, rate: 400, idPrefix: stream });
    await waitFor(() => log.unique() > 200, 20_000, "handling under way");
    const kv = await new Kvm(env.js).open("elastic-consumer-groups");
    await kv.delete(`${stream}.g`);
    assert.deepEqual(await Promise.all(members.map((m) => m.closed())), [undefined, undefined], "members stopped cleanly");
    await load.stop();
    // Sourcing continues; what left the work queue was acked, so it must have been handled.
    await waitFor(async () => (await env.jsm.streams.info(`${stream}-g`)).state.messages + log.unique() >= load.total(), 20_000, "sourcing to catch up");
    const remaining = new Set<string>();
    const info = await env.jsm.streams.info(`${stream}-g`);
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const m = await env.jsm.streams.getMessage(`${stream}-g`, { seq }).catch(() => null);
      if (m) {
        const { key, seq: s } = m.json<{ key: string; seq: number }>();
        remaining.add(`${key}/${s}`);
      }
    }
    const handled = new Set(log.records.map((r) => `${r.key}/${r.seq}`));
    const ackedUnhandled: string[] = [];
    for (const [key, n] of load.published) for (let s = 1; s <= n; s++) if (!remaining.has(`${key}/${s}`) && !handled.has(`${key}/${s}`)) ackedUnhandled.push(`${key}/${s}`);
    assert.deepEqual(ackedUnhandled, [], "every message gone from the work queue was handled");
    assert.ok(remaining.size > 0 || handled.size === load.total());
  });

  test("reliability - elastic membership churn and a crash at the same time", async () => {
    const stream = uniqueName("churncrash");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    await createElastic(env.js, { stream, group: "g", maxMembers: 8, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, stream, "g", ["m1", "m2", "m3"]);
    const log = new HandledLog();
    const settings = { url: env.server.url, flavour: "elastic" as const, stream, group: "g", ackWaitMs: 1000 };
    const procs = ["m1", "m1", "m2", "m3", "m4"].map((member) => startChildMember({ ...settings, member }, log));
    try {
      await Promise.all(procs.map((p) => p.ready));
      const load = startKeyedLoad(env.js, (key) => `${stream}.${key}`, { keys: 60, rate: 200, idPrefix: stream });
      await waitFor(() => log.unique() > 100, 20_000, "handling under way");
      for (let round = 0; round < 4; round++) {
        const since = performance.timeOrigin + performance.now();
        const m1s = procs.filter((_, i) => i < 2);
        const pinned = await waitFor(() => m1s.find((p) => p.handledSince(since)), 20_000, "a pinned m1");
        await Promise.all([pinned.kill(), round % 2 === 0 ? addMembers(env.js, stream, "g", ["m4"]) : deleteMembers(env.js, stream, "g", ["m4"])]);
        procs[procs.indexOf(pinned)] = startChildMember({ ...settings, member: "m1" }, log);
        const before = log.unique();
        await waitFor(() => log.unique() > before + 50, 30_000, `round ${round}: handling continues`);
      }
      await load.stop();
      await waitFor(() => log.unique() >= load.total(), 60_000, "everything handled");
      const report = log.check(load.published);
      console.log(`reliability churn + crash: ${report.published} published, ${report.duplicates} duplicates`);
      assert.deepEqual(report.lost, []);
      assert.deepEqual(report.outOfOrder, []);
    } finally {
      await Promise.all(procs.map((p) => p.stop()));
    }
  });
});
