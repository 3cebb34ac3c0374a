/**
 * Auto-join's lifecycle without a server: instances run over an in-memory lease bucket
 * (see test/helpers/fake-lease-port.ts), and `node:test` mock timers drive renewals,
 * settle periods and leaves, so timings that need a stalled process against a server
 * are cheap and exact here.
 */
import { afterEach, beforeEach, describe, mock, test } from "node:test";
import assert from "node:assert/strict";
import { ConsumerGroupError } from "../../src/core/errors.js";
import type { ElasticConsumerGroupConfig } from "../../src/core/types.js";
import { AutoMembership, MAX_SETTLE_PERIODS, RENEW_RETRY_MS, SIBLING_MARKS_MS } from "../../src/elastic/auto-join/auto-join.js";
import { MAX_WRITE_ATTEMPTS } from "../../src/elastic/auto-join/membership-writer.js";
import type { AutoJoinSettings } from "../../src/elastic/auto-join/settings.js";
import type { LeaseValue } from "../../src/elastic/auto-join/lease-store.js";
import type { MemberStatus } from "../../src/nats/member-types.js";
import { FakeLeaseBucket, FakeLeasePort, casConflict, leaseKey, registrationKey } from "../helpers/fake-lease-port.js";

const TTL = 9000;
const SETTLE = 1000;
const SETTINGS: AutoJoinSettings = { leaseTtlMs: TTL, settleMs: SETTLE, assignment: "balanced" };

const config = (extra: Partial<ElasticConsumerGroupConfig> = {}): ElasticConsumerGroupConfig => ({
  max_members: 4,
  max_buffered_msg: 0,
  max_buffered_bytes: 0,
  partitioning_filters: [{ filter: "orders.*", partitioning_wildcards: [1] }],
  ...extra,
});

