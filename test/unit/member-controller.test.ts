/**
 * The member lifecycle without a server: a fake {@link MemberPort} records every
 * call, and `node:test` mock timers drive the retries and head starts, so the hard
 * interleavings (stop during a join, during a drain, a config deleted or a consumer
 * lost during a drain, a watch that fails) are cheap and deterministic.
 */
import { afterEach, beforeEach, describe, mock, test } from "node:test";
import assert from "node:assert/strict";
import { ConsumerGroupError } from "../../src/core/errors.js";
import type { ConfigEvent, StoredConfig } from "../../src/nats/config-store.js";
import { MemberController } from "../../src/nats/member-controller.js";
import type { ConfigWatch, ConsumeSession, EnsureResult, MemberPort, RefreshResult } from "../../src/nats/member-port.js";
import type { MemberSettings, MemberStatus } from "../../src/nats/member-types.js";
import { NOOP_METRICS } from "../../src/nats/metrics.js";
import type { PinnedConsumerEvents } from "../../src/nats/pinned-consumer.js";
import type { ParkedKey } from "../../src/nats/dispatcher.js";
import { PushQueue } from "../helpers/push-queue.js";

/** A config is just the member's partitions; `bad` makes it unusable. */
interface Cfg {
  partitions: number[];
  bad?: boolean;
  /** Stands for what else a config may change without moving partitions (a repartition's count). */
  layout?: number;
}

/** Lets pending promise callbacks run (setImmediate is not mocked). */
const flush = async (rounds = 5): Promise<void> => {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
};

/** A promise resolved by hand. */
function gate<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

class FakeSession implements ConsumeSession {
  pinId: string | undefined = "pin-1";
  inFlight = 0;
  held = 0;
  stops: number[] = [];
  /** Resolves the drain; until then stop() waits (a handler in flight). */
  drain = gate<boolean>();
  constructor(
    readonly events: PinnedConsumerEvents,
    autoDrain: boolean,
  ) {
    if (autoDrain) this.drain.resolve(true);
  }
  /** Set when starts were paused, with the stops made until then (pauses must come first). */
  pausedBeforeStops: number | undefined;
  pauseStarts(): void {
    this.pausedBeforeStops ??= this.stops.length;
  }
  parkedKeys(): ParkedKey[] {
    return [];
  }
  release(): Promise<undefined> {
    return Promise.resolve(undefined);
  }
  stop(timeoutMs: number): Promise<boolean> {
    this.stops.push(timeoutMs);
    return this.drain.promise;
  }
}

class FakeWatch extends PushQueue<ConfigEvent<Cfg>> implements ConfigWatch<Cfg> {
  readonly events: AsyncIterable<ConfigEvent<Cfg>> = { [Symbol.asyncIterator]: () => this.iterate() };
  /** Set when the controller gave the watch up as stale (a shared one ends for every user). */
  abandoned = false;
  abandon(): void {
    this.abandoned = true;
    this.stop();
  }
}

/**
 * The first session has no pin id, and learns one during its drain: the message that
 * pinned it was on the wire when the server was first asked. The port answers "not
 * pinned" before the drain and "pinned" after it; returns the answers still unread.
 */
function pinArrivesDuringDrain(port: FakePort): boolean[] {
  const session = port.sessions[0] as FakeSession;
  session.pinId = undefined;
  const answers = [false, true];
  port.isPinned = () => Promise.resolve(answers.shift() ?? false);
  const stop = session.stop.bind(session);
  session.stop = (timeoutMs) => {
    session.pinId = "pin-late";
    return stop(timeoutMs);
  };
  return answers;
}

class FakePort implements MemberPort<Cfg> {
  readonly consumerName = "m1";
  stopWhenConsumerLost = false;
  calls: string[] = [];
  ensureResults: (EnsureResult | Error)[] = [];
  ensureGate: Promise<void> | undefined;
  startError: Error | undefined;
  autoDrain = true;
  pinned = true;
  gone = true;
  closedConnection = false;
  stored: StoredConfig<Cfg> | Error = { config: { partitions: [0, 1] }, revision: 1 };
  sessions: FakeSession[] = [];
  watches: FakeWatch[] = [];
  watchErrors: Error[] = [];
  /** What each refreshConsumer call answers, in turn (then undefined: nothing to follow). */
  refreshResults: (number | undefined | "rejoin" | Error)[] = [];
  refreshes = 0;

