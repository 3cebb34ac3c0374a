/**
 * Load-test instrumentation for the ordered-concurrency and handoff tests: a seeded
 * random source, keyed publishing that remembers stored sequences, a delivery spy
 * that sees every message the server delivers (to any member), and a handler
 * tracker that records successful handlings per key, overlaps per key and per
 * partition, and how many handlers ran at once per instance.
 */
import type { JetStreamClient } from "@nats-io/jetstream";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { ConsumerGroupMessage, MessageHandler } from "../../src/index.js";

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Milliseconds since the epoch, sub-millisecond, one clock for the whole process. */
export const now = (): number => performance.timeOrigin + performance.now();

/** A seeded PRNG (mulberry32): the same seed gives the same run of numbers in [0, 1). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The payload of a load message. */
export interface KeyedMessage {
  key: string;
  seq: number;
}

/** `count` key names, `k0` … `k<count-1>`. */
export const keyNames = (count: number): string[] => Array.from({ length: count }, (_, i) => `k${i}`);

/** What was published. */
export class Published {
  /** Per key, the highest per-key sequence published. */
  readonly perKey = new Map<string, number>();
  /** `key/seq` → the sequence the publish ack reported (the stream the subject is stored in). */
  readonly streamSeq = new Map<string, number>();

  get total(): number {
    let n = 0;
    for (const c of this.perKey.values()) n += c;
    return n;
  }
}

/**
 * Publishes `{ key, seq }` to `subjectOf(key)` for seq in [from, from + perKey), interleaving
 * the keys (seq 1 of every key, then seq 2, …). Concurrent publishes on one connection
 * are stored in publish order.
 */
export async function publishKeyed(
  js: JetStreamClient,
  subjectOf: (key: string) => string,
  keys: readonly string[],
  perKey: number,
  into: Published,
  options: { from?: number; window?: number; pauseMs?: number } = {},
): Promise<Published> {
  const from = options.from ?? 1;
  const window = options.window ?? 200;
  let pending: Promise<void>[] = [];
  for (let seq = from; seq < from + perKey; seq++) {
    for (const key of keys) {
      pending.push(
        js.publish(subjectOf(key), JSON.stringify({ key, seq })).then((ack) => {
          into.streamSeq.set(`${key}/${seq}`, ack.seq);
        }),
      );
      into.perKey.set(key, Math.max(into.perKey.get(key) ?? 0, seq));
      if (pending.length >= window) {
        await Promise.all(pending);
        pending = [];
        if (options.pauseMs) await sleep(options.pauseMs);
      }
    }
  }
  await Promise.all(pending);
  return into;
}

/**
 * Sees every JetStream delivery on the server (a subscription on `_INBOX.>`, where
 * pulls are answered), by stream and stream sequence, with the time it arrived.
 */
export class DeliverySpy {
  private readonly seen = new Map<string, number[]>();
  total = 0;

  private constructor(private readonly sub: Subscription) {}

  static async start(nc: NatsConnection): Promise<DeliverySpy> {
    const holder: { spy?: DeliverySpy } = {};
    const sub = nc.subscribe("_INBOX.>", {
      callback: (_err, m) => {
        const reply = m.reply ?? "";
        const spy = holder.spy;
        if (!spy || !reply.startsWith("$JS.ACK.")) return;
        const t = reply.split(".");
        // v1: $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.… (9 tokens); v2 adds domain and account hash.
        const [stream, sseq] = t.length >= 11 ? [t[4], t[7]] : [t[2], t[5]];
        const id = `${stream}/${sseq}`;
        const list = spy.seen.get(id) ?? [];
        list.push(now());
        spy.seen.set(id, list);
        spy.total += 1;
      },
    });
    const spy = new DeliverySpy(sub);
    holder.spy = spy;
    await nc.flush();
    return spy;
  }

  /** Arrival times of every delivery of `stream`/`seq`. */
  deliveries(stream: string, seq: number): number[] {
    return this.seen.get(`${stream}/${seq}`) ?? [];
  }

  /** Stream sequences of `stream` delivered more than once. */
  redelivered(stream: string): number {
    let n = 0;
    for (const [id, list] of this.seen) if (id.startsWith(`${stream}/`) && list.length > 1) n += 1;
    return n;
  }

  stop(): void {
    this.sub.unsubscribe();
  }
}

/** What the tracked handler does. */
export interface LoadBehaviour {
  rng: () => number;
  /** Random handler latency, uniform in [min, max] ms. */
  latencyMs: [number, number];
  /** Probability that an invocation throws (not for slow or nak'ed messages). */
  failRate: number;
  /** `key/seq` of messages whose handler takes `slowMs` (longer than AckWait). */
  slow?: ReadonlySet<string>;
  slowMs?: number;
  /** `key/seq` of messages the handler nak's itself on their first run (and returns). */
  nakOnce?: ReadonlySet<string>;
  /** `key/seq` of messages whose handler always throws. */
  alwaysFail?: ReadonlySet<string>;
}

