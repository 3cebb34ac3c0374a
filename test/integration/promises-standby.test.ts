/**
 * Regression tests for issue 14, items 1, 2, 9, 10 and 11: what a member instance
 * promises around hot standbys, drains and lifecycle callbacks, on a real server.
 *
 * 1. a hot standby never destroys the pinned instance's consumer during a drain
 *    (TypeScript standby and Go standby);
 * 2. a drain timeout never makes two runs of one message (or of one key) overlap;
 * 9. `onAssigned` is awaited before any message of those partitions starts;
 * 10. every `onAssigned` is matched by `onRevoked` (consumer lost, join retried, stop());
 * 11. an instance that lost its pin starts no further message; an ack that fails
 *     during a drain is reported, never counted as handled.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { MeterProvider } from "@opentelemetry/sdk-metrics";
import {
  addMembers,
  deleteMembers,
  elasticConsume,
  elasticGetPartitionFilters,
  getElasticConsumerGroupConfig,
  memberPartitions,
  staticConsume,
  staticMemberStepDown,
  workQueueStreamName,
  type ConsumerGroupMessage,
  type ConsumeOptions,
} from "../../src/index.js";
import { checkDelivery, type HandledRecord } from "../../src/cli/demo/delivery-check.js";
import { deferred, startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { createLoadGroup, nanos } from "../helpers/load-scenario.js";
import { DeliverySpy, Published, keyNames, now, publishKeyed, sleep, type KeyedMessage } from "../helpers/load-harness.js";
import { GoMember, driverBinary } from "../helpers/interop-go.js";
import { TestReader, handledTotal } from "../helpers/metric-reader.js";
import { ApiAudit, ConsumerAdvisories, ConsumerStates, RunLog, keyOnPartition, recordLifecycle, recordStatus, within } from "../helpers/promises.js";

/** The handler's view of a message, for the run log. */
function runOf(who: string, msg: ConsumerGroupMessage): { who: string; id: string; key: string; partition: number; seq: number; deliveryCount: number } {
  const { key, seq } = msg.json<KeyedMessage>();
  return { who, id: `${key}/${seq}`, key, partition: msg.partition, seq: msg.seq, deliveryCount: msg.info.deliveryCount };
}

