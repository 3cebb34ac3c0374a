/**
 * The order checker of the fault benchmarks: every handler start of one member, on
 * every instance, checked against what was published. Per key, the order of FIRST
 * handling must be the publish order (a message never first starts before an earlier
 * message of its key first started), and nothing published may go unhandled. Starts
 * reported by child processes carry `performance.timeOrigin + performance.now()`
 * times, which compare across processes on one machine.
 */

/** One handler start. */
export interface Start {
  /** The instance. */
  who: string;
  key: string;
  /** The message's per-key sequence (1, 2, 3… in publish order). */
  seq: number;
  /** Its delivery count. */
  dc: number;
  at: number;
}

/** What {@link checkOrder} found. */
export interface OrderReport {
  published: number;
  starts: number;
  /** Messages started at least once. */
  unique: number;
  /** Published but never started, as `key/seq`. */
  lost: string[];
  /** First started before an earlier message of its key first started, as `key/seq`. */
  outOfOrder: string[];
}

/**
 * Checks starts against `published` (per key, the highest sequence published; every
 * sequence from 1 to it was published).
 */
export function checkOrder(starts: readonly Start[], published: ReadonlyMap<string, number>): OrderReport {
  const sorted = [...starts].sort((a, b) => a.at - b.at);
  const seen = new Map<string, Set<number>>();
  const highest = new Map<string, number>();
  const outOfOrder: string[] = [];
  for (const s of sorted) {
    let done = seen.get(s.key);
    if (!done) seen.set(s.key, (done = new Set()));
    if (done.has(s.seq)) continue;
    done.add(s.seq);
    if (s.seq < (highest.get(s.key) ?? 0)) outOfOrder.push(`${s.key}/${s.seq}`);
    else highest.set(s.key, s.seq);
  }
  const lost: string[] = [];
  let total = 0;
  for (const [key, last] of published) {
    total += last;
    for (let seq = 1; seq <= last; seq++) if (!seen.get(key)?.has(seq)) lost.push(`${key}/${seq}`);
  }
  let unique = 0;
  for (const set of seen.values()) unique += set.size;
  return { published: total, starts: starts.length, unique, lost, outOfOrder };
}

/**
 * The longest pause between consecutive starts that begins in [from, until), and when
 * it ended: after a fault, how long handling stopped and when it went on.
 */
export function longestPause(starts: readonly Start[], from: number, until: number): { ms: number; resumedAt: number } | undefined {
  const times = starts.map((s) => s.at).sort((a, b) => a - b);
  let best: { ms: number; resumedAt: number } | undefined;
  // The pause under way at `from` counts from `from`.
  let previous = from;
  for (const t of times) {
    if (t < from) continue;
    if (previous >= until) break;
    if (!best || t - previous > best.ms) best = { ms: t - previous, resumedAt: t };
    previous = t;
  }
  return best;
}
