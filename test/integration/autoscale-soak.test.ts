/**
 * The autoscaling soak (issue 25), beside the soak of issue 14 (soak.test.ts), whose
 * helpers it reuses: one elastic group on a real nats-server whose members join by
 * themselves (`autoJoin`, a lease per instance), each member a Deployment of two
 * instances (child processes) started together and stopped together (SIGTERM to both at
 * once), the member count moving between 3 and 5 every few seconds; `concurrency: "key"`
 * with `retry` and 2 % poison messages; slow handlers (10 % take 20 ms to 3 × AckWait);
 * a kill -9 of a random instance every ~6 s (it is restarted, as a Deployment replaces a
 * pod); a SIGSTOP of one instance past its lease TTL every ~10 s, then SIGCONT; one
 * `repartition()` from 4 to 8 partitions in the middle of the run; keyed publishing
 * throughout.
 *
 * Half of the seeds (odd ones) give the members a `deadLetterSubject`: every poison
 * message must then be dead-lettered exactly once, after at most `maxDeliver` attempts
 * (an attempt a kill -9 cut may add one: reported apart; a SIGSTOP excuses none; with
 * `retry.exactAttempts`, every other such seed, nothing excuses one). The other half run without
 * one: a poison key blocks and is parked, the messages behind it stay unhandled (and a
 * parked key in an old partition holds the repartition in `moving`, as docs/repartitioning.md says).
 * After the load, once nothing moves any more, every message not handled must still be
 * in the work queue (none lost); then the test releases each parked key to the
 * dead-letter stream with `releaseParkedKey(nc, stream, group, seq, { deadLetterSubject })`
 * until every message is handled or dead-lettered.
 *
 * The checker is today's (test/helpers/soak-check.ts): nothing lost, first handling in
 * key order, every duplicate explained by a kill -9 or a SIGSTOP, no two runs of a key
 * at once, every poison message dead-lettered once; and the group's config must list
 * exactly the members that run, and none once every instance stopped.
 *
 * Settings: AUTOSOAK_SEED (default random; the seed is printed first), AUTOSOAK_SECONDS
 * (load duration, default 45); AUTOSOAK_DLQ=1/0 and AUTOSOAK_ASSIGNMENT=balanced/sticky
 * override what the seed picks. The workload is a function of the seed; the timing of
 * the chaos is paced by the clock, its choices by the seed.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  createElastic,
  getElasticConsumerGroupConfig,
  listParkedKeys,
  releaseParkedKey,
  repartition,
  workQueueStreamName,
  type AssignmentPolicy,
  type ElasticConsumerGroupConfig,
  type ListedParkedKey,
  type RepartitionProgress,
} from "../../src/index.js";
import { prng, sleep } from "../helpers/load-harness.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { checkPoisonAttempts, checkSoak, repeatedDeadLetters, soakProblems, type PoisonAttempts, type RepeatedDeadLetter, type SoakReport } from "../helpers/soak-check.js";
import { SoakFleet, disturbances, now, publishSoakWorkload, type SoakInstance } from "../helpers/soak-fleet.js";
import { drawSoakWorkload, type HandlerRun, type SoakPayload } from "../helpers/soak-log.js";
import type { SoakChildSettings } from "../helpers/soak-member-child.js";

const SEED = process.env["AUTOSOAK_SEED"] ? Number(process.env["AUTOSOAK_SEED"]) : Math.floor(Math.random() * 2 ** 31);
const SECONDS = Number(process.env["AUTOSOAK_SECONDS"] ?? 45);
const DLQ = process.env["AUTOSOAK_DLQ"] ? process.env["AUTOSOAK_DLQ"] === "1" : SEED % 2 === 1;
/** `retry.exactAttempts` (with a dead-letter subject): then no kill excuses an attempt past maxDeliver. Every other seed with one. */
const EXACT = DLQ && (process.env["AUTOSOAK_EXACT"] ? process.env["AUTOSOAK_EXACT"] === "1" : Math.floor(SEED / 4) % 2 === 1);
const ASSIGNMENT = (process.env["AUTOSOAK_ASSIGNMENT"] ?? (Math.floor(SEED / 2) % 2 === 0 ? "balanced" : "sticky")) as AssignmentPolicy;
if (!Number.isSafeInteger(SEED) || !(SECONDS > 0) || !["balanced", "sticky"].includes(ASSIGNMENT)) {
  throw new Error(
    `autoscale soak: AUTOSOAK_SEED must be an integer, AUTOSOAK_SECONDS a positive number, AUTOSOAK_ASSIGNMENT balanced or sticky (got ${String(process.env["AUTOSOAK_SEED"])}, ${String(process.env["AUTOSOAK_SECONDS"])}, ${ASSIGNMENT})`,
  );
}
const ACK_WAIT_MS = 1000;
const LEASE_TTL_MS = 2000;
const SETTLE_MS = 500;
const RATE = 60; // messages per second
const KEYS = 200;
const POISON_RATE = 0.02;
const SLOW_RATE = 0.1;
const INSTANCES_PER_MEMBER = 2;
const MIN_MEMBERS = 3;
const MAX_MEMBERS = 5;
const PARTITIONS = 4;
/** A scale step (a member's two instances started, or both sent SIGTERM) every this many ms. */
const SCALE_EVERY_MS: [number, number] = [3000, 5000];
const KILL_EVERY_MS: [number, number] = [5000, 7000];
/** Share of kills aimed at an instance with a handler in flight (when there is one). */
const KILL_BUSY_SHARE = 0.5;
/** A SIGSTOP of one instance every this many ms, for 1.25 to 2 lease TTLs. */
const STOP_EVERY_MS: [number, number] = [8000, 12000];
const STOP_MS: [number, number] = [1.25 * LEASE_TTL_MS, 2 * LEASE_TTL_MS];
/** The repartition starts at this share of the load time. */
const REPARTITION_AT = 0.5;
const MAX_DELIVER = 3;
const BACKOFF_MS = [50, 100];
/** As in soak.test.ts: an ack (or a failure's count) may not have left this long before a kill. */
const ACK_GRACE_MS = 500;
const DRAIN_TIMEOUT_MS = 120_000;
/** Without a dead-letter subject: nothing handled for this long means only blocked keys (and what they hold back) are left. */
const STILL_MS = 5000;

