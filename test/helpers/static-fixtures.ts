/**
 * Fixtures for the static-group integration tests: partitioned streams, keyed
 * messages, handlers that record what they handled, status recorders and the
 * per-key order check.
 */
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import type { ConsumerGroupMember, ConsumerGroupMessage, MemberStatus } from "../../src/index.js";

/** One message as a handler saw it. */
export interface Handled {
  /** Which instance handled it. */
  who: string;
  key: string;
  seq: number;
  partition: number;
  /** The subject without the partition token. */
  subject: string;
  pinId: string | undefined;
  deliveryCount: number;
  /** Date.now() when the handler started. */
  at: number;
}

/** The payload of a keyed test message. */
export interface KeyedPayload {
  k: string;
  s: number;
}

/**
 * Creates a stream `orders.*` (prefixed with the stream name to stay unique) whose
 * stored subjects are `<partition>.<prefix>.<key>`.
 *
 * @returns the subject prefix to publish under (`<prefix>.<key>`)
 */
export async function createKeyedStream(jsm: JetStreamManager, stream: string, partitions: number, prefix = "orders"): Promise<string> {
  await jsm.streams.add({
    name: stream,
    subjects: [`${prefix}.*`],
    storage: "memory",
    subject_transform: { src: `${prefix}.*`, dest: `{{partition(${partitions},1)}}.${prefix}.{{wildcard(1)}}` },
  });
  return prefix;
}

/** `count` key names, `k0` … `k<count-1>`. */
export function keys(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `k${i}`);
}

/**
 * Publishes `perKey` messages for every key, interleaved (seq 1 of every key, then
 * seq 2, …), with payload `{ k, s }`. Stored in publish order.
 *
 * @returns every (key, seq) published
 */
export async function publishKeyed(js: JetStreamClient, prefix: string, keyNames: string[], perKey: number, firstSeq = 1): Promise<KeyedPayload[]> {
  const sent: KeyedPayload[] = [];
  const pending: Promise<unknown>[] = [];
  for (let s = firstSeq; s < firstSeq + perKey; s++) {
    for (const k of keyNames) {
      sent.push({ k, s });
      pending.push(js.publish(`${prefix}.${k}`, JSON.stringify({ k, s })));
      if (pending.length >= 256) await Promise.all(pending.splice(0));
    }
  }
  await Promise.all(pending);
  return sent;
}

/**
 * A handler that records every message into `sink` and can be slowed down.
 */
export function recordingHandler(who: string, sink: Handled[], options: { delayMs?: number; onHandled?: (h: Handled) => void } = {}) {
  return async (msg: ConsumerGroupMessage): Promise<void> => {
    const { k, s } = msg.json<KeyedPayload>();
    const handled: Handled = {
      who,
      key: k,
      seq: s,
      partition: msg.partition,
      subject: msg.subject,
      pinId: msg.pinId,
      deliveryCount: msg.info.deliveryCount,
      at: Date.now(),
    };
    sink.push(handled);
    options.onHandled?.(handled);
    if (options.delayMs) await new Promise((r) => setTimeout(r, options.delayMs));
  };
}

/** `key/seq` of every published message that no record covers. */
export function missing(sent: KeyedPayload[], records: Handled[]): string[] {
  const seen = new Set(records.map((r) => `${r.key}/${r.seq}`));
  return sent.map((p) => `${p.k}/${p.s}`).filter((id) => !seen.has(id));
}

/**
 * Checks per-key order over first deliveries: for each key, the first time each
 * seq was handled must come in increasing seq order. `records` must be in handling
 * order (sort by `at` when they come from several instances).
 *
 * @returns a description of each violation
 */
export function orderViolations(records: Handled[]): string[] {
  const seen = new Set<string>();
  const last = new Map<string, number>();
  const violations: string[] = [];
  for (const r of records) {
    const id = `${r.key}/${r.seq}`;
    if (seen.has(id)) continue;
    seen.add(id);
    const prev = last.get(r.key) ?? 0;
    if (r.seq <= prev) violations.push(`${r.key}: seq ${r.seq} first handled (by ${r.who}) after seq ${prev}`);
    last.set(r.key, Math.max(prev, r.seq));
  }
  return violations;
}

/** A recorded status event with the time it arrived. */
export type StampedStatus = MemberStatus & { at: number };

/** Records a member's status events from now on. */
export interface StatusRecorder {
  readonly events: StampedStatus[];
  /** Resolves with the first event of `type` recorded after index `from` (default 0), or rejects after `timeoutMs`. */
  next<T extends MemberStatus["type"]>(type: T, timeoutMs: number, from?: number): Promise<Extract<StampedStatus, { type: T }>>;
}

/** Starts recording `member.status()`. Ends by itself when the member stops. */
export function recordStatus(member: ConsumerGroupMember): StatusRecorder {
  const events: StampedStatus[] = [];
  const waiters = new Set<() => void>();
  void (async () => {
    for await (const e of member.status()) {
      events.push({ ...e, at: Date.now() });
      for (const w of [...waiters]) w();
    }
    for (const w of [...waiters]) w();
  })();
  return {
    events,
    next(type, timeoutMs, from = 0) {
      type Found = Extract<StampedStatus, { type: typeof type }>;
      const find = (): Found | undefined => events.slice(from).find((e) => e.type === type) as Found | undefined;
      return new Promise((resolve, reject) => {
        const check = (): void => {
          const found = find();
          if (found) {
            cleanup();
            resolve(found);
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`timed out after ${timeoutMs} ms waiting for status "${type}" (saw: ${events.map((e) => e.type).join(", ") || "nothing"})`));
        }, timeoutMs);
        const cleanup = (): void => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
  };
}

/**
 * Resolves with what a promise settled to, or rejects after `timeoutMs`.
 */
export async function within<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)), timeoutMs))),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs `fn` and returns what it threw (fails when it does not throw). */
export async function thrown(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  throw new Error("expected the call to throw, but it returned");
}