describe("promises - standbys, drains and lifecycle callbacks (issue 14)", () => {
  let env: TestEnv;
  const running: { stop(): Promise<void> }[] = [];
  const track = <T extends { stop(): Promise<void> }>(m: T): T => {
    running.push(m);
    return m;
  };

  before(async () => {
    env = await startEnv();
  });
  afterEach(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
  });
  after(async () => {
    await env.close();
  });

  /** An elastic group on `<stream>.*` with 4 partitions and these members. */
  async function elasticGroup(prefix: string, members: string[]): Promise<{ stream: string; wq: string; subjectOf: (key: string) => string }> {
    const stream = uniqueName(prefix);
    const subjectOf = await createLoadGroup(env, "elastic", stream, "g", 4, members);
    return { stream, wq: workQueueStreamName(stream, "g"), subjectOf };
  }

  const publish = async (subject: string, key: string, seq: number): Promise<void> => {
    await env.js.publish(subject, JSON.stringify({ key, seq }));
  };

  // --- item 1 -------------------------------------------------------------------

  test("standby - item 1: a TypeScript hot standby never deletes the consumer of the pinned instance draining a handler slower than AckWait", async () => {
    const { stream, wq, subjectOf } = await elasticGroup("sb1", ["m1"]);
    // A partition m1 keeps once m2 joins: the slow message stays m1's, so a second run can only come from m1's standby.
    const keep = memberPartitions(["m1", "m2"], 4, null, "m1");
    const slowKey = keyOnPartition(stream, 4, keep, "slow");
    const otherKey = keyOnPartition(stream, 4, keep, "after");
    const runs = new RunLog();
    const slowStarted = deferred();
    const options = (who: string): ConsumeOptions => ({
      stream,
      group: "g",
      member: "m1",
      consumerConfig: { ack_wait: nanos(2000) },
      drainTimeoutMs: 10_000,
      handler: async (msg) => {
        const end = runs.begin(runOf(who, msg), msg.signal);
        try {
          if (msg.json<KeyedMessage>().key === slowKey) {
            slowStarted.resolve();
            await sleep(3000); // longer than AckWait (2 s), shorter than drainTimeoutMs (10 s)
          }
        } finally {
          end();
        }
      },
    });
    const ca = await env.connect();
    const a = track(await elasticConsume(ca.js, options("A")));
    const statusA = recordStatus(a);
    await publish(subjectOf(otherKey), otherKey, 1);
    await waitFor(() => runs.runs.some((r) => r.who === "A"), 10_000, "A to take the pin");
    const cb = await env.connect();
    const b = track(await elasticConsume(cb.js, options("B")));
    const statusB = recordStatus(b);
    await waitFor(async () => (await env.jsm.consumers.info(wq, "m1")).num_waiting >= 2, 10_000, "the standby's pull on m1");

    const advisories = await ConsumerAdvisories.start(env.nc, wq, "m1");
    const states = new ConsumerStates(env.jsm, wq, "m1").start();
    try {
      await publish(subjectOf(slowKey), slowKey, 1);
      await within(slowStarted.promise, 10_000, "A to start the slow message");
      const changedAt = now();
      await addMembers(env.js, stream, "g", ["m2"]);
      const newFilters = elasticGetPartitionFilters(await getElasticConsumerGroupConfig(env.js, stream, "g"), "m1");

      await waitFor(() => runs.of(`${slowKey}/1`).every((r) => r.end !== undefined), 10_000, "the slow handler to finish");
      // A message published once the change is done must reach m1's (new) consumer.
      await waitFor(async () => JSON.stringify((await env.jsm.consumers.info(wq, "m1")).config.filter_subjects) === JSON.stringify(newFilters), 15_000, "m1's consumer with its new filters");
      await publish(subjectOf(otherKey), otherKey, 2);
      await waitFor(() => runs.of(`${otherKey}/2`).length > 0, 15_000, "a message published after the change to be handled");
      await sleep(2500); // past AckWait: a slow message left unacked would run again now
      states.stop();

      const slowRuns = runs.of(`${slowKey}/1`).map((r) => `${r.who}#${r.deliveryCount}`);
      const lost = [...statusA.of("consumer_lost").map((e) => `A: ${e.reason}`), ...statusB.of("consumer_lost").map((e) => `B: ${e.reason}`)];
      const created = states.createdWith(newFilters);
      const finalCreated = (await env.jsm.consumers.info(wq, "m1")).created;
      const history = advisories.describe(changedAt);
      assert.deepEqual(slowRuns, ["A#1"], `the slow message ran once, on A (consumer m1 after the change: ${history})`);
      assert.deepEqual(lost, [], `no instance lost its consumer (consumer m1 after the change: ${history})`);
      assert.equal(advisories.deletionsAfterRecreation(changedAt), 0, `m1's new consumer, once created, was never deleted: ${history}`);
      assert.deepEqual(created, [finalCreated], "m1's consumer with the new filters was created once and kept");
    } finally {
      states.stop();
      advisories.stop();
    }
  });

  test("standby - item 1: with a Go hot standby, the draining TypeScript instance never deletes the Go instance's consumer; the Go instance keeps consuming", async () => {
    driverBinary(); // fails loudly when the Go driver was not built
    const { stream, wq, subjectOf } = await elasticGroup("sb1go", ["m1"]);
    const keep = memberPartitions(["m1", "m2"], 4, null, "m1");
    const slowKey = keyOnPartition(stream, 4, keep, "slow");
    const keys = [0, 1, 2, 3].map((i) => keyOnPartition(stream, 4, keep, `after${i}_`));
    const runs = new RunLog();
    const slowStarted = deferred();
    const ca = await env.connect();
    // Go's cg template on both sides (explicit acks, max_ack_pending 1, AckWait 2 s), so they share one consumer.
    const ts = track(
      await elasticConsume(ca.js, {
        stream,
        group: "g",
        member: "m1",
        consumerConfig: { ack_policy: "explicit", ack_wait: nanos(2000), max_ack_pending: 1 },
        drainTimeoutMs: 10_000,
        handler: async (msg) => {
          const end = runs.begin(runOf("ts", msg), msg.signal);
          try {
            if (msg.json<KeyedMessage>().key === slowKey) {
              slowStarted.resolve();
              await sleep(3000);
            }
          } finally {
            end();
          }
        },
      }),
    );
    const statusTs = recordStatus(ts);
    await publish(subjectOf(keys[0] ?? ""), keys[0] ?? "", 1);
    await waitFor(() => runs.runs.some((r) => r.who === "ts"), 10_000, "the TypeScript instance to take the pin");
    const go = track(new GoMember("go:m1", env.server.url, "elastic", stream, "g", "m1", { ackWaitMs: 2000, maxAckPending: 1 }));
    await go.started;
    await waitFor(async () => (await env.jsm.consumers.info(wq, "m1")).num_waiting >= 2, 10_000, "the Go standby's pull on m1");

    const advisories = await ConsumerAdvisories.start(env.nc, wq, "m1");
    try {
      await publish(subjectOf(slowKey), slowKey, 1);
      await within(slowStarted.promise, 10_000, "the TypeScript instance to start the slow message");
      const changedAt = now();
      await addMembers(env.js, stream, "g", ["m2"]);
      await waitFor(() => runs.of(`${slowKey}/1`).every((r) => r.end !== undefined), 10_000, "the slow handler to finish");
      // Let the draining instance finish what it does after its handler (delete, rejoin): a fixed
      // window, because what must be shown is that it does NOT delete the Go instance's consumer.
      await sleep(3000);
      const fromGo = go.handled.length;
      const sent: string[] = [];
      for (const [i, key] of keys.entries()) {
        await publish(subjectOf(key), key, 10 + i);
        sent.push(`${key}/${10 + i}`);
      }
      // The driver records {"k","s"} payloads; ours are {"key","seq"}: read them from the payload.
      const goHandled = (): string[] =>
        go.handled.slice(fromGo).map((h) => {
          const p = JSON.parse(h.payload) as KeyedMessage;
          return `${p.key}/${p.seq}`;
        });
      const tsHandled = (): string[] => runs.runs.filter((r) => sent.includes(r.id)).map((r) => r.id);
      const allHandled = (): boolean => sent.every((id) => goHandled().includes(id) || tsHandled().includes(id));
      await waitFor(allHandled, 20_000, "the messages published after the change to be handled").catch(() => undefined);
      const ci = await env.jsm.consumers.info(wq, "m1").catch(() => undefined);
      const state = `consumer m1 after the change: ${advisories.describe(changedAt)}; now ${ci ? `pending ${ci.num_pending}, ack pending ${ci.num_ack_pending}, waiting pulls ${ci.num_waiting}` : "missing"}`;
      assert.ok(go.running, `the Go instance is still running: ${JSON.stringify(go.events)} ${go.stderr}`);
      assert.ok(goHandled().length > 0, `the Go instance kept consuming after the change: it handled ${goHandled().length} of ${sent.length}, the TypeScript instance ${tsHandled().length} (${state})`);
      assert.equal(advisories.deletionsAfterRecreation(changedAt), 0, `the consumer the Go instance recreated was never deleted (${state})`);
      assert.deepEqual(
        statusTs.of("consumer_lost").map((e) => e.reason),
        [],
        "the TypeScript instance did not lose a consumer it rejoined",
      );
      assert.ok(allHandled(), `every message published after the change was handled (${state})`);
    } finally {
      advisories.stop();
    }
  });

  // --- item 2 -------------------------------------------------------------------

  test("standby - item 2: a rebalance whose drain times out never runs one message, or one key, on two members at once", async () => {
    const { stream, wq, subjectOf } = await elasticGroup("dt", ["m1"]);
    // A partition that moves from m1 to m2 when m2 joins.
    const moved = memberPartitions(["m1", "m2"], 4, null, "m2");
    const key = keyOnPartition(stream, 4, moved, "hot");
    const slow = `${key}/1`;
    const runs = new RunLog();
    const slowStarted = deferred();
    const spy = await DeliverySpy.start(env.nc);
    const lifecycleA = recordLifecycle();
    const options = (who: string, member: string): ConsumeOptions => ({
      stream,
      group: "g",
      member,
      consumerConfig: { ack_wait: nanos(1000) },
      drainTimeoutMs: 1500,
      handler: async (msg) => {
        const run = runOf(who, msg);
        const end = runs.begin(run, msg.signal);
        try {
          if (run.id === slow) {
            slowStarted.resolve();
            await sleep(4000); // outlives drainTimeoutMs (1.5 s) and AckWait (1 s); ignores msg.signal on purpose
          }
        } finally {
          end();
        }
      },
    });
    const ca = await env.connect();
    const cb = await env.connect();
    const a = track(await elasticConsume(ca.js, { ...options("A", "m1"), ...lifecycleA.callbacks }));
    const statusA = recordStatus(a);
    track(await elasticConsume(cb.js, options("B", "m2")));
    try {
      await publish(subjectOf(key), key, 1);
      await within(slowStarted.promise, 10_000, "m1 to start the slow message");
      await publish(subjectOf(key), key, 2);
      const changedAt = now();
      await addMembers(env.js, stream, "g", ["m2"]);
      await waitFor(() => runs.runs.some((r) => r.id === `${key}/2`) && runs.runs.every((r) => r.end !== undefined), 20_000, `${key}/2 handled and every handler finished`);
      await sleep(1500); // past AckWait: a message left without working() or ack would run again now

      const runA = runs.of(slow).find((r) => r.who === "A");
      assert.ok(runA?.end !== undefined);
      const revokedAt = lifecycleA.calls.find((c) => c.name === "revoked" && c.partitions.some((p) => moved.includes(p)))?.at;
      const seq = runA.seq;
      const endA = runA.end;
      assert.deepEqual(runs.overlaps((x, y) => x.id === y.id), [], "no two runs of one message overlap");
      assert.deepEqual(runs.overlaps((x, y) => x.key === y.key && x.who !== y.who), [], "no two messages of one key run at once on two members");
      assert.deepEqual(
        spy.deliveries(wq, seq).filter((t) => t > runA.start + 300 && t < endA + 300),
        [],
        `${slow} was not delivered again while m1 ran it (working() kept going until it settled)`,
      );
      assert.ok(runA.hadSignal, "the handler got a msg.signal");
      assert.ok(
        runA.abortedAt !== undefined && runA.abortedAt >= changedAt + 1500 - 100 && runA.abortedAt <= runA.end,
        `msg.signal aborted at the drain timeout (changed at 0, aborted at ${runA.abortedAt === undefined ? "never" : Math.round(runA.abortedAt - changedAt)}, handler ended at ${Math.round(runA.end - changedAt)})`,
      );
      assert.ok(statusA.of("drain_timeout").length > 0, `a drain_timeout event (events: ${statusA.events.map((e) => e.type).join(", ")})`);
      assert.ok(revokedAt !== undefined && revokedAt >= runA.end, `onRevoked ran only after the handler settled (revoked at ${revokedAt === undefined ? "never" : Math.round(revokedAt - changedAt)}, handler ended at ${Math.round(runA.end - changedAt)} ms after the change)`);
    } finally {
      spy.stop();
    }
  });

  test("standby - item 2: stop() whose drain times out never lets the hot standby run the message still in its handler", async () => {
    const stream = uniqueName("dts");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    const runs = new RunLog();
    const slowStarted = deferred();
    const lifecycleA = recordLifecycle();
    const options = (who: string): ConsumeOptions => ({
      stream,
      group: "g",
      member: "m1",
      concurrency: "key",
      consumerConfig: { ack_wait: nanos(1000) },
      drainTimeoutMs: 1500,
      handler: async (msg) => {
        const run = runOf(who, msg);
        const end = runs.begin(run, msg.signal);
        try {
          if (run.key === "slow") {
            slowStarted.resolve();
            await sleep(4000); // outlives drainTimeoutMs and AckWait
          }
        } finally {
          end();
        }
      },
    });
    const ca = await env.connect();
    const a = track(await staticConsume(ca.js, { ...options("A"), ...lifecycleA.callbacks }));
    const statusA = recordStatus(a);
    await publish(subjectOf("warm"), "warm", 1);
    await waitFor(() => runs.runs.some((r) => r.who === "A"), 10_000, "A to take the pin");
    const cb = await env.connect();
    track(await staticConsume(cb.js, options("B")));
    await waitFor(async () => (await env.jsm.consumers.info(stream, "g-m1")).num_waiting >= 2, 10_000, "the standby's pull");
    await publish(subjectOf("slow"), "slow", 1);
    await within(slowStarted.promise, 10_000, "A to start the slow message");
    const stopAt = now();
    await a.stop();
    const stoppedAt = now();
    await publish(subjectOf("after"), "after", 1);
    await waitFor(() => runs.runs.some((r) => r.who === "B" && r.key === "after"), 15_000, "the standby to take over");
    await waitFor(() => runs.of("slow/1").every((r) => r.end !== undefined), 10_000, "the slow handler to finish");
    await sleep(1500); // past AckWait: an unacked slow message would be redelivered to the standby now

    const runA = runs.of("slow/1").find((r) => r.who === "A");
    assert.ok(runA?.end !== undefined, "A ran the slow message");
    assert.deepEqual(runs.overlaps((x, y) => x.id === y.id), [], "no two runs of one message overlap");
    assert.deepEqual(runs.of("slow/1").map((r) => `${r.who}#${r.deliveryCount}`), ["A#1"], "the slow message ran once");
    assert.ok(stoppedAt >= runA.end, `stop() resolved only after the handler settled (resolved ${Math.round(stoppedAt - stopAt)} ms after the call, the handler ended after ${Math.round(runA.end - stopAt)} ms)`);
    assert.ok(runA.abortedAt !== undefined && runA.abortedAt >= stopAt + 1400 && runA.abortedAt <= runA.end, `msg.signal aborted at the drain timeout (aborted ${runA.abortedAt === undefined ? "never" : `${Math.round(runA.abortedAt - stopAt)} ms after stop()`})`);
    assert.ok(statusA.of("drain_timeout").length > 0, `a drain_timeout event (events: ${statusA.events.map((e) => e.type).join(", ")})`);
    const revokedAt = lifecycleA.calls.find((c) => c.name === "revoked")?.at;
    assert.ok(revokedAt !== undefined && revokedAt >= runA.end, "onRevoked ran only after the handler settled");
  });

  // --- item 9 -------------------------------------------------------------------

  test("standby - item 9: onAssigned is awaited before any message of the partitions starts (static join)", async () => {
    const stream = uniqueName("oa");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    for (let i = 0; i < 5; i++) await publish(subjectOf(`k${i}`), `k${i}`, 1);
    const runs = new RunLog();
    const lifecycle = recordLifecycle(1000);
    track(
      await staticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        ...lifecycle.callbacks,
        handler: (msg) => runs.begin(runOf("A", msg))(),
      }),
    );
    await waitFor(() => runs.runs.length >= 5, 10_000, "5 messages handled");
    const assigned = lifecycle.calls.filter((c) => c.name === "assigned");
    assert.ok(assigned.length > 0, "onAssigned was called");
    const early = runs.runs.filter((r) => {
      const call = assigned.find((c) => c.partitions.includes(r.partition));
      return call?.returnedAt === undefined || r.start < call.returnedAt;
    });
    assert.equal(early.length, 0, `${early.length} of ${runs.runs.length} messages started before onAssigned of their partition resolved`);
  });

  test("standby - item 9: onAssigned is awaited before any message of the partitions gained in a rebalance starts (elastic)", async () => {
    const { stream, subjectOf } = await elasticGroup("oae", ["m1", "m2"]);
    // Messages on m2's partitions wait in the work queue (no m2 instance runs) until m1 gains them.
    const gained = memberPartitions(["m1", "m2"], 4, null, "m2");
    const keys = [0, 1, 2, 3, 4].map((i) => keyOnPartition(stream, 4, gained, `g${i}_`));
    for (const key of keys) await publish(subjectOf(key), key, 1);
    const runs = new RunLog();
    const lifecycle = recordLifecycle(1000);
    const a = track(
      await elasticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        ...lifecycle.callbacks,
        handler: (msg) => runs.begin(runOf("A", msg))(),
      }),
    );
    const status = recordStatus(a);
    await waitFor(() => lifecycle.calls.some((c) => c.name === "assigned" && c.returnedAt !== undefined), 10_000, "m1's first onAssigned");
    await deleteMembers(env.js, stream, "g", ["m2"]);
    await waitFor(() => runs.runs.length >= 5, 15_000, `5 messages handled (events: ${status.events.map((e) => e.type).join(", ")})`);
    const early = runs.runs.filter((r) => {
      const call = lifecycle.calls.find((c) => c.name === "assigned" && c.partitions.includes(r.partition));
      return call?.returnedAt === undefined || r.start < call.returnedAt;
    });
    assert.equal(early.length, 0, `${early.length} of ${runs.runs.length} messages started before onAssigned of their partition resolved`);
  });

  // --- item 10 ------------------------------------------------------------------

  test("standby - item 10: every onAssigned is matched by onRevoked when the consumer was lost and stop() comes while the rejoin is retried", async () => {
    const { stream, wq, subjectOf } = await elasticGroup("bal", ["m1"]);
    const lifecycle = recordLifecycle();
    const runs = new RunLog();
    const a = track(
      await elasticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        consumerConfig: { ack_wait: nanos(1000) },
        ...lifecycle.callbacks,
        handler: (msg) => runs.begin(runOf("A", msg))(),
      }),
    );
    const status = recordStatus(a);
    await publish(subjectOf("k1"), "k1", 1);
    await waitFor(() => runs.runs.length > 0 && lifecycle.calls.some((c) => c.name === "assigned"), 10_000, "m1 to consume");
    const filters = (await env.jsm.consumers.info(wq, "m1")).config.filter_subjects ?? [];
    const audit = await ApiAudit.start(env.nc);
    try {
      // The consumer disappears, and another consumer takes its filters: the rejoin is refused (10100) until it goes.
      await env.jsm.consumers.delete(wq, "m1");
      await env.jsm.consumers.add(wq, { name: "blocker", ack_policy: "explicit", filter_subjects: filters });
      await waitFor(() => audit.refusedCreates(wq, "m1", 10100) >= 2, 10_000, `m1's rejoin refused and retried (events: ${status.events.map((e) => e.type).join(", ")})`);
      await a.stop();
    } finally {
      audit.stop();
    }
    await env.jsm.consumers.delete(wq, "blocker");
    assert.deepEqual(lifecycle.unbalanced(), [], `onAssigned and onRevoked balance per partition (calls: ${JSON.stringify(lifecycle.calls.map((c) => [c.name, c.partitions]))})`);
  });

  test("standby - item 10: every onAssigned is matched by onRevoked when stop() comes while a join after a membership change is retried", async () => {
    const { stream, wq } = await elasticGroup("balj", ["m1", "m2"]);
    const lifecycle = recordLifecycle();
    const a = track(
      await elasticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        consumerConfig: { ack_wait: nanos(1000) },
        ...lifecycle.callbacks,
        handler: () => undefined,
      }),
    );
    const status = recordStatus(a);
    await waitFor(() => lifecycle.calls.some((c) => c.name === "assigned"), 10_000, "m1's onAssigned");
    // m2 runs no instance; a consumer holding m2's partitions makes m1's join refused (10100) once it gains them.
    const m2Filters = elasticGetPartitionFilters(await getElasticConsumerGroupConfig(env.js, stream, "g"), "m2");
    await env.jsm.consumers.add(wq, { name: "blocker", ack_policy: "explicit", filter_subjects: m2Filters });
    const audit = await ApiAudit.start(env.nc);
    try {
      await deleteMembers(env.js, stream, "g", ["m2"]);
      await status.waitFor("partitions_changed", 10_000);
      await waitFor(() => audit.refusedCreates(wq, "m1", 10100) >= 2, 10_000, `m1's join with its new partitions refused and retried (events: ${status.events.map((e) => e.type).join(", ")})`);
      await a.stop();
    } finally {
      audit.stop();
    }
    await env.jsm.consumers.delete(wq, "blocker");
    assert.deepEqual(lifecycle.unbalanced(), [], `onAssigned and onRevoked balance per partition (calls: ${JSON.stringify(lifecycle.calls.map((c) => [c.name, c.partitions]))})`);
  });

  // --- item 11 ------------------------------------------------------------------

  /**
   * A static member with a pinned instance A holding up to 50 delivered messages and a
   * standby B; 300 keyed messages; a step-down while A is part-way through.
   */
  async function stepDownScenario(): Promise<{ runs: RunLog; handled: HandledRecord[]; published: Published; unpinned: number | undefined }> {
    const stream = uniqueName("unpin");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    const handled: HandledRecord[] = [];
    const runs = new RunLog();
    const options = (who: string): ConsumeOptions => ({
      stream,
      group: "g",
      member: "m1",
      // A buffer of up to 50 delivered messages on the pinned instance.
      consumerConfig: { ack_wait: nanos(5000), max_ack_pending: 50 },
      handler: async (msg) => {
        const run = runOf(who, msg);
        const end = runs.begin(run);
        handled.push({ key: run.key, seq: msg.json<KeyedMessage>().seq, at: now() });
        await sleep(20);
        end();
      },
    });
    const ca = await env.connect();
    const a = track(await staticConsume(ca.js, options("A")));
    const statusA = recordStatus(a);
    await publish(subjectOf("warm"), "warm", 1);
    await waitFor(() => runs.runs.some((r) => r.who === "A"), 10_000, "A to take the pin");
    const cb = await env.connect();
    track(await staticConsume(cb.js, options("B")));
    await waitFor(async () => (await env.jsm.consumers.info(stream, "g-m1")).num_waiting >= 2, 10_000, "the standby's pull");
    const published = await publishKeyed(env.js, subjectOf, keyNames(5), 60, new Published());
    published.perKey.set("warm", 1);
    await waitFor(() => runs.runs.filter((r) => r.who === "A").length >= 30, 10_000, "A to be part-way through");
    await staticMemberStepDown(env.js, stream, "g", "m1");
    const unpinned = await statusA.waitFor("unpinned", 10_000).then(
      () => statusA.firstAt("unpinned"),
      () => undefined,
    );
    await waitFor(() => checkDelivery(published.perKey, handled).lost.length === 0, 30_000, "every message handled");
    return { runs, handled, published, unpinned };
  }

  test("standby - item 11: an instance that loses its pin (step-down) starts no further message", async () => {
    const { runs, unpinned } = await stepDownScenario();
    assert.ok(unpinned !== undefined, "A reported that it lost its pin");
    // 50 ms: the event is read from status() a little after the engine learnt of the 423.
    const late = runs.runs.filter((r) => r.who === "A" && r.start > unpinned + 50);
    assert.equal(late.length, 0, `A started ${late.length} messages after it lost its pin (first: ${late.slice(0, 3).map((r) => `${r.id} +${Math.round(r.start - unpinned)} ms`).join(", ")})`);
    assert.ok(runs.runs.some((r) => r.who === "B"), "B took over");
  });

  test("standby - item 11: the messages buffered by an instance that loses its pin reach the new pinned instance in order", async () => {
    const { runs, handled, published } = await stepDownScenario();
    const report = checkDelivery(published.perKey, handled);
    const firstB = runs.runs.find((r) => r.who === "B");
    assert.deepEqual(report.lost, []);
    assert.deepEqual(
      report.outOfOrder.slice(0, 5).map((o) => `${o.key}: ${o.got} before ${o.expected}`),
      [],
      `per key, first handlings follow the publish order across the step-down (B's first message: ${firstB ? `${firstB.id}#${firstB.deliveryCount}` : "none"})`,
    );
  });

  test("standby - item 11: an ack that fails during a drain is reported as ack_failed and not counted as handled", async () => {
    const stream = uniqueName("ackf");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    const started = deferred<number>();
    const a = track(
      await staticConsume(env.js, {
        stream,
        group: "g",
        member: "m1",
        meterProvider: provider,
        drainTimeoutMs: 10_000,
        handler: async (msg) => {
          if (msg.json<KeyedMessage>().key === "slow") {
            started.resolve(msg.seq);
            await sleep(1500);
          }
        },
      }),
    );
    const status = recordStatus(a);
    try {
      await publish(subjectOf("warm"), "warm", 1);
      await waitFor(async () => handledTotal(await reader.collect()) === 1, 10_000, "the first message counted as handled");
      await publish(subjectOf("slow"), "slow", 1);
      const seq = await within(started.promise, 10_000, "the slow handler to start");
      const stopping = a.stop();
      // The consumer goes away while stop() waits for the handler: its ack can only fail.
      await env.jsm.consumers.delete(stream, "g-m1");
      await stopping;
      const failed = status.of("ack_failed");
      assert.deepEqual(
        failed.map((e) => e.seq),
        [seq],
        `the failed ack was reported (events: ${status.events.map((e) => e.type).join(", ")})`,
      );
      assert.equal(handledTotal(await reader.collect()), 1, "the message whose ack failed was not counted as handled");
    } finally {
      await provider.shutdown();
    }
  });
});
