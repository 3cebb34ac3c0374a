/**
 * The lag cache behind `consume --metrics-port`, without a server and with a fake
 * clock: one reading per max age however many ask, one in flight at a time, the rate
 * measured from the previous reading only while it is recent, failures cached too;
 * and the `/lag` route's 503 document when the lag cannot be read.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ConsumerGroupError, type GroupLag } from "../../src/index.js";
import { LagCache } from "../../src/cli/lag-cache.js";
import { lagRoute } from "../../src/cli/lag-endpoint.js";

/** A minimal reading, told apart by `pending`. */
function reading(pending: number): GroupLag {
  return {
    stream: "s",
    group: "g",
    workQueue: "s-g",
    partitionCount: 2,
    partitions: [],
    members: [],
    pending,
    sourceLag: 0,
    backlog: pending,
    rate: { source: "none", activeMembers: 0 },
    targetDrainMs: 60_000,
    recommendedMembers: 1,
    recommendation: { recommended: 1, needed: 1, capped: false, basis: "hold" },
    notes: [],
    sample: { atMs: 0, lastSeq: 0, messages: pending },
    at: new Date(0).toISOString(),
  };
}

function fixture(options: { maxAgeMs?: number; maxWindowMs?: number } = {}): {
  cache: LagCache;
  clock: { now: number };
  calls: (GroupLag | undefined)[];
  next: { fail?: Error; release?: Promise<void> };
} {
  const clock = { now: 1_000_000 };
  const calls: (GroupLag | undefined)[] = [];
  const next: { fail?: Error; release?: Promise<void> } = {};
  const cache = new LagCache(
    async (previous) => {
      calls.push(previous);
      if (next.release) await next.release;
      if (next.fail) throw next.fail;
      return reading(calls.length);
    },
    { ...options, now: () => clock.now },
  );
  return { cache, clock, calls, next };
}

describe("lag cache", () => {
  test("lag cache - a reading is served until it is max age old; then the next one measures from it", async () => {
    const { cache, clock, calls } = fixture({ maxAgeMs: 5000 });
    assert.equal((await cache.get()).pending, 1);
    clock.now += 4999;
    assert.equal((await cache.get()).pending, 1, "still fresh");
    assert.equal(calls.length, 1);
    clock.now += 1;
    assert.equal((await cache.get()).pending, 2, "expired: read again");
    assert.deepEqual(calls, [undefined, reading(1)], "the first reading has no previous; the second measures from the first");
  });

  test("lag cache - callers arriving while a reading runs share it", async () => {
    const { cache, calls, next } = fixture();
    let release!: () => void;
    next.release = new Promise<void>((resolve) => (release = resolve));
    const all = Promise.all([cache.get(), cache.get(), cache.get()]);
    release();
    assert.deepEqual((await all).map((l) => l.pending), [1, 1, 1]);
    assert.equal(calls.length, 1);
  });

  test("lag cache - a previous reading older than the max window is not used to measure the rate", async () => {
    const { cache, clock, calls } = fixture({ maxAgeMs: 1000, maxWindowMs: 60_000 });
    await cache.get();
    clock.now += 60_001;
    await cache.get();
    assert.deepEqual(calls, [undefined, undefined]);
  });

  test("lag cache - a failure is thrown again until it expires, then read again; the last good reading is kept", async () => {
    const { cache, clock, calls, next } = fixture({ maxAgeMs: 5000 });
    await cache.get();
    clock.now += 5000;
    next.fail = new ConsumerGroupError("PERMISSION_DENIED", "no direct gets");
    await assert.rejects(cache.get(), /no direct gets/);
    clock.now += 1000;
    await assert.rejects(cache.get(), /no direct gets/);
    assert.equal(calls.length, 2, "the failure was cached");
    assert.equal(cache.last()?.pending, 1);
    delete next.fail;
    clock.now += 4000;
    assert.equal((await cache.get()).pending, 3);
    assert.equal(calls[2]?.pending, 1, "measured from the last good reading");
  });

  test("lag cache - the /lag route: the document with 200, or the error with its code and 503", async () => {
    const ok = fixture();
    const good = await lagRoute(ok.cache)();
    assert.equal(good.status, 200);
    assert.equal((good.body as { pending: number; work_queue: string }).pending, 1);
    assert.equal((good.body as { work_queue: string }).work_queue, "s-g");

    const failing = fixture();
    failing.next.fail = new ConsumerGroupError("GROUP_NOT_FOUND", "no group g on s");
    assert.deepEqual(await lagRoute(failing.cache)(), { status: 503, body: { error: { code: "GROUP_NOT_FOUND", message: "no group g on s" } } });
  });
});
