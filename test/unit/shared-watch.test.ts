/**
 * The shared watch without a server: a fake watch counts how often it was opened and
 * stopped, and the tests check who shares it, who gets which entries, and that a
 * failure or an end reaches every user.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { SharedWatches, type RawWatch, type WatchLease } from "../../src/nats/shared-watch.js";
import { PushQueue } from "../helpers/push-queue.js";

interface Entry {
  revision: number;
}

/** A watch fed by hand. */
class FakeWatch extends PushQueue<Entry> implements RawWatch<Entry> {
  constructor(readonly afterRevision: number) {
    super();
  }
  [Symbol.asyncIterator](): AsyncGenerator<Entry> {
    return this.iterate();
  }
}

/** Opens fake watches and keeps them. */
function opener(): { opened: FakeWatch[]; open: (after: number) => Promise<FakeWatch> } {
  const opened: FakeWatch[] = [];
  return {
    opened,
    open: (after) => {
      const w = new FakeWatch(after);
      opened.push(w);
      return Promise.resolve(w);
    },
  };
}

const flush = async (rounds = 5): Promise<void> => {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/** Collects what a lease delivers, and how it ended. */
function collect(lease: WatchLease<Entry>): { seen: number[]; end: Promise<"ended" | Error> } {
  const seen: number[] = [];
  const end = (async () => {
    try {
      for await (const e of lease.entries) seen.push(e.revision);
      return "ended" as const;
    } catch (err) {
      return err as Error;
    }
  })();
  return { seen, end };
}

test("shared watch - sixteen users of one key on one owner open one watch, and each gets every entry", async () => {
  const watches = new SharedWatches<Entry>();
  const owner = {};
  const { opened, open } = opener();
  const leases = await Promise.all(Array.from({ length: 16 }, () => watches.join(owner, "k", 5, open)));
  assert.equal(opened.length, 1);
  assert.equal(watches.openCount(owner), 1);
  assert.equal(watches.users(owner, "k"), 16);
  const seen = leases.map(collect);
  opened[0]?.push({ revision: 6 });
  opened[0]?.push({ revision: 7 });
  await flush();
  for (const s of seen) assert.deepEqual(s.seen, [6, 7]);
  for (const l of leases) l.stop();
});

test("shared watch - other keys and other owners get their own watch", async () => {
  const watches = new SharedWatches<Entry>();
  const a = {};
  const b = {};
  const { opened, open } = opener();
  const leases = [await watches.join(a, "k1", 1, open), await watches.join(a, "k2", 1, open), await watches.join(b, "k1", 1, open)];
  assert.equal(opened.length, 3);
  for (const l of leases) l.stop();
});

test("shared watch - the last user leaving stops the watch; until then it stays open", async () => {
  const watches = new SharedWatches<Entry>();
  const owner = {};
  const { opened, open } = opener();
  const leases = await Promise.all(Array.from({ length: 16 }, () => watches.join(owner, "k", 1, open)));
  const last = collect(leases[15] as WatchLease<Entry>);
  for (const l of leases.slice(0, 15)) l.stop();
  leases[0]?.stop(); // idempotent: it does not count twice
  assert.equal(opened[0]?.stopped, false);
  assert.equal(watches.users(owner, "k"), 1);
  opened[0]?.push({ revision: 2 });
  await flush();
  assert.deepEqual(last.seen, [2]);
  leases[15]?.stop();
  assert.equal(opened[0]?.stopped, true);
  assert.equal(await last.end, "ended");
  assert.equal(watches.openCount(owner), 0);
  // The next user opens a new one.
  const again = await watches.join(owner, "k", 2, open);
  assert.equal(opened.length, 2);
  again.stop();
});

test("shared watch - a failure of the watch reaches every user, and the next join opens a new one", async () => {
  const watches = new SharedWatches<Entry>();
  const owner = {};
  const { opened, open } = opener();
  const leases = await Promise.all(Array.from({ length: 4 }, () => watches.join(owner, "k", 1, open)));
  const seen = leases.map(collect);
  const boom = new Error("the watch failed");
  opened[0]?.push(boom);
  for (const s of seen) assert.equal(await s.end, boom);
  assert.equal(watches.openCount(owner), 0);
  const next = await watches.join(owner, "k", 1, open);
  assert.equal(opened.length, 2);
  next.stop();
  for (const l of leases) l.stop();
});

test("shared watch - a watch that ends by itself ends for every user", async () => {
  const watches = new SharedWatches<Entry>();
  const owner = {};
  const { opened, open } = opener();
  const leases = await Promise.all(Array.from({ length: 3 }, () => watches.join(owner, "k", 1, open)));
  const seen = leases.map(collect);
  opened[0]?.stop();
  for (const s of seen) assert.equal(await s.end, "ended");
});

test("shared watch - abandon ends it for every user and the next join opens a fresh one", async () => {
  const watches = new SharedWatches<Entry>();
  const owner = {};
  const { opened, open } = opener();
  const leases = await Promise.all(Array.from({ length: 3 }, () => watches.join(owner, "k", 1, open)));
  const seen = leases.map(collect);
  leases[1]?.abandon();
  assert.equal(opened[0]?.stopped, true);
  for (const s of seen) assert.equal(await s.end, "ended");
  const fresh = await watches.join(owner, "k", 1, open);
  assert.equal(opened.length, 2);
  fresh.stop();
});

test("shared watch - a user ahead of the watch joins it and gets only the entries after its revision", async () => {
  const watches = new SharedWatches<Entry>();
  const owner = {};
  const { opened, open } = opener();
  const first = await watches.join(owner, "k", 1, open);
  const ahead = await watches.join(owner, "k", 3, open);
  assert.equal(opened.length, 1);
  const a = collect(first);
  const b = collect(ahead);
  for (const revision of [2, 3, 4]) opened[0]?.push({ revision });
  await flush();
  assert.deepEqual(a.seen, [2, 3, 4]);
  assert.deepEqual(b.seen, [4]);
  first.stop();
  ahead.stop();
});

test("shared watch - a user behind what the watch handed out gets a watch of its own from its revision", async () => {
  const watches = new SharedWatches<Entry>();
  const owner = {};
  const { opened, open } = opener();
  const first = await watches.join(owner, "k", 1, open);
  const a = collect(first);
  opened[0]?.push({ revision: 2 });
  await flush();
  assert.deepEqual(a.seen, [2]);
  // It read the config at revision 1: it would miss revision 2 on the shared watch.
  const behind = await watches.join(owner, "k", 1, open);
  assert.equal(opened.length, 2);
  assert.equal(opened[1]?.afterRevision, 1);
  // The private one is not shared: a third user still joins the first.
  const third = await watches.join(owner, "k", 2, open);
  assert.equal(opened.length, 2);
  assert.equal(watches.users(owner, "k"), 2);
  behind.stop();
  assert.equal(opened[1]?.stopped, true);
  assert.equal(opened[0]?.stopped, false);
  first.stop();
  third.stop();
  assert.equal(opened[0]?.stopped, true);
});

test("shared watch - a failure to open reaches every user waiting on it, and nothing stays registered", async () => {
  const watches = new SharedWatches<Entry>();
  const owner = {};
  const refused = new Error("permission denied");
  let calls = 0;
  const open = async (): Promise<FakeWatch> => {
    calls += 1;
    await flush(1);
    throw refused;
  };
  const results = await Promise.allSettled([watches.join(owner, "k", 1, open), watches.join(owner, "k", 1, open)]);
  assert.equal(calls, 1);
  for (const r of results) assert.equal(r.status === "rejected" ? r.reason : undefined, refused);
  assert.equal(watches.openCount(owner), 0);
});

test("shared watch - every user leaving while it opens stops it once it is open", async () => {
  const watches = new SharedWatches<Entry>();
  const owner = {};
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const w = new FakeWatch(1);
  const joining = watches.join(owner, "k", 1, async () => {
    await gate;
    return w;
  });
  release();
  const lease = await joining;
  lease.stop();
  assert.equal(w.stopped, true);
});
