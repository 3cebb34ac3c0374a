/**
 * Partition → member assignment, identical to Go's `GeneratePartitionFilters`.
 * Pure: no NATS, no I/O.
 */
import { assertPartitionCount } from "./limits.js";
import type { ElasticConsumerGroupConfig, MemberMapping, StaticConsumerGroupConfig } from "./types.js";

/**
 * Compares strings by Unicode code point, which is UTF-8 byte order and so Go's
 * string order. JavaScript's `<` compares UTF-16 code units, which puts astral
 * characters (emoji, many CJK extensions) before U+E000–U+FFFF; Go does not.
 */
export function compareCodePoints(a: string, b: string): number {
  const ia = a[Symbol.iterator]();
  const ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next();
    const y = ib.next();
    if (x.done || y.done) return x.done === y.done ? 0 : x.done ? -1 : 1;
    const cx = x.value.codePointAt(0) ?? 0;
    const cy = y.value.codePointAt(0) ?? 0;
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
}

/**
 * The members that get partitions in balanced mode: deduplicated (first occurrence
 * kept), sorted by code point, and capped at the partition count.
 *
 * @param members - the configured members
 * @param maxMembers - the partition count
 */
export function effectiveMembers(members: readonly string[], maxMembers: number): string[] {
  const unique = [...new Set(members)];
  // Without surrogates, UTF-16 code unit order is code point order: the plain comparison (much faster) is exact.
  const astral = unique.some((m) => SURROGATE.test(m));
  return unique.sort(astral ? compareCodePoints : compareCodeUnits).slice(0, maxMembers);
}

/** Any UTF-16 surrogate: a string without one orders the same by code units as by code points. */
const SURROGATE = /[\uD800-\uDFFF]/;

function compareCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function assertMaxMembers(maxMembers: number): void {
  assertPartitionCount(maxMembers);
}

/**
 * The partitions a member owns.
 *
 * Balanced mode (members non-empty) hands out contiguous blocks of ⌊P/n⌋ partitions
 * in sorted member order, then the leftovers one each to the first members. Mapping
 * mode returns the member's mapped partitions in listed order.
 *
 * @param members - the balanced membership (takes precedence when non-empty)
 * @param maxMembers - P, the partition count
 * @param memberMappings - the explicit mappings
 * @param memberName - the member asked about
 */
export function memberPartitions(
  members: readonly string[] | null | undefined,
  maxMembers: number,
  memberMappings: readonly MemberMapping[] | null | undefined,
  memberName: string,
): number[] {
  assertMaxMembers(maxMembers);
  if (members && members.length > 0) {
    const sorted = effectiveMembers(members, maxMembers);
    return balancedPartitions(sorted.length, maxMembers, sorted.indexOf(memberName));
  }
  return (memberMappings ?? []).filter((m) => m.member === memberName).flatMap((m) => m.partitions ?? []);
}

/**
 * The partitions of the k-th of n sorted members (none when k is -1 or beyond the cap):
 * the block k·q … k·q+q-1 with q = ⌊P/n⌋, then the leftover n·q+k when there is one
 * (n ≤ P, so q ≥ 1). The same as Go's loop over every partition, without the loop.
 */
function balancedPartitions(n: number, maxMembers: number, k: number): number[] {
  if (k < 0 || k >= n) return [];
  const q = Math.floor(maxMembers / n);
  const owned = Array.from({ length: q }, (_, i) => k * q + i);
  if (n * q + k < maxMembers) owned.push(n * q + k);
  return owned;
}

/**
 * The consumer filter subjects of a member for one filter, byte for byte as Go's
 * `GeneratePartitionFilters`: `<p>.<filter>` in balanced mode, and always `<p>.>`
 * in mapping mode (Go ignores the filter there; we match it for wire compatibility).
 *
 * @param members - the balanced membership
 * @param maxMembers - the partition count
 * @param memberMappings - the explicit mappings
 * @param memberName - the member
 * @param filter - the filter after the partition token, e.g. `>` or `foo.*`
 *
 * @example
 * ```ts
 * generatePartitionFilters(["m1", "m2", "m3"], 4, [], "m1", ">"); // ["0.>", "3.>"]
 * ```
 */
