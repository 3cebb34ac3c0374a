/**
 * A message's failed attempts, as the attempts bucket keeps them: the server's delivery
 * count starts over whenever a rebalance recreates a member's consumer, so the attempts
 * of a message that moves between members are counted here instead.
 *
 * A record names the message it counts (work-queue sequence, subject and store time):
 * a record left behind by a deleted and recreated group, whose sequences start over,
 * belongs to another message and counts nothing.
 */

/** The message a record counts the attempts of. */
export interface AttemptIdentity {
  /** Its work-queue stream sequence. */
  seq: number;
  /** Its subject as stored. */
  subject: string;
  /** When it was stored, in ns since the epoch (as a decimal string: it exceeds 2^53). */
  storedNanos: string;
}

/** What the attempts bucket keeps for one message. */
export interface AttemptRecord extends AttemptIdentity {
  /** Failed attempts counted so far, by every member and instance. */
  attempts: number;
}

/**
 * The attempts of a message once one more of them failed: one more than the record
 * counts (when it counts this message), and never fewer than the attempts the server's
 * delivery count and this instance know of.
 *
 * @param record - what the bucket holds for the message's sequence, if anything
 * @param localRuns - attempts known here: the earlier deliveries of this consumer plus this instance's attempts, this one included
 */
export function attemptsAfterFailure(record: AttemptRecord | undefined, identity: AttemptIdentity, localRuns: number): number {
  const counted = record && sameMessage(record, identity) ? record.attempts : 0;
  return Math.max(localRuns, counted + 1);
}

/**
 * The attempts of a message counted before its next attempt runs (`retry.exactAttempts`):
 * the record's count (when it counts this message) or the attempts known here, whichever
 * is more. The next attempt may run when this is below `maxDeliver`; it is then counted
 * as `counted + 1` before it starts, so an attempt that a crash cuts is counted too.
 *
 * @param earlierRuns - attempts known here before this one: the consumer's earlier deliveries plus this instance's attempts
 */
export function attemptsBeforeRun(record: AttemptRecord | undefined, identity: AttemptIdentity, earlierRuns: number): number {
  const counted = record && sameMessage(record, identity) ? record.attempts : 0;
  return Math.max(earlierRuns, counted);
}

/** Whether a record counts the message `identity` names. */
export function sameMessage(record: AttemptIdentity, identity: AttemptIdentity): boolean {
  return record.seq === identity.seq && record.subject === identity.subject && record.storedNanos === identity.storedNanos;
}

/** The record's stored form. */
export function encodeAttemptRecord(record: AttemptRecord): string {
  return JSON.stringify({ seq: record.seq, subject: record.subject, stored_nanos: record.storedNanos, attempts: record.attempts });
}

/** Reads a stored record; undefined for anything that is not one (it is then ignored and overwritten). */
export function decodeAttemptRecord(text: string): AttemptRecord | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null) return undefined;
  const { seq, subject, stored_nanos: storedNanos, attempts } = value as Record<string, unknown>;
  if (!Number.isSafeInteger(seq) || typeof subject !== "string" || typeof storedNanos !== "string" || !Number.isSafeInteger(attempts) || (attempts as number) < 1) return undefined;
  return { seq: seq as number, subject, storedNanos, attempts: attempts as number };
}
