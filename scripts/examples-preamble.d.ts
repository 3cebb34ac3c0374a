// The names the documentation's TypeScript examples use without defining them:
// what an earlier example created, and the reader's own application code.
// scripts/check-examples.mjs compiles every example with this file.
import type { JetStreamClient } from "@nats-io/jetstream";

declare global {
  /** The JetStream client of the first example (`const js = jetstream(nc)`). */
  const js: JetStreamClient;
  /** The reader's own work on an order. */
  function ship(order: unknown): Promise<void>;
  /** The reader's own per-partition state, saved when partitions are revoked. */
  function flushState(partitions: readonly number[]): Promise<void>;
  /** The reader's own per-partition state, loaded when partitions are assigned. */
  function loadState(partitions: readonly number[]): void;
}

export {};
