/**
 * The repartition scenario (issue 18): an elastic group on `<stream>.<key>` with
 * members consuming, keyed messages published throughout, and a repartition
 * started part-way. Records every handler run (start and end) so the checks can
 * tell whether a message of a key started while an earlier one of that key was
 * still unhandled, across members and across the cut.
 */
import assert from "node:assert/strict";
import type { JetStreamClient } from "@nats-io/jetstream";
import { createElastic, addMembers, elasticConsume, repartition, type ConcurrencyMode, type ConsumerGroupMember, type RepartitionProgress } from "../../src/index.js";
import { checkDelivery, type DeliveryReport } from "../../src/cli/demo/delivery-check.js";
import type { Client } from "./nats.js";
import { now, sleep } from "./load-harness.js";

/** One handler run. */
export interface HandlerSpan {
  key: string;
  seq: number;
  member: string;
  partition: number;
  /** Whether the message was in the transition layout (`pcg-repartition.…`). */
  transition: boolean;
  start: number;
  end: number | undefined;
}

/** What a scenario run measured. */
export interface RepartitionRunReport {
  delivery: DeliveryReport;
  /** Keys where a message started before the previous one (by key sequence) had finished a run. */
  orderBreaks: string[];
  spans: HandlerSpan[];
  /** Handled messages per second, in 500 ms buckets, from the first publish. */
  ratePerBucket: number[];
  /** When the repartition ran, in ms since the first publish. */
  repartitionWindow: [number, number] | undefined;
  /** Per new partition, how long after the cut it was held back (ms), from the progress reports. */
  heldBackMs: Map<number, number>;
  publishMs: number;
  /** From the first publish until every message was handled. */
  totalMs: number;
}

/** Options of {@link runRepartitionScenario}. */
export interface RepartitionRunOptions {
  clients: Client[];
  stream: string;
  group?: string;
  from: number;
  members: string[];
  messages: number;
  keys: number;
  /** Messages per second the publisher aims at. */
  rate: number;
  /** When to call `repartition` (ms after the first publish); undefined: never (the baseline). */
  repartitionAtMs?: number;
  /** Runs the repartition (the API or the CLI); reports progress through `onProgress`. */
  repartition?: (stream: string, group: string, onProgress: (p: RepartitionProgress) => void) => Promise<void>;
  concurrency?: ConcurrencyMode;
  /** Handlers at once per instance (`partition` and `key` modes). */
  maxInFlight?: number;
  /** Hot standbys per member: instances that share the member's consumer and wait for its pin. */
  standbys?: number;
  /** Handler time per message (ms). */
  handlerMs?: number;
  timeoutMs?: number;
  /** Replicas of the stream (and so of the work-queue stream and the config bucket); default 1. */
  replicas?: number;
}

