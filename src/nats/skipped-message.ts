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
 * Each filter's stored messages are walked from its lowest up, past the ones this
 * instance knows, to the first it does not know or past the delivered sequence: a held
 * message can hide skipped ones above it (the review found one inherited pending
 * delivery at the bottom of a partition whose later messages were all skipped). The
 * walk takes at most one lookup per message held here, plus one per filter.
 */

/** A stored message: its stream sequence and subject. */
export interface FirstStored {
  readonly seq: number;
  readonly subject: string;
}

/** The lowest message of `filter` stored with a sequence >= `fromSeq`, or undefined. */
export type StoredFrom = (filter: string, fromSeq: number) => Promise<FirstStored | undefined>;

/**
 * The lowest stored message of `filter` at or below `deliveredUpTo` that is not known
 * here, or undefined when there is none.
 *
 * @param deliveredUpTo - the consumer's delivered stream sequence, read before the lookups
 * @param known - whether this instance holds the message, awaits its redelivery or has just settled it
 * @throws whatever `storedFrom` throws
 */
export async function skippedInFilter(filter: string, deliveredUpTo: number, storedFrom: StoredFrom, known: (seq: number) => boolean): Promise<FirstStored | undefined> {
  for (let from = 1; from <= deliveredUpTo; ) {
    const m = await storedFrom(filter, from);
    if (!m || m.seq > deliveredUpTo) return undefined;
    if (!known(m.seq)) return m;
    from = m.seq + 1;
  }
  return undefined;
}

/** The lowest of the messages found skipped in each filter, or undefined when none was. */
export function lowestOf(found: readonly (FirstStored | undefined)[]): FirstStored | undefined {
  let lowest: FirstStored | undefined;
  for (const m of found) if (m && (!lowest || m.seq < lowest.seq)) lowest = m;
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
