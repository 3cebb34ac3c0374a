/**
 * The ordered-concurrency load scenario, for static and elastic groups in every
 * concurrency mode: keyed messages published before and while members consume,
 * a handler with random latency, injected failures, messages slower than AckWait
 * and messages the handler nak's itself. The caller asserts on what it returns.
 */
import assert from "node:assert/strict";
import type { ConsumerConfig } from "@nats-io/jetstream";
import {
  addMembers,
  createElastic,
  createStatic,
  elasticConsume,
  staticConsume,
  workQueueStreamName,
  type ConcurrencyMode,
  type ConsumerGroupMember,
  type ConsumeOptions,
  type MemberStatus,
} from "../../src/index.js";
import { uniqueName, waitFor, type Client, type TestEnv } from "./nats.js";
import { DeliverySpy, LoadTracker, Published, keyNames, now, prng, publishKeyed, sleep } from "./load-harness.js";

export type Flavour = "static" | "elastic";

export interface OrderedLoadOptions {
  flavour: Flavour;
  mode: ConcurrencyMode;
  /** One instance per member, each on its own connection. */
  members: string[];
  partitions: number;
  keys: number;
  /** Messages per key (half published before the members start, half while they run). */
  perKey: number;
  maxInFlight?: number;
  ackWaitMs: number;
  seed: number;
  latencyMs: [number, number];
  failRate: number;
  /** Messages slower than AckWait, as `key/seq`. */
  slow: string[];
  slowMs: number;
  /** Messages the handler nak's on their first run, as `key/seq`. */
  nakOnce: string[];
  /** Extra consumer-template fields. */
  template?: Partial<ConsumerConfig>;
  /** Extra consume options. */
  consume?: Partial<ConsumeOptions>;
  /** How long to wait for everything to be handled. */
  timeoutMs?: number;
}

export interface OrderedLoadResult {
  stream: string;
  group: string;
  /** The stream the members' consumers are on (the work-queue stream for elastic groups). */
  consumerStream: string;
  tracker: LoadTracker;
  published: Published;
  spy: DeliverySpy;
  events: Map<string, MemberStatus[]>;
  /** Handled per second, from the first member start to the last success. */
  throughput: number;
}

export const nanos = (ms: number): number => ms * 1_000_000;

/** Creates the stream and the group; returns the subject of a key. */
export async function createLoadGroup(env: TestEnv, flavour: Flavour, stream: string, group: string, partitions: number, members: string[]): Promise<(key: string) => string> {
  if (flavour === "static") {
    await env.jsm.streams.add({
      name: stream,
      subjects: [`${stream}.*`],
      storage: "memory",
      subject_transform: { src: `${stream}.*`, dest: `{{partition(${partitions},1)}}.${stream}.{{wildcard(1)}}` },
    });
    await createStatic(env.js, { stream, group, maxMembers: partitions, members });
  } else {
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], storage: "memory" });
    await createElastic(env.js, { stream, group, maxMembers: partitions, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    if (members.length > 0) await addMembers(env.js, stream, group, members);
  }
  return (key) => `${stream}.${key}`;
}

/** Runs the scenario; stops its members before returning. */
export async function runOrderedLoad(env: TestEnv, o: OrderedLoadOptions): Promise<OrderedLoadResult> {
  const stream = uniqueName("load");
  const group = "g";
  const subjectOf = await createLoadGroup(env, o.flavour, stream, group, o.partitions, o.members);
  const consumerStream = o.flavour === "static" ? stream : workQueueStreamName(stream, group);
  const keys = keyNames(o.keys);
  const tracker = new LoadTracker({
    rng: prng(o.seed),
    latencyMs: o.latencyMs,
    failRate: o.failRate,
    slow: new Set(o.slow),
    slowMs: o.slowMs,
    nakOnce: new Set(o.nakOnce),
  });
  const spy = await DeliverySpy.start(env.nc);
  const published = new Published();
  const half = Math.floor(o.perKey / 2);
  await publishKeyed(env.js, subjectOf, keys, half, published);

  const members: ConsumerGroupMember[] = [];
  const clients: Client[] = [];
  const events = new Map<string, MemberStatus[]>();
  const started = now();
  try {
    for (const member of o.members) {
      const c = await env.connect();
      clients.push(c);
      const consume = o.flavour === "static" ? staticConsume : elasticConsume;
      const m = await consume(c.js, {
        stream,
        group,
        member,
        handler: tracker.handler(member),
        concurrency: o.mode,
        ...(o.maxInFlight === undefined ? {} : { maxInFlight: o.maxInFlight }),
        // Retries in place (serial mode too), so that a failure never reorders a key.
        retry: { maxDeliver: 50, backoffMs: [2, 5, 10] },
        consumerConfig: { ack_wait: nanos(o.ackWaitMs), ...(o.flavour === "elastic" ? { ack_policy: "explicit" as const } : {}), ...o.template },
        ...o.consume,
      });
      members.push(m);
      const list: MemberStatus[] = [];
      events.set(member, list);
      void (async () => {
        for await (const e of m.status()) list.push(e);
      })();
    }
    await publishKeyed(env.js, subjectOf, keys, o.perKey - half, published, { from: half + 1, window: 100, pauseMs: 5 });
    const total = published.total;
    await waitFor(() => tracker.handled >= total, o.timeoutMs ?? 90_000, `${total} messages handled (handled ${tracker.handled})`, 50);
    const throughput = tracker.handled / ((Math.max(...tracker.log.map((s) => s.at)) - started) / 1000);
    // Nothing left pending anywhere…
    await waitFor(
      async () => {
        if (o.flavour === "elastic") return (await env.jsm.streams.info(consumerStream)).state.messages === 0;
        for (const member of o.members) {
          const ci = await env.jsm.consumers.info(stream, `${group}-${member}`);
          if (ci.num_pending !== 0 || ci.num_ack_pending !== 0) return false;
        }
        return true;
      },
      30_000,
      "every message acked",
      100,
    );
    // …and no late redelivery handled again: wait longer than AckWait.
    await sleep(o.ackWaitMs + 500);
    return { stream, group, consumerStream, tracker, published, spy, events, throughput };
  } finally {
    await Promise.allSettled(members.map((m) => m.stop()));
    spy.stop();
  }
}

