/**
 * Per-key order and the pin under connection and process faults (the fault
 * catalogue's slow-consumer, half-open-link and event-loop-block rows): one elastic
 * member with a pinned instance and a hot standby, every handler run recorded, and
 * the catalogue's checker (test/helpers/fault-check.ts) applied to the whole run:
 * nothing lost, per-key order of first handling, no two runs of one key at once (except
 * with a run in flight when its process stalled, which cannot be recalled), and no start
 * by an instance after the other one took the pin. The byte budget is checked too: with
 * the defaults, 1 MB messages never bring the server to cut the instance.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { addMembers, createElastic, elasticConsume, workQueueStreamName, type ConsumerGroupMember, type MemberStatus } from "../../src/index.js";
import { FaultLog, KeyedPublisher, clock, summary, type FaultReport } from "../helpers/fault-check.js";
import { startFaultChild, type FaultChild } from "../helpers/fault-member.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { startTcpProxy } from "../helpers/tcp-proxy.js";

const nanos = (ms: number): number => ms * 1_000_000;

/** An elastic group `g` on `<stream>.*` (file storage: 1 MB payloads do not fit the memory store), 4 partitions, member m1. */
async function memberGroup(env: TestEnv, prefix: string): Promise<{ stream: string; wq: string; subjectOf: (key: string) => string }> {
  const stream = uniqueName(prefix);
  await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], storage: "file" });
  await createElastic(env.js, { stream, group: "g", maxMembers: 4, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
  await addMembers(env.js, stream, "g", ["m1"]);
  return { stream, wq: workQueueStreamName(stream, "g"), subjectOf: (key) => `${stream}.${key}` };
}

/** A connection's status events, with the time each came. */
function recordConnection(nc: NatsConnection): { type: string; at: number; detail: string }[] {
  const events: { type: string; at: number; detail: string }[] = [];
  void (async () => {
    for await (const s of nc.status()) {
      const detail = "error" in s && s.error instanceof Error ? s.error.message : "server" in s ? String(s.server) : "";
      events.push({ type: s.type, at: clock(), detail });
    }
  })();
  return events;
}

/** The events by type, and how long each disconnect lasted until the reconnect. */
function describeConnection(events: { type: string; at: number }[]): string {
  const n = new Map<string, number>();
  for (const e of events) n.set(e.type, (n.get(e.type) ?? 0) + 1);
  const gaps: number[] = [];
  events.forEach((e, i) => {
    if (e.type !== "disconnect") return;
    const back = events.slice(i + 1).find((x) => x.type === "reconnect");
    if (back) gaps.push(Math.round(back.at - e.at));
  });
  const types = [...n].map(([t, c]) => `${t} ${c}`).join(", ") || "no events";
  return gaps.length > 0 ? `${types} (reconnected after ${gaps.join(", ")} ms)` : types;
}

/**
 * Waits until every published message was started, every run ended and the consumer
 * has nothing pending or unacked (redeliveries still due would come after). Returns
 * false after `timeoutMs`: the checker then says what is missing.
 */
async function settled(env: TestEnv, wq: string, log: FaultLog, total: number, timeoutMs: number): Promise<boolean> {
  try {
    await waitFor(
      async () => {
        if (log.unique() < total || !log.allEnded()) return false;
        const ci = await env.jsm.consumers.info(wq, "m1");
        return ci.num_ack_pending === 0 && ci.num_pending === 0;
      },
      timeoutMs,
      "everything handled and acked",
      100,
    );
    return true;
  } catch {
    return false;
  }
}

/** Busy-waits: synchronous work, the event loop does nothing else meanwhile. */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // work
  }
}