console.log(
  `autoscale-soak - seed ${SEED} (repeat with AUTOSOAK_SEED=${SEED} AUTOSOAK_SECONDS=${SECONDS}); ${DLQ ? "with" : "without"} a dead-letter subject${EXACT ? " and exactAttempts" : ""}, assignment ${ASSIGNMENT}`,
);

/** What the run did, for the summary. */
interface Chaos {
  kills: { member: string; pid: number; inFlight: number; at: number }[];
  scaleUps: string[];
  scaleDowns: { member: string; pids: number[]; ms: number; forced: boolean }[];
  memberCounts: number[];
}

/** The repartition run in the middle of the load. */
interface Repartitioning {
  startedAt: number;
  endedAt?: number;
  durationMs?: number;
  error?: string;
  last?: RepartitionProgress;
}

/** Without a dead-letter subject: what was held once nothing moved any more, before any release. */
interface BeforeRelease {
  parkedKeys: number;
  parkedMessages: number;
  /** Good messages not handled yet. */
  unhandled: number;
  /** Of those, behind a listed parked key of theirs. */
  behindParked: number;
  /** Unhandled messages (good or poison) that were not in the work queue: lost. */
  missing: string[];
}

const listed = (c: ElasticConsumerGroupConfig): string[] => [...((c.members ?? []).length > 0 ? (c.members ?? []) : (c.member_mappings ?? []).map((m) => m.member))].sort();

