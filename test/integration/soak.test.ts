/**
 * The randomized soak test (issue 14): one elastic group on a real nats-server, with a
 * dead-letter stream; 4 members with 2 instances each (hot standbys), each instance a
 * child process; handler latencies from 0 to 3 × AckWait (90 % under 20 ms); 2 % poison
 * messages; a membership change every second and a kill -9 of a random instance (most
 * often one with a handler in flight) every ~5 s; SIGSTOP pulses of 0.3-2.5 × AckWait
 * every ~3 s (a starved or suspended process: shorter and longer than PinnedTTL); a
 * phase with a CPU burner per core; every instance's link through a proxy of its own,
 * held half-open for 0.5-3 × AckWait every ~5 s (a stall) and slowed by 50-400 ms per
 * chunk for 2-4 s every ~7 s, membership changes going on meanwhile (a slow link);
 * 3 % large messages (200-900 KB: the byte budget, against the server's slow-consumer
 * limit); keyed publishing throughout. After
 * the load stops and everything drained, the checker (test/helpers/soak-check.ts) says
 * what was lost, reordered, repeated without a kill to blame, run twice at once, or
 * dead-lettered other than exactly once.
 *
 * `concurrency: "key"` (override with SOAK_MODE=partition): it is the mode the issue's
 * hard promises are about (a failure holds only its key; a slow handler holds only its
 * key; no two messages of one key at once across members), and it keeps 3 s handlers
 * from stalling whole partitions so the run gets through thousands of messages.
 *
 * Settings: SOAK_SEED (default random; the seed is printed first), SOAK_SECONDS (load
 * duration, default 60). The workload (keys, latencies, poison) is a function of the
 * seed; the timing of churn and kills is paced by the clock, their choices by the seed.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { spawn } from "node:child_process";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { addMembers, createElastic, deleteMembers, workQueueStreamName, type ConcurrencyMode } from "../../src/index.js";
import { prng, sleep } from "../helpers/load-harness.js";
import { startTcpProxy, type TcpProxy } from "../helpers/tcp-proxy.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { checkSoak, soakProblems, type SoakReport } from "../helpers/soak-check.js";
import { SoakFleet, disturbances, now, publishSoakWorkload, type SoakInstance } from "../helpers/soak-fleet.js";
import { drawSoakWorkload, type HandlerRun, type SoakPayload } from "../helpers/soak-log.js";

const SEED = process.env["SOAK_SEED"] ? Number(process.env["SOAK_SEED"]) : Math.floor(Math.random() * 2 ** 31);
const SECONDS = Number(process.env["SOAK_SECONDS"] ?? 60);
const MODE = (process.env["SOAK_MODE"] ?? "key") as ConcurrencyMode;
if (!Number.isSafeInteger(SEED) || !(SECONDS > 0) || !["key", "partition"].includes(MODE)) {
  throw new Error(`soak: SOAK_SEED must be an integer, SOAK_SECONDS a positive number, SOAK_MODE key or partition (got ${String(process.env["SOAK_SEED"])}, ${String(process.env["SOAK_SECONDS"])}, ${MODE})`);
}
const ACK_WAIT_MS = 1000;
const RATE = 60; // messages per second
const KEYS = 200;
const POISON_RATE = 0.02;
const SLOW_RATE = 0.1;
const MEMBERS = ["m1", "m2", "m3", "m4"];
const INSTANCES_PER_MEMBER = 2;
const MIN_MEMBERS = 2;
const PARTITIONS = 8;
const CHURN_EVERY_MS = 1000;
const KILL_EVERY_MS: [number, number] = [4000, 6000];
/** Share of kills aimed at an instance with a handler in flight (when there is one). */
const KILL_BUSY_SHARE = 0.75;
/** A SIGSTOP pulse every this many ms, of 0.3 to 2.5 × AckWait. */
const PAUSE_EVERY_MS: [number, number] = [2000, 4000];
const PAUSE_MS: [number, number] = [0.3 * ACK_WAIT_MS, 2.5 * ACK_WAIT_MS];
/** A CPU burner per core runs from this share of the load time, for BURN_MS. */
const BURN_AT = 0.4;
const BURN_MS = 8000;
/** A link stall (the link held half-open) every this many ms, of 0.5 to 3 × AckWait. */
const STALL_EVERY_MS: [number, number] = [4000, 6000];
const STALL_MS: [number, number] = [0.5 * ACK_WAIT_MS, 3 * ACK_WAIT_MS];
/** A slow-link spell every this many ms: 50-400 ms per chunk for 2-4 s. */
const SLOW_LINK_EVERY_MS: [number, number] = [6000, 8000];
const SLOW_LINK_DELAY_MS: [number, number] = [50, 400];
const SLOW_LINK_MS: [number, number] = [2000, 4000];
/** The pin's TTL for this AckWait (max(AckWait, 1 s)): a stalled instance's last proof is no older. */
const PINNED_TTL_MS = Math.max(ACK_WAIT_MS, 1000);
/** Share of large messages, and their padding. */
const LARGE_RATE = 0.03;
const LARGE_BYTES: [number, number] = [200_000, 900_000];
const MAX_DELIVER = 3;
const BACKOFF_MS = [50, 100];
/**
 * The ack follows the handler's end record within an event-loop turn, and the proxy
 * forwards it within one of its own; this much is allowed for both on a loaded machine
 * (at load 16 on 2 cores a run that ended 293 ms before a stall of its link, which a
 * kill ended, was repeated: its ack had not got through before the stall). A run in
 * flight across a pause or a stall gets the same grace.
 */
