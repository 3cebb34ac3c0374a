/**
 * Sticky partition assignment for members that join and leave by themselves: explicit
 * `member_mappings`, balanced to ±1, that move as few partitions as a change allows.
 * Go's balanced mode hands out contiguous blocks in name order, so a member that sorts
 * into the middle shifts every block after it; mappings let each member keep what it
 * has. Go members read the mappings unchanged. Pure: no NATS, no I/O.
 *
 * Why the result moves the fewest partitions possible: whatever balanced assignment
 * is chosen, member m can keep at most min(held_m, target_m) of the partitions it
 * holds, so the best possible is the largest Σ min(held_m, target_m) over the ways to
 * hand out the targets. {@link stickyMappings} gives the larger targets to the members
 * holding the most (an exchange argument shows nothing does better), keeps exactly
 * min(held_m, target_m) per member, and moves only the rest. {@link minimumMoves}
 * computes the same bound from an owner array.
 */
import { compareCodePoints } from "./assignment.js";
import { assertPartitionCount } from "./limits.js";
import type { MemberMapping } from "./types.js";

/** The partitions the fixed (manual) mappings hold, and by whom; out-of-range entries are ignored. */
function fixedHolders(partitionCount: number, fixed: readonly MemberMapping[]): Map<number, Set<string>> {
  const holders = new Map<number, Set<string>>();
  for (const mapping of fixed) {
    for (const p of mapping.partitions ?? []) {
      if (!Number.isSafeInteger(p) || p < 0 || p >= partitionCount) continue;
      const set = holders.get(p) ?? new Set<string>();
      set.add(mapping.member);
      holders.set(p, set);
    }
  }
  return holders;
}

/** The partitions no fixed mapping holds, ascending. */
function freePartitions(partitionCount: number, held: ReadonlyMap<number, unknown>): number[] {
  return [...Array(partitionCount).keys()].filter((p) => !held.has(p));
}

/** The members that share the free partitions: deduplicated, without fixed names, in code-point order. */
function autoMembers(members: readonly string[], fixed: readonly MemberMapping[]): string[] {
  const manual = new Set(fixed.map((m) => m.member));
  return [...new Set(members)].filter((m) => !manual.has(m)).sort(compareCodePoints);
}

/**
 * How many partitions each member should end with. k = min(members, free partitions,
 * room for more mappings) members get partitions: ⌊free/k⌋ each, and one more for
 * free mod k of them. The larger shares and the places among the k go to the members
 * holding the most (ties by name), which is what keeps the most partitions in place.
 */
function targets(members: readonly string[], heldCount: (member: string) => number, freeCount: number, room: number): Map<string, number> {
  const result = new Map<string, number>(members.map((m) => [m, 0]));
  const sharing = Math.max(0, Math.min(members.length, freeCount, room));
  if (sharing === 0) return result;
  const base = Math.floor(freeCount / sharing);
  const extra = freeCount % sharing;
  const byHolding = [...members].sort((a, b) => heldCount(b) - heldCount(a) || compareCodePoints(a, b));
  byHolding.slice(0, sharing).forEach((m, i) => result.set(m, i < extra ? base + 1 : base));
  return result;
}

/** Go rejects more mappings than partitions, so the fixed mappings leave this many for the rest. */
function mappingRoom(partitionCount: number, fixed: readonly MemberMapping[]): number {
  return partitionCount - new Set(fixed.map((m) => m.member)).size;
}

/**
 * The free partitions each auto member holds in `previous`, ascending. A partition
 * listed by several auto members (a hand-edited config) counts for the one first in
 * code-point order, so the result does not depend on the input order.
 */
function currentHoldings(previous: readonly MemberMapping[], members: readonly string[], free: readonly number[]): Map<string, number[]> {
  const live = new Set(members);
  const freeSet = new Set(free);
  const claimant = new Map<number, string>();
  for (const mapping of previous) {
    if (!live.has(mapping.member)) continue;
    for (const p of mapping.partitions ?? []) {
      if (!freeSet.has(p)) continue;
      const current = claimant.get(p);
      if (current === undefined || compareCodePoints(mapping.member, current) < 0) claimant.set(p, mapping.member);
    }
  }
  const holdings = new Map<string, number[]>(members.map((m) => [m, []]));
  for (const p of free) {
    const owner = claimant.get(p);
    if (owner !== undefined) holdings.get(owner)?.push(p);
  }
  return holdings;
}