describe("autoscale soak - auto-join fleet of two-instance members scaled 3-5 under kill -9, SIGSTOP past the lease, a repartition and poison messages", () => {
  let env: TestEnv | undefined;
  let fleet: SoakFleet | undefined;
  let dir: string | undefined;
  const abort = new AbortController();
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "pcg-autosoak-"));
    env = await startEnv();
  });
  after(async () => {
    abort.abort();
    await fleet?.stopAll();
    await env?.close();
    if (dir && process.env["SOAK_KEEP_LOGS"] !== "1") rmSync(dir, { recursive: true, force: true });
    else if (dir) console.log(`autoscale-soak - instance logs kept in ${dir}`);
  });

  test(
    "autoscale soak - nothing lost, key order kept, every duplicate from a kill or a SIGSTOP, poison dead-lettered once (or parked and released), the config lists the live members",
    { timeout: SECONDS * 1000 + 420_000 },
    async () => {
      assert.ok(env && dir);
      const e = env;
      const t0 = now();
      const stream = uniqueName("asoak");
      const group = "g";
      const dlqStream = `${stream}_dlq`;
      const dlqSubject = `dlq.${stream}`;
      await e.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
      // Without a dead-letter subject for the members it still receives what the test releases.
      await e.jsm.streams.add({ name: dlqStream, subjects: [dlqSubject] });
      await createElastic(e.js, { stream, group, maxMembers: PARTITIONS, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });

      const settings: Omit<SoakChildSettings, "member" | "logFile"> = {
        url: e.server.url,
        stream,
        group,
        ackWaitMs: ACK_WAIT_MS,
        mode: "key",
        maxDeliver: MAX_DELIVER,
        backoffMs: BACKOFF_MS,
        autoJoin: { leaseTtlMs: LEASE_TTL_MS, settleMs: SETTLE_MS, assignment: ASSIGNMENT },
        ...(DLQ ? { deadLetterSubject: dlqSubject } : {}),
        ...(EXACT ? { exactAttempts: true } : {}),
      };
      const f = new SoakFleet(dir, settings);
      fleet = f;
      let memberSeq = 0;
      const scaleUp = (): string => {
        const m = `m${++memberSeq}`;
        for (let i = 0; i < INSTANCES_PER_MEMBER; i++) f.start(m);
        return m;
      };
      for (let i = 0; i < MIN_MEMBERS; i++) scaleUp();
      await waitFor(() => f.live().length === MIN_MEMBERS * INSTANCES_PER_MEMBER, 60_000, "every instance consuming");
      await waitFor(async () => listed(await getElasticConsumerGroupConfig(e.js, stream, group)).join() === f.members().join(), 30_000, "the first members in the config");
      const setupMs = now() - t0;

      const workload = drawSoakWorkload(SEED, Math.round(SECONDS * RATE), { keys: KEYS, ackWaitMs: ACK_WAIT_MS, slowRate: SLOW_RATE, poisonRate: POISON_RATE, largeRate: 0, largeBytes: [0, 0] });
      const published: SoakPayload[] = [];
      let loadRunning = true;
      const loadStart = now();
      const publishing = publishSoakWorkload(e.js, stream, workload, RATE, loadStart, published, () => loadRunning);

      const chaosRng = prng(SEED ^ 0x2545f491);
      const pick = <T>(items: readonly T[]): T | undefined => items[Math.floor(chaosRng() * items.length)];
      const between = (range: [number, number]): number => range[0] + chaosRng() * (range[1] - range[0]);
      const chaos: Chaos = { kills: [], scaleUps: [], scaleDowns: [], memberCounts: [f.members().length] };
      const pulses: Promise<void>[] = [];
      const stopping: Promise<void>[] = [];
      let rep: Repartitioning | undefined;
      let repartitioning: Promise<void> = Promise.resolve();
      const startRepartition = (): void => {
        const r: Repartitioning = { startedAt: now() };
        rep = r;
        repartitioning = repartition(e.js, stream, group, 2 * PARTITIONS, { pollMs: 250, signal: abort.signal, onProgress: (p) => (r.last = p) }).then(
          (result) => {
            r.endedAt = now();
            r.durationMs = result.durationMs;
          },
          (err: unknown) => {
            r.endedAt = now();
            r.error = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
          },
        );
      };
      // Instances the chaos may disturb: running, consuming, and of a member not being scaled down.
      const targets = (): SoakInstance[] => f.live().filter((i) => !f.isRetired(i.member));
      const chaosLoop = (async () => {
        let nextScale = now() + between(SCALE_EVERY_MS);
        let nextKill = now() + between(KILL_EVERY_MS);
        let nextStop = now() + between(STOP_EVERY_MS);
        while (loadRunning) {
          await sleep(200);
          if (!loadRunning) break;
          if (!rep && now() - loadStart >= REPARTITION_AT * SECONDS * 1000) startRepartition();
          if (now() >= nextScale) {
            nextScale = now() + between(SCALE_EVERY_MS);
            const members = f.members();
            const up = members.length <= MIN_MEMBERS || (members.length < MAX_MEMBERS && chaosRng() < 0.5);
            if (up) chaos.scaleUps.push(scaleUp());
            else {
              const m = pick(members);
              if (m !== undefined) stopping.push(f.stopMember(m).then((s) => void chaos.scaleDowns.push(s)));
            }
            chaos.memberCounts.push(f.members().length);
          }
          if (now() >= nextStop) {
            nextStop = now() + between(STOP_EVERY_MS);
            const target = pick(targets());
            if (target) pulses.push(f.pause(target, between(STOP_MS)));
          }
          if (now() >= nextKill) {
            nextKill = now() + between(KILL_EVERY_MS);
            f.log.poll();
            const inFlight = f.log.inFlightByPid();
            const live = targets();
            const busy = live.filter((i) => (inFlight.get(i.pid) ?? 0) > 0);
            const target = chaosRng() < KILL_BUSY_SHARE && busy.length > 0 ? pick(busy) : pick(live);
            if (!target) continue;
            chaos.kills.push({ member: target.member, pid: target.pid, inFlight: inFlight.get(target.pid) ?? 0, at: now() });
            await f.kill(target);
            if (!f.isRetired(target.member)) f.start(target.member);
          }
        }
      })();

      let loadMs = 0;
      try {
        await publishing;
      } finally {
        loadRunning = false;
        loadMs = now() - loadStart;
        await chaosLoop;
        await Promise.all(pulses);
        await Promise.all(stopping);
      }
      if (!rep) startRepartition();

      const wq = workQueueStreamName(stream, group);
      const poisonIds = new Set(published.filter((p) => p.poison).map((p) => `${p.key}/${p.seq}`));
      const goodIds = published.filter((p) => !p.poison).map((p) => `${p.key}/${p.seq}`);
      const dlqCount = async (): Promise<number> => (await e.jsm.streams.info(dlqStream)).state.messages;
      const allDone = async (): Promise<boolean> => {
        f.log.poll();
        const ok = f.log.handledOk();
        if (goodIds.some((id) => !ok.has(id))) return false;
        if ((await dlqCount()) < poisonIds.size) return false;
        if (rep?.endedAt === undefined) return false;
        return (await e.jsm.streams.info(wq)).state.messages === 0;
      };
      const problems: string[] = [];
      const drainStart = now();
      let beforeRelease: BeforeRelease | undefined;
      let released = 0;
      const releases: { seq: number; key: string; member: string; at: number }[] = [];
      const releaseErrors: string[] = [];
      try {
        await waitFor(() => f.running().every((i) => i.isReady()), 60_000, "the restarted instances consuming");
        if (DLQ) {
          await waitFor(allDone, DRAIN_TIMEOUT_MS, "every message handled or dead-lettered, the repartition done and the work queue empty", 250);
        } else {
          // Until nothing is handled any more: what is left is blocked keys and what they hold back.
          let okRuns = -1;
          let since = now();
          await waitFor(
            () => {
              f.log.poll();
              const n = f.log.runs.filter((r) => r.ok).length;
              if (n !== okRuns) {
                okRuns = n;
                since = now();
              }
              return now() - since >= STILL_MS;
            },
            DRAIN_TIMEOUT_MS,
            `no message handled for ${STILL_MS} ms`,
            250,
          );
          beforeRelease = await heldBeforeRelease(e, stream, group, wq, published, f.log.handledOk());
          // Release every parked key to the dead-letter stream, again as keys block on their next poison message.
          await waitFor(
            async () => {
              if (await allDone()) return true;
              for (const p of await listParkedKeys(e.nc, stream, group, { waitMs: 500 })) {
                try {
                  const at = now();
                  const outcome = await releaseParkedKey(e.nc, stream, group, p.seq, { deadLetterSubject: dlqSubject, waitMs: 1000 });
                  if (outcome.released) {
                    released += 1;
                    releases.push({ seq: p.seq, key: p.key, member: outcome.member, at });
                  }
                } catch (err) {
                  releaseErrors.push(`seq ${p.seq} (${p.key}): ${err instanceof Error ? err.message : String(err)}`);
                }
              }
              return false;
            },
            DRAIN_TIMEOUT_MS,
            "every message handled or dead-lettered (parked keys released), the repartition done and the work queue empty",
            250,
          );
        }
      } catch (err) {
        problems.push(`drain: ${err instanceof Error ? err.message : String(err)}${rep?.last ? ` (repartition last seen: ${JSON.stringify(rep.last)})` : ""}`);
      }
      const drainMs = now() - drainStart;
      // A repartition still running after the drain gave up is stopped (and reported as not done).
      if (rep?.endedAt === undefined) abort.abort();
      await repartitioning;
      // Quiet: no handler start for 2 × AckWait (a late redelivery would come within AckWait).
      try {
        let runs = f.log.runs.length;
        let since = now();
        await waitFor(
          () => {
            f.log.poll();
            if (f.log.runs.length !== runs) {
              runs = f.log.runs.length;
              since = now();
            }
            return now() - since >= 2 * ACK_WAIT_MS;
          },
          30_000,
          "no handler start for 2 × AckWait",
          100,
        );
      } catch (err) {
        problems.push(`quiet period: ${err instanceof Error ? err.message : String(err)}`);
      }
      // The config lists exactly the members that run (a killed instance's lease expired, scaled-down members left).
      const liveMembers = f.members();
      let configured: string[] = [];
      try {
        await waitFor(
          async () => {
            configured = listed(await getElasticConsumerGroupConfig(e.js, stream, group));
            return configured.join() === liveMembers.join();
          },
          Math.max(15_000, 4 * LEASE_TTL_MS + 6 * SETTLE_MS),
          "the config listing exactly the live members",
          250,
        );
      } catch {
        problems.push(`the config lists ${configured.join(", ") || "no member"}, the members running are ${liveMembers.join(", ")}`);
      }
      const wqLeft = (await e.jsm.streams.info(wq)).state.messages;
      const finalConfig = await getElasticConsumerGroupConfig(e.js, stream, group);
      await f.stopAll();
      f.log.poll();
      let afterStop: string[] = [];
      try {
        await waitFor(async () => (afterStop = listed(await getElasticConsumerGroupConfig(e.js, stream, group))).length === 0, 15_000, "no member listed", 250);
      } catch {
        problems.push(`once every instance stopped the config still lists ${afterStop.join(", ")}`);
      }

      const deadLetters: string[] = [];
      const dlqInfo = await e.jsm.streams.info(dlqStream);
      for (let seq = dlqInfo.state.first_seq; seq <= dlqInfo.state.last_seq && dlqInfo.state.messages > 0; seq++) {
        const p = (await e.jsm.streams.getMessage(dlqStream, { seq }))?.json<SoakPayload>();
        if (p) deadLetters.push(`${p.key}/${p.seq}`);
      }
      const report = checkSoak({ published, runs: f.log.runs, kills: f.kills, exits: f.exits, deadLetters, ackGraceMs: ACK_GRACE_MS, pauses: f.pauses });
      const counted = checkPoisonAttempts({ published, runs: f.log.runs, kills: f.kills, pauses: f.pauses, ackGraceMs: ACK_GRACE_MS, ackWaitMs: ACK_WAIT_MS }, MAX_DELIVER);
      // Counted before they start, a cut attempt (a kill, a SIGSTOP past AckWait) counts too: nothing excuses an attempt past maxDeliver.
      const attempts: PoisonAttempts = EXACT ? { ...counted, byKill: [], unexplained: [...counted.unexplained, ...counted.byKill] } : counted;

      const who = (pid: number): string => `${f.memberOf(pid)} (pid ${pid}${f.kills.has(pid) ? ", killed" : ""}${f.stops.has(pid) ? ", scaled down" : ""})`;
      problems.unshift(...soakProblems(report, f.log.runs, f.kills, who));
      if (DLQ && attempts.unexplained.length > 0) {
        problems.push(
          `${attempts.unexplained.length} poison messages attempted more than maxDeliver (${MAX_DELIVER}) times with fewer cut attempts to explain it:${attempts.unexplained
            .slice(0, 10)
            .map((o) => {
              const key = o.id.split("/")[0] ?? "";
              const runs = f.log.runs.filter((r) => `${r.key}/${r.seq}` === o.id).map((r) => describeRunShort(r, who));
              const letters = f.log.deadLettered.filter((d) => d.info?.startsWith(`${stream}.${key} `)).map((d) => `${d.type} ${d.info ?? ""} by ${who(d.pid)} at ${new Date(d.at).toISOString().slice(11, 23)}`);
              return `\n  ${o.id}: ${o.attempts} attempts (cut by a kill ${o.cutByKill}, across a SIGSTOP ${o.acrossPause}, of those past AckWait ${o.acrossPausePastAckWait}): ${runs.join("; ")}\n    dead letters of key ${key}: ${letters.join("; ") || "none reported"}`;
            })
            .join("")}`,
        );
      }
      const redead = repeatedDeadLetters(f.log.deadLettered, { kills: f.kills, pauses: f.pauses, ackGraceMs: ACK_GRACE_MS });
      const redeadNotExcused = redead.filter((d) => !d.excused);
      if (redeadNotExcused.length > 0) {
        problems.push(
          `${redeadNotExcused.length} messages dead-lettered more than once with no kill after the earlier dead letter (a terminate that did not take effect; the message then ran again):${redeadNotExcused
            .slice(0, 10)
            .map((d) => `\n  ${d.message}: ${d.by.map((b) => `by ${who(b.pid)} at ${new Date(b.at).toISOString().slice(11, 23)}`).join(", ")}`)
            .join("")}`,
        );
      }
      if (beforeRelease && beforeRelease.missing.length > 0) {
        problems.push(`${beforeRelease.missing.length} messages neither handled nor in the work queue before any release (lost): ${beforeRelease.missing.slice(0, 20).join(", ")}`);
      }
      if (rep?.error) problems.push(`repartition failed: ${rep.error}`);
      if (finalConfig.max_members !== 2 * PARTITIONS) problems.push(`the group has ${finalConfig.max_members} partitions after the repartition, not ${2 * PARTITIONS}`);
      if (wqLeft > 0) problems.push(`${wqLeft} messages left in the work queue`);
      if (f.unexpectedExits.length > 0) problems.push(`instances that exited on their own (or not with 0 when scaled down): ${JSON.stringify(f.unexpectedExits)} ${JSON.stringify(f.log.closed)}`);
      const forced = chaos.scaleDowns.filter((s) => s.forced);
      if (forced.length > 0) problems.push(`scale-downs whose instances had not exited 30 s after SIGTERM (then killed): ${forced.map((s) => s.member).join(", ")}`);
      if (f.log.orphanEnds > 0) problems.push(`${f.log.orphanEnds} end records without a start`);
      if (problems.length > 0) problems.push(disturbances(f, chaos.kills, problems.join("\n")));

      const summary = summarize(report, attempts, redead, chaos, f, {
        loadMs,
        drainMs,
        setupMs,
        totalMs: now() - t0,
        rep,
        beforeRelease,
        released,
        releaseErrors: releaseErrors.length,
        problems: problems.length > 0 ? problems.length - 1 : 0,
      });
      console.log(summary);
      // A release that answered `released` must have dead-lettered its message (reported for the closing note, not failed: the loop releases again).
      const dead = (seq: number): { pid: number; at: number }[] => f.log.deadLettered.filter((d) => d.type === "dead_lettered" && d.info?.endsWith(` seq ${seq}`) === true);
      // (A release is carried out after its answer: one asked again before the dead letter was sent answers `released` too.)
      const hollow = releases.filter((r) => !dead(r.seq).some((d) => d.at >= r.at));
      if (hollow.length > 0) {
        console.log(
          `autoscale-soak - ${hollow.length} releases answered "released" with no dead letter after them: ${hollow
            .slice(0, 10)
            .map((r) => `seq ${r.seq} (${r.key}) by ${r.member} at ${new Date(r.at).toISOString().slice(11, 23)}, dead-lettered at ${dead(r.seq).map((d) => new Date(d.at).toISOString().slice(11, 23)).join(", ") || "never"}`)
            .join("; ")}`,
        );
      }
      if (releaseErrors.length > 0) console.log(`autoscale-soak - release errors (a key may have moved between the list and the release): ${releaseErrors.slice(0, 10).join("; ")}`);
      if (problems.length > 0) assert.fail(`autoscale soak (seed ${SEED}) found:\n\n${problems.join("\n\n")}`);
    },
  );
});