/** Checks every property of an ordered load run; returns a one-line summary. */
export function assertOrderedRun(r: OrderedLoadResult, o: OrderedLoadOptions): string {
  const t = r.tracker;
  const total = r.published.total;
  assert.equal(total, o.keys * o.perKey);
  assert.deepEqual(t.orderProblems(r.published).slice(0, 5), [], "per key, successful handlings are exactly the publish order: nothing lost, nothing twice");
  assert.equal(t.handled, total);
  assert.equal(t.keyOverlaps, 0, "two handlers of one key never overlap");
  if (o.mode !== "key") assert.equal(t.partitionOverlaps, 0, "two handlers of one partition never overlap");
  for (const member of o.members) {
    const max = t.maxConcurrent.get(member) ?? 0;
    if (o.mode === "serial") assert.equal(max, 1, `${member} runs one handler at a time`);
    else {
      assert.ok(max > 1, `${member} ran handlers concurrently (max ${max})`);
      assert.ok(max <= (o.maxInFlight ?? 16), `${member} ran at most maxInFlight at once (max ${max})`);
    }
  }
  assert.ok(t.injectedFailures > 0, "failures were injected");
  // Slower than AckWait: working() kept them from being redelivered while they ran.
  assert.equal(t.slowRuns.length, o.slow.length);
  for (const run of t.slowRuns) {
    const during = r.spy.deliveries(run.stream, run.seq).filter((at) => at > run.start + 300 && at < run.end + 500);
    assert.deepEqual(during, [], `${run.id} (${Math.round(run.end - run.start)} ms, AckWait ${o.ackWaitMs} ms) was not redelivered while it ran`);
  }
  // nak'ed by the handler: redelivered by the server and handled once more, in order (checked above).
  assert.equal(t.nakAt.length, o.nakOnce.length);
  assert.deepEqual([...t.nakRedone].sort(), [...o.nakOnce].sort(), "every nak'ed message was handled again");
  for (const n of t.nakAt) assert.ok(r.spy.deliveries(n.stream, n.seq).length >= 2, `${n.id} was redelivered by the server after its nak`);
  const concurrency = o.members.map((m) => `${m}=${t.maxConcurrent.get(m) ?? 0}`).join(" ");
  return (
    `${o.flavour}/${o.mode}: ${total} msgs, ${Math.round(r.throughput)} msg/s, ${t.invocations} handler runs ` +
    `(${t.injectedFailures} injected failures, ${t.nakked} naks), max concurrent ${concurrency}, ` +
    `same-partition overlaps ${t.partitionOverlaps}, deliveries seen ${r.spy.total}, messages redelivered ${r.spy.redelivered(r.consumerStream)}`
  );
}

/** The shared shape of the runs: 16 partitions, 200 keys, AckWait 1 s. */
export function loadOptions(flavour: Flavour, mode: ConcurrencyMode, seed: number, overrides: Partial<OrderedLoadOptions> = {}): OrderedLoadOptions {
  return {
    flavour,
    mode,
    members: ["m1", "m2"],
    partitions: 16,
    keys: 200,
    perKey: 20,
    maxInFlight: 16,
    ackWaitMs: 1000,
    seed,
    latencyMs: [0, 10],
    failRate: 0.05,
    slow: ["k3/3", "k77/4", "k150/5"],
    slowMs: 1400,
    nakOnce: ["k5/2", "k40/8", "k99/12", "k123/14", "k198/15"],
    ...overrides,
  };
}
