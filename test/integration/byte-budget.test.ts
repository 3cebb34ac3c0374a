/**
 * The byte budget of an instance's pulls (`maxBufferedBytes`), against real servers:
 * pulls whose byte limits add up past the budget let the server queue past its
 * slow-consumer limit, and a pull whose byte limit is smaller than the next message
 * never delivers it. Found by the adversarial review of the budget: a long run of tiny
 * messages (so each of several pulls asked for the whole budget) then a burst of 1 MB
 * ones made the server cut the instance in 5 of 5 runs with the default options, and a
 * message larger than the budget was never delivered (its member stalled for good).
 * The second review found the budget counted per instance while the server's limit is
 * per connection: 4 or more instances on one connection, started together on a backlog
 * of 1 MB messages, were cut in every run (4, 8 and 16 instances, static and elastic).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Msg } from "@nats-io/transport-node";
import { createStatic, staticConsume, type ConsumerGroupMember, type MemberStatus } from "../../src/index.js";
import { FaultLog, KeyedPublisher, summary } from "../helpers/fault-check.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";

/** A static group `g` of `members` (one member `m1` by default) on a stream of `<stream>.<key>` partitioned in `partitions`. */
async function staticGroup(env: TestEnv, prefix: string, partitions: number, members = ["m1"]): Promise<{ stream: string; subjectOf: (key: string) => string }> {
  const stream = uniqueName(prefix);
  await env.jsm.streams.add({
    name: stream,
    subjects: [`${stream}.*`],
    storage: "file",
    subject_transform: { src: `${stream}.*`, dest: `{{partition(${partitions},1)}}.{{wildcard(1)}}` },
  });
  await createStatic(env.js, { stream, group: "g", maxMembers: partitions, members });
  return { stream, subjectOf: (key) => `${stream}.${key}` };
}

/** Synchronous work: the event loop reads no socket meanwhile. */
function busy(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // spin
  }
}

/** Watches a member's status events. */
function statusesOf(member: ConsumerGroupMember): MemberStatus[] {
  const seen: MemberStatus[] = [];
  void (async () => {
    for await (const e of member.status()) seen.push(e);
  })();
  return seen;
}

test("byte budget - 2,800 tiny messages, then 300 of 1 MB with 40 ms of synchronous work: the pulls' byte limits stay within twice the budget and the server never cuts the instance (defaults)", { timeout: 240_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), "pcg-bytes-"));
  const serverLog = join(dir, "server.log");
  const env = await startEnv({ extraConfig: `log_file: ${JSON.stringify(serverLog)}` });
  let member: ConsumerGroupMember | undefined;
  try {
    const { stream, subjectOf } = await staticGroup(env, "tiny", 4);
    const pub = new KeyedPublisher(env.js, subjectOf, 16, stream);
    const log = new FaultLog();
    const client = await env.connect({ maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    member = await staticConsume(client.js, {
      stream,
      group: "g",
      member: "m1",
      handler: log.handler("A", (_msg, payload) => {
        if (payload.pad !== undefined) busy(40);
      }),
    });
    const statuses = statusesOf(member);
    // Every pull of the instance, as the server gets it (the keep-alives ask for one byte without waiting).
    const limits: number[] = [];
    const sniff = env.nc.subscribe(`$JS.API.CONSUMER.MSG.NEXT.${stream}.>`, {
      callback: (_err: Error | null, m: Msg) => {
        const request = m.json<{ max_bytes?: number; no_wait?: boolean }>();
        if (request.no_wait !== true) limits.push(request.max_bytes ?? 0);
      },
    });
    await env.nc.flush();
    // The server's bytes queued for the instance, sampled while the burst goes.
    let mostPending = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const connz = await env.server.monitor<{ connections?: { cid: number; pending_bytes?: number }[] }>("/connz").catch(() => ({ connections: [] }));
        for (const c of connz.connections ?? []) mostPending = Math.max(mostPending, c.pending_bytes ?? 0);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();

    await pub.publish(2800);
    // The burst right behind them, 32 publishes in flight at a time (one connection keeps their order), on keys of its own.
    const pad = "x".repeat(1_000_000 - 200);
    const published = new Map(pub.published);
    for (let i = 0; i < 300; i += 32) {
      const window: Promise<unknown>[] = [];
      for (let j = i; j < Math.min(i + 32, 300); j++) {
        const key = `big${j % 16}`;
        const seq = (published.get(key) ?? 0) + 1;
        published.set(key, seq);
        window.push(env.js.publish(subjectOf(key), JSON.stringify({ key, seq, pad }), { msgID: `${stream}-${key}-${seq}`, timeout: 30_000 }));
      }
      await Promise.all(window);
    }
    const total = [...published.values()].reduce((a, b) => a + b, 0);
    await waitFor(() => log.unique() >= total && log.allEnded(), 180_000, "everything handled");
    sampling = false;
    await sampler;
    sniff.unsubscribe();

    const logged = await readFile(serverLog, "utf8").catch(() => "");
    const cuts = logged.split("\n").filter((l) => l.includes("Slow Consumer Detected"));
    const report = log.check(published);
    console.log(summary("byte budget, tiny then 1 MB", report));
    console.log(`  pulls ${limits.length}, largest byte limit ${Math.max(...limits)}; server pending for a client at most ${mostPending} bytes; cuts ${cuts.length}`);
    assert.deepEqual(cuts, [], "the server never cut the instance as a slow consumer");
    assert.ok(mostPending <= 2 * 16 * 1024 * 1024, `the server queued at most twice the budget for a client (${mostPending} bytes)`);
    assert.equal(statuses.filter((e) => e.type === "slow_consumer").length, 0);
    assert.equal(report.lost.length, 0, "nothing lost");
    assert.deepEqual(report.outOfOrder, [], "per-key order of first handling");
  } finally {
    await member?.stop();
    await env.close();
    await rm(dir, { recursive: true, force: true });
  }
});