/**
 * Without a dead-letter subject, once nothing is handled any more: the parked keys, and
 * every message not handled (good, or poison never released) checked against what the
 * work queue still stores. One missing from it is lost.
 */
async function heldBeforeRelease(e: TestEnv, stream: string, group: string, wq: string, published: readonly SoakPayload[], ok: ReadonlySet<string>): Promise<BeforeRelease> {
  const parked: ListedParkedKey[] = await listParkedKeys(e.nc, stream, group);
  const parkedKeys = new Set(parked.map((p) => p.key));
  const stored = new Set<string>();
  const info = await e.jsm.streams.info(wq);
  const seqs: number[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) seqs.push(seq);
  for (let i = 0; i < seqs.length; i += 64) {
    const batch = await Promise.all(seqs.slice(i, i + 64).map((seq) => e.jsm.streams.getMessage(wq, { seq }).catch(() => null)));
    for (const sm of batch) {
      const p = sm?.json<SoakPayload>();
      if (p) stored.add(`${p.key}/${p.seq}`);
    }
  }
  // A poison message is "handled" only once released; every one is unhandled here.
  const unhandled = published.filter((p) => (p.poison ? true : !ok.has(`${p.key}/${p.seq}`)));
  const good = unhandled.filter((p) => !p.poison);
  // A poison message never attempted yet might have been acked by nobody: it must be stored too.
  const missing = unhandled.map((p) => `${p.key}/${p.seq}`).filter((id) => !stored.has(id));
  return {
    parkedKeys: parked.length,
    parkedMessages: parked.reduce((n, p) => n + p.parkedMessages, 0),
    unhandled: good.length,
    behindParked: good.filter((p) => parkedKeys.has(p.key)).length,
    missing,
  };
}