/**
 * The mappings for members that share, with as few moves as possible, every partition
 * the fixed (manual) mappings do not hold.
 *
 * - Balance: with k sharing members, each gets ⌊free/k⌋ or one more, where k is the
 *   number of members, capped by the free partitions and by Go's limit of at most
 *   `partitionCount` mappings in all (fixed ones included). Only fixed mappings with
 *   an empty partition list can make that last cap bite.
 * - Stickiness: each member keeps its current partitions up to its share; the one more
 *   goes to the members holding the most; partitions released by members over their
 *   share, held by departed members or held by nobody go to members under their share.
 *   The number of partitions that change owner is then exactly {@link minimumMoves}.
 * - Robustness: `previous` may be a whole hand-edited config. Mappings of departed or
 *   fixed members, partitions out of range, not integers or held by a fixed mapping are
 *   ignored; a partition listed twice stays with the first member in code-point order;
 *   a member listed twice keeps the union. The result never lists a partition twice.
 * - Members with no partition (more members than free partitions) are left out: an
 *   empty mapping is valid for Go only while there are no more mappings than
 *   partitions, which such a config would exceed. Find them with
 *   {@link membersWithoutPartitions}; Go treats a member outside the membership as idle.
 * - Members also named in `fixed` stay manual and are not given free partitions.
 *
 * Deterministic: the same inputs in any order give the same result, sorted by member
 * (code-point order) with partitions ascending. When `fixed` is valid on its own (unique
 * members, partitions in range and listed once), `[...fixed, ...result]` passes config
 * validation as soon as the result is not empty or no partition is free.
 *
 * @param partitionCount - the group's partition count (`max_members`)
 * @param previous - the current mappings (may include departed, fixed and duplicate entries)
 * @param members - the members that share the free partitions
 * @param fixed - manual mappings, left exactly as they are; their partitions are never handed out
 * @returns the mappings for `members` that own at least one partition
 * @throws ConsumerGroupError `INVALID_MAX_MEMBERS` when `partitionCount` is not an integer in 1..4096
 *
 * @example
 * ```ts
 * const before = [{ member: "a", partitions: [0, 1, 2, 3] }, { member: "c", partitions: [4, 5, 6, 7] }];
 * stickyMappings(8, before, ["a", "b", "c"]);
 * // [{ member: "a", partitions: [0, 1, 2] }, { member: "b", partitions: [3, 7] }, { member: "c", partitions: [4, 5, 6] }]
 * // two partitions moved; Go's balanced mode would move four (b sorts into the middle)
 * ```
 */
export function stickyMappings(
  partitionCount: number,
  previous: readonly MemberMapping[],
  members: readonly string[],
  fixed: readonly MemberMapping[] = [],
): MemberMapping[] {
  assertPartitionCount(partitionCount);
  const free = freePartitions(partitionCount, fixedHolders(partitionCount, fixed));
  const sharing = autoMembers(members, fixed);
  const holdings = currentHoldings(previous, sharing, free);
  const share = targets(sharing, (m) => holdings.get(m)?.length ?? 0, free.length, mappingRoom(partitionCount, fixed));
  const claimed = new Set<number>();
  const kept = new Map<string, number[]>();
  for (const m of sharing) {
    const mine = (holdings.get(m) ?? []).slice(0, share.get(m) ?? 0);
    mine.forEach((p) => claimed.add(p));
    kept.set(m, mine);
  }
  const pool = free.filter((p) => !claimed.has(p));
  let next = 0;
  const result: MemberMapping[] = [];
  for (const m of sharing) {
    const mine = kept.get(m) ?? [];
    const want = share.get(m) ?? 0;
    while (mine.length < want && next < pool.length) mine.push(pool[next++] as number);
    if (mine.length > 0) result.push({ member: m, partitions: mine.sort((a, b) => a - b) });
  }
  return result;
}