const ACK_GRACE_MS = 500;
const DRAIN_TIMEOUT_MS = 120_000;

console.log(`soak - seed ${SEED} (repeat with SOAK_SEED=${SEED} SOAK_SECONDS=${SECONDS}${MODE === "key" ? "" : ` SOAK_MODE=${MODE}`})`);

describe("soak - elastic group under churn, kill -9, slow handlers and poison messages", () => {
  let env: TestEnv | undefined;
  let fleet: SoakFleet | undefined;
  let dir: string | undefined;
  const proxies: TcpProxy[] = [];
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "pcg-soak-"));
    env = await startEnv();
    // One per instance, and a spare for an instance that starts before its predecessor's exit was seen.
    for (let i = 0; i < MEMBERS.length * INSTANCES_PER_MEMBER + 2; i++) proxies.push(await startTcpProxy(env.server.port, 0, true));
  });
  after(async () => {
    await fleet?.stopAll();
    await Promise.all(proxies.map((p) => p.close()));
    await env?.close();
    // SOAK_KEEP_LOGS=1 keeps every instance's NDJSON log (starts, ends, status events) for a failed run's timeline.
    if (dir && process.env["SOAK_KEEP_LOGS"] !== "1") rmSync(dir, { recursive: true, force: true });
    else if (dir) console.log(`soak - instance logs kept in ${dir}`);
  });

  test("soak - nothing lost, first handling in key order, every duplicate from a kill, every poison message dead-lettered once", { timeout: SECONDS * 1000 + 300_000 }, async () => {
    assert.ok(env && dir);
    const e = env;
    const t0 = now();
    const stream = uniqueName("soak");
    const group = "g";
    const dlqStream = `${stream}_dlq`;
    const dlqSubject = `dlq.${stream}`;
    await e.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    await e.jsm.streams.add({ name: dlqStream, subjects: [dlqSubject] });
    await createElastic(e.js, { stream, group, maxMembers: PARTITIONS, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    const membership = new Set(MEMBERS.slice(0, 3));
    await addMembers(e.js, stream, group, [...membership]);

    const f = new SoakFleet(dir, { url: e.server.url, stream, group, ackWaitMs: ACK_WAIT_MS, mode: MODE, deadLetterSubject: dlqSubject, maxDeliver: MAX_DELIVER, backoffMs: BACKOFF_MS }, proxies);
    fleet = f;
    for (const m of MEMBERS) for (let i = 0; i < INSTANCES_PER_MEMBER; i++) f.start(m);
    await waitFor(() => f.live().length === MEMBERS.length * INSTANCES_PER_MEMBER, 60_000, "every instance consuming");
    const setupMs = now() - t0;

    // Load: publish the workload at RATE, in order, each message once (a retried publish keeps its msg id).
    const workload = drawSoakWorkload(SEED, Math.round(SECONDS * RATE), { keys: KEYS, ackWaitMs: ACK_WAIT_MS, slowRate: SLOW_RATE, poisonRate: POISON_RATE, largeRate: LARGE_RATE, largeBytes: LARGE_BYTES });
    const published: SoakPayload[] = [];
    let loadRunning = true;
    const loadStart = now();
    const publishing = publishSoakWorkload(e.js, stream, workload, RATE, loadStart, published, () => loadRunning);

    // Chaos, until the load is done: a membership change every second, a kill -9 every ~5 s.
    const chaosRng = prng(SEED ^ 0x5bd1e995);
    const pick = <T>(items: readonly T[]): T | undefined => items[Math.floor(chaosRng() * items.length)];
    let churnSteps = 0;
    const churnErrors: string[] = [];
    const kills: { member: string; pid: number; inFlight: number; at: number }[] = [];
    const pulses: Promise<void>[] = [];
    const between = (range: [number, number]): number => range[0] + chaosRng() * (range[1] - range[0]);
    let burned = false;
    const burn = (): void => {
      burned = true;
      for (let i = 0; i < availableParallelism(); i++) {
        const burner = spawn(process.execPath, ["-e", "for (;;) {}"], { stdio: "ignore" });
        setTimeout(() => burner.kill("SIGKILL"), BURN_MS).unref();
      }
    };
    const chaos = (async () => {
      let nextKill = now() + KILL_EVERY_MS[0] + chaosRng() * (KILL_EVERY_MS[1] - KILL_EVERY_MS[0]);
      let nextPause = now() + PAUSE_EVERY_MS[0] + chaosRng() * (PAUSE_EVERY_MS[1] - PAUSE_EVERY_MS[0]);
      let nextStall = now() + between(STALL_EVERY_MS);
      let nextSlowLink = now() + between(SLOW_LINK_EVERY_MS);
      while (loadRunning) {
        await sleep(CHURN_EVERY_MS);
        if (!loadRunning) break;
        if (!burned && now() - loadStart >= BURN_AT * SECONDS * 1000) burn();
        if (now() >= nextPause) {
          nextPause = now() + PAUSE_EVERY_MS[0] + chaosRng() * (PAUSE_EVERY_MS[1] - PAUSE_EVERY_MS[0]);
          f.log.poll();
          const inFlight = f.log.inFlightByPid();
          const live = f.live();
          const busy = live.filter((i) => (inFlight.get(i.pid) ?? 0) > 0);
          const target = chaosRng() < 0.5 && busy.length > 0 ? pick(busy) : pick(live);
          if (target) pulses.push(f.pause(target, PAUSE_MS[0] + chaosRng() * (PAUSE_MS[1] - PAUSE_MS[0])));
        }
        if (now() >= nextStall) {
          nextStall = now() + between(STALL_EVERY_MS);
          f.log.poll();
          const inFlight = f.log.inFlightByPid();
          const linked = f.live().filter((i) => f.canDisturbLink(i));
          const busy = linked.filter((i) => (inFlight.get(i.pid) ?? 0) > 0);
          const target = chaosRng() < 0.5 && busy.length > 0 ? pick(busy) : pick(linked);
          if (target) pulses.push(f.stall(target, between(STALL_MS), PINNED_TTL_MS));
        }
        if (now() >= nextSlowLink) {
          nextSlowLink = now() + between(SLOW_LINK_EVERY_MS);
          const target = pick(f.live().filter((i) => f.canDisturbLink(i)));
          if (target) pulses.push(f.slowLink(target, Math.round(between(SLOW_LINK_DELAY_MS)), between(SLOW_LINK_MS)));
        }
        const outside = MEMBERS.filter((m) => !membership.has(m));
        const coin = chaosRng();
        const add = membership.size <= MIN_MEMBERS || (outside.length > 0 && coin < 0.5);
        const m = pick(add ? outside : [...membership]);
        if (m !== undefined) {
          try {
            if (add) await addMembers(e.js, stream, group, [m]);
            else await deleteMembers(e.js, stream, group, [m]);
            if (add) membership.add(m);
            else membership.delete(m);
            churnSteps += 1;
          } catch (err) {
            churnErrors.push(`${add ? "add" : "delete"} ${m}: ${err instanceof Error ? err.message : String(err)}`);
          }
        }
        if (now() < nextKill) continue;
        nextKill = now() + KILL_EVERY_MS[0] + chaosRng() * (KILL_EVERY_MS[1] - KILL_EVERY_MS[0]);
        f.log.poll();
        const inFlight = f.log.inFlightByPid();
        const live = f.live();
        const busy = live.filter((i) => (inFlight.get(i.pid) ?? 0) > 0);
        const aimBusy = chaosRng() < KILL_BUSY_SHARE;
        const target: SoakInstance | undefined = aimBusy && busy.length > 0 ? pick(busy) : pick(live);
        if (!target) continue;
        kills.push({ member: target.member, pid: target.pid, inFlight: inFlight.get(target.pid) ?? 0, at: now() });
        await f.kill(target);
        f.start(target.member);
      }
    })();

    let drainMs = 0;
    let drainError: string | undefined;
    let quietError: string | undefined;
    let loadMs = 0;
    try {
      await publishing;
    } finally {
      loadRunning = false;
      loadMs = now() - loadStart;
      await chaos;
      await Promise.all(pulses);
    }

    // Drain: every non-poison message handled, every poison message dead-lettered, the work queue empty.
    const wq = workQueueStreamName(stream, group);
    const poisonCount = published.filter((p) => p.poison).length;
    const goodIds = published.filter((p) => !p.poison).map((p) => `${p.key}/${p.seq}`);
    const drainStart = now();
    try {
      await waitFor(() => f.live().length === MEMBERS.length * INSTANCES_PER_MEMBER, 60_000, "the restarted instances consuming");
      await waitFor(
        async () => {
          f.log.poll();
          const ok = f.log.handledOk();
          if (goodIds.some((id) => !ok.has(id))) return false;
          if ((await e.jsm.streams.info(dlqStream)).state.messages < poisonCount) return false;
          return (await e.jsm.streams.info(wq)).state.messages === 0;
        },
        DRAIN_TIMEOUT_MS,
        "every message handled or dead-lettered and the work queue empty",
        250,
      );
    } catch (err) {
      drainError = err instanceof Error ? err.message : String(err);
    }
    drainMs = now() - drainStart;
    // Quiet: a late redelivery (an ack that never arrived) comes within AckWait; wait until none started for 2 × AckWait.
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
      quietError = err instanceof Error ? err.message : String(err);
    }
    await f.stopAll();
    f.log.poll();
    const wqLeft = (await e.jsm.streams.info(wq)).state.messages;

    const deadLetters: string[] = [];
    const dlqInfo = await e.jsm.streams.info(dlqStream);
    for (let seq = dlqInfo.state.first_seq; seq <= dlqInfo.state.last_seq && dlqInfo.state.messages > 0; seq++) {
      const sm = await e.jsm.streams.getMessage(dlqStream, { seq });
      const p = sm?.json<SoakPayload>();
      if (p) deadLetters.push(`${p.key}/${p.seq}`);
    }

    const report = checkSoak({ published, runs: f.log.runs, kills: f.kills, exits: f.exits, deadLetters, ackGraceMs: ACK_GRACE_MS, pauses: f.pauses });
    printFigures(report, {
      loadMs,
      drainMs,
      totalMs: now() - t0,
      setupMs,
      churnSteps,
      kills,
      pauses: f.pauses.filter((p) => p.kind !== "stall").map((p) => p.to - p.from),
      stalls: f.pauses.filter((p) => p.kind === "stall").map((p) => p.to - p.from),
      slowLinks: f.slowLinks.length,
      large: published.filter((p) => p.pad !== undefined).length,
      statusCounts: f.log.statusCounts,
      abortedRuns: f.log.runs.filter((r) => r.aborted).length,
      slowRuns: f.log.runs.filter((r) => r.end !== undefined && r.end - r.start > ACK_WAIT_MS).length,
    });

    const who = (pid: number): string => `${f.memberOf(pid)} (pid ${pid}${f.kills.has(pid) ? ", killed" : ""})`;
    const problems = soakProblems(report, f.log.runs, f.kills, who);
    if (drainError) problems.push(`drain: ${drainError}`);
    if (quietError) problems.push(`quiet period: ${quietError}`);
    if (wqLeft > 0) problems.push(`${wqLeft} messages left in the work queue`);
    if (f.unexpectedExits.length > 0) problems.push(`instances that exited on their own: ${JSON.stringify(f.unexpectedExits)} ${JSON.stringify(f.log.closed)}`);
    if (churnErrors.length > 0) problems.push(`membership changes that failed: ${churnErrors.join("; ")}`);
    if (f.log.orphanEnds > 0) problems.push(`${f.log.orphanEnds} end records without a start`);
    if (problems.length > 0) problems.push(disturbances(f, kills, problems.join("\n")));
    if (problems.length > 0) assert.fail(`soak (seed ${SEED}) found:\n\n${problems.join("\n\n")}`);
  });
});