function describeRunShort(r: HandlerRun, who: (pid: number) => string): string {
  return `${who(r.pid)} dc ${r.dc} at ${new Date(r.start).toISOString().slice(11, 23)}${r.end === undefined ? " (no end)" : ""}`;
}

/** The figures, then the one-line summary (last line) a closing note can quote. */
function summarize(
  r: SoakReport,
  a: PoisonAttempts,
  redead: readonly RepeatedDeadLetter[],
  chaos: Chaos,
  f: SoakFleet,
  x: {
    loadMs: number;
    drainMs: number;
    setupMs: number;
    totalMs: number;
    rep: Repartitioning | undefined;
    beforeRelease: BeforeRelease | undefined;
    released: number;
    releaseErrors: number;
    problems: number;
  },
): string {
  const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
  const byKind = (kind: string): number => r.duplicates.filter((d) => d.attributable === kind).length;
  const stops = f.pauses.map((p) => p.to - p.from);
  const status = [...f.log.statusCounts].sort(([p], [q]) => (p < q ? -1 : 1)).map(([k, v]) => `${k} ${v}`).join(", ");
  const counts = chaos.memberCounts;
  const repText = x.rep?.error ? `failed (${x.rep.error.slice(0, 80)})` : x.rep?.durationMs !== undefined ? `in ${s(x.rep.durationMs)}` : "not done";
  const parked = x.beforeRelease
    ? `parked ${x.beforeRelease.parkedKeys} keys holding ${x.beforeRelease.parkedMessages} messages (${x.beforeRelease.unhandled} good unhandled before release, ${x.beforeRelease.behindParked} behind a parked key, ${x.beforeRelease.missing.length} missing), released ${x.released} times${x.releaseErrors > 0 ? ` (${x.releaseErrors} release errors)` : ""}`
    : "parked 0 / released 0";
  const figures = [
    `autoscale-soak figures - seed ${SEED}, ${DLQ ? (EXACT ? "DLQ, exactAttempts" : "DLQ") : "no DLQ"}, assignment ${ASSIGNMENT}, AckWait ${ACK_WAIT_MS} ms, lease TTL ${LEASE_TTL_MS} ms, ${SECONDS} s of load`,
    `  handler runs ${r.runs} (ok ${r.okRuns}); poison attempts: most ${a.most}${DLQ ? `, over ${MAX_DELIVER} explained by an attempt a kill cut ${a.byKill.length}, unexplained ${a.unexplained.length}` : ""}`,
    `  scale: up ${chaos.scaleUps.length}, down ${chaos.scaleDowns.length} (SIGTERM to exit ${chaos.scaleDowns.map((d) => s(d.ms)).join(", ") || "-"}), members ${Math.min(...counts)}-${Math.max(...counts)}`,
    `  kills ${chaos.kills.length} (${chaos.kills.filter((k) => k.inFlight > 0).length} with a handler in flight), SIGSTOPs ${stops.length} (${stops.map((ms) => s(ms)).join(", ") || "-"})`,
    `  time: setup ${s(x.setupMs)}, load ${s(x.loadMs)}, drain ${s(x.drainMs)}, total ${s(x.totalMs)}`,
    `  status events: ${status}`,
  ];
  const line =
    `autoscale-soak summary - seed ${SEED}, ${DLQ ? (EXACT ? "DLQ, exactAttempts" : "DLQ") : "no DLQ"}, ${ASSIGNMENT}, ${SECONDS} s: ` +
    `messages ${r.published} (${r.poison} poison), handled ${r.handled}, lost ${r.lost.length}, out of order ${r.outOfOrder.length}, ` +
    `dead-lettered ${r.deadLetters} (missing ${r.dlqMissing.length}, stored twice ${r.dlqRepeated.length}, sent twice ${redead.length} of which after a kill ${redead.filter((d) => d.excused).length}), ${parked}, ` +
    `duplicates ${r.duplicates.length} (kill ${byKind("in-flight") + byKind("ack-window")}, SIGSTOP ${byKind("paused")}, unexplained ${r.notAttributable.length}), key overlaps ${r.keyOverlaps.length}, ` +
    (DLQ
      ? `poison over ${MAX_DELIVER} attempts ${a.byKill.length + a.unexplained.length} (a kill cut one ${a.byKill.length}, unexplained ${a.unexplained.length}), `
      : `poison attempts up to ${a.most} (blocked keys are retried until released), `) +
    `kills ${chaos.kills.length}, stops ${stops.length}, scale steps ${chaos.scaleUps.length + chaos.scaleDowns.length} (members ${Math.min(...counts)}-${Math.max(...counts)}), ` +
    `repartition ${PARTITIONS}→${2 * PARTITIONS} ${repText}, problems ${x.problems}`;
  return [...figures, line].join("\n");
}