/** The assertions every reproduction shares: the promises, not how far the engine is from them. */
function assertPromises(report: FaultReport, where: string): void {
  assert.deepEqual(report.lost.slice(0, 10), [], `${where}: nothing lost (${report.lost.length} lost)`);
  assert.deepEqual(report.outOfOrder.slice(0, 10), [], `${where}: per-key order of first handling (${report.outOfOrder.length} messages out of order, ${report.keysOutOfOrder} keys)`);
  assert.deepEqual(report.overlaps.slice(0, 10), [], `${where}: no two runs of one key at once (${report.overlaps.length} overlaps)`);
  assert.deepEqual(report.staleStarts.slice(0, 10), [], `${where}: no start under a pin another instance had already replaced (${report.staleStarts.length} such starts)`);
  for (const i of report.isolated) {
    assert.deepEqual(i.startsAfter.slice(0, 10), [], `${where}: the isolated instance ${i.who} starts nothing once its standby started (${i.startsAfter.length} starts after the takeover)`);
  }
  assert.equal(report.withoutPinId, 0, `${where}: every message carried a pin id (the stale-pin check judged every start)`);
}

// --- slow consumer --------------------------------------------------------------

/** Payload bytes: with the JSON around it and the headers, under the server's 1 MiB max_payload. */
const PAD_BYTES = 1_000_000 - 200;

/**
 * One elastic member, a pinned instance and a hot standby, 5 keys, 300 messages of about
 * 1 MB, 50 ms of synchronous work per message: the pinned instance reads its socket only
 * between messages. Returns the checker's report, the slow-consumer cuts in the server's
 * log, and the members' status events.
 */
async function slowConsumerRun(name: string, options: { maxBufferedBytes?: number; consumerConfig?: { ack_wait: number } }): Promise<{ report: FaultReport; cuts: string[]; statuses: MemberStatus[] }> {
  const dir = await mkdtemp(join(tmpdir(), "pcg-slowc-"));
  const serverLog = join(dir, "server.log");
  const env = await startEnv({ extraConfig: `log_file: ${JSON.stringify(serverLog)}` });
  const members: ConsumerGroupMember[] = [];
  const statuses: MemberStatus[] = [];
  try {
    const { stream, wq, subjectOf } = await memberGroup(env, "slowc");
    const pub = new KeyedPublisher(env.js, subjectOf, 5, stream, PAD_BYTES);
    await pub.publish(300);
    await waitFor(async () => (await env.jsm.streams.info(wq)).state.messages >= 300, 30_000, "the work queue to source all 300 messages");

    const log = new FaultLog();
    const opts = { maxReconnectAttempts: -1, reconnectTimeWait: 100 };
    const [ca, cb] = [await env.connect(opts), await env.connect(opts)];
    const connA = recordConnection(ca.nc);
    const connB = recordConnection(cb.nc);
    const watch = (m: ConsumerGroupMember): void =>
      void (async () => {
        for await (const e of m.status()) statuses.push(e);
      })();
    // Serial, default AckWait; 50 ms of synchronous work per message.
    members.push(await elasticConsume(ca.js, { stream, group: "g", member: "m1", ...options, handler: log.handler("A", () => busy(50)) }));
    watch(members[0] as ConsumerGroupMember);
    await waitFor(() => log.startsBy("A") > 0, 20_000, "A to take the pin and start");
    members.push(await elasticConsume(cb.js, { stream, group: "g", member: "m1", ...options, handler: log.handler("B", () => busy(50)) }));
    watch(members[1] as ConsumerGroupMember);

    // Every cut holds starts until its lost deliveries come back (about an AckWait): a loaded machine
    // may see ten cuts in a run, so the run gets time for all of them.
    const complete = await settled(env, wq, log, 300, 150_000);
    const report = log.check(pub.published);
    const logged = await readFile(serverLog, "utf8").catch(() => "");
    const cuts = logged.split("\n").filter((l) => l.includes("Slow Consumer Detected"));
    const varz = await env.server.monitor<{ slow_consumers?: number }>("/varz");
    const held = statuses.flatMap((e) => (e.type === "starts_held" ? [`${e.reason} ${e.durationMs} ms`] : []));
    console.log(summary(name, report));
    console.log(`  complete: ${complete}; server log: ${cuts.length} "Slow Consumer Detected" (varz slow_consumers ${varz.slow_consumers ?? "?"})`);
    console.log(`  A's connection: ${describeConnection(connA)}; B's connection: ${describeConnection(connB)}`);
    console.log(`  slow_consumer events ${statuses.filter((e) => e.type === "slow_consumer").length}; starts held: ${held.join(", ") || "none"}`);
    for (const v of report.outOfOrder.slice(0, 5)) console.log(`    order: ${v}`);
    return { report, cuts, statuses };
  } finally {
    await Promise.allSettled(members.map((m) => m.stop()));
    await env.close();
    await rm(dir, { recursive: true, force: true });
  }
}

