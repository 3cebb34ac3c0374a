/**
 * Auto-join fleets of member processes under keyed load, with the delivery checker:
 * scaling 3 → 6 → 2 with SIGTERM (balanced and sticky, partitions moved per step),
 * kill -9 of 2 of 5 members (time from kill to the new owner's first message), and a
 * process stalled past its lease (SIGSTOP, as a long GC pause) that must not handle
 * what the group gave to others meanwhile.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import { createElastic, partitionOwners, type AssignmentPolicy, type ElasticConsumerGroupConfig } from "../../src/index.js";
import { GroupLeaseKeys, LEASE_BUCKET, leaseOf } from "../../src/elastic/auto-join/lease-store.js";
import { minimumMoves, movedPartitions } from "../../src/core/sticky-assignment.js";
import { HandledLog, startKeyedLoad } from "../helpers/keyed-load.js";
import { startChildMember, type ChildMember, type ChildSettings } from "../helpers/member-process.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { sleep } from "../helpers/elastic-util.js";

const ACK_WAIT_MS = 1000;
const LEASE_TTL_MS = 2000;
const SETTLE_MS = 500;

describe("auto-join - fleets of processes", () => {
  let env: TestEnv;
  const children: ChildMember[] = [];
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await Promise.all(children.map((c) => c.kill()));
    await env.close();
  });

  async function group(partitions: number): Promise<string> {
    const stream = uniqueName("ajf");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    await createElastic(env.js, { stream, group: "g", maxMembers: partitions, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    return stream;
  }

  async function config(stream: string): Promise<ElasticConsumerGroupConfig> {
    return (await stored(stream)).config;
  }

  async function stored(stream: string): Promise<{ config: ElasticConsumerGroupConfig; revision: number }> {
    const e = await (await new Kvm(env.js).open("elastic-consumer-groups")).get(`${stream}.g`);
    assert.ok(e);
    return { config: e.json<ElasticConsumerGroupConfig>(), revision: e.revision };
  }



  /**
   * Records when each member's instances came into the lease bucket (first lease) and
   * when they left it (a lease marked leaving, or gone). Membership writes are settled
   * per burst of such changes (`settleMs` after the last one), so how many writes a step
   * may take depends on how far apart its changes came: on a loaded machine, processes
   * spawned together can register more than `settleMs` apart.
   */
  async function watchLeaseChanges(stream: string): Promise<{ changes: { at: number; what: string }[]; stop(): void }> {
    const keys = new GroupLeaseKeys(stream, "g");
    const kv = await new Kvm(env.js).open(LEASE_BUCKET);
    const watcher = await kv.watch({ key: keys.allLeases });
    const changes: { at: number; what: string }[] = [];
    const seen = new Set<string>();
    const gone = new Set<string>();
    void (async () => {
      for await (const entry of watcher) {
        const parsed = keys.parse(entry.key);
        if (parsed?.kind !== "lease") continue;
        const lease = entry.operation === "PUT" ? leaseOf(entry) : undefined;
        const id = `${parsed.member}/${parsed.instance}`;
        if (lease && !lease.leaving && !seen.has(id)) {
          seen.add(id);
          changes.push({ at: performance.now(), what: `${parsed.member} in` });
        } else if ((!lease || lease.leaving) && !gone.has(id)) {
          gone.add(id);
          changes.push({ at: performance.now(), what: `${parsed.member} out` });
        }
      }
    })();
    return { changes, stop: () => watcher.stop() };
  }

  /** How many bursts `changes` in [from, to) make: a gap longer than `settleMs` starts a new one. */
  function bursts(changes: { at: number }[], from: number, to: number, settleMs: number): number {
    const times = changes.map((c) => c.at).filter((t) => t >= from && t < to).sort((a, b) => a - b);
    return times.filter((t, i) => i === 0 || t - (times[i - 1] ?? 0) > settleMs).length;
  }

  const listed = (c: ElasticConsumerGroupConfig): string[] => ((c.members ?? []).length > 0 ? (c.members ?? []) : (c.member_mappings ?? []).map((m) => m.member));

  function start(stream: string, member: string, log: HandledLog, assignment: AssignmentPolicy, extra: Partial<ChildSettings> = {}): ChildMember {
    const child = startChildMember(
      { url: env.server.url, flavour: "elastic", stream, group: "g", member, ackWaitMs: ACK_WAIT_MS, autoJoin: { leaseTtlMs: LEASE_TTL_MS, settleMs: SETTLE_MS, assignment }, ...extra },
      log,
    );
    children.push(child);
    return child;
  }

  /** Waits for exactly `members` listed and every partition's owner running a consumer that handles. */
  async function settled(stream: string, members: string[]): Promise<(string | undefined)[]> {
    const want = [...members].sort().join();
    const c = await waitFor(async () => {
      const now = await config(stream);
      return [...listed(now)].sort().join() === want ? now : undefined;
    }, 20_000, `membership ${want}`);
    return partitionOwners(c);
  }

  for (const assignment of ["balanced", "sticky"] as const) {
    /** Two members of two instances each; every instance ends at once (`end`), then no member may be listed. */
    async function endTogether(end: (c: ChildMember, i: number) => Promise<void>): Promise<void> {
      const stream = await group(4);
      const log = new HandledLog();
      const fleet = ["a", "a", "b", "b"].map((member) => start(stream, member, log, assignment));
      await Promise.all(fleet.map((c) => c.ready));
      await settled(stream, ["a", "b"]);
      await sleep(SETTLE_MS); // every lease seen by every instance
      await Promise.all(fleet.map(end));
      const left = listed(await config(stream));
      assert.deepEqual(left, [], `members whose every instance stopped (or died) are out of the config (left: ${left.join(", ")})`);
    }

    test(`auto-join - ${assignment}: SIGTERM to every process of a fleet at once, two per member: each member's last instance writes its leave, the config lists none`, async () => {
      await endTogether((c) => c.stop());
    });

    test(`auto-join - ${assignment}: per member one SIGTERM and one kill -9 at the same moment, no other member alive: the stopped instance waits out its killed sibling's lease and writes the leave (review F2)`, async () => {
      await endTogether((c, i) => (i % 2 === 0 ? c.stop() : c.kill()));
    });

    test(`auto-join - ${assignment}: scale 3 → 6 → 2 with SIGTERM under keyed load: nothing lost, order kept, no duplicates`, async () => {
      const stream = await group(12);
      const log = new HandledLog();
      const fleet = new Map<string, ChildMember>();
      for (const m of ["a", "b", "c"]) fleet.set(m, start(stream, m, log, assignment));
      await Promise.all([...fleet.values()].map((c) => c.ready));
      const owners0 = await settled(stream, ["a", "b", "c"]);
      const load = startKeyedLoad(env.js, (key) => `${stream}.${key}`, { keys: 60, rate: 200, idPrefix: stream });
      const leases = await watchLeaseChanges(stream);
      await sleep(1000);
      const up = (await stored(stream)).revision;
      const upAt = performance.now();
      for (const m of ["d", "e", "f"]) fleet.set(m, start(stream, m, log, assignment));
      const owners1 = await settled(stream, ["a", "b", "c", "d", "e", "f"]);
      await sleep(1500);
      const down = (await stored(stream)).revision;
      const downAt = performance.now();
      const leaving = ["b", "d", "e", "f"];
      await Promise.all(leaving.map((m) => fleet.get(m)).map((c) => c?.stop() ?? Promise.resolve()));
      const owners2 = await settled(stream, ["a", "c"]);
      const writes = [down - up, (await stored(stream)).revision - down];
      leases.stop();
      const changeBursts = [bursts(leases.changes, upAt, downAt, SETTLE_MS), bursts(leases.changes, downAt, Infinity, SETTLE_MS)];
      await sleep(1000);
      await load.stop();
      await waitFor(() => log.unique() >= load.total(), 60_000, `all ${load.total()} handled (have ${log.unique()})`);
      await sleep(500);
      const report = log.check(load.published);
      const moved = [movedPartitions(owners0, owners1), movedPartitions(owners1, owners2)];
      const minimum = [minimumMoves(owners0, ["a", "b", "c", "d", "e", "f"]), minimumMoves(owners1, ["a", "c"])];
      console.log(
        `auto-join ${assignment} scale 3→6→2: ${report.published} published, ${report.handled} handled, ${report.duplicates} duplicates; partitions moved 3→6: ${moved[0]} (minimum ${minimum[0]}, ${writes[0]} config write(s)), 6→2: ${moved[1]} (minimum ${minimum[1]}, ${writes[1]} config write(s)); lease changes came in ${changeBursts.join(" and ")} burst(s) of ${SETTLE_MS} ms`,
      );
      // One write per burst of lease changes, and at most one more (two instances that settle at once).
      assert.ok(
        writes.every((w, i) => w >= 1 && w <= (changeBursts[i] ?? 1) + 1),
        `each step is one membership write per burst of lease changes, at most one more: writes ${writes.join()}, bursts ${changeBursts.join()} (${leases.changes.map((c) => `${c.what} at ${Math.round(c.at - upAt)} ms`).join(", ")})`,
      );
      if (assignment === "sticky") assert.ok(moved.every((m, i) => m <= (minimum[i] ?? 0) + 1), `sticky moves at most one more than the minimum: ${moved.join()} vs ${minimum.join()}`);
      assert.deepEqual(report.lost, [], "nothing lost");
      assert.deepEqual(report.outOfOrder, [], "per-key order of first handling kept");
      assert.equal(report.duplicates, 0, "planned changes hand partitions over without duplicates");
      await Promise.all([...fleet.values()].map((c) => c.stop()));
      assert.deepEqual(listed(await config(stream)), [], "the last instances took their members out");
    });
  }

  test("auto-join - kill -9 of 2 of 5 members under load: they leave after the lease TTL, their partitions are handled again, nothing lost, order kept", async () => {
    const stream = await group(10);
    const log = new HandledLog();
    const fleet = new Map<string, ChildMember>();
    for (const m of ["a", "b", "c", "d", "e"]) fleet.set(m, start(stream, m, log, "balanced"));
    await Promise.all([...fleet.values()].map((c) => c.ready));
    const owners = await settled(stream, ["a", "b", "c", "d", "e"]);
    const load = startKeyedLoad(env.js, (key) => `${stream}.${key}`, { keys: 50, rate: 200, idPrefix: stream });
    await sleep(1500);
    const victims = ["b", "d"];
    const orphaned = owners.flatMap((o, p) => (o !== undefined && victims.includes(o) ? [p] : []));
    const killedAt = Date.now();
    await Promise.all(victims.map((m) => fleet.get(m)).map((c) => c?.kill() ?? Promise.resolve()));
    await settled(stream, ["a", "c", "e"]);
    const removedAfter = Date.now() - killedAt;
    const survivors = ["a", "c", "e"].map((m) => fleet.get(m)).filter((c): c is ChildMember => c !== undefined);
    const firstAgain = await waitFor(() => {
      const times = survivors.flatMap((c) => c.records.filter((r) => r.at > killedAt && orphaned.includes(r.p)).map((r) => r.at));
      return times.length > 0 ? Math.min(...times) : undefined;
    }, 20_000, "a survivor handling an orphaned partition");
    await sleep(1000);
    await load.stop();
    await waitFor(() => log.unique() >= load.total(), 60_000, `all ${load.total()} handled (have ${log.unique()})`);
    const report = log.check(load.published);
    console.log(
      `auto-join kill -9 of 2 of 5 (lease TTL ${LEASE_TTL_MS} ms, settle ${SETTLE_MS} ms, AckWait ${ACK_WAIT_MS} ms): removed from the membership ${removedAfter} ms after the kill, first orphaned-partition message handled ${firstAgain - killedAt} ms after the kill; ${report.published} published, ${report.duplicates} duplicates`,
    );
    assert.deepEqual(report.lost, [], "nothing lost");
    assert.deepEqual(report.outOfOrder, [], "per-key order of first handling kept");
    await Promise.all(survivors.map((c) => c.stop()));
  });

  test("auto-join - a process stalled past its lease (SIGSTOP) is fenced: after SIGCONT it starts nothing the group gave to others meanwhile", async () => {
    const stream = await group(4);
    const log = new HandledLog();
    // Slow handlers and a deep buffer: the stalled process holds messages it has not started.
    const a = start(stream, "a", log, "balanced", { handlerMs: 20, maxBuffered: 200, concurrency: "partition", maxInFlight: 2 });
    const b = start(stream, "b", log, "balanced", { handlerMs: 20, maxBuffered: 200, concurrency: "partition", maxInFlight: 2 });
    await Promise.all([a.ready, b.ready]);
    await settled(stream, ["a", "b"]);
    const load = startKeyedLoad(env.js, (key) => `${stream}.${key}`, { keys: 40, rate: 300, idPrefix: stream });
    await waitFor(() => a.records.length > 50, 20_000, "a handling");
    a.pause();
    const pausedAt = Date.now();
    await settled(stream, ["b"]);
    await waitFor(() => b.records.some((r) => r.at > pausedAt + 500 && [0, 1, 2, 3].includes(r.p) && a.records.some((x) => x.p === r.p)), 20_000, "b handling a's partitions");
    await sleep(1500);
    const resumedAt = Date.now();
    a.resume();
    await settled(stream, ["a", "b"]);
    await sleep(2000);
    await load.stop();
    await waitFor(() => log.unique() >= load.total(), 60_000, `all ${load.total()} handled (have ${log.unique()})`);
    const handledByB = new Set(b.records.map((r) => `${r.key}/${r.seq}`));
    const stale = a.records.filter((r) => r.at >= resumedAt && handledByB.has(`${r.key}/${r.seq}`));
    const report = log.check(load.published);
    console.log(`auto-join SIGSTOP past the lease: a stalled ${resumedAt - pausedAt} ms; after SIGCONT it started ${stale.length} messages b had handled; ${report.duplicates} duplicates overall`);
    assert.deepEqual(stale, [], "the stalled instance started nothing the group had given to b");
    assert.deepEqual(report.lost, [], "nothing lost");
    assert.deepEqual(report.outOfOrder, [], "per-key order of first handling kept");
    assert.ok(a.events.some((e) => e.type === "lease_lost"), "the stalled instance reported its lease lost");
    await Promise.all([a.stop(), b.stop()]);
  });
});