describe("autoscale soak - repeated dead letters checker", () => {
  const ev = (pid: number, at: number, seq = 7) => ({ pid, at, type: "dead_lettered", info: `s.a seq ${seq}` });
  test("autoscale soak - checker: a message dead-lettered again after a kill right after its first dead letter is excused; without a kill it is not", () => {
    const kills = new Map([[1, 1100]]);
    assert.deepEqual(repeatedDeadLetters([ev(1, 1000), ev(2, 3000), ev(2, 3000, 8)], { kills, ackGraceMs: 200 }).map((d) => [d.message, d.excused]), [["s.a seq 7", true]]);
    assert.deepEqual(repeatedDeadLetters([ev(1, 1000), ev(2, 3000)], { kills: new Map(), ackGraceMs: 200 }).map((d) => d.excused), [false]);
    assert.deepEqual(repeatedDeadLetters([ev(1, 1000), ev(2, 3000)], { kills: new Map([[1, 2500]]), ackGraceMs: 200 }).map((d) => d.excused), [false]);
    // The later one from a process stopped (SIGSTOP) while the first was sent: it finished an attempt from before the stop.
    const stop = (pid: number, from: number, to: number) => ({ pid, from, to, kind: "sigstop" as const });
    assert.deepEqual(repeatedDeadLetters([ev(2, 3000), ev(1, 4100)], { kills: new Map(), pauses: [stop(1, 2000, 4000)], ackGraceMs: 200 }).map((d) => d.excused), [true]);
    assert.deepEqual(repeatedDeadLetters([ev(2, 3000), ev(1, 4100)], { kills: new Map(), pauses: [stop(1, 3500, 4000)], ackGraceMs: 200 }).map((d) => d.excused), [false], "stopped only after the first was sent");
  });
});

