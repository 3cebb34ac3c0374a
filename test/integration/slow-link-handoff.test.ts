/**
 * A planned membership change while two members' links are slow (the fault catalogue's
 * slow-link row): an elastic group of 6 partitions, a pinned instance per member (and a
 * hot standby for one of them), each on a connection of its own through its own proxy,
 * keyed messages published throughout. The links of two members' pinned instances get
 * 400 ms per chunk in each direction; 2 s later, right behind a burst that leaves the
 * members with a backlog, a member is added (or one is deleted), so partitions move
 * between members, some from or to a slow one; the load goes on, the links stay slow a
 * while after every member joined, then recover, and everything is handled.
 *
 * The checker (test/helpers/fault-check.ts) is applied to every handler run of every
 * member: nothing lost, per-key order of first handling, no two runs of one key at once
 * on any two members, and no duplicate at all: nothing crashed and no AckWait ran out
 * (5 s, against a round trip of 800 ms), so a message handled twice is a handoff that
 * lost an ack or handed over what was still being handled.
 *
 * The fault report's duplicates (61-76 in 3 of 6 runs, the old owner re-running what the
 * new owner had handled, a key on two members at once) need one more thing, found by
 * lining requests up on the wire: a hot standby on a healthy link whose create of the
 * member's consumer reaches the server while the slow pinned instance's delete of it is
 * carried out. The server races the two (`open …/meta.inf.tmp: no such file or
 * directory`), the consumer it makes keeps the deleted one's pending deliveries, and
 * after AckWait it redelivers to the old owner the messages of the partition that moved,
 * which the new owner had already handled. The last test holds the standby's create on
 * its link and lets it go the moment the delete reaches the server (file storage, as the
 * race needs): on 16d7c24 4 of 10 runs broke (71-77 duplicates, 18-26 overlaps); with the
 * consumer-create gate the standby sends no create while the old consumer is there.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { NatsConnection } from "@nats-io/transport-node";
import { addMembers, createElastic, deleteMembers, elasticConsume, workQueueStreamName, type ConcurrencyMode, type ConsumerGroupMember, type MemberStatus } from "../../src/index.js";
import { FaultLog, KeyedPublisher, clock, summary, type FaultReport } from "../helpers/fault-check.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { startTapProxy, startTcpProxy, type TapProxy, type TcpProxy } from "../helpers/tcp-proxy.js";

/** The delay per chunk, each way, on a slowed link. */
const SLOW_LINK_MS = 400;
/** How long the links are slow before the membership changes. */
const SLOW_BEFORE_CHANGE_MS = 2000;
/** How long the load goes on, links still slow, after the change. */
const SLOW_AFTER_CHANGE_MS = 6000;
/** How long the links stay slow, at least, after every member joined with its new partitions. */
const MIN_SLOW_AFTER_JOIN_MS = 3000;
/** Messages published at once right before the change (at the steady rate they would take 4 s). */
const BURST_BEFORE_CHANGE = 400;
const PARTITIONS = 6;
const KEYS = 24;

/** One instance of a member, on a connection (and a proxy) of its own. */
interface InstanceSpec {
  /** The instance's name in the log, e.g. `m1a`. */
  who: string;
  member: string;
  /** Started once every member handles messages, so that the instance started first holds the pin: a hot standby. */
  standby?: boolean;
}

/** One run of the fault: who is in the group, whose link is slowed, and what changes. */
interface SlowLinkScenario {
  name: string;
  /** The membership before the change. */
  membersBefore: string[];
  /** The instances; a member outside the membership idles until it is added. */
  instances: InstanceSpec[];
  /** The instances whose links are slowed. */
  slowed: string[];
  /** The membership change. */
  change(env: TestEnv, stream: string): Promise<unknown>;
  /** The membership after the change (to know when every member took its new partitions). */
  membersAfter: string[];
  concurrency: ConcurrencyMode;
  /** Messages published at once right before the change (default {@link BURST_BEFORE_CHANGE}). */
  burst?: number;
  /** File-stored streams (memory by default). */
  fileStorage?: boolean;
  /**
   * Lines a standby's create of its member's consumer up behind the pinned instance's
   * delete of it: from the change on, the standby's create request is held on its link
   * and let go the moment the pinned instance's delete request reaches the server.
   */
  createBehindDelete?: { member: string; pinned: string; standby: string };
}