function printFigures(
  r: SoakReport,
  x: {
    loadMs: number;
    drainMs: number;
    totalMs: number;
    setupMs: number;
    churnSteps: number;
    kills: { inFlight: number }[];
    pauses: number[];
    stalls: number[];
    slowLinks: number;
    large: number;
    statusCounts: ReadonlyMap<string, number>;
    abortedRuns: number;
    slowRuns: number;
  },
): void {
  const inFlight = r.duplicates.filter((d) => d.attributable === "in-flight").length;
  const ackWindow = r.duplicates.filter((d) => d.attributable === "ack-window").length;
  const paused = r.duplicates.filter((d) => d.attributable === "paused").length;
  const s = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
  const status = [...x.statusCounts].sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => `${k} ${v}`).join(", ");
  console.log(
    [
      `soak figures - seed ${SEED}, mode ${MODE}, AckWait ${ACK_WAIT_MS} ms, ${SECONDS} s of load`,
      `  published ${r.published} (${r.poison} poison, ${x.large} of 200-900 KB) to ${KEYS} keys`,
      `  handler runs ${r.runs} (ok ${r.okRuns}, over AckWait ${x.slowRuns}, signal aborted ${x.abortedRuns}); distinct good messages handled ${r.handled}; lost ${r.lost.length}`,
      `  duplicates ${r.duplicates.length}: attributable ${inFlight + ackWindow + paused} (in flight at the kill ${inFlight}, ended within ${ACK_GRACE_MS} ms of it ${ackWindow}, in flight across a pause ${paused}), not attributable ${r.notAttributable.length}`,
      `  out of order ${r.outOfOrder.length} keys; runs of one key at once ${r.keyOverlaps.length}`,
      `  dead letters ${r.deadLetters} (missing ${r.dlqMissing.length}, repeated ${r.dlqRepeated.length}, not poison ${r.dlqNotPoison.length})`,
      `  kills ${x.kills.length} (${x.kills.filter((k) => k.inFlight > 0).length} with a handler in flight), SIGSTOP pulses ${x.pauses.length} (${x.pauses.filter((ms) => ms >= ACK_WAIT_MS).length} of AckWait or longer), link stalls ${x.stalls.length} (${x.stalls.filter((ms) => ms >= ACK_WAIT_MS).length} of AckWait or longer), slow-link spells ${x.slowLinks}, churn steps ${x.churnSteps}`,
      `  time: setup ${s(x.setupMs)}, load ${s(x.loadMs)}, drain ${s(x.drainMs)}, total ${s(x.totalMs)}`,
      `  status events: ${status}`,
    ].join("\n"),
  );
}

