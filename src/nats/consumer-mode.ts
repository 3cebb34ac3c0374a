/**
 * Tells apart "another instance of this member runs in another concurrency mode"
 * from an ordinary stale consumer, so the first gets a clear error instead of the
 * instances deleting each other's consumer in turn.
 */
import type { ConsumerConfig, JetStreamManager } from "@nats-io/jetstream";

/**
 * The consumer metadata key holding an instance's concurrency mode. Every consumer
 * this library creates carries it, and Go's never do: it tells the two apart.
 */
export const MODE_KEY = "pcg_concurrency";

/**
 * Compares the concurrency mode recorded on an existing consumer with ours.
 *
 * @returns a sentence describing the mismatch, or undefined when the modes agree (or the consumer is gone)
 */
export async function describeModeConflict(jsm: JetStreamManager, stream: string, consumer: string, ours: Partial<ConsumerConfig>): Promise<string | undefined> {
  let theirs: string;
  try {
    const info = await jsm.consumers.info(stream, consumer);
    theirs = info.config.metadata?.[MODE_KEY] ?? "serial";
  } catch {
    return undefined;
  }
  const mine = ours.metadata?.[MODE_KEY] ?? "serial";
  if (theirs === mine) return undefined;
  return `another instance of this member consumes in "${theirs}" concurrency mode and this one in "${mine}"; all instances of a member share one consumer and must use the same mode (Go instances use "serial")`;
}