/**
 * The members that own no partition in `mappings`: deduplicated, in code-point order.
 * Pass the result of {@link stickyMappings} (with the fixed mappings, if manual
 * members are in `members` too) to learn which members it left idle.
 *
 * @param members - the members asked about
 * @param mappings - the mappings to look in
 *
 * @example
 * ```ts
 * const mappings = stickyMappings(2, [], ["a", "b", "c"]); // a: [0], b: [1]
 * membersWithoutPartitions(["a", "b", "c"], mappings); // ["c"]
 * ```
 */
export function membersWithoutPartitions(members: readonly string[], mappings: readonly MemberMapping[]): string[] {
  const owning = new Set(mappings.filter((m) => (m.partitions ?? []).length > 0).map((m) => m.member));
  return [...new Set(members)].filter((m) => !owning.has(m)).sort(compareCodePoints);
}

/**
 * How many partitions changed owner: the partitions p with an owner before
 * (`before[p] !== undefined`) and not that same owner after (`after[p] !== before[p]`,
 * including a partition left with no owner, or beyond the end of `after`). A partition
 * that had no owner before and gets one is not counted: no member loses it, so
 * nothing is interrupted.
 *
 * @param before - the owner of each partition before, index = partition (as `partitionOwners` returns)
 * @param after - the owner of each partition after
 */
export function movedPartitions(before: readonly (string | undefined)[], after: readonly (string | undefined)[]): number {
  let moved = 0;
  for (let p = 0; p < before.length; p++) {
    const owner = before[p];
    if (owner !== undefined && after[p] !== owner) moved++;
  }
  return moved;
}

/**
 * The fewest partitions that must change owner (counted as {@link movedPartitions}
 * does) to go from `before` to an assignment balanced to ±1 over `members`, with the
 * fixed mappings' partitions given to the fixed members. P = `before.length`.
 *
 * With F the partitions no fixed mapping holds, k the members that share them (as in
 * {@link stickyMappings}: the members not named in `fixed`, capped by |F| and by the
 * room for mappings), q = ⌊|F|/k⌋, r = |F| mod k, and c_m the partitions of F that
 * `before` gives to member m, sorted so that c_(1) ≥ c_(2) ≥ …:
 *
 * minimumMoves = fixedMoves + owned(F) − Σ_(i ≤ k) min(c_(i), t_i), with t_i = q + 1 for i ≤ r, else q
 *
 * where fixedMoves counts the fixed partitions whose owner before is defined and not a
 * fixed member listing them, and owned(F) the partitions of F with an owner before.
 * When every member shares (k = number of members) this reads: the partitions of
 * departed members + Σ_m max(0, c_m − q) − min(r, number of members with c_m > q);
 * that is, departed members' partitions must move, every member above q gives up
 * the surplus, and up to r of those members may keep one more. It is a lower bound
 * because member m keeps at most min(c_m, its target) of its partitions, and giving
 * the larger targets to the larger c_m maximizes that sum. With k = 0 every owned
 * partition of F loses its owner.
 *
 * @param before - the owner of each partition before, index = partition
 * @param members - the members that share the free partitions
 * @param fixed - manual mappings, as given to {@link stickyMappings}
 * @throws ConsumerGroupError `INVALID_MAX_MEMBERS` when `before.length` is not an integer in 1..4096
 */
export function minimumMoves(before: readonly (string | undefined)[], members: readonly string[], fixed: readonly MemberMapping[] = []): number {
  const partitionCount = before.length;
  assertPartitionCount(partitionCount, "the partition count (before.length)");
  const holders = fixedHolders(partitionCount, fixed);
  const free = freePartitions(partitionCount, holders);
  const sharing = autoMembers(members, fixed);
  let fixedMoves = 0;
  for (const [p, names] of holders) {
    const owner = before[p];
    if (owner !== undefined && !names.has(owner)) fixedMoves++;
  }
  const held = new Map<string, number>(sharing.map((m) => [m, 0]));
  let owned = 0;
  for (const p of free) {
    const owner = before[p];
    if (owner === undefined) continue;
    owned++;
    const count = held.get(owner);
    if (count !== undefined) held.set(owner, count + 1);
  }
  const share = targets(sharing, (m) => held.get(m) ?? 0, free.length, mappingRoom(partitionCount, fixed));
  let kept = 0;
  for (const m of sharing) kept += Math.min(held.get(m) ?? 0, share.get(m) ?? 0);
  return fixedMoves + owned - kept;
}