/** A member status event with the time it came. */
interface TimedStatus {
  /** The instance. */
  who: string;
  member: string;
  at: number;
  event: MemberStatus;
}

/** A status event in a line (errors by their message). */
function describeStatus(e: MemberStatus): string {
  const { type, ...rest } = e;
  const fields = Object.entries(rest).map(([k, v]) => `${k}=${v instanceof Error ? v.message : JSON.stringify(v)}`);
  return fields.length > 0 ? `${type} ${fields.join(" ")}` : type;
}

/** How many times each connection dropped (a slow link must not cost a reconnect). */
function countDisconnects(nc: NatsConnection, into: Map<string, number>, who: string): void {
  void (async () => {
    for await (const s of nc.status()) if (s.type === "disconnect") into.set(who, (into.get(who) ?? 0) + 1);
  })();
}

/**
 * Waits until every published message was started, every run ended, the work queue
 * holds nothing (every message acked: nothing can be redelivered any more) and the
 * number of starts stayed the same for a second after that (a redelivery already on
 * its way would have arrived). False after `timeoutMs`: the checker says what is missing.
 */
async function drained(env: TestEnv, wq: string, log: FaultLog, total: number, timeoutMs: number): Promise<boolean> {
  try {
    let quietSince: { starts: number; at: number } | undefined;
    await waitFor(
      async () => {
        if (log.unique() < total || !log.allEnded() || (await env.jsm.streams.info(wq)).state.messages > 0) {
          quietSince = undefined;
          return false;
        }
        const starts = log.runs.length;
        if (quietSince?.starts !== starts) quietSince = { starts, at: Date.now() };
        return Date.now() - quietSince.at >= 1000;
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

/** The runs of a duplicated message, each with its member, delivery count and times. */
function duplicateDetails(log: FaultLog, limit: number): string[] {
  const byMessage = new Map<string, typeof log.runs>();
  for (const r of log.runs) {
    const id = `${r.key}/${r.seq}`;
    const list = byMessage.get(id) ?? [];
    byMessage.set(id, list);
    list.push(r);
  }
  const rel = (t: number | undefined): string => (t === undefined ? "open" : `+${Math.round(t - log.t0)}`);
  return [...byMessage]
    .filter(([, runs]) => runs.length > 1)
    .slice(0, limit)
    .map(([id, runs]) => `${id}: ${runs.map((r) => `${r.who}#${r.deliveryCount} [${rel(r.start)}, ${rel(r.end)}]`).join(" then ")}`);
}

async function slowLinkRun(scenario: SlowLinkScenario): Promise<FaultReport> {
  const env = await startEnv();
  const proxies = new Map<string, TcpProxy>();
  const taps: TapProxy[] = [];
  const members: ConsumerGroupMember[] = [];
  const statuses: TimedStatus[] = [];
  const disconnects = new Map<string, number>();
  let running = true;
  let load: Promise<void> | undefined;
  try {
    const stream = uniqueName("slowlink");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], ...(scenario.fileStorage ? { storage: "file" as const } : {}) });
    await createElastic(env.js, { stream, group: "g", maxMembers: PARTITIONS, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, stream, "g", scenario.membersBefore);
    const wq = workQueueStreamName(stream, "g");
    const log = new FaultLog();
    const pub = new KeyedPublisher(env.js, (key) => `${stream}.${key}`, KEYS, stream);

    // The create-behind-delete line-up: armed at the change, let go by the pinned instance's delete.
    const race = scenario.createBehindDelete;
    // nats.js names the consumer in a delete's subject, not in a create's (its name is in the body).
    const deleteSubject = `$JS.API.CONSUMER.DELETE.${wq}.${race?.member ?? ""}`;
    const createSubject = `$JS.API.CONSUMER.CREATE.${wq}`;
    let armed = false;
    let letCreateGo: (() => void) | undefined;
    let deleteSeen: Promise<void> = Promise.resolve();
    const raceLog: string[] = [];
    const noteRace = (what: string): void => void raceLog.push(`+${Math.round(clock() - log.t0)} ${what}`);
    /** The instance's way to the server: its own adjustable proxy, and for the race a tap behind it (pinned) or instead of it (standby). */
    const linkOf = async (who: string): Promise<string> => {
      if (race && who === race.standby) {
        const tap = await startTapProxy(env.server.port, async (chunk) => {
          if (!armed || !chunk.includes(createSubject)) return;
          noteRace(`${who}'s create held`);
          await deleteSeen;
          noteRace(`${who}'s create let go`);
        });
        taps.push(tap);
        return tap.url;
      }
      let port = env.server.port;
      if (race && who === race.pinned) {
        const tap = await startTapProxy(port, (chunk) => {
          if (!armed || letCreateGo === undefined || !chunk.includes(deleteSubject)) return;
          noteRace(`${who}'s delete reaches the server`);
          setImmediate(letCreateGo);
          letCreateGo = undefined;
        });
        taps.push(tap);
        port = tap.port;
      }
      const proxy = await startTcpProxy(port, 0, true);
      proxies.set(who, proxy);
      return proxy.url;
    };
    const startInstance = async ({ who, member }: InstanceSpec): Promise<void> => {
      const client = await env.connect({ servers: await linkOf(who), maxReconnectAttempts: -1, reconnectTimeWait: 100 });
      countDisconnects(client.nc, disconnects, who);
      const instance = await elasticConsume(client.js, {
        stream,
        group: "g",
        member,
        concurrency: scenario.concurrency,
        // 1-20 ms of asynchronous work: a drain usually finds a handler running.
        handler: log.handler(who, () => new Promise((r) => setTimeout(r, 1 + Math.random() * 19))),
      });
      members.push(instance);
      void (async () => {
        for await (const event of instance.status()) statuses.push({ who, member, at: clock(), event });
      })();
    };
    for (const spec of scenario.instances) if (!spec.standby) await startInstance(spec);

    // Steady keyed load, about 100 messages a second, until the test stops it; a burst when asked for
    // (one publisher: each key's sequence numbers are handed out in publish order).
    let burst = 0;
    let burstDone: (() => void) | undefined;
    load = (async () => {
      while (running) {
        if (burst > 0) {
          await pub.publish(burst);
          burst = 0;
          burstDone?.();
        }
        await pub.publish(1);
        await new Promise((r) => setTimeout(r, 10));
      }
    })();
    const memberOf = new Map(scenario.instances.map((i) => [i.who, i.member]));
    const handledBy = (member: string): boolean => log.runs.some((r) => memberOf.get(r.who) === member);
    await waitFor(() => scenario.membersBefore.every(handledBy), 30_000, "every member to handle messages");
    for (const spec of scenario.instances) if (spec.standby) await startInstance(spec);

    for (const who of scenario.slowed) proxies.get(who)?.setDelay(SLOW_LINK_MS);
    const slowFrom = clock();
    await new Promise((r) => setTimeout(r, SLOW_BEFORE_CHANGE_MS));
    // A backlog right before the change: the members give partitions up with messages buffered and on the wire.
    await new Promise<void>((resolve) => {
      burstDone = resolve;
      burst = scenario.burst ?? BURST_BEFORE_CHANGE;
    });
    const changeAt = clock();
    if (race) {
      deleteSeen = new Promise<void>((resolve) => {
        letCreateGo = resolve;
        // No delete seen (another instance deleted, say): the create goes after 20 s anyway.
        setTimeout(resolve, 20_000).unref();
      });
      armed = true;
    }
    await scenario.change(env, stream);
    // Every member of the new membership took its new partitions (the change was acted on), under load.
    await waitFor(
      () => scenario.membersAfter.every((m) => statuses.some((s) => s.member === m && s.at >= changeAt && s.event.type === "joined")),
      45_000,
      "every member to join with its new partitions",
      100,
    );
    const joinedAt = clock();
    // The links stay slow for a while after the joins too: the new consumers' first deliveries and takeovers.
    await new Promise((r) => setTimeout(r, Math.max(MIN_SLOW_AFTER_JOIN_MS, SLOW_AFTER_CHANGE_MS - (joinedAt - changeAt))));
    for (const proxy of proxies.values()) proxy.setDelay(0);
    const slowUntil = clock();
    // A little more load on healthy links, then the publisher stops.
    await new Promise((r) => setTimeout(r, 1000));
    running = false;
    await load;

    const complete = await drained(env, wq, log, pub.total(), 60_000);
    // The pin check compares pin ids among the instances of one member (each member's consumer has pins of its own).
    const staleStarts = [...new Set(memberOf.values())].flatMap((member) => {
      const own = new FaultLog(log.t0);
      own.runs.push(...log.runs.filter((r) => memberOf.get(r.who) === member));
      return own.check(new Map()).staleStarts;
    });
    const report: FaultReport = { ...log.check(pub.published), staleStarts };
    const rel = (t: number): string => `+${Math.round(t - log.t0)}`;
    console.log(summary(scenario.name, report));
    console.log(
      `  complete: ${complete}; links of ${scenario.slowed.join(", ")} slow (${SLOW_LINK_MS} ms a chunk) from ${rel(slowFrom)} to ${rel(slowUntil)}; ` +
        `change at ${rel(changeAt)}, every member joined by ${rel(joinedAt)}; disconnects: ${[...disconnects].map(([m, n]) => `${m} ${n}`).join(", ") || "none"}`,
    );
    if (race) console.log(`  create behind delete: ${raceLog.join("; ") || "the standby sent no create of the consumer after the change"}`);
    const interesting = new Set(["partitions_changed", "joined", "idle", "pinned", "unpinned", "drain_timeout", "ack_failed", "consumer_lost", "consumer_error", "starts_held", "slow_consumer", "handler_error"]);
    if (report.duplicates > 0 || report.overlaps.length > 0 || report.outOfOrder.length > 0 || report.lost.length > 0 || !complete) {
      for (const s of statuses) if (interesting.has(s.event.type)) console.log(`    ${rel(s.at)} ${s.who}: ${describeStatus(s.event)}`);
    }
    for (const d of duplicateDetails(log, 10)) console.log(`    duplicate ${d}`);
    for (const v of report.overlaps.slice(0, 5)) console.log(`    overlap: ${v}`);
    for (const v of report.outOfOrder.slice(0, 5)) console.log(`    order: ${v}`);
    for (const v of report.staleStarts.slice(0, 5)) console.log(`    pin: ${v}`);
    assert.ok(complete, "every message handled and acked, the work queue empty");
    return report;
  } finally {
    running = false;
    await load?.catch(() => undefined);
    await Promise.allSettled(members.map((m) => m.stop()));
    for (const proxy of proxies.values()) await proxy.close();
    for (const tap of taps) await tap.close();
    await env.close();
  }
}

/** The promises: a planned change on slow links loses nothing, keeps order, never runs a key twice at once, and handles nothing twice. */
function assertPromises(report: FaultReport, where: string): void {
  assert.deepEqual(report.lost.slice(0, 10), [], `${where}: nothing lost (${report.lost.length} lost)`);
  assert.deepEqual(report.outOfOrder.slice(0, 10), [], `${where}: per-key order of first handling (${report.outOfOrder.length} messages out of order, ${report.keysOutOfOrder} keys)`);
  assert.deepEqual(report.overlaps.slice(0, 10), [], `${where}: no two runs of one key at once (${report.overlaps.length} overlaps)`);
  assert.deepEqual(report.staleStarts.slice(0, 10), [], `${where}: no start under a pin another instance of its member had already replaced (${report.staleStarts.length})`);
  assert.equal(report.duplicates, 0, `${where}: no message handled twice (nothing crashed, no AckWait ran out)`);
}

test("slow link - a member added while two members' links are slow: nothing lost, per-key order, no overlap, no duplicate", { timeout: 120_000 }, async () => {
  // 6 partitions: m1 {0,1,2} m2 {3,4,5}, then m1 {0,1} m2 {2,3} m3 {4,5}: partition 2 moves between the slow members, 4 and 5
  // from a slow one to m3. m2's standby is on a healthy link: it sees the change before its pinned instance does.
  const report = await slowLinkRun({
    name: "slow link, member added",
    membersBefore: ["m1", "m2"],
    instances: [
      { who: "m1a", member: "m1" },
      { who: "m2a", member: "m2" },
      { who: "m3a", member: "m3" },
      { who: "m2b", member: "m2", standby: true },
    ],
    slowed: ["m1a", "m2a"],
    change: (env, stream) => addMembers(env.js, stream, "g", ["m3"]),
    membersAfter: ["m1", "m2", "m3"],
    concurrency: "serial",
  });
  assertPromises(report, "member added");
});

test("slow link - a member deleted while its link and another member's are slow: nothing lost, per-key order, no overlap, no duplicate", { timeout: 120_000 }, async () => {
  // m1 {0,1} m2 {2,3} m3 {4,5}, then m1 {0,1,2} m3 {3,4,5}: the slow m2 gives partition 2 to the slow m1 and 3 to m3.
  // m1's standby is on a healthy link.
  const report = await slowLinkRun({
    name: "slow link, member deleted",
    membersBefore: ["m1", "m2", "m3"],
    instances: [
      { who: "m1a", member: "m1" },
      { who: "m2a", member: "m2" },
      { who: "m3a", member: "m3" },
      { who: "m1b", member: "m1", standby: true },
    ],
    slowed: ["m1a", "m2a"],
    change: (env, stream) => deleteMembers(env.js, stream, "g", ["m2"]),
    membersAfter: ["m1", "m3"],
    concurrency: "key",
  });
  assertPromises(report, "member deleted");
});

/** Runs of the create-behind-delete test: the race is the server's, one run in 2-3 hit it on 16d7c24. */
const CREATE_RACE_RUNS = Number(process.env.SLOW_LINK_CREATE_RACE_RUNS ?? "3");

test("slow link - a standby's create reaches the server while the slow pinned instance deletes the consumer, a member added: no duplicate, no overlap", { timeout: 120_000 * CREATE_RACE_RUNS }, async () => {
  // m1 {0,1,2} m2 {3,4,5}, then m1 {0,1} m2 {2,3} m3 {4,5}, the pinned m1a and m2a slow. m1s, m1's standby on a healthy link,
  // has any create of consumer m1 held on its link until m1a's delete of it reaches the server.
  const failures: string[] = [];
  for (let run = 1; run <= CREATE_RACE_RUNS; run++) {
    const report = await slowLinkRun({
      name: `slow link, create behind delete, member added (run ${run})`,
      membersBefore: ["m1", "m2"],
      instances: [
        { who: "m1a", member: "m1" },
        { who: "m2a", member: "m2" },
        { who: "m3a", member: "m3" },
        { who: "m1s", member: "m1", standby: true },
      ],
      slowed: ["m1a", "m2a"],
      change: (env, stream) => addMembers(env.js, stream, "g", ["m3"]),
      membersAfter: ["m1", "m2", "m3"],
      concurrency: "serial",
      burst: 800,
      fileStorage: true,
      createBehindDelete: { member: "m1", pinned: "m1a", standby: "m1s" },
    });
    try {
      assertPromises(report, `run ${run}`);
    } catch (err) {
      failures.push(err instanceof Error ? err.message : String(err));
    }
  }
  assert.deepEqual(failures, [], `${failures.length} of ${CREATE_RACE_RUNS} runs broke a promise`);
});