/** Lets pending promise callbacks run (setImmediate is not mocked). */
const flush = async (rounds = 20): Promise<void> => {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/** Moves the mock clock by `ms` in steps, letting promises run after each. */
async function advance(ms: number, step = 10): Promise<void> {
  if (ms === 0) {
    mock.timers.tick(0);
    await flush();
  }
  for (let done = 0; done < ms; ) {
    const by = Math.min(step, ms - done);
    mock.timers.tick(by);
    done += by;
    await flush();
  }
}

interface Running {
  membership: AutoMembership;
  port: FakeLeasePort;
  events: MemberStatus[];
  errors: ConsumerGroupError[];
}

/** Starts an auto instance of `member` on `bucket`, with hooks that record what it reports. */
async function start(bucket: FakeLeaseBucket, member: string, instance: string, settings: AutoJoinSettings = SETTINGS): Promise<Running> {
  const port = new FakeLeasePort(bucket);
  const membership = new AutoMembership(port, "ORDERS", "g", member, settings, { now: () => Date.now(), instance });
  const events: MemberStatus[] = [];
  const errors: ConsumerGroupError[] = [];
  membership.attach({ publish: (e) => events.push(e), reportError: (e) => errors.push(e) });
  await membership.start(bucket.config.config);
  await flush();
  return { membership, port, events, errors };
}

const types = (events: MemberStatus[]): string[] => events.map((e) => e.type);
const members = (bucket: FakeLeaseBucket): string[] => bucket.config.config.members ?? [];

describe("auto-join lifecycle - over a fake lease port (no server)", () => {
  beforeEach(() => mock.timers.enable({ apis: ["setTimeout", "setInterval", "Date"] }));
  afterEach(() => mock.timers.reset());

  test("auto-join lifecycle - start writes the lease before the registration, then is live holding it", async () => {
    const bucket = new FakeLeaseBucket(config());
    const { membership, port } = await start(bucket, "m1", "i1");
    assert.deepEqual(
      port.calls.filter((c) => ["writeLease", "createRegistration", "watch"].includes(c)),
      ["writeLease", "createRegistration", "watch"],
    );
    assert.equal(membership.state.name, "live");
    assert.deepEqual(membership.state.name === "live" ? membership.state.lease : undefined, { status: "held", revision: bucket.revisionOf(leaseKey("m1", "i1")), validUntil: TTL });
    assert.equal(membership.leaseValid(), true);
    await membership.close();
  });

  test("auto-join lifecycle - renewals go out a third of the TTL after the last write was sent; mayStart is false once the lease may have run out", async () => {
    const bucket = new FakeLeaseBucket(config());
    const { membership, port } = await start(bucket, "m1", "i1");
    assert.equal(port.count("writeLease"), 1);
    await advance(TTL / 3 - 10);
    assert.equal(port.count("writeLease"), 1, "no renewal before TTL/3");
    await advance(10);
    assert.equal(port.count("writeLease"), 2, "renewed at TTL/3");
    // The next renewal never answers (the process or the link stalls): the lease is good until
    // TTL after the last write that went through was sent, and not a millisecond longer.
    let release!: () => void;
    port.fail("writeLease", new Promise<void>((r) => (release = r)));
    await advance(TTL / 3);
    assert.equal(port.count("writeLease"), 3);
    await advance(TTL / 3 + TTL / 3 - 10);
    assert.equal(membership.leaseValid(), true, `valid at ${Date.now()}`);
    await advance(10);
    assert.equal(Date.now(), TTL / 3 + TTL);
    assert.equal(membership.leaseValid(), false, "fenced at the end of the lease");
    release();
    await flush();
    assert.equal(membership.leaseValid(), true, "the late answer renews from when it was sent");
    await membership.close();
  });

  test("auto-join lifecycle - a renewal that loses its compare-and-set fences at once (lease_lost, expired); a new lease is written (lease_restored)", async () => {
    const bucket = new FakeLeaseBucket(config());
    const { membership, port, events } = await start(bucket, "m1", "i1");
    port.fail("writeLease", casConflict());
    await advance(TTL / 3);
    assert.equal(membership.leaseValid(), false);
    const state = membership.state;
    assert.equal(state.name === "live" && state.lease.status === "lost" ? state.lease.reason : undefined, "expired");
    const lost = events.find((e) => e.type === "lease_lost");
    assert.equal(lost?.type === "lease_lost" ? (lost.error).code : undefined, "LEASE_LOST");
    // Written again at once: the bucket made again if it was gone, then the lease, registration and policy.
    await advance(0);
    assert.deepEqual(types(events).filter((t) => t.startsWith("lease_")), ["lease_lost", "lease_restored"]);
    assert.equal(port.count("ensureBucket"), 1);
    assert.equal(membership.leaseValid(), true);
    assert.equal(membership.state.name === "live" ? membership.state.lease.status : undefined, "held");
    await membership.close();
  });

  test("auto-join lifecycle - renewals failing: retried every 500 ms, fenced when the lease may have run out (lease_lost once, renewal_failing), restored when one goes through", async () => {
    const bucket = new FakeLeaseBucket(config());
    const { membership, port, events, errors } = await start(bucket, "m1", "i1");
    const failures = Array.from({ length: 40 }, () => new Error("connection lost"));
    port.fail("writeLease", ...failures);
    await advance(TTL / 3);
    assert.equal(errors.length, 1);
    assert.equal(membership.leaseValid(), true, "still within the lease");
    await advance(TTL - TTL / 3 - RENEW_RETRY_MS);
    assert.equal(membership.leaseValid(), true);
    assert.equal(errors.length, 1 + (TTL - TTL / 3 - RENEW_RETRY_MS) / RENEW_RETRY_MS, "one retry per 500 ms");
    assert.deepEqual(types(events).filter((t) => t.startsWith("lease_")), []);
    await advance(RENEW_RETRY_MS);
    assert.equal(membership.leaseValid(), false);
    const state = membership.state;
    assert.equal(state.name === "live" && state.lease.status === "lost" ? state.lease.reason : undefined, "renewal_failing");
    await advance(3 * RENEW_RETRY_MS);
    assert.deepEqual(types(events).filter((t) => t.startsWith("lease_")), ["lease_lost"], "said once");
    // The server comes back.
    port.faults.delete("writeLease");
    await advance(RENEW_RETRY_MS);
    assert.deepEqual(types(events).filter((t) => t.startsWith("lease_")), ["lease_lost", "lease_restored"]);
    assert.equal(membership.leaseValid(), true);
    await membership.close();
  });

  test(`auto-join lifecycle - reconcile debounce: written settleMs after the last change, never later than ${MAX_SETTLE_PERIODS} settle periods after the first`, async () => {
    const bucket = new FakeLeaseBucket(config());
    const settings = { ...SETTINGS, leaseTtlMs: 60_000 };
    const first = await start(bucket, "m1", "i1", settings);
    // The bucket was empty: the view is up to date at once, and the first reconcile is a settle period away.
    await advance(SETTLE - 10);
    assert.equal(bucket.written.length, 0);
    await advance(10);
    assert.deepEqual(members(bucket), ["m1"]);
    // A burst of members joining 600 ms apart: each extends the settle period, up to MAX_SETTLE_PERIODS.
    const others: Running[] = [];
    const burstStart = Date.now();
    for (const m of ["m2", "m3", "m4", "m5", "m6"]) {
      others.push(await start(bucket, m, `i-${m}`, settings));
      if (m !== "m6") await advance(600);
    }
    const written = bucket.written.length;
    await advance(burstStart + MAX_SETTLE_PERIODS * SETTLE - Date.now() - 10);
    assert.equal(bucket.written.length, written, "nothing written during the burst");
    await advance(10);
    assert.equal(bucket.written.length, written + 1, "one write for the whole burst");
    assert.deepEqual(members(bucket), ["m1", "m2", "m3", "m4"]);
    for (const r of [first, ...others]) await r.membership.close();
  });

  test("auto-join lifecycle - a membership write that loses its compare-and-set is retried from a fresh config; after too many in a row, CONFIG_CONFLICT and a retry a settle period later", async () => {
    const bucket = new FakeLeaseBucket(config());
    bucket.configConflicts = 3;
    // The back-off between attempts is random (up to 20 ms × attempt): the longest, here.
    const random = mock.method(Math, "random", () => 0.999);
    const { membership, port, events, errors } = await start(bucket, "m1", "i1");
    await advance(SETTLE + 20 * (1 + 2 + 3) + 10);
    assert.equal(port.count("writeConfig"), 4);
    assert.deepEqual(members(bucket), ["m1"]);
    assert.equal(events.filter((e) => e.type === "membership_written").length, 1);
    assert.deepEqual(errors, []);

    const second = await start(bucket, "m2", "i2");
    // Both instances write (each saw the other join): enough conflicts for each to lose every attempt.
    bucket.configConflicts = 2 * MAX_WRITE_ATTEMPTS;
    const before = port.count("writeConfig") + second.port.count("writeConfig");
    await advance(SETTLE + MAX_WRITE_ATTEMPTS * 20 * MAX_WRITE_ATTEMPTS, 20);
    const codes = [...errors, ...second.errors].map((e) => e.code);
    assert.ok(codes.includes("CONFIG_CONFLICT"), `reported: ${codes.join(", ")}`);
    assert.ok(port.count("writeConfig") + second.port.count("writeConfig") - before >= MAX_WRITE_ATTEMPTS);
    await advance(SETTLE * MAX_SETTLE_PERIODS + 100, 20);
    assert.deepEqual(members(bucket), ["m1", "m2"], "written at a later reconcile");
    await membership.close();
    await second.membership.close();
    random.mock.restore();
  });

  test("auto-join lifecycle - an expired lease removes its member only once this instance's own renewals have gone through for a whole TTL; a clean stop removes it a settle period later", async () => {
    const bucket = new FakeLeaseBucket(config());
    const a = await start(bucket, "m1", "i1");
    const b = await start(bucket, "m2", "i2");
    const c = await start(bucket, "m3", "i3");
    await advance(SETTLE * MAX_SETTLE_PERIODS + 100, 50);
    assert.deepEqual(members(bucket), ["m1", "m2", "m3"]);
    // m2's process stalls (its renewals never answer) and the server expires its lease.
    b.port.fail("writeLease", new Promise<void>(() => undefined));
    await advance(TTL / 3 - Date.now() + 100, 50);
    bucket.expireLease("m2", "i2");
    // m3 stops cleanly.
    await c.membership.close();
    await advance(SETTLE + 100, 50);
    assert.deepEqual(members(bucket), ["m1", "m2"], "the clean stop is written after settleMs; the expired one is kept for now");
    await advance(TTL - Date.now() - 100, 50);
    assert.deepEqual(members(bucket), ["m1", "m2"], "kept while this instance has not been healthy for a whole TTL");
    await advance(300, 50);
    assert.deepEqual(members(bucket), ["m1"]);
    await a.membership.close();
  });

  test("auto-join lifecycle - a policy write that loses its compare-and-set reads the policy again and follows it when it is the same", async () => {
    const bucket = new FakeLeaseBucket(config());
    const port = new FakeLeasePort(bucket);
    // Another instance creates the policy between this one's read and its write.
    port.fail("writePolicy", casConflict());
    bucket.writePolicy("balanced", undefined);
    const membership = new AutoMembership(port, "ORDERS", "g", "m1", SETTINGS, { now: () => Date.now(), instance: "i1" });
    await membership.start(bucket.config.config);
    assert.equal(port.count("writePolicy"), 0, "the stored policy is the same: nothing to write");
    await membership.close();

    const other = new FakeLeaseBucket(config());
    const racing = new FakeLeasePort(other);
    racing.fail("writePolicy", casConflict());
    const late = new AutoMembership(racing, "ORDERS", "g", "m1", SETTINGS, { now: () => Date.now(), instance: "i1" });
    const started = late.start(other.config.config);
    other.writePolicy("balanced", undefined);
    await started;
    assert.equal(late.state.name, "live");
    await late.close();
  });

  for (const [gap, how] of [
    [0, "marks its lease"],
    [300, "marks its lease"],
    [SIBLING_MARKS_MS - 100, "marks its lease"],
    [SIBLING_MARKS_MS + 500, "marks its lease"],
    [5000, "marks its lease"],
    [300, "is closed without a leave"],
  ] as const) {
    test(`auto-join lifecycle - the last instance of a member writes its leave: the sibling stops ${gap} ms later and ${how}`, async () => {
      const bucket = new FakeLeaseBucket(config());
      const watcher = await start(bucket, "other", "i-other");
      const a = await start(bucket, "m1", "a");
      const b = await start(bucket, "m1", "b");
      await advance(SETTLE * MAX_SETTLE_PERIODS + 100, 50);
      assert.deepEqual(members(bucket), ["m1", "other"]);
      await watcher.membership.close();
      await advance(SETTLE * MAX_SETTLE_PERIODS + 100, 50);
      assert.deepEqual(members(bucket), ["m1"]);

      let releasedA = 0;
      let releasedB = 0;
      const stopA = (async () => {
        await a.membership.leave(() => Promise.resolve(void (releasedA += 1)));
        await a.membership.close();
      })();
      // Gap 0: in the same tick, before either has seen the other's mark (an orchestrator stopping every pod).
      if (gap > 0) await advance(gap, 50);
      const stopB = (async () => {
        if (how === "marks its lease") await b.membership.leave(() => Promise.resolve(void (releasedB += 1)));
        await b.membership.close();
      })();
      await advance(SIBLING_MARKS_MS + MAX_SETTLE_PERIODS * SETTLE + 5000, 50);
      await Promise.all([stopA, stopB]);
      assert.deepEqual(members(bucket), [], "m1 left the group");
      assert.equal(bucket.entry(registrationKey("m1"))?.present, false, "no registration left behind");
      assert.deepEqual(bucket.liveLeases("m1"), []);
      assert.equal(releasedA + releasedB >= 1, true, "the one that wrote the leave handed its partitions over");
      assert.equal(a.membership.state.name, "closed");
      assert.equal(a.membership.state.name === "closed" ? a.membership.state.reason : undefined, "stopped");
    });
  }

  test("auto-join lifecycle - the last live instance writes its leave when its sibling was killed -9 at the same moment and no other member is alive (review F2): it waits for the sibling's lease to expire", async () => {
    const bucket = new FakeLeaseBucket(config());
    const watcher = await start(bucket, "other", "i-other");
    const a = await start(bucket, "m1", "a");
    const b = await start(bucket, "m1", "b");
    await advance(SETTLE * MAX_SETTLE_PERIODS + 100, 50);
    await watcher.membership.close();
    await advance(SETTLE * MAX_SETTLE_PERIODS + 100, 50);
    assert.deepEqual(members(bucket), ["m1"]);
    // b is killed: it writes nothing any more; the server expires its lease after the TTL.
    b.port.fail("writeLease", ...Array.from({ length: 100 }, () => new Error("killed")));
    b.port.fail("ensureBucket", ...Array.from({ length: 100 }, () => new Error("killed")));
    const left = a.membership.leave(() => Promise.resolve());
    await advance(TTL - 500, 50);
    assert.deepEqual(members(bucket), ["m1"], "still waiting for the sibling's lease");
    bucket.expireLease("m1", "b");
    await advance(MAX_SETTLE_PERIODS * SETTLE + 3000, 50);
    assert.equal(await left, true, "the member was taken out");
    assert.deepEqual(members(bucket), []);
    await a.membership.close();
    await b.membership.close();
  });

  test("auto-join lifecycle - a leave marks the lease as leaving, then a live sibling keeps the member in", async () => {
    const bucket = new FakeLeaseBucket(config());
    const a = await start(bucket, "m1", "a");
    const b = await start(bucket, "m1", "b");
    await advance(SETTLE * MAX_SETTLE_PERIODS + 100, 50);
    assert.deepEqual(members(bucket), ["m1"]);
    const left = a.membership.leave(() => Promise.resolve());
    await advance(50);
    assert.equal(a.membership.state.name, "leaving");
    assert.equal((bucket.entry(leaseKey("m1", "a"))?.value as LeaseValue).leaving, true);
    // The sibling renews within a third of the TTL: proof that it stays.
    await advance(TTL / 3 + 200, 50);
    assert.equal(await left, false, "not the last instance");
    await a.membership.close();
    await advance(SETTLE * MAX_SETTLE_PERIODS + 100, 50);
    assert.deepEqual(members(bucket), ["m1"]);
    assert.equal(bucket.entry(registrationKey("m1"))?.present, true);
    await b.membership.close();
  });

  test("auto-join lifecycle - a leave with the lease lost writes a new one marked as leaving, and the member still leaves", async () => {
    const bucket = new FakeLeaseBucket(config());
    const a = await start(bucket, "m1", "a");
    await advance(SETTLE + 100);
    assert.deepEqual(members(bucket), ["m1"]);
    // The renewal finds the lease gone, and writing a new one fails too (the server is away).
    a.port.fail("writeLease", casConflict());
    a.port.fail("ensureBucket", ...Array.from({ length: 20 }, () => new Error("unreachable")));
    await advance(TTL / 3);
    assert.equal(a.membership.leaseValid(), false);
    assert.equal(a.membership.state.name === "live" ? a.membership.state.lease.status : undefined, "lost");
    const left = a.membership.leave(() => Promise.resolve());
    await advance(SIBLING_MARKS_MS + 200, 50);
    assert.equal(await left, true);
    assert.equal(bucket.entry(leaseKey("m1", "a"))?.present, true);
    assert.equal((bucket.entry(leaseKey("m1", "a"))?.value as LeaseValue).leaving, true);
    assert.deepEqual(members(bucket), []);
    await a.membership.close();
  });

  test("auto-join lifecycle - close stops every timer, deletes the lease, and is idempotent", async () => {
    const bucket = new FakeLeaseBucket(config());
    const { membership, port } = await start(bucket, "m1", "i1");
    await membership.close("member_closed");
    await membership.close();
    assert.equal(membership.state.name === "closed" ? membership.state.reason : undefined, "member_closed");
    assert.equal(bucket.entry(leaseKey("m1", "i1"))?.present, false);
    const calls = port.calls.length;
    await advance(3 * TTL, 500);
    assert.equal(port.calls.length, calls, "nothing after the close");
  });
});