describe("soak - checker", () => {
  const run = (pid: number, n: number, key: string, seq: number, start: number, end?: number, ok = true): HandlerRun =>
    end === undefined ? { pid, run: n, key, seq, dc: 1, start } : { pid, run: n, key, seq, dc: 1, start, end, ok, aborted: false };
  const published: SoakPayload[] = [
    { key: "a", seq: 1, ms: 0, poison: false },
    { key: "a", seq: 2, ms: 0, poison: true },
    { key: "a", seq: 3, ms: 0, poison: false },
    { key: "b", seq: 1, ms: 0, poison: false },
  ];
  const clean = [run(1, 1, "a", 1, 100, 110), run(1, 2, "a", 2, 120, 121, false), run(1, 3, "a", 3, 130, 140), run(2, 1, "b", 1, 100, 200)];
  const input = { published, runs: clean, kills: new Map<number, number>(), exits: new Map<number, number>(), deadLetters: ["a/2"], ackGraceMs: 200 };

  test("soak - checker: a clean run has nothing to report", () => {
    const r = checkSoak(input);
    assert.equal(r.handled, 3);
    assert.deepEqual([r.lost, r.outOfOrder, r.duplicates, r.keyOverlaps, r.wrongOutcome, r.dlqMissing, r.dlqRepeated, r.dlqNotPoison], [[], [], [], [], [], [], [], []]);
  });

  test("soak - checker: a good message without a successful run is lost, even if it started", () => {
    const r = checkSoak({ ...input, runs: [clean[0], clean[1], clean[3], run(1, 3, "a", 3, 130)].filter((x) => x !== undefined) });
    assert.deepEqual(r.lost, ["a/3"]);
  });

  test("soak - checker: a key whose first handlings leave publish order is reported, poison messages included", () => {
    const r = checkSoak({ ...input, runs: [run(1, 1, "a", 1, 100, 110), run(1, 3, "a", 3, 115, 118), run(1, 2, "a", 2, 120, 121, false), run(2, 1, "b", 1, 100, 200)] });
    assert.deepEqual(r.outOfOrder, [{ key: "a", expected: 2, got: 3 }]);
  });

  test("soak - checker: a repeat after a kill is attributable when the earlier run was in flight or had just ended", () => {
    const kills = new Map([[1, 150]]);
    const inFlight = checkSoak({ ...input, kills, exits: kills, runs: [...clean, run(1, 9, "b", 1, 140), run(3, 1, "b", 1, 1300, 1310)].filter((x) => x.pid !== 2) });
    assert.deepEqual(inFlight.duplicates.map((d) => d.attributable), ["in-flight"]);
    assert.deepEqual(inFlight.notAttributable, []);
    const justEnded = checkSoak({ ...input, kills, exits: kills, runs: [...clean, run(3, 1, "a", 3, 1300, 1310)] });
    assert.deepEqual(justEnded.duplicates.map((d) => d.attributable), ["ack-window"]);
  });

  test("soak - checker: a repeat no kill explains is not attributable", () => {
    const noKill = checkSoak({ ...input, runs: [...clean, run(3, 1, "a", 1, 1300, 1310)] });
    assert.deepEqual(noKill.notAttributable.map((d) => d.id), ["a/1"]);
    const longBefore = checkSoak({ ...input, kills: new Map([[1, 900]]), runs: [...clean, run(3, 1, "a", 1, 1300, 1310)] });
    assert.deepEqual(longBefore.notAttributable.map((d) => d.id), ["a/1"]);
    const repeatBeforeKill = checkSoak({ ...input, kills: new Map([[1, 1500]]), runs: [...clean, run(3, 1, "a", 1, 1300, 1310)] });
    assert.deepEqual(repeatBeforeKill.notAttributable.map((d) => d.id), ["a/1"]);
  });

  test("soak - checker: two runs of one key at once are reported, unless the first one's process had died", () => {
    const overlap = checkSoak({ ...input, runs: [...clean, run(3, 1, "b", 1, 150, 160)] });
    assert.deepEqual(overlap.keyOverlaps.map((o) => o.key), ["b"]);
    const afterDeath = checkSoak({ ...input, exits: new Map([[2, 140]]), kills: new Map([[2, 140]]), runs: [...clean.slice(0, 3), run(2, 1, "b", 1, 100), run(3, 1, "b", 1, 150, 160)] });
    assert.deepEqual(afterDeath.keyOverlaps, []);
    assert.deepEqual(afterDeath.notAttributable, []);
  });

  test("soak - checker: a repeat of a run in flight across a long pause is attributable; a run started after the pause never is", () => {
    const pauses = [{ pid: 1, from: 1000, to: 2500 }];
    const across = checkSoak({ ...input, pauses, runs: [...clean, run(1, 9, "b", 1, 900, 2600), run(3, 1, "b", 1, 2100, 2110)].filter((x) => x.pid !== 2) });
    assert.deepEqual(across.duplicates.map((d) => d.attributable), ["paused"]);
    assert.deepEqual(across.keyOverlaps, [], "the overlap with the paused run is the documented exception");
    const startedAfter = checkSoak({ ...input, pauses, runs: [...clean, run(1, 9, "b", 1, 2600, 2700), run(3, 1, "b", 1, 2650, 2660)].filter((x) => x.pid !== 2) });
    assert.deepEqual(startedAfter.notAttributable.map((d) => d.id), ["b/1"], "a resumed instance must not start what the new holder runs");
    assert.deepEqual(startedAfter.keyOverlaps.map((o) => o.key), ["b"]);
  });

  test("soak - checker: a stalled instance's run started while its last proof was valid is excused; one started later is not", () => {
    const stall = { pid: 1, from: 1000, to: 3000, kind: "stall" as const, startsExcusedUntil: 2000 };
    const withinProof = checkSoak({ ...input, pauses: [stall], runs: [...clean, run(1, 9, "b", 1, 1500, 2900), run(3, 1, "b", 1, 2600, 2610)].filter((x) => x.pid !== 2) });
    assert.deepEqual(withinProof.duplicates.map((d) => d.attributable), ["paused"]);
    assert.deepEqual(withinProof.keyOverlaps, []);
    const pastProof = checkSoak({ ...input, pauses: [stall], runs: [...clean, run(1, 9, "b", 1, 2100, 2900), run(3, 1, "b", 1, 2600, 2610)].filter((x) => x.pid !== 2) });
    assert.deepEqual(pastProof.notAttributable.map((d) => d.id), ["b/1"], "a start after the proof ran out is a fence failure");
    assert.deepEqual(pastProof.keyOverlaps.map((o) => o.key), ["b"]);
  });

  test("soak - checker: the dead-letter stream must hold each poison message exactly once and nothing else", () => {
    assert.deepEqual(checkSoak({ ...input, deadLetters: [] }).dlqMissing, ["a/2"]);
    assert.deepEqual(checkSoak({ ...input, deadLetters: ["a/2", "a/2"] }).dlqRepeated, [{ id: "a/2", count: 2 }]);
    assert.deepEqual(checkSoak({ ...input, deadLetters: ["a/2", "b/1"] }).dlqNotPoison, ["b/1"]);
  });

  test("soak - checker: a good run that threw or a poison run that returned is a wrong outcome", () => {
    const r = checkSoak({ ...input, runs: [run(1, 1, "a", 1, 100, 110, false), run(1, 2, "a", 2, 120, 121, true), run(1, 3, "a", 3, 130, 140), run(2, 1, "b", 1, 100, 200)] });
    assert.deepEqual(r.wrongOutcome.map((x) => `${x.key}/${x.seq}`), ["a/1", "a/2"]);
  });
});