  partitions(config: Cfg): number[] {
    return config.partitions;
  }
  wantsConsumer(config: Cfg): boolean {
    return config.partitions.length > 0;
  }
  /** As the elastic port: never across a change of the partition count (`layout` here). */
  supersedes(older: Cfg, newer: Cfg): boolean {
    return older.layout === newer.layout;
  }
  /** Errors classify throws, one per call, before it answers (a server that did not answer a question about the change). */
  classifyErrors: Error[] = [];
  classify(current: Cfg, next: Cfg): "same" | "membership" | ConsumerGroupError {
    const error = this.classifyErrors.shift();
    if (error) throw error;
    if (next.bad) return new ConsumerGroupError("CONFIG_IMMUTABLE", "bad change");
    return JSON.stringify(current) === JSON.stringify(next) ? "same" : "membership";
  }
  async ensureConsumer(): Promise<EnsureResult> {
    this.calls.push("ensure");
    await this.ensureGate;
    const next = this.ensureResults.shift() ?? "ready";
    if (next instanceof Error) throw next;
    return next;
  }
  refreshConsumer(): Promise<RefreshResult> {
    this.refreshes += 1;
    const next = this.refreshResults.shift();
    if (next instanceof Error) return Promise.reject(next);
    return Promise.resolve(next === "rejoin" ? { recheckMs: undefined, rejoin: true } : { recheckMs: next, rejoin: false });
  }
  async startConsume(events: PinnedConsumerEvents): Promise<ConsumeSession> {
    this.calls.push("start");
    if (this.startError) throw this.startError;
    const session = new FakeSession(events, this.autoDrain);
    this.sessions.push(session);
    return Promise.resolve(session);
  }
  isPinned(): Promise<boolean> {
    return Promise.resolve(this.pinned);
  }
  deleteJoinedConsumer(_session: ConsumeSession, unusable = false): Promise<void> {
    this.calls.push(unusable ? "delete:unusable" : "delete");
    return Promise.resolve();
  }
  unpin(): Promise<void> {
    this.calls.push("unpin");
    return Promise.resolve();
  }
  consumerGone(): Promise<boolean> {
    return Promise.resolve(this.gone);
  }
  readConfig(): Promise<StoredConfig<Cfg>> {
    this.calls.push("read");
    return this.stored instanceof Error ? Promise.reject(this.stored) : Promise.resolve(this.stored);
  }
  openWatch(): Promise<ConfigWatch<Cfg>> {
    this.calls.push("watch");
    const error = this.watchErrors.shift();
    if (error) return Promise.reject(error);
    const w = new FakeWatch();
    this.watches.push(w);
    return Promise.resolve(w);
  }
  cleanup(): Promise<void> {
    this.calls.push("cleanup");
    return Promise.resolve();
  }
  connectionClosed(): boolean {
    return this.closedConnection;
  }
  close(): void {
    this.calls.push("close");
  }
}


interface Harness {
  port: FakePort;
  controller: MemberController<Cfg>;
  events: MemberStatus[];
  log: string[];
  settings: MemberSettings;
}

function harness(partitions: number[], overrides: Partial<MemberSettings> = {}, onAssigned?: (p: number[]) => Promise<void>): Harness {
  const port = new FakePort();
  const log: string[] = [];
  const settings: MemberSettings = {
    handler: () => undefined,
    ackWaitMs: 2000,
    drainTimeoutMs: 10_000,
    handoff: true,
    pullBatch: 100,
    localBufferCap: 256,
    maxBufferedBytes: 16 * 1024 * 1024,
    dispatch: { mode: "serial", maxInFlight: 1, keyOf: () => "", workingIntervalMs: 1000 },
    deadLetterTo: () => assert.fail("no dead letters here"),
    lifecycle: {
      onAssigned: async (p) => {
        log.push(`assigned:${p.join(",")}`);
        await onAssigned?.(p);
      },
      onRevoked: (p) => void log.push(`revoked:${p.join(",")}`),
    },
    ...overrides,
  };
  const controller = new MemberController<Cfg>(port, "s", "g", "m1", { config: { partitions }, revision: 1 }, settings, { rejoinTickMs: 2500, configCheckMs: 1000 }, NOOP_METRICS);
  const events: MemberStatus[] = [];
  void (async () => {
    for await (const e of controller.status()) events.push(e);
  })();
  return { port, controller, events, log, settings };
}

