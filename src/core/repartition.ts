/**
 * The pure part of growing an elastic group's partition count from N to M
 * (see `elastic/repartition/` for the protocol): which old partitions can feed
 * a new one, the transition subjects and filters, the progress record and how the
 * new partitions are added to explicit mappings. No NATS import.
 *
 * During a repartition the work-queue stream holds three kinds of subjects:
 * - `<p>.<subject>`: the old layout (partition p of N), sourced before the cut;
 * - `pcg-repartition.<q>.<subject>`: the transition layout (partition q of M), sourced after it;
 * - once every old message is handled, `<q>.<subject>` again: the final layout, Go's.
 */
import { ConsumerGroupError } from "./errors.js";
import { sourceTransforms } from "./names.js";
import type { MemberMapping, PartitioningFilter } from "./types.js";

/** The first token of transition-layout subjects in the work-queue stream. */
export const TRANSITION_TOKEN = "pcg-repartition";

/** The stream metadata key that holds a repartition's {@link RepartitionRecord} while it runs. */
export const REPARTITION_METADATA_KEY = "pcg_repartition";

/**
 * The stream metadata key present while a source switch holds the member consumers
 * paused: the time (ISO 8601) the pause ends by itself. A member that makes its
 * consumer meanwhile pauses it until then before pulling from it, so no consumer the
 * switch could not see takes a message the switch is about to replace.
 */
export const SWITCH_PAUSE_METADATA_KEY = "pcg_switch_pause";

/**
 * Where a repartition is:
 * - `moving`: new messages arrive in the transition layout; old-layout messages are being handled;
 * - `finishing`: every old-layout message is handled; new messages arrive in the final layout and
 *   the transition layout drains.
 */
export type RepartitionPhase = "moving" | "finishing";

/** A repartition in progress, as stored in the work-queue stream's metadata. */
export interface RepartitionRecord {
  /** The partition count before (N). */
  from: number;
  /** The partition count after (M). */
  to: number;
  /** Where it is. */
  phase: RepartitionPhase;
  /** When it started (ISO 8601). */
  started: string;
  /**
   * The work-queue sequence of the last switch's anchor: the old source's copies stored
   * after it are deleted by the switch, or by the next run if the switch was interrupted.
   */
  switchedAfter?: number;
  /**
   * The origin sequence of that anchor: the new source starts right after it. A message
   * of the old source's layout from later in the origin is one of those copies, whenever
   * it is seen (members drop one they get before a run deleted it).
   */
  switchedAfterOrigin?: number;
}

/** Encodes a record for the stream metadata (a string value). */
export function encodeRepartitionRecord(record: RepartitionRecord): string {
  return JSON.stringify({
    from: record.from,
    to: record.to,
    phase: record.phase,
    started: record.started,
    ...(record.switchedAfter !== undefined ? { switchedAfter: record.switchedAfter } : {}),
    ...(record.switchedAfterOrigin !== undefined ? { switchedAfterOrigin: record.switchedAfterOrigin } : {}),
  });
}

/**
 * Decodes a stored record.
 *
 * @throws ConsumerGroupError `CONFIG_DECODE` when it is not a record this version understands
 */
export function decodeRepartitionRecord(raw: string): RepartitionRecord {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    throw new ConsumerGroupError("CONFIG_DECODE", `the repartition record in the work-queue stream's metadata is not JSON: ${raw.slice(0, 200)}`, { cause: err });
  }
  const r = value as Partial<RepartitionRecord> | null;
  const count = (n: unknown): boolean => typeof n === "number" && Number.isSafeInteger(n) && n >= 1;
  if (!r || typeof r !== "object" || !count(r.from) || !count(r.to) || (r.phase !== "moving" && r.phase !== "finishing") || typeof r.started !== "string") {
    throw new ConsumerGroupError(
      "CONFIG_DECODE",
      `the repartition record in the work-queue stream's metadata is not one this version understands (${raw.slice(0, 200)}): upgrade nats-pcgroups on every member and on the machine running the repartition`,
    );
  }
  const sequence = (n: unknown): n is number => typeof n === "number" && Number.isSafeInteger(n) && n >= 0;
  return {
    from: r.from as number,
    to: r.to as number,
    phase: r.phase,
    started: r.started,
    ...(sequence(r.switchedAfter) ? { switchedAfter: r.switchedAfter } : {}),
    ...(sequence(r.switchedAfterOrigin) ? { switchedAfterOrigin: r.switchedAfterOrigin } : {}),
  };
}

const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));

/**
 * The old partitions (of `from`) whose messages may have keys that land in new
 * partition `q` (of `to`): those congruent to q modulo gcd(from, to). A key hashed
 * to h lands in old p = h mod from and new q = h mod to, so p ≡ q (mod gcd). When
 * `to` is a multiple of `from` that is one partition, `q mod from`.
 *
 * @example
 * ```ts
 * feedingPartitions(4, 12, 9); // [1]
 * feedingPartitions(4, 6, 3);  // [1, 3]
 * ```
 */
export function feedingPartitions(from: number, to: number, q: number): number[] {
  const g = gcd(from, to);
  const feeders: number[] = [];
  for (let p = q % g; p < from; p += g) feeders.push(p);
  return feeders;
}

/**
 * The old partitions new partition `q` has to wait for: its feeders except `q`
 * itself, whose old messages the same consumer receives first, in stream order.
 */
