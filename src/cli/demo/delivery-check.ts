/**
 * The delivery checker: given what was published (a per-key sequence) and what the
 * members handled, it says whether anything was lost, whether the order of first
 * handling per key equals the publish order, and how many duplicates there were.
 * Pure; used by `cg demo` and by the reliability tests.
 */

/** One handled message. */
export interface HandledRecord {
  key: string;
  /** The per-key sequence the publisher stamped (1, 2, 3…). */
  seq: number;
  /** When handling started, in ms (any clock shared by all members, e.g. performance.timeOrigin + performance.now()). */
  at: number;
}

/** What the checker found. */
export interface DeliveryReport {
  published: number;
  handled: number;
  unique: number;
  duplicates: number;
  lost: { key: string; seq: number }[];
  /** Keys whose first handlings came out of publish order, with the first offending pair. */
  outOfOrder: { key: string; expected: number; got: number }[];
  /** Handled messages that were never published (should be none). */
  unexpected: number;
}

/**
 * Checks handled records against the published per-key counts.
 *
 * @param published - per key, how many messages were published (sequences 1..n)
 * @param handled - every handling, duplicates included, in any order
 */
export function checkDelivery(published: ReadonlyMap<string, number>, handled: readonly HandledRecord[]): DeliveryReport {
  const byTime = [...handled].sort((a, b) => a.at - b.at);
  const firstSeen = new Map<string, Set<number>>();
  const nextExpected = new Map<string, number>();
  const outOfOrder = new Map<string, { key: string; expected: number; got: number }>();
  let unique = 0;
  let unexpected = 0;
  for (const h of byTime) {
    const total = published.get(h.key) ?? 0;
    if (h.seq < 1 || h.seq > total) {
      unexpected += 1;
      continue;
    }
    const seen = firstSeen.get(h.key) ?? new Set<number>();
    firstSeen.set(h.key, seen);
    if (seen.has(h.seq)) continue;
    seen.add(h.seq);
    unique += 1;
    const expected = nextExpected.get(h.key) ?? 1;
    if (h.seq !== expected && !outOfOrder.has(h.key)) outOfOrder.set(h.key, { key: h.key, expected, got: h.seq });
    nextExpected.set(h.key, Math.max(expected, h.seq + 1));
  }
  const lost: { key: string; seq: number }[] = [];
  let total = 0;
  for (const [key, count] of published) {
    total += count;
    const seen = firstSeen.get(key);
    for (let seq = 1; seq <= count; seq++) if (!seen?.has(seq)) lost.push({ key, seq });
  }
  return { published: total, handled: handled.length, unique, duplicates: handled.length - unique - unexpected, lost, outOfOrder: [...outOfOrder.values()], unexpected };
}