export function generatePartitionFilters(
  members: readonly string[] | null | undefined,
  maxMembers: number,
  memberMappings: readonly MemberMapping[] | null | undefined,
  memberName: string,
  filter: string,
): string[] {
  const balanced = !!members && members.length > 0;
  return memberPartitions(members, maxMembers, memberMappings, memberName).map((p) => (balanced ? `${p}.${filter}` : `${p}.>`));
}

/**
 * The whole assignment of a config: every member that owns partitions, with them
 * in ascending order, in sorted member order (balanced) or mapping order (mapped).
 * Members beyond the cap are present with an empty list.
 *
 * @param config - a static or elastic config
 */
export function partitionAssignment(config: Pick<StaticConsumerGroupConfig, "max_members" | "members" | "member_mappings">): Map<string, number[]> {
  const result = new Map<string, number[]>();
  const { members, member_mappings: mappings, max_members: max } = config;
  assertMaxMembers(max);
  if (members && members.length > 0) {
    // Once, not per member: sorting per member made this quadratic in the membership.
    const sorted = effectiveMembers(members, Number.POSITIVE_INFINITY);
    const n = Math.min(sorted.length, max);
    sorted.forEach((m, k) => result.set(m, balancedPartitions(n, max, k)));
  } else {
    for (const m of mappings ?? []) result.set(m.member, [...(result.get(m.member) ?? []), ...(m.partitions ?? [])]);
  }
  return result;
}

/** One member of a group's membership, as {@link memberRoster} lists it. */
export interface RosterEntry {
  /** The member's name. */
  member: string;
  /** The partitions it owns (none when it is over the cap). */
  partitions: number[];
  /** Listed as a member but beyond the partition count: it owns nothing and idles. */
  overCap: boolean;
}

/**
 * Every member of a config's membership (listed members or mapped ones), sorted by
 * name, with its partitions and whether it is beyond the cap.
 *
 * @param config - a static or elastic config
 */
export function memberRoster(config: Pick<StaticConsumerGroupConfig, "max_members" | "members" | "member_mappings">): RosterEntry[] {
  const assignment = partitionAssignment(config);
  const capped = new Set(config.members && config.members.length > 0 ? effectiveMembers(config.members, config.max_members) : (config.member_mappings ?? []).map((m) => m.member));
  const listed = [...new Set([...(config.members ?? []), ...(config.member_mappings ?? []).map((m) => m.member)])].sort();
  return listed.map((member) => ({ member, partitions: assignment.get(member) ?? [], overCap: !capped.has(member) }));
}

/**
 * The owner of each partition, index = partition; undefined where no member owns it.
 *
 * @param config - a static or elastic config
 */
export function partitionOwners(config: Pick<StaticConsumerGroupConfig, "max_members" | "members" | "member_mappings">): (string | undefined)[] {
  const owners: (string | undefined)[] = new Array<string | undefined>(config.max_members).fill(undefined);
  for (const [member, partitions] of partitionAssignment(config)) for (const p of partitions) owners[p] = member;
  return owners;
}

/**
 * Go's `IsInMembership`: listed as a member or in a mapping, whether or not it gets partitions.
 */
export function isInMembership(config: Pick<StaticConsumerGroupConfig, "members" | "member_mappings">, member: string): boolean {
  return (config.members ?? []).includes(member) || (config.member_mappings ?? []).some((m) => m.member === member);
}

/**
 * A static member's consumer filter subjects: one block per configured filter in
 * config order, or `<p>.>` blocks with no filters.
 */
export function staticMemberFilters(config: StaticConsumerGroupConfig, member: string): string[] {
  const filters = config.filters && config.filters.length > 0 ? config.filters : [">"];
  return filters.flatMap((f) => generatePartitionFilters(config.members, config.max_members, config.member_mappings, member, f));
}

/**
 * An elastic member's consumer filter subjects (Go's `ElasticGetPartitionFilters`).
 */
export function elasticGetPartitionFilters(config: ElasticConsumerGroupConfig, member: string): string[] {
  const pfs = config.partitioning_filters;
  const filters = pfs && pfs.length > 0 ? pfs.map((f) => f.filter) : [">"];
  return filters.flatMap((f) => generatePartitionFilters(config.members, config.max_members, config.member_mappings, member, f));
}