export function partitionsToWaitFor(from: number, to: number, q: number): number[] {
  return feedingPartitions(from, to, q).filter((p) => p !== q);
}

/**
 * The source transforms of the transition layout: Go's transforms for M, with
 * {@link TRANSITION_TOKEN} in front, so that the new messages never share a subject
 * with the old layout's.
 */
export function transitionTransforms(partitions: number, filters: readonly PartitioningFilter[] | null): { src: string; dest: string }[] {
  return sourceTransforms(partitions, filters).map((t) => ({ src: t.src, dest: `${TRANSITION_TOKEN}.${t.dest}` }));
}

/**
 * Whether a stored message is one of the copies a source switch replaced: stored by
 * that switch's old source from later in the origin than its anchor. The new source
 * stores it again in the new layout, so the copy must not be handled. Normally the
 * switch deletes these before any consumer resumes; when the process running the
 * switch died first, members drop those they get, until the next run deletes the rest.
 *
 * Decided from the message alone, so a member whose view of the record lags can only
 * fail to recognise a copy, never take a new message for one: the `Nats-Stream-Source`
 * header (`<origin> <origin seq> <filters> <destinations> …`, nats-server >= 2.10)
 * names the transforms of the source that stored the message.
 *
 * @param record - the repartition record as last read (the cut is the switch in `moving`, the finish in `finishing`)
 * @param sourceHeader - the message's `Nats-Stream-Source` header
 * @param filters - the group's partitioning filters
 */
export function isReplacedCopy(record: RepartitionRecord | undefined, sourceHeader: string | undefined, filters: readonly PartitioningFilter[] | null): boolean {
  if (!record || record.switchedAfterOrigin === undefined || !sourceHeader) return false;
  const fields = sourceHeader.split(" ");
  const originSeq = Number(fields[1]);
  if (fields.length < 4 || !Number.isSafeInteger(originSeq) || originSeq <= record.switchedAfterOrigin) return false;
  const oldSource = record.phase === "moving" ? sourceTransforms(record.from, filters) : transitionTransforms(record.to, filters);
  return fields[3] === oldSource.map((t) => t.dest).join("\f");
}

/**
 * A member's consumer filters during a repartition, from its filters under the new
 * config (`<q>.<filter>`, Go's): each kept, plus its transition twin
 * `pcg-repartition.<q>.<filter>` once partition q may start new-layout messages.
 *
 * @param finalFilters - the member's filters under the M config
 * @param open - whether partition q's transition messages may be consumed
 */
export function transitionFilters(finalFilters: readonly string[], open: (q: number) => boolean): string[] {
  const twins = finalFilters.filter((f) => open(filterPartition(f))).map((f) => `${TRANSITION_TOKEN}.${f}`);
  return [...finalFilters, ...twins];
}

/** The partition of a member filter `<q>.<filter>`. */
export function filterPartition(filter: string): number {
  return Number(filter.slice(0, filter.indexOf(".")));
}

/**
 * Splits a subject as stored in a group's stream into its partition and the
 * subject without the partition token(s): `7.orders.eu` and
 * `pcg-repartition.7.orders.eu` both give partition 7 and `orders.eu`.
 *
 * @returns partition NaN when the subject carries no partition number
 */
export function splitStoredSubject(stored: string): {
  /** The partition number (NaN when there is none). */
  partition: number;
  /** The subject without the partition token(s). */
  subject: string;
} {
  let rest = stored;
  if (rest.startsWith(`${TRANSITION_TOKEN}.`)) rest = rest.slice(TRANSITION_TOKEN.length + 1);
  const dot = rest.indexOf(".");
  return { partition: storedPartition(rest, 0), subject: dot === -1 ? rest : rest.slice(dot + 1) };
}

/**
 * The partition number of a stored subject, as {@link splitStoredSubject} gives it,
 * without building the rest: read once per delivered message.
 *
 * @returns NaN when the subject carries no partition number
 */
export function partitionOfStored(stored: string): number {
  return storedPartition(stored, stored.startsWith(`${TRANSITION_TOKEN}.`) ? TRANSITION_TOKEN.length + 1 : 0);
}

/** The decimal token of `subject` starting at `from` (up to the next dot or the end), NaN if it is not all digits. */
function storedPartition(subject: string, from: number): number {
  let value = 0;
  let at = from;
  for (; at < subject.length; at++) {
    const code = subject.charCodeAt(at);
    if (code === 46) break; // "."
    if (code < 48 || code > 57) return NaN;
    value = value * 10 + (code - 48);
  }
  return at === from ? NaN : value;
}

/**
 * Explicit mappings grown from `from` to `to` partitions: the existing ones kept as
 * they are, and each new partition given to the member that has the fewest so far
 * (the first in mapping order on a tie), so that no partition moves and the load
 * stays balanced within one.
 */
export function growMappings(mappings: readonly MemberMapping[], from: number, to: number): MemberMapping[] {
  const grown = mappings.map((m) => ({ member: m.member, partitions: [...(m.partitions ?? [])] }));
  if (grown.length === 0) return grown;
  for (let q = from; q < to; q++) {
    let least = grown[0] as MemberMapping;
    for (const m of grown) if ((m.partitions ?? []).length < (least.partitions ?? []).length) least = m;
    (least.partitions ??= []).push(q);
  }
  return grown;
}