/** A run of a slow message's handler. */
export interface SlowRun {
  id: string;
  stream: string;
  seq: number;
  start: number;
  end: number;
}

/** One successful handling. */
export interface Success {
  key: string;
  seq: number;
  instance: string;
  partition: number;
  at: number;
}

/**
 * Wraps handlers with instrumentation. One tracker per test: it sees all instances.
 */
export class LoadTracker {
  /** Per key, the per-key sequences handled successfully, in the order they succeeded. */
  readonly successes = new Map<string, number[]>();
  readonly log: Success[] = [];
  invocations = 0;
  injectedFailures = 0;
  nakked = 0;
  /** Times a handler started while another of the same key was running. */
  keyOverlaps = 0;
  /** Times a handler started while another of the same partition was running. */
  partitionOverlaps = 0;
  readonly maxConcurrent = new Map<string, number>();
  readonly slowRuns: SlowRun[] = [];
  /** Successful handlings of messages that had been nak'ed by the handler. */
  readonly nakRedone: string[] = [];
  /** Where the handler nak'ed a message. */
  readonly nakAt: { id: string; stream: string; seq: number }[] = [];
  private readonly runningKey = new Map<string, number>();
  private readonly runningPartition = new Map<number, number>();
  private readonly concurrent = new Map<string, number>();
  private readonly nakDone = new Set<string>();

  constructor(private readonly behaviour: LoadBehaviour) {}

  /** Handled successfully so far. */
  get handled(): number {
    return this.log.length;
  }

  /** The handler of one instance. */
  handler(instance: string, extra?: (msg: ConsumerGroupMessage, body: KeyedMessage) => void | Promise<void>): MessageHandler {
    const b = this.behaviour;
    return async (msg) => {
      const body = msg.json<KeyedMessage>();
      const id = `${body.key}/${body.seq}`;
      this.invocations += 1;
      const k = (this.runningKey.get(body.key) ?? 0) + 1;
      this.runningKey.set(body.key, k);
      if (k > 1) this.keyOverlaps += 1;
      const p = (this.runningPartition.get(msg.partition) ?? 0) + 1;
      this.runningPartition.set(msg.partition, p);
      if (p > 1) this.partitionOverlaps += 1;
      const c = (this.concurrent.get(instance) ?? 0) + 1;
      this.concurrent.set(instance, c);
      this.maxConcurrent.set(instance, Math.max(this.maxConcurrent.get(instance) ?? 0, c));
      try {
        if (b.slow?.has(id)) {
          const start = now();
          await sleep(b.slowMs ?? 1500);
          this.slowRuns.push({ id, stream: msg.info.stream, seq: msg.seq, start, end: now() });
        } else {
          const [lo, hi] = b.latencyMs;
          const ms = lo + b.rng() * (hi - lo);
          if (ms >= 1) await sleep(ms);
          else await Promise.resolve();
        }
        if (extra) await extra(msg, body);
        if (b.alwaysFail?.has(id)) throw new Error(`${id} always fails`);
        if (b.nakOnce?.has(id) && !this.nakDone.has(id)) {
          this.nakDone.add(id);
          this.nakked += 1;
          this.nakAt.push({ id, stream: msg.info.stream, seq: msg.seq });
          msg.nak();
          return;
        }
        if (!b.slow?.has(id) && !b.nakOnce?.has(id) && b.rng() < b.failRate) {
          this.injectedFailures += 1;
          throw new Error(`injected failure of ${id}`);
        }
        const list = this.successes.get(body.key) ?? [];
        list.push(body.seq);
        this.successes.set(body.key, list);
        this.log.push({ key: body.key, seq: body.seq, instance, partition: msg.partition, at: now() });
        if (this.nakDone.has(id)) this.nakRedone.push(id);
      } finally {
        this.runningKey.set(body.key, (this.runningKey.get(body.key) ?? 1) - 1);
        this.runningPartition.set(msg.partition, (this.runningPartition.get(msg.partition) ?? 1) - 1);
        this.concurrent.set(instance, (this.concurrent.get(instance) ?? 1) - 1);
      }
    };
  }

  /**
   * Keys whose successful handlings are not exactly 1, 2, …, n in that order (n as published,
   * minus the sequences in `skipped`), described.
   */
  orderProblems(published: Published, skipped: ReadonlySet<string> = new Set()): string[] {
    const problems: string[] = [];
    for (const [key, n] of published.perKey) {
      const expected = Array.from({ length: n }, (_, i) => i + 1).filter((s) => !skipped.has(`${key}/${s}`));
      const got = this.successes.get(key) ?? [];
      if (got.length !== expected.length || got.some((s, i) => s !== expected[i])) {
        problems.push(`${key}: handled ${got.join(",")} (expected ${expected.join(",")})`);
      }
    }
    for (const key of this.successes.keys()) if (!published.perKey.has(key)) problems.push(`${key}: never published`);
    return problems;
  }
}