test("order - 1 MB messages with synchronous handlers stay under the server's slow-consumer limit with the default byte budget", { timeout: 240_000 }, async () => {
  const { report, cuts } = await slowConsumerRun("order byte budget", {});
  assert.deepEqual(cuts, [], "the server never cut the instance as a slow consumer");
  assertPromises(report, "byte budget");
});

test("order - a slow-consumer cut keeps per-key order (a byte budget above the server's limit)", { timeout: 240_000 }, async () => {
  // 512 MiB lets the server queue past its 64 MiB max_pending, so it cuts the instance.
  const { report, cuts, statuses } = await slowConsumerRun("order slow consumer", { maxBufferedBytes: 512 * 1024 * 1024, consumerConfig: { ack_wait: 2_000_000_000 } });
  assert.ok(cuts.length > 0, "the server cut a connection as a slow consumer (else this test tried nothing)");
  assert.ok(statuses.some((e) => e.type === "slow_consumer"), "the cut instance reported slow_consumer");
  assertPromises(report, "slow-consumer cut");
});

// --- half-open link ---------------------------------------------------------------

test("order - a half-open link to the pinned instance: it starts nothing once its standby holds the pin", { timeout: 120_000 }, async () => {
  const env = await startEnv();
  const proxy = await startTcpProxy(env.server.port);
  const members: ConsumerGroupMember[] = [];
  try {
    const { stream, wq, subjectOf } = await memberGroup(env, "halfopen");
    const pub = new KeyedPublisher(env.js, subjectOf, 5, stream);
    const log = new FaultLog();
    const opts = { maxReconnectAttempts: -1, reconnectTimeWait: 100 };
    const ca = await env.connect({ ...opts, servers: proxy.url });
    const cb = await env.connect(opts);
    const connA = recordConnection(ca.nc);
    const ackWaitMs = 1000;
    const work = (): Promise<void> => new Promise((r) => setTimeout(r, 10));
    const options = (who: string) => ({ stream, group: "g", member: "m1", consumerConfig: { ack_wait: nanos(ackWaitMs) }, handler: log.handler(who, work) });
    members.push(await elasticConsume(ca.js, options("A")));
    await pub.publish(20);
    await waitFor(() => log.startsBy("A") > 0, 20_000, "A (through the proxy) to take the pin and start");
    members.push(await elasticConsume(cb.js, options("B")));
    await waitFor(async () => (await env.jsm.consumers.info(wq, "m1")).num_waiting >= 2, 10_000, "the standby's pull on m1");

    // A backlog, so the pinned instance holds messages when its link goes quiet.
    const beforeBacklog = clock();
    await pub.publish(400);
    await waitFor(() => log.startsBy("A", beforeBacklog) >= 20, 20_000, "A to work through the backlog");
    const from = clock();
    const held = proxy.hold(15_000);
    // More load while A is cut off: the standby has fresh messages to take the pin with.
    for (let i = 0; i < 10; i++) {
      await pub.publish(20);
      await new Promise((r) => setTimeout(r, 300));
    }
    await held;
    const until = clock();
    await pub.publish(100);

    const complete = await settled(env, wq, log, pub.total(), 30_000);
    const report = log.check(pub.published, { isolations: [{ who: "A", from, until }] });
    const iso = report.isolated[0];
    console.log(summary("order half-open link", report));
    console.log(
      `  complete: ${complete}; link held 15 s; B first started +${iso?.takeoverAt === undefined ? "never" : Math.round(iso.takeoverAt - from)} ms into the hold; ` +
        `A started ${log.startsBy("A", from) - log.startsBy("A", until)} during the hold, ${log.startsBy("A", until)} after it; A's connection: ${describeConnection(connA)}`,
    );
    for (const v of iso?.startsAfter.slice(0, 3) ?? []) console.log(`    A after the takeover: ${v}`);
    for (const v of report.outOfOrder.slice(0, 3)) console.log(`    order: ${v}`);
    for (const v of report.overlaps.slice(0, 3)) console.log(`    overlap: ${v}`);
    assert.ok(iso?.takeoverAt !== undefined, "the standby started handling while the pinned instance's link was held (else this test tried nothing)");
    assertPromises(report, "half-open link");
  } finally {
    await proxy.close();
    await Promise.allSettled(members.map((m) => m.stop()));
    await env.close();
  }
});