/** Every onAssigned partition set was revoked by the end. */
function assertBalanced(log: string[]): void {
  const held = new Set<number>();
  for (const entry of log) {
    const [what, list] = entry.split(":");
    for (const p of (list ?? "").split(",").filter((x) => x !== "").map(Number)) {
      if (what === "assigned") {
        assert.ok(!held.has(p), `partition ${p} assigned twice without a revoke (${log.join(" ")})`);
        held.add(p);
      } else if (what === "revoked") {
        assert.ok(held.has(p), `partition ${p} revoked without being assigned (${log.join(" ")})`);
        held.delete(p);
      }
    }
  }
  assert.deepEqual([...held], [], `every onAssigned is matched by onRevoked (${log.join(" ")})`);
}

const put = (partitions: number[], revision: number, bad = false): ConfigEvent<Cfg> => ({ kind: "put", config: bad ? { partitions, bad } : { partitions }, revision });

/**
 * Starts an instance on partitions 0 and 1 and sends a membership change to `next`
 * while a handler is in flight: the first session's drain waits until its gate is resolved.
 *
 * @param autoDrain - whether the sessions started after the change drain at once
 */
async function drainingAfterChange(next: number[], autoDrain: boolean): Promise<Harness & { first: FakeSession }> {
  const h = harness([0, 1]);
  await h.controller.start(false);
  h.port.autoDrain = autoDrain;
  const first = h.port.sessions[0];
  assert.ok(first);
  first.drain = gate<boolean>(); // a handler in flight
  h.port.watches[0]?.push(put(next, 2));
  await flush();
  return { ...h, first };
}

