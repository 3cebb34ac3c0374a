/**
 * Helpers for the elastic integration tests: running member instances that record
 * what they handle and what they report, reading the raw stored config, and
 * stopping everything a test started.
 */
import type { ConsumerConfig, JetStreamClient } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { waitFor } from "./nats.js";
import {
  ELASTIC_BUCKET,
  elasticConsume,
  type ConsumerGroupMember,
  type ConsumerGroupMessage,
  type MemberStatus,
} from "../../src/index.js";

/** Milliseconds to nanoseconds (consumer configs are in ns). */
export const nanos = (ms: number): number => ms * 1_000_000;

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One message as a member instance handled it. */
export interface Handled {
  /** Subject without the partition token. */
  subject: string;
  /** Stored subject, partition token included. */
  rawSubject: string;
  partition: number;
  data: string;
  redelivered: boolean;
  pinId: string | undefined;
  /** Date.now() when the handler started. */
  at: number;
}

/** A running instance plus everything it handled and reported. */
export interface Runner {
  readonly name: string;
  readonly instance: ConsumerGroupMember;
  readonly handled: Handled[];
  readonly events: MemberStatus[];
  /** Resolves with what closed() resolved to. */
  readonly closedWith: Promise<Error | undefined>;
  /** True once closed() resolved. */
  isClosed(): boolean;
  /** Number of events of a type seen so far. */
  eventCount(type: MemberStatus["type"]): number;
}

export interface RunOptions {
  stream: string;
  group: string;
  member: string;
  /** AckWait in ms (default 1000). */
  ackWaitMs?: number;
  /** max_ack_pending of the template (default 1, as Go's test). */
  maxAckPending?: number;
  /** Extra template fields. */
  template?: Partial<ConsumerConfig>;
  /** Called from the handler (after recording); may be async. */
  onMessage?: (msg: ConsumerGroupMessage, runner: Runner) => void | Promise<void>;
  /** pullBatch option. */
  pullBatch?: number;
}

/**
 * Keeps track of every instance a test file starts, so `stopAll` can stop them
 * (and no timer, watcher or subscription outlives the file).
 */
export class Runners {
  readonly all: Runner[] = [];

  async start(js: JetStreamClient, opts: RunOptions): Promise<Runner> {
    const handled: Handled[] = [];
    const events: MemberStatus[] = [];
    const ref: { runner?: Runner } = {};
    let closed = false;
    const instance = await elasticConsume(js, {
      stream: opts.stream,
      group: opts.group,
      member: opts.member,
      consumerConfig: {
        ack_policy: "explicit",
        ack_wait: nanos(opts.ackWaitMs ?? 1000),
        max_ack_pending: opts.maxAckPending ?? 1,
        ...opts.template,
      },
      ...(opts.pullBatch === undefined ? {} : { pullBatch: opts.pullBatch }),
      handler: async (msg) => {
        handled.push({
          subject: msg.subject,
          rawSubject: msg.rawSubject,
          partition: msg.partition,
          data: msg.string(),
          redelivered: msg.redelivered,
          pinId: msg.pinId,
          at: Date.now(),
        });
        if (opts.onMessage && ref.runner) await opts.onMessage(msg, ref.runner);
      },
    });
    // Subscribe at once; events published during start-up are not seen.
    void (async () => {
      for await (const e of instance.status()) events.push(e);
    })();
    const closedWith = instance.closed().then((e) => {
      closed = true;
      return e;
    });
    const runner: Runner = {
      name: opts.member,
      instance,
      handled,
      events,
      closedWith,
      isClosed: () => closed,
      eventCount: (type) => events.filter((e) => e.type === type).length,
    };
    ref.runner = runner;
    this.all.push(runner);
    return runner;
  }

  /** Stops every instance started here (idempotent). */
  async stopAll(): Promise<void> {
    await Promise.allSettled(this.all.map((r) => r.instance.stop()));
  }
}

/** The raw stored value of an elastic group's config, or undefined when there is none. */
export async function rawElasticConfig(js: JetStreamClient, stream: string, group: string): Promise<{ text: string; revision: number; operation: string } | undefined> {
  const jsm = await js.jetstreamManager();
  try {
    await jsm.streams.info(`KV_${ELASTIC_BUCKET}`);
  } catch {
    return undefined; // no bucket at all
  }
  const kv = await new Kvm(js).open(ELASTIC_BUCKET);
  const entry = await kv.get(`${stream}.${group}`);
  if (!entry) return undefined;
  return { text: new TextDecoder().decode(entry.value), revision: entry.revision, operation: entry.operation };
}

/** Writes a raw value to an elastic group's key, as a hand edit would. */
export async function putRawElasticConfig(js: JetStreamClient, stream: string, group: string, text: string): Promise<number> {
  const kv = await new Kvm(js).open(ELASTIC_BUCKET);
  return kv.put(`${stream}.${group}`, text);
}

/** Purges an elastic group's key (what the library must never do itself). */
export async function purgeElasticConfig(js: JetStreamClient, stream: string, group: string): Promise<void> {
  const kv = await new Kvm(js).open(ELASTIC_BUCKET);
  await kv.purge(`${stream}.${group}`);
}

/** Publishes in order, `concurrency` at a time (one connection keeps the order). */
export async function publishAll(js: JetStreamClient, items: { subject: string; data: string }[], concurrency = 100): Promise<void> {
  for (let i = 0; i < items.length; i += concurrency) {
    await Promise.all(items.slice(i, i + concurrency).map((m) => js.publish(m.subject, m.data)));
  }
}

/** The median of some numbers. */
export function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? (s[mid] ?? NaN) : ((s[mid - 1] ?? NaN) + (s[mid] ?? NaN)) / 2;
}

/** Asserts that a promise rejects with a ConsumerGroupError of `code`; returns the error. */
export async function rejectsWithCode(p: Promise<unknown> | (() => Promise<unknown>), code: string): Promise<Error & { code: string }> {
  try {
    await (typeof p === "function" ? p() : p);
  } catch (err) {
    const e = err as Error & { code?: string };
    if (e?.code !== code) {
      throw new Error(`expected a ConsumerGroupError with code ${code}, got ${e?.code ?? "no code"}: ${e?.message ?? String(err)}`);
    }
    return e as Error & { code: string };
  }
  throw new Error(`expected a rejection with code ${code}, but it resolved`);
}

/** Resolves as `p` does, or rejects after `ms`. */
export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** waitFor whose failure message is computed when it fails (e.g. to show current counts). */
export async function waitUntil<T>(check: () => T | Promise<T>, timeoutMs: number, what: () => string, intervalMs = 20): Promise<NonNullable<T>> {
  try {
    return await waitFor(check, timeoutMs, "the condition", intervalMs);
  } catch (err) {
    throw new Error(`timed out after ${timeoutMs} ms waiting for ${what()} (${err instanceof Error ? err.message : String(err)})`);
  }
}