describe("autoscale soak - poison attempts checker", () => {
  const published: SoakPayload[] = [{ key: "a", seq: 1, ms: 0, poison: true }];
  const run = (pid: number, n: number, start: number, end?: number): HandlerRun =>
    end === undefined ? { pid, run: n, key: "a", seq: 1, dc: 1, start } : { pid, run: n, key: "a", seq: 1, dc: 1, start, end, ok: false, aborted: false };
  const base = { published, kills: new Map<number, number>(), ackGraceMs: 200, ackWaitMs: 1000 };

  test("autoscale soak - checker: maxDeliver attempts or fewer is nothing to report", () => {
    const r = checkPoisonAttempts({ ...base, runs: [run(1, 1, 100, 101), run(1, 2, 200, 201), run(2, 1, 300, 301)] }, 3);
    assert.equal(r.most, 3);
    assert.deepEqual([r.byKill, r.unexplained], [[], []]);
  });

  test("autoscale soak - checker: one more attempt after a kill cut one is explained by the kill; two more are not", () => {
    const kills = new Map([[1, 150]]);
    const cut = checkPoisonAttempts({ ...base, kills, runs: [run(1, 1, 100), run(2, 1, 1200, 1201), run(2, 2, 1300, 1301), run(2, 3, 1400, 1401)] }, 3);
    assert.deepEqual(cut.byKill.map((o) => o.id), ["a/1"]);
    const tooMany = checkPoisonAttempts({ ...base, kills, runs: [run(1, 1, 100), run(2, 1, 1200, 1201), run(2, 2, 1300, 1301), run(2, 3, 1400, 1401), run(2, 4, 1500, 1501)] }, 3);
    assert.deepEqual(tooMany.unexplained.map((o) => `${o.id} ${o.attempts} ${o.cutByKill}`), ["a/1 5 1"]);
  });

  test("autoscale soak - checker: a process killed while stopped cut the attempt that ended just before its SIGSTOP; one ended long before is not cut", () => {
    const kills = new Map([[1, 1290]]);
    const pauses = [{ pid: 1, from: 110, to: 1295 }];
    const later = [run(2, 1, 1400, 1401), run(2, 2, 1500, 1501), run(2, 3, 1600, 1601)];
    const frozen = checkPoisonAttempts({ ...base, kills, pauses, runs: [run(1, 1, 50, 100), ...later] }, 3);
    assert.deepEqual(frozen.byKill.map((o) => o.id), ["a/1"]);
    const early = checkPoisonAttempts({ ...base, kills, pauses: [{ pid: 1, from: 900, to: 1295 }], runs: [run(1, 1, 50, 100), ...later] }, 3);
    assert.deepEqual(early.unexplained.map((o) => o.id), ["a/1"]);
  });

  test("autoscale soak - checker: an attempt in flight across a SIGSTOP past AckWait explains one more (its failure is counted after another instance read the count), two more are not; a SIGSTOP within AckWait or no fault explains nothing (seed 505)", () => {
    const later = [run(2, 1, 1200, 1201), run(2, 2, 1300, 1301), run(2, 3, 1400, 1401)];
    const pastAckWait = [{ pid: 1, from: 150, to: 3000 }];
    const across = checkPoisonAttempts({ ...base, pauses: pastAckWait, runs: [run(1, 1, 100, 3001), ...later] }, 3);
    assert.deepEqual(across.byKill.map((o) => `${o.id} past AckWait ${o.acrossPausePastAckWait}`), ["a/1 past AckWait 1"]);
    const twoMore = checkPoisonAttempts({ ...base, pauses: pastAckWait, runs: [run(1, 1, 100, 3001), ...later, run(2, 4, 1500, 1501)] }, 3);
    assert.deepEqual(twoMore.unexplained.map((o) => o.id), ["a/1"]);
    const short = checkPoisonAttempts({ ...base, pauses: [{ pid: 1, from: 150, to: 600 }], runs: [run(1, 1, 100, 601), ...later] }, 3);
    assert.deepEqual(short.unexplained.map((o) => `${o.id} across a pause ${o.acrossPause}`), ["a/1 across a pause 1"]);
    const none = checkPoisonAttempts({ ...base, runs: [run(1, 1, 100, 101), ...later] }, 3);
    assert.deepEqual(none.unexplained.map((o) => o.id), ["a/1"]);
  });
});
