/**
 * A continuous keyed load for fault tests. Every message carries its key and a
 * per-key sequence; a publish that fails (server down, leader moving) is retried
 * with the same `Nats-Msg-Id`, so the stream stores it once. The recorder notes
 * what handlers saw, for the delivery checker.
 */
import type { JetStreamClient } from "@nats-io/jetstream";
import { checkDelivery, type DeliveryReport, type HandledRecord } from "../../src/cli/demo/delivery-check.js";
import type { ConsumerGroupMessage } from "../../src/index.js";

/** The payload of a load message. */
export interface LoadPayload {
  key: string;
  seq: number;
}

/** A running publisher. */
export interface KeyedLoad {
  /** Per key, how many messages were stored (sequences 1..n). */
  published: Map<string, number>;
  total(): number;
  /** Stops after the message in progress is stored. */
  stop(): Promise<void>;
}

/**
 * Publishes to `subjectOf(key)` round-robin over `keys` keys, about `rate` per second,
 * until `max` messages or stop().
 */
export function startKeyedLoad(js: JetStreamClient, subjectOf: (key: string) => string, options: { keys: number; rate: number; max?: number; idPrefix: string }): KeyedLoad {
  const published = new Map<string, number>();
  let running = true;
  let total = 0;
  const loop = (async () => {
    for (let i = 0; running && (options.max === undefined || i < options.max); i++) {
      const key = `k${i % options.keys}`;
      const seq = (published.get(key) ?? 0) + 1;
      const payload = JSON.stringify({ key, seq } satisfies LoadPayload);
      for (let attempt = 0; ; attempt++) {
        try {
          await js.publish(subjectOf(key), payload, { msgID: `${options.idPrefix}-${key}-${seq}`, timeout: 2000 });
          break;
        } catch (err) {
          if (attempt > 300) throw err;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      published.set(key, seq);
      total += 1;
      await new Promise((r) => setTimeout(r, 1000 / options.rate));
    }
  })();
  return {
    published,
    total: () => total,
    async stop() {
      running = false;
      await loop;
    },
  };
}

/** Records what handlers saw. */
export class HandledLog {
  readonly records: HandledRecord[] = [];

  /** A handler that records the message (at its start) and then runs `then`. */
  handler(then?: (msg: ConsumerGroupMessage) => void | Promise<void>): (msg: ConsumerGroupMessage) => Promise<void> {
    return async (msg) => {
      const { key, seq } = msg.json<LoadPayload>();
      this.records.push({ key, seq, at: performance.timeOrigin + performance.now() });
      await then?.(msg);
    };
  }

  /** Distinct (key, seq) pairs handled. */
  unique(): number {
    return new Set(this.records.map((r) => `${r.key}/${r.seq}`)).size;
  }

  /** The checker's verdict against what was published. */
  check(published: ReadonlyMap<string, number>): DeliveryReport {
    return checkDelivery(published, this.records);
  }
}