// --- event-loop block -------------------------------------------------------------

test("order - an event loop block longer than AckWait: no start after the pin moved", { timeout: 120_000 }, async () => {
  const env = await startEnv();
  const children: FaultChild[] = [];
  const ackWaitMs = 1000;
  const blockMs = 1.5 * ackWaitMs;
  const rounds = 3;
  /** Messages published right behind each block message. */
  const BURST = 150;
  try {
    const { stream, wq, subjectOf } = await memberGroup(env, "block");
    const pub = new KeyedPublisher(env.js, subjectOf, 5, stream);
    const log = new FaultLog();
    // Each instance in its own process (a block stalls everything in its process), both blocking
    // synchronously for 1.5 x AckWait on a marked message's first delivery: whichever is pinned then.
    const settings = { url: env.server.url, stream, group: "g", member: "m1", ackWaitMs, workMs: 5, honourBlock: true };
    const a = startFaultChild({ ...settings, who: "A" }, log);
    children.push(a);
    await a.ready;
    await pub.publish(20);
    await waitFor(() => log.startsBy("A") > 0, 20_000, "A to take the pin and start");
    const b = startFaultChild({ ...settings, who: "B" }, log);
    children.push(b);
    await b.ready;
    await waitFor(async () => (await env.jsm.consumers.info(wq, "m1")).num_waiting >= 2, 10_000, "the standby's pull on m1");

    // Steady load, about 100 messages a second. Once `blockNext` is set, the next message carries
    // the block and a burst follows it at once, so the blocked instance holds a backlog, as a busy
    // one does (an instance that keeps up with the load has nothing buffered to start after a block).
    let running = true;
    let blockNext = false;
    const load = (async () => {
      while (running) {
        if (blockNext) {
          blockNext = false;
          await pub.publish(1, () => ({ block: blockMs }));
          await pub.publish(BURST);
        }
        await pub.publish(1);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const blocks = (): number => children.reduce((n, c) => n + c.blocks.length, 0);
    try {
      for (let round = 0; round < rounds; round++) {
        const before = log.unique();
        await waitFor(() => log.unique() >= before + 150, 30_000, `round ${round + 1}: handling under way`);
        blockNext = true;
        await waitFor(() => blocks() > round, 20_000, `round ${round + 1}: the pinned instance to block`);
      }
      const before = log.unique();
      await waitFor(() => log.unique() >= before + 150, 30_000, "handling to go on after the last block");
    } finally {
      running = false;
      await load;
    }

    const complete = await settled(env, wq, log, pub.total(), 30_000);
    // After a block, an instance that lost its pin must start nothing: within one AckWait of the
    // block's end its standby (pinned for a PinnedTTL of 1 s) cannot have given the pin back.
    const isolations = children.flatMap((c) => c.blocks.map((k) => ({ who: c.who, from: k.from, until: k.to + ackWaitMs })));
    // The message each block ran, and whatever else was running when it began, cannot be recalled:
    // overlaps with those runs are the documented exception, and nothing else is.
    const stalls = children.flatMap((c) => c.blocks.map((k) => ({ who: c.who, from: k.from })));
    const report = log.check(pub.published, { isolations, toleranceMs: 2, stalls });
    console.log(summary("order event-loop block", report));
    console.log(
      `  complete: ${complete}; blocks: ${children.flatMap((c) => c.blocks.map((k) => `${c.who} ${Math.round(k.to - k.from)} ms at +${Math.round(k.from - log.t0)}`)).join(", ")}; ` +
        `status A: ${describeConnection(a.events.filter((e) => e.ev === "status"))}; status B: ${describeConnection(b.events.filter((e) => e.ev === "status"))}`,
    );
    for (const v of report.staleStarts.slice(0, 3)) console.log(`    pin: ${v}`);
    for (const v of report.overlaps.slice(0, 3)) console.log(`    overlap: ${v}`);
    for (const v of report.outOfOrder.slice(0, 3)) console.log(`    order: ${v}`);
    assert.equal(blocks(), rounds, "every round blocked the pinned instance");
    assert.ok(
      report.isolated.some((i, n) => i.takeoverAt !== undefined && i.takeoverAt <= (isolations[n]?.until ?? 0)),
      "the standby took over during a block at least once (else this test tried nothing)",
    );
    assertPromises(report, "event-loop block");
  } finally {
    await Promise.allSettled(children.map((c) => c.stop()));
    await env.close();
  }
});

// --- synchronous work in key mode ---------------------------------------------------

test("order - synchronous work before each handler's first await (key mode): no start under a pin that moved", { timeout: 120_000 }, async () => {
  const env = await startEnv();
  const children: FaultChild[] = [];
  try {
    const { stream, wq, subjectOf } = await memberGroup(env, "keysync");
    const pub = new KeyedPublisher(env.js, subjectOf, 10, stream);
    const log = new FaultLog();
    // 100 ms of synchronous work per run, up to 16 runs in one dispatch loop: the loop outlasts
    // the pin's proof (PinnedTTL 1 s), and the keep-alive timer cannot fire meanwhile.
    const settings = { url: env.server.url, stream, group: "g", member: "m1", ackWaitMs: 1000, workMs: 5, syncMs: 100, concurrency: "key" as const };
    const a = startFaultChild({ ...settings, who: "A" }, log);
    children.push(a);
    await a.ready;
    const b = startFaultChild({ ...settings, who: "B" }, log);
    children.push(b);
    await b.ready;
    const until = performance.now() + 20_000;
    while (performance.now() < until) {
      await pub.publish(1);
      await new Promise((r) => setTimeout(r, 1000 / 12));
    }
    const complete = await settled(env, wq, log, pub.total(), 60_000);
    const report = log.check(pub.published, { toleranceMs: 2 });
    console.log(summary("order key-mode synchronous work", report));
    console.log(`  complete: ${complete}; status A: ${describeConnection(a.events.filter((e) => e.ev === "status"))}; status B: ${describeConnection(b.events.filter((e) => e.ev === "status"))}`);
    for (const v of report.staleStarts.slice(0, 3)) console.log(`    pin: ${v}`);
    assert.deepEqual(report.lost.slice(0, 10), [], "nothing lost");
    assert.deepEqual(report.outOfOrder.slice(0, 10), [], "per-key order of first handling");
    // A run in flight when the pin moved may overlap its redelivery (it cannot be recalled); a start after it may not.
    assert.deepEqual(report.staleStarts.slice(0, 10), [], `no start under a pin another instance had already replaced (${report.staleStarts.length})`);
  } finally {
    await Promise.allSettled(children.map((c) => c.stop()));
    await env.close();
  }
});