/** Creates `<stream>` on `<stream>.*` and an elastic group keyed on the token after it. */
export async function createKeyedElasticGroup(client: Client, stream: string, group: string, partitions: number, members: string[], replicas = 1): Promise<void> {
  await client.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], num_replicas: replicas });
  await createElastic(client.js, { stream, group, maxMembers: partitions, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
  if (members.length > 0) await addMembers(client.js, stream, group, members);
}

/**
 * A `key`-mode instance of member `member` of group "g" that records a span per
 * handler run (payloads `{key, seq}`); it takes `handlerMs` per message.
 */
export function recordingMember(js: JetStreamClient, stream: string, member: string, spans: HandlerSpan[], handlerMs = 0): Promise<ConsumerGroupMember> {
  return elasticConsume(js, {
    stream,
    group: "g",
    member,
    concurrency: "key",
    handler: async (msg) => {
      const { key, seq } = msg.json<{ key: string; seq: number }>();
      const span: HandlerSpan = { key, seq, member, partition: msg.partition, transition: msg.rawSubject.startsWith("pcg-repartition."), start: performance.now(), end: undefined };
      spans.push(span);
      if (handlerMs > 0) await sleep(handlerMs);
      span.end = performance.now();
    },
  });
}

/** Publishes `messages` over `keys` keys at about `rate`/s, each payload `{key, seq}`. */
export async function publishSteadily(js: JetStreamClient, stream: string, messages: number, keys: number, rate: number, published: Map<string, number>): Promise<void> {
  const started = now();
  const inFlight: Promise<unknown>[] = [];
  for (let i = 0; i < messages; i++) {
    const key = `k${i % keys}`;
    const seq = (published.get(key) ?? 0) + 1;
    published.set(key, seq);
    inFlight.push(js.publish(`${stream}.${key}`, JSON.stringify({ key, seq }), { msgID: `${stream}-${key}-${seq}`, timeout: 10_000 }));
    // A message's position in the stream is its publish order per key: wait for the previous one of the same key.
    if (inFlight.length >= Math.min(keys, 64)) await Promise.all(inFlight.splice(0));
    const due = started + ((i + 1) * 1000) / rate;
    const wait = due - now();
    if (wait > 1) await sleep(wait);
  }
  await Promise.all(inFlight);
}

/** Finds keys where a message started before the previous message of its key had finished a run. */
export function findOrderBreaks(spans: readonly HandlerSpan[]): string[] {
  const byKey = new Map<string, Map<number, { firstStart: number; firstEnd: number }>>();
  for (const s of spans) {
    const seqs = byKey.get(s.key) ?? new Map<number, { firstStart: number; firstEnd: number }>();
    byKey.set(s.key, seqs);
    const seen = seqs.get(s.seq) ?? { firstStart: Infinity, firstEnd: Infinity };
    seen.firstStart = Math.min(seen.firstStart, s.start);
    if (s.end !== undefined) seen.firstEnd = Math.min(seen.firstEnd, s.end);
    seqs.set(s.seq, seen);
  }
  const breaks: string[] = [];
  for (const [key, seqs] of byKey) {
    for (const [seq, seen] of seqs) {
      const previous = seqs.get(seq - 1);
      if (previous && seen.firstStart < previous.firstEnd) {
        breaks.push(`${key}: #${seq} started ${(previous.firstEnd - seen.firstStart).toFixed(1)} ms before #${seq - 1} had finished`);
        break;
      }
    }
  }
  return breaks;
}

/** Runs the scenario and returns what it measured; every member is stopped at the end. */
export async function runRepartitionScenario(o: RepartitionRunOptions): Promise<RepartitionRunReport> {
  const group = o.group ?? "g";
  const [first] = o.clients;
  if (!first) throw new Error("no client");
  await createKeyedElasticGroup(first, o.stream, group, o.from, o.members, o.replicas);
  const spans: HandlerSpan[] = [];
  const running: ConsumerGroupMember[] = [];
  let t0 = 0;
  const instances = o.members.flatMap((m) => Array.from({ length: 1 + (o.standbys ?? 0) }, () => m));
  for (const [i, member] of instances.entries()) {
    const client = o.clients[i % o.clients.length] ?? first;
    running.push(
      await elasticConsume(client.js, {
        stream: o.stream,
        group,
        member,
        concurrency: o.concurrency ?? "key",
        ...(o.maxInFlight !== undefined ? { maxInFlight: o.maxInFlight } : {}),
        consumerConfig: { ack_wait: 5_000_000_000 },
        handler: async (msg) => {
          const { key, seq } = msg.json<{ key: string; seq: number }>();
          const span: HandlerSpan = { key, seq, member, partition: msg.partition, transition: msg.rawSubject.startsWith("pcg-repartition."), start: now(), end: undefined };
          spans.push(span);
          if (o.handlerMs) await sleep(o.handlerMs);
          span.end = now();
        },
      }),
    );
  }
  const published = new Map<string, number>();
  const heldBackMs = new Map<number, number>();
  let window: [number, number] | undefined;
  let cutAt: number | undefined;
  t0 = now();
  const publishing = publishSteadily(first.js, o.stream, o.messages, o.keys, o.rate, published).then(() => now() - t0);
  let repartitioning: Promise<void> = Promise.resolve();
  if (o.repartition && o.repartitionAtMs !== undefined) {
    const run = o.repartition;
    repartitioning = (async () => {
      await sleep(o.repartitionAtMs ?? 0);
      const begin = now();
      const everHeld = new Set<number>();
      await run(o.stream, group, (p) => {
        cutAt ??= now();
        for (const q of p.heldBack) everHeld.add(q);
        for (const q of everHeld) if (!p.heldBack.includes(q) && !heldBackMs.has(q)) heldBackMs.set(q, now() - cutAt);
      });
      window = [begin - t0, now() - t0];
    })();
  }
  const publishMs = await publishing;
  await repartitioning;
  const deadline = now() + (o.timeoutMs ?? 120_000);
  const uniqueHandled = (): number => new Set(spans.filter((s) => s.end !== undefined).map((s) => `${s.key}/${s.seq}`)).size;
  while (uniqueHandled() < o.messages && now() < deadline) await sleep(50);
  const totalMs = now() - t0;
  await Promise.allSettled(running.map((m) => m.stop()));
  const ratePerBucket: number[] = [];
  for (const s of spans) {
    if (s.end === undefined) continue;
    const bucket = Math.floor((s.end - t0) / 500);
    ratePerBucket[bucket] = (ratePerBucket[bucket] ?? 0) + 2;
  }
  for (let i = 0; i < ratePerBucket.length; i++) ratePerBucket[i] ??= 0;
  const delivery = checkDelivery(
    published,
    spans.map((s) => ({ key: s.key, seq: s.seq, at: s.start })),
  );
  return { delivery, orderBreaks: findOrderBreaks(spans), spans, ratePerBucket, repartitionWindow: window, heldBackMs, publishMs, totalMs };
}

/** One line of what a run measured. */
export function summary(name: string, r: RepartitionRunReport): string {
  const held = [...r.heldBackMs.values()];
  return `${name}: published ${r.delivery.published} in ${r.publishMs.toFixed(0)} ms, all handled after ${r.totalMs.toFixed(0)} ms; lost ${r.delivery.lost.length}, duplicates ${r.delivery.duplicates}, out of order ${r.delivery.outOfOrder.length}, order breaks ${r.orderBreaks.length}; transition-layout messages ${r.spans.filter((s) => s.transition).length}; repartition ${r.repartitionWindow ? `${(r.repartitionWindow[1] - r.repartitionWindow[0]).toFixed(0)} ms` : "none"}; longest hold ${held.length ? Math.max(...held).toFixed(0) : 0} ms over ${held.length} held partitions`;
}

/** The lowest handled rate in any 500 ms bucket of the window, against the median of a baseline's buckets. */
export function dip(r: RepartitionRunReport, baseline: RepartitionRunReport): string {
  const steady = baseline.ratePerBucket.slice(1, Math.floor(baseline.publishMs / 500)).sort((a, b) => a - b);
  const median = steady[Math.floor(steady.length / 2)] ?? 0;
  const [from, to] = r.repartitionWindow ?? [0, 0];
  const inWindow = r.ratePerBucket.slice(Math.floor(from / 500), Math.ceil(to / 500) + 1);
  return `handled rate: baseline median ${median}/s; during the repartition min ${Math.min(...inWindow)}/s, mean ${(inWindow.reduce((a, b) => a + b, 0) / Math.max(1, inWindow.length)).toFixed(0)}/s; time to drain after the last publish ${(r.totalMs - r.publishMs).toFixed(0)} ms (baseline ${(baseline.totalMs - baseline.publishMs).toFixed(0)} ms)`;
}

/** Asserts what a repartition promises: nothing lost, per-key order of first handling, no duplicates. */
export function assertClean(r: RepartitionRunReport): void {
  assert.deepEqual(r.delivery.lost.slice(0, 5), [], "nothing lost");
  assert.equal(r.delivery.unexpected, 0);
  assert.deepEqual(r.delivery.outOfOrder.slice(0, 5), [], "first handlings in publish order per key");
  assert.deepEqual(r.orderBreaks.slice(0, 5), [], "no message of a key starts while an earlier one of that key is unhandled");
  assert.equal(r.delivery.duplicates, 0, "no duplicates: handoffs drain, and a switch of the source neither skips nor repeats a message");
}

/**
 * A `repartition` callback for {@link runRepartitionScenario}: grows the group from 4 to
 * `to` partitions with `js`, records the phases it goes through, and checks that it
 * was a fresh run from 4 (`REPARTITION_DEBUG` prints every report).
 */
export function growFromFour(js: JetStreamClient, to: number, phases: string[]): NonNullable<RepartitionRunOptions["repartition"]> {
  return async (stream, group, onProgress) => {
    const result = await repartition(js, stream, group, to, {
      onProgress: (p) => {
        if (phases.at(-1) !== p.phase) phases.push(p.phase);
        if (process.env["REPARTITION_DEBUG"]) console.log(JSON.stringify(p));
        onProgress(p);
      },
    });
    assert.equal(result.from, 4);
    assert.equal(result.to, to);
    assert.equal(result.resumed, false);
  };
}