describe("member controller - lifecycle without a server", () => {
  beforeEach(() => mock.timers.enable({ apis: ["setTimeout"] }));
  afterEach(() => mock.timers.reset());

  test("controller - onAssigned is awaited before the consume starts", async () => {
    const slow = gate();
    const h = harness([0, 1], {}, () => slow.promise);
    const started = h.controller.start(false);
    await flush();
    assert.deepEqual(h.port.calls, ["watch", "ensure"], "the consume has not started while onAssigned runs");
    slow.resolve();
    await started;
    assert.deepEqual(h.port.calls, ["watch", "ensure", "start"]);
    assert.equal(h.controller.currentState.name, "consuming");
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - a pinned instance drains, revokes what it lost, deletes the consumer it joined, then rejoins", async () => {
    const h = await drainingAfterChange([1, 2], false);
    const first = h.first;
    assert.equal(h.controller.currentState.name, "draining");
    assert.deepEqual(first.stops, [10_000], "the drain gets the drain timeout");
    assert.ok(!h.port.calls.includes("delete"), "nothing is deleted while the handler runs");
    first.drain.resolve(true);
    h.port.autoDrain = true;
    await flush();
    assert.deepEqual(h.port.calls.slice(-3), ["delete", "ensure", "start"]);
    assert.deepEqual(h.log, ["assigned:0,1", "revoked:0", "assigned:2"]);
    const changed = h.events.find((e) => e.type === "partitions_changed");
    assert.deepEqual(changed, { type: "partitions_changed", partitions: [1, 2], assigned: [2], revoked: [0] });
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - changes that arrive during a drain are acted on once, at the newest: no rebalance through the revisions in between", async () => {
    const h = await drainingAfterChange([1, 2], false);
    // Two more edits land while the first change drains: [0, 1, 2, 3], then [3].
    h.port.watches[0]?.push(put([0, 1, 2, 3], 3));
    h.port.watches[0]?.push(put([3], 4));
    await flush();
    h.first.drain.resolve(true);
    h.port.autoDrain = true;
    await flush(20);
    assert.deepEqual(h.log, ["assigned:0,1", "revoked:0", "assigned:2", "revoked:1,2", "assigned:3"], "revision 3 was never joined");
    const changes = h.events.filter((e) => e.type === "partitions_changed").map((e) => (e.type === "partitions_changed" ? e.partitions : []));
    assert.deepEqual(changes, [[1, 2], [3]]);
    assert.equal(h.port.sessions.length, 3, "one consume per config acted on");
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - a burst is not read past a change of the partition count: each repartition step is acted on in turn", async () => {
    const h = await drainingAfterChange([1, 2], false);
    // A repartition to layout 2 then a membership edit within it, then another repartition to layout 3.
    h.port.watches[0]?.push({ kind: "put", config: { partitions: [0, 1, 2, 3], layout: 2 }, revision: 3 });
    h.port.watches[0]?.push({ kind: "put", config: { partitions: [3], layout: 2 }, revision: 4 });
    h.port.watches[0]?.push({ kind: "put", config: { partitions: [3, 4], layout: 3 }, revision: 5 });
    await flush();
    h.first.drain.resolve(true);
    h.port.autoDrain = true;
    await flush(30);
    const changes = h.events.filter((e) => e.type === "partitions_changed").map((e) => (e.type === "partitions_changed" ? e.partitions : []));
    assert.deepEqual(changes, [[1, 2], [3], [3, 4]], "revision 3 is replaced by 4 (same layout), 4 is not replaced by 5");
    assert.equal(h.controller.currentState.name, "consuming");
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - a deletion queued behind a put is not skipped: the instance stops with cleanup after acting on the put", async () => {
    const h = await drainingAfterChange([1, 2], false);
    h.port.watches[0]?.push(put([3], 3));
    h.port.watches[0]?.push({ kind: "deleted", revision: 4 });
    await flush();
    h.first.drain.resolve(true);
    h.port.autoDrain = true;
    await flush(20);
    assert.equal(h.controller.currentState.name, "stopped");
    assert.ok(h.port.calls.includes("cleanup"), "the deletion cleaned up");
    assertBalanced(h.log);
  });

  test("controller - a standby never deletes the consumer: it gives the pinned one a head start, then waits while it is busy", async () => {
    const h = harness([0, 1]);
    await h.controller.start(false);
    h.port.pinned = false;
    h.port.ensureResults = ["busy", "busy", "ready"];
    h.port.watches[0]?.push(put([1], 2));
    await flush();
    assert.ok(!h.port.calls.includes("delete"));
    assert.equal(h.port.calls.filter((c) => c === "ensure").length, 1, "waits its head start first");
    mock.timers.tick(500);
    await flush();
    assert.equal(h.port.calls.filter((c) => c === "ensure").length, 2);
    assert.equal(h.controller.currentState.name, "rejoining");
    mock.timers.tick(150);
    await flush();
    mock.timers.tick(150);
    await flush();
    assert.equal(h.controller.currentState.name, "consuming");
    assert.ok(!h.port.calls.includes("delete"), "a standby deleted nothing");
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - pinned by a message still on the wire when it asked: the pin id learned during the drain makes it delete its consumer (no wait for the inactive threshold)", async () => {
    const h = harness([0, 1]);
    await h.controller.start(false);
    const answers = pinArrivesDuringDrain(h.port);
    h.port.watches[0]?.push(put([1], 2));
    await flush();
    assert.deepEqual(answers, [], "asked before and after the drain");
    assert.ok(h.port.calls.includes("delete"), "the instance that turned out pinned deleted the consumer it joined");
    assert.equal(h.controller.currentState.name, "consuming");
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - a change that moves partitions pauses the session's starts before anything is awaited (the pin question included)", async () => {
    const h = harness([0, 1]);
    await h.controller.start(false);
    const session = h.port.sessions[0] as FakeSession;
    let pausedWhenAsked: boolean | undefined;
    h.port.isPinned = () => {
      pausedWhenAsked = session.pausedBeforeStops !== undefined;
      return Promise.resolve(true);
    };
    h.port.watches[0]?.push(put([1], 2));
    await flush();
    assert.equal(pausedWhenAsked, true, "starts were paused before the server was asked");
    assert.equal(session.pausedBeforeStops, 0, "and before the drain");
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - a standby that learned no new pin id during the drain is not asked again and deletes nothing", async () => {
    const h = harness([0, 1]);
    await h.controller.start(false);
    let asked = 0;
    h.port.isPinned = () => {
      asked += 1;
      return Promise.resolve(false);
    };
    h.port.watches[0]?.push(put([1], 2));
    await flush();
    mock.timers.tick(500);
    await flush();
    assert.equal(asked, 1);
    assert.ok(!h.port.calls.includes("delete"));
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - stop(): a pin learned during the drain is released too (unpin), so a standby takes over at once", async () => {
    const h = harness([0, 1]);
    await h.controller.start(false);
    pinArrivesDuringDrain(h.port);
    await h.controller.stop();
    assert.ok(h.port.calls.includes("unpin"));
    assertBalanced(h.log);
  });

  test("controller - a second change while a join waits revokes what the first one assigned and no longer holds", async () => {
    const h = harness([0, 1]);
    await h.controller.start(false);
    h.port.ensureResults = ["busy"]; // another member still holds partition 2
    h.port.watches[0]?.push(put([0, 1, 2], 2));
    await flush(10);
    assert.equal(h.controller.currentState.name, "rejoining");
    h.port.watches[0]?.push(put([2], 3)); // before the join succeeds, the member loses 0 and 1
    await flush(10);
    assert.equal(h.controller.currentState.name, "consuming");
    assert.deepEqual(h.log, ["assigned:0,1", "revoked:0,1", "assigned:2"]);
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - a consumer that skipped messages is replaced even when this instance is not pinned to it; a foreign delivery only by the pinned instance", async () => {
    const skipped = harness([0, 1]);
    await skipped.controller.start(false);
    skipped.port.pinned = false;
    const first = skipped.port.sessions[0] as FakeSession;
    first.pinId = undefined;
    first.events.onSkippedMessage?.({ seq: 3, subject: "0.orders.a" }, 9);
    await flush(10);
    assert.ok(skipped.events.some((e) => e.type === "consumer_error" && e.error.code === "CONSUMER_STATE_FOREIGN" && e.error.message.includes("never delivered 3")), "the skip is reported");
    assert.deepEqual(skipped.port.calls.filter((c) => c.startsWith("delete") || c === "start"), ["start", "delete:unusable", "start"], "deleted and consumed again");
    assert.equal(skipped.controller.currentState.name, "consuming");
    await skipped.controller.stop();

    const foreign = harness([0, 1]);
    await foreign.controller.start(false);
    foreign.port.pinned = false;
    (foreign.port.sessions[0] as FakeSession).pinId = undefined;
    foreign.port.sessions[0]?.events.onForeignDelivery?.("2.orders.b", 5);
    await flush(10);
    mock.timers.tick(600);
    await flush(10);
    assert.ok(foreign.events.some((e) => e.type === "consumer_error" && e.error.code === "CONSUMER_STATE_FOREIGN"));
    assert.deepEqual(foreign.port.calls.filter((c) => c.startsWith("delete") || c === "start"), ["start", "start"], "an unpinned instance leaves the consumer to its pinned one");
    await foreign.controller.stop();
    assertBalanced(skipped.log);
    assertBalanced(foreign.log);
  });

  test("controller - stop while a join is retried revokes what was assigned, and starts nothing", async () => {
    const h = harness([0, 1]);
    await h.controller.start(false);
    h.port.startError = new Error("boom");
    h.port.sessions[0]?.events.onEnded("the consumer was deleted");
    await flush();
    assert.equal(h.controller.currentState.name, "rejoining");
    assert.ok(h.events.some((e) => e.type === "consumer_lost"));
    mock.timers.tick(300);
    await flush();
    assert.equal(h.controller.currentState.name, "rejoining", "the restart failed and is retried");
    await h.controller.stop();
    assert.equal(h.controller.currentState.name, "stopped");
    mock.timers.tick(10_000);
    await flush();
    assert.equal(h.port.calls.filter((c) => c === "start").length, 2, "no join after stop");
    assertBalanced(h.log);
  });

  test("controller - stop during a join: the consume that was starting is stopped and never reported joined", async () => {
    const h = harness([0, 1]);
    const ensure = gate();
    h.port.ensureGate = ensure.promise;
    const started = h.controller.start(false);
    await flush();
    const stopped = h.controller.stop();
    ensure.resolve();
    await started;
    await stopped;
    assert.equal(h.controller.currentState.name, "stopped");
    assert.ok(!h.events.some((e) => e.type === "joined"));
    assertBalanced(h.log);
  });

  test("controller - stop during a drain waits for the drain, then revokes everything and starts no new consume", async () => {
    const h = await drainingAfterChange([1], false);
    const first = h.first;
    const stopped = h.controller.stop();
    await flush();
    assert.equal(h.controller.currentState.name, "draining", "stop waits its turn behind the drain");
    first.drain.resolve(true);
    await stopped;
    assert.equal(h.controller.currentState.name, "stopped");
    assert.equal(h.port.sessions.length, 1, "no consume started after the stop was asked for");
    assert.deepEqual(h.port.calls.filter((c) => c === "delete" || c === "unpin"), ["delete"], "the drained consumer was deleted; no pin was left to give up");
    assertBalanced(h.log);
  });

  test("controller - config deleted during a drain: the drain finishes, then the instance stops cleanly with cleanup", async () => {
    const h = await drainingAfterChange([1], false);
    const first = h.first;
    h.port.watches[0]?.push({ kind: "deleted", revision: 3 });
    await flush();
    first.drain.resolve(true);
    await flush(10);
    h.port.sessions[1]?.drain.resolve(true);
    assert.equal(await h.controller.closed(), undefined);
    assert.ok(h.port.calls.includes("cleanup"));
    assertBalanced(h.log);
  });

  test("controller - consumer lost during a drain is ignored (the drain owns the session)", async () => {
    const h = await drainingAfterChange([1], true);
    const first = h.first;
    first.events.onEnded("the consumer was deleted");
    first.drain.resolve(true);
    await flush(10);
    assert.equal(h.controller.currentState.name, "consuming");
    assert.ok(!h.events.some((e) => e.type === "consumer_lost"));
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - a static durable that is gone stops the instance with CONSUMER_LOST; gone with its config is a clean stop", async () => {
    const lost = harness([0]);
    lost.port.stopWhenConsumerLost = true;
    await lost.controller.start(true);
    lost.port.sessions[0]?.events.onEnded("the consumer was deleted");
    const error = await lost.controller.closed();
    assert.equal((error as ConsumerGroupError | undefined)?.code, "CONSUMER_LOST");
    assert.equal(lost.port.calls.filter((c) => c === "start").length, 1, "never recreated");
    assertBalanced(lost.log);

    const deleted = harness([0]);
    deleted.port.stopWhenConsumerLost = true;
    deleted.port.stored = new ConsumerGroupError("GROUP_NOT_FOUND", "gone");
    await deleted.controller.start(true);
    deleted.port.sessions[0]?.events.onEnded("the consumer was deleted");
    assert.equal(await deleted.controller.closed(), undefined);
    assert.ok(deleted.port.calls.includes("cleanup"));
  });

  test("controller - a failing watch is re-opened with backoff while the member keeps consuming, and changes missed meanwhile apply", async () => {
    const h = harness([0, 1]);
    await h.controller.start(false);
    h.port.watchErrors = [new Error("no quorum")];
    h.port.stored = { config: { partitions: [0, 1, 2] }, revision: 5 };
    h.port.watches[0]?.push(new Error("watcher closed"));
    await flush();
    assert.deepEqual(
      h.events.filter((e) => e.type === "watch_error").map((e) => (e.type === "watch_error" ? e.retryInMs : 0)),
      [250],
    );
    assert.equal(h.controller.currentState.name, "consuming", "still consuming");
    mock.timers.tick(250);
    await flush();
    assert.equal(h.events.filter((e) => e.type === "watch_error").length, 2, "the first re-open failed too");
    mock.timers.tick(500);
    await flush(10);
    const restarted = h.events.find((e) => e.type === "watch_restarted");
    assert.deepEqual(restarted, { type: "watch_restarted", revision: 5, attempts: 2 });
    assert.deepEqual(h.controller.partitions(), [0, 1, 2], "the change made while the watch was down applied");
    h.port.watches[1]?.push(put([2], 6));
    await flush(10);
    assert.deepEqual(h.controller.partitions(), [2], "later changes are followed");
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - acting on a change that fails (the server did not answer) re-opens the watch and applies the stored config, without an unhandled rejection", async () => {
    const rejections: unknown[] = [];
    const onRejection = (reason: unknown): void => void rejections.push(reason);
    process.on("unhandledRejection", onRejection);
    try {
      const h = harness([0, 1]);
      await h.controller.start(false);
      h.port.classifyErrors = [new Error("stream info timed out")];
      h.port.stored = { config: { partitions: [1, 2] }, revision: 2 };
      h.port.watches[0]?.push(put([1, 2], 2));
      await flush(10);
      assert.ok(h.events.some((e) => e.type === "watch_error" && e.error.message.includes("stream info timed out")), "the failure is reported");
      mock.timers.tick(250);
      await flush(20);
      assert.deepEqual(h.controller.partitions(), [1, 2], "the change applies after the re-read");
      assert.equal(h.controller.currentState.name, "consuming");
      await h.controller.stop();
      assertBalanced(h.log);
      assert.deepEqual(rejections, []);
    } finally {
      process.off("unhandledRejection", onRejection);
    }
  });

  test("controller - a watch that went silent (its KV stream recreated) is replaced once two reads disagree with it", async () => {
    const h = harness([0, 1]);
    await h.controller.start(false);
    h.port.stored = { config: { partitions: [3] }, revision: 1 }; // a recreated bucket starts again at revision 1
    mock.timers.tick(1000);
    await flush(10);
    assert.equal(h.port.watches[0]?.stopped, false, "one read that disagrees could be a change on its way");
    mock.timers.tick(1000);
    await flush(10);
    assert.equal(h.port.watches[0]?.stopped, true, "the second one replaces the watch");
    assert.equal(h.port.watches[0]?.abandoned, true, "a stale watch is abandoned (ended for every instance sharing it), not just left");
    mock.timers.tick(250);
    await flush(20);
    assert.ok(h.events.some((e) => e.type === "watch_restarted"));
    assert.deepEqual(h.controller.partitions(), [3], "the stored config applies");
    await h.controller.stop();
    assertBalanced(h.log);
  });

  test("controller - with the connection closed, a failed watch stops the member with WATCH_CLOSED", async () => {
    const h = harness([0]);
    await h.controller.start(false);
    h.port.closedConnection = true;
    h.port.watches[0]?.push(new Error("connection closed"));
    const error = await h.controller.closed();
    assert.equal((error as ConsumerGroupError | undefined)?.code, "WATCH_CLOSED");
    assertBalanced(h.log);
  });

  test("controller - an unusable config change stops the member after its drain, with cleanup", async () => {
    const h = harness([0]);
    await h.controller.start(false);
    h.port.watches[0]?.push(put([0], 2, true));
    const error = await h.controller.closed();
    assert.equal((error as ConsumerGroupError | undefined)?.code, "CONFIG_IMMUTABLE");
    assert.ok(h.port.calls.includes("cleanup"));
    assert.ok(!h.port.calls.includes("unpin"), "only a requested stop unpins");
    assertBalanced(h.log);
  });

  test("controller - an unsupported client is thrown at start, even when joins are retried", async () => {
    const h = harness([0]);
    h.port.startError = new ConsumerGroupError("CLIENT_UNSUPPORTED", "old nats.js");
    await assert.rejects(h.controller.start(false), (e: unknown) => (e as ConsumerGroupError).code === "CLIENT_UNSUPPORTED");
    assert.equal(h.controller.currentState.name, "stopped");
  });

  test("controller - the status iterator is bounded: an unread one keeps 1,000 events and says how many it dropped", async () => {
    const h = harness([0]);
    await h.controller.start(false);
    const unread = h.controller.status()[Symbol.asyncIterator]();
    for (let i = 0; i < 1500; i++) h.controller.publish({ type: "config_changed", revision: i });
    const first = await unread.next();
    assert.deepEqual(first.value, { type: "events_dropped", count: 500 });
    const second = await unread.next();
    assert.deepEqual(second.value, { type: "config_changed", revision: 500 });
    await h.controller.stop();
  });
  test("controller - a running consumer follows its stream while the port asks, a failed check is retried, and nothing is checked once stopped", async () => {
    const h = harness([0, 1]);
    h.port.refreshResults = [250, new ConsumerGroupError("SERVER_ERROR", "stream info failed"), 250, undefined];
    await h.controller.start(false);
    mock.timers.tick(0);
    await flush();
    assert.equal(h.port.refreshes, 1, "checked once the consume runs");
    mock.timers.tick(250);
    await flush();
    assert.equal(h.port.refreshes, 2);
    assert.ok(h.events.some((e) => e.type === "consumer_error" && e.retryInMs === 1000 && e.error.message.includes("stream info failed")), "the failure is reported");
    mock.timers.tick(999);
    await flush();
    assert.equal(h.port.refreshes, 2, "not before the retry delay");
    mock.timers.tick(1);
    await flush();
    assert.equal(h.port.refreshes, 3);
    mock.timers.tick(250);
    await flush();
    assert.equal(h.port.refreshes, 4, "the port said there is nothing more to follow");
    mock.timers.tick(10_000);
    await flush();
    assert.equal(h.port.refreshes, 4, "so it is not asked again");
    // A change that keeps the partitions (a repartition's new count) is checked at once, without a rejoin.
    h.port.refreshResults = [250];
    h.port.watches[0]?.push({ kind: "put", config: { partitions: [0, 1], layout: 2 }, revision: 2 });
    await flush();
    mock.timers.tick(0);
    await flush();
    assert.equal(h.port.refreshes, 5);
    assert.equal(h.port.sessions.length, 1, "no rejoin");
    // Filters to add: the instance drains, deletes the consumer it joined and rejoins, keeping its partitions.
    h.port.refreshResults = ["rejoin"];
    mock.timers.tick(250);
    await flush(10);
    assert.equal(h.port.refreshes, 6);
    assert.equal(h.port.sessions.length, 2, "rejoined with a new consume");
    assert.deepEqual(h.port.sessions[0]?.stops, [10_000], "the first consume drained with the drain timeout");
    assert.ok(h.port.calls.includes("delete"), "the pinned instance deleted the consumer it joined");
    assert.ok(h.events.some((e) => e.type === "consumer_refreshed"));
    assert.deepEqual(h.log, ["assigned:0,1"], "no partition was revoked or assigned again");
    h.port.refreshResults = [250];
    mock.timers.tick(0);
    await flush();
    assert.equal(h.port.refreshes, 7, "the new consume is checked too");
    await h.controller.stop();
    mock.timers.tick(10_000);
    await flush();
    assert.equal(h.port.refreshes, 7, "a stopped instance checks nothing");
    assertBalanced(h.log);
  });
});