/** Messages larger than a pull's byte limit: each case publishes its plan (count, padding bytes) to one key lane in order. */
const aloneCases: { name: string; server?: string; maxBufferedBytes?: number; plan: [count: number, padBytes: number][] }[] = [
  { name: "a message larger than maxBufferedBytes comes alone, and the messages behind it follow in order", maxBufferedBytes: 4096, plan: [[20, 0], [10, 100_000], [5, 0]] },
  {
    name: "with the default budget, a 20 MB message on a server whose max_payload is 32 MB comes, and the ones behind it follow",
    server: "max_payload: 33554432\nmax_pending: 134217728",
    plan: [[1, 20 * 1024 * 1024], [5, 0]],
  },
];
for (const c of aloneCases) {
  test(`byte budget - ${c.name}`, { timeout: 120_000 }, async () => {
    const env = await startEnv(c.server ? { extraConfig: c.server } : {});
    let member: ConsumerGroupMember | undefined;
    try {
      const { stream, subjectOf } = await staticGroup(env, "alone", 1);
      const pub = new KeyedPublisher(env.js, subjectOf, 3, stream);
      const log = new FaultLog();
      member = await staticConsume(env.js, { stream, group: "g", member: "m1", ...(c.maxBufferedBytes ? { maxBufferedBytes: c.maxBufferedBytes } : {}), handler: log.handler("A") });
      for (const [count, padBytes] of c.plan) {
        const pad = "y".repeat(padBytes);
        await pub.publish(count, () => (padBytes > 0 ? { pad } : {}));
      }
      await waitFor(() => log.unique() >= pub.total() && log.allEnded(), 60_000, `all ${pub.total()} handled`);
      const report = log.check(pub.published);
      assert.equal(report.lost.length, 0);
      assert.deepEqual(report.outOfOrder, []);
    } finally {
      await member?.stop();
      await env.close();
    }
  });
}

test("byte budget - six members on one connection start together on a backlog of 1 MB messages: they share one budget and the server never cuts the connection (defaults)", { timeout: 240_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), "pcg-bytes-"));
  const serverLog = join(dir, "server.log");
  const env = await startEnv({ extraConfig: `log_file: ${JSON.stringify(serverLog)}` });
  const names = ["m1", "m2", "m3", "m4", "m5", "m6"];
  const members: ConsumerGroupMember[] = [];
  try {
    const { stream, subjectOf } = await staticGroup(env, "shared", names.length, names);
    const pub = new KeyedPublisher(env.js, subjectOf, 24, stream);
    const pad = "z".repeat(1_000_000 - 200);
    await pub.publish(240, () => ({ pad }));
    const log = new FaultLog();
    const client = await env.connect({ maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    const statuses: MemberStatus[][] = [];
    members.push(
      ...(await Promise.all(
        names.map((member) =>
          staticConsume(client.js, {
            stream,
            group: "g",
            member,
            handler: log.handler(member, () => busy(10)),
          }),
        ),
      )),
    );
    for (const m of members) statuses.push(statusesOf(m));
    await waitFor(() => log.unique() >= pub.total() && log.allEnded(), 180_000, `all ${pub.total()} handled`);

    const logged = await readFile(serverLog, "utf8").catch(() => "");
    const cuts = logged.split("\n").filter((l) => l.includes("Slow Consumer Detected"));
    const report = log.check(pub.published);
    console.log(summary("byte budget, six members on one connection", report));
    console.log(`  cuts ${cuts.length}; slow_consumer events ${statuses.flat().filter((e) => e.type === "slow_consumer").length}`);
    assert.deepEqual(cuts, [], "the server never cut the connection as a slow consumer");
    assert.equal(report.lost.length, 0, "nothing lost");
    assert.deepEqual(report.outOfOrder, [], "per-key order of first handling");
  } finally {
    await Promise.allSettled(members.map((m) => m.stop()));
    await env.close();
    await rm(dir, { recursive: true, force: true });
  }
});
