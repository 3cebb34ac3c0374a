/**
 * Whether a work-queue consumer has passed a message it never delivered. Pure: no NATS
 * import, the server's answers are passed in.
 *
 * A create of a consumer that lands while the server is deleting another consumer of
 * the same name (it unlists the old one before it removes its files) loads the old
 * one's state from disk: its delivered sequence and its pending list, for its filters.
 * Given other filters (a membership change), the new consumer starts past every stored
 * message of its new partitions below the old delivered sequence, and delivers none of
 * them until it is deleted (measured on 2.15.3: 5 of 200 raced creates inherited a
 * state, and the messages of the added filter between the old ack floor and delivered
 * sequence were never delivered).
 *
 * On a work queue an acked or terminated message is removed, so every stored message
 * at or below the consumer's delivered sequence is pending: delivered and not yet
 * settled. When the consumer's unacked count says that all its unacked deliveries are
 * held by one instance (the start guard's settle condition), a stored message at or
 * below the delivered sequence that this instance neither holds, awaits nor has just
 * settled was never delivered to anyone who still has it: the consumer skipped it.
 * The lowest stored message of each filter is enough to see the inherited state: every
 * stored message of a partition the old consumer did not have is below its delivered
 * sequence, the lowest among them.
 */

/** The lowest stored message of one filter, or undefined when the filter holds none. */
export interface FirstStored {
  readonly seq: number;
  readonly subject: string;
}

/**
 * The lowest message the consumer skipped, or undefined when none shows.
 *
 * @param deliveredUpTo - the consumer's delivered stream sequence, read before `firstStored`
 * @param firstStored - the lowest stored message of each of its filters, read after the consumer's state
 * @param known - whether this instance holds the message, awaits its redelivery or has just settled it
 */
export function skippedMessage(deliveredUpTo: number, firstStored: readonly (FirstStored | undefined)[], known: (seq: number) => boolean): FirstStored | undefined {
  let lowest: FirstStored | undefined;
  for (const first of firstStored) {
    if (!first || first.seq > deliveredUpTo || known(first.seq)) continue;
    if (!lowest || first.seq < lowest.seq) lowest = first;
  }
  return lowest;
}

/**
 * Whether the skip check applies to a consumer: a work-queue consumer without a
 * `max_deliver` of its own (a message whose deliveries ran out stays stored and
 * pending-free too, and looks the same).
 */
export function skipCheckApplies(config: { max_deliver?: number }): boolean {
  return config.max_deliver === undefined || config.max_deliver <= 0;
}

/** What one look found: the lowest skipped message, none, or a lookup that failed (a leader election, a timeout). */
export type SkipLook = FirstStored | undefined | "failed";

/** What the skip check concludes: nothing skipped, no conclusion yet (the hold waits and asks again), or a skip. */
export type SkipVerdict = "clean" | "unsure" | "skipped";

/**
 * The verdict of the skip check's two looks, 100 ms apart (`second` "not yet": the
 * first look's verdict, "look again" when it found a suspect). A failed lookup proves
 * nothing, so it never counts as clean; a skip counts only when both looks name the
 * same message (a clustered work queue removes an acked message shortly after the ack
 * is counted).
 */
export function skipVerdict(first: SkipLook, second: SkipLook | "not yet"): SkipVerdict | "look again" {
  if (first === "failed") return "unsure";
  if (first === undefined) return "clean";
  if (second === "not yet") return "look again";
  if (second === "failed") return "unsure";
  if (second === undefined) return "clean";
  return second.seq === first.seq ? "skipped" : "unsure";
}