describe("member controller - following the stream through a leader election", () => {
  beforeEach(() => mock.timers.enable({ apis: ["setTimeout", "setInterval"] }));
  afterEach(() => mock.timers.reset());

  test("controller - transient check failures (timeouts while the work queue elects a leader) are retried quietly; one that lasts is reported", async () => {
    const h = harness([0, 1]);
    const timeout = (): Error => new ConsumerGroupError("SERVER_ERROR", "error reading the layout of the work-queue stream: timeout", { cause: new Error("TimeoutError: timeout") });
    // An election: three timeouts, then the stream answers.
    h.port.refreshResults = [timeout(), timeout(), timeout(), 250, ...Array.from({ length: 11 }, timeout), undefined];
    await h.controller.start(false);
    for (let i = 0; i < 4; i++) {
      mock.timers.tick(1000);
      await flush();
    }
    assert.equal(h.port.refreshes, 4, "retried after each failure, then back on its schedule");
    assert.deepEqual(h.events.filter((e) => e.type === "consumer_error"), [], "an election's timeouts are not reported");
    // A failure that lasts: reported once it outlasts the quiet retries.
    for (let i = 0; i < 12; i++) {
      mock.timers.tick(1000);
      await flush();
    }
    const reported = h.events.filter((e) => e.type === "consumer_error");
    assert.equal(reported.length, 1, "reported after 10 transient failures in a row");
    assert.match(reported[0]?.type === "consumer_error" ? reported[0].error.message : "", /timeout/);
    await h.controller.stop();
  });
});
