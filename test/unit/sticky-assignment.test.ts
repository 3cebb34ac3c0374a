/**
 * Sticky partition assignment: balance, stickiness against a brute-forced minimum,
 * long random join/leave sequences, determinism, hand-edited input, and Go's config
 * validation of the result.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { partitionOwners } from "../../src/core/assignment.js";
import { membersWithoutPartitions, minimumMoves, movedPartitions, stickyMappings } from "../../src/core/sticky-assignment.js";
import type { MemberMapping } from "../../src/core/types.js";
import { validateElasticConfig } from "../../src/core/validation.js";
import { seededRandom } from "../../bench/lib/stats.js";

type Owners = (string | undefined)[];

function pick<T>(random: () => number, items: readonly T[]): T {
  return items[Math.floor(random() * items.length)] as T;
}

function shuffled<T>(random: () => number, items: readonly T[]): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

/** The owner array of some mappings (the mappings mode of `partitionOwners`). */
function ownersOf(partitionCount: number, mappings: readonly MemberMapping[]): Owners {
  return partitionOwners({ max_members: partitionCount, member_mappings: [...mappings] });
}

/** Mappings from an owner array, one per owner, in first-seen order. */
function mappingsOf(owners: Owners): MemberMapping[] {
  const byOwner = new Map<string, number[]>();
  owners.forEach((o, p) => {
    if (o !== undefined) byOwner.set(o, [...(byOwner.get(o) ?? []), p]);
  });
  return [...byOwner].map(([member, partitions]) => ({ member, partitions }));
}

/** Every partition count per member of `members` (0 for members that got none). */
function counts(members: readonly string[], mappings: readonly MemberMapping[]): number[] {
  return [...new Set(members)].map((m) => mappings.filter((x) => x.member === m).reduce((n, x) => n + (x.partitions ?? []).length, 0));
}

function validate(partitionCount: number, mappings: readonly MemberMapping[]): void {
  validateElasticConfig({ max_members: partitionCount, partitioning_filters: null, ...(mappings.length > 0 ? { member_mappings: [...mappings] } : {}) });
}

/** The invariants every result must hold; `label` locates a failure. */
function assertSound(partitionCount: number, members: readonly string[], fixed: readonly MemberMapping[], result: readonly MemberMapping[], label: string): void {
  const manual = new Set(fixed.map((m) => m.member));
  const sharing = [...new Set(members)].filter((m) => !manual.has(m));
  const fixedPartitions = new Set(fixed.flatMap((m) => m.partitions ?? []));
  const free = [...Array(partitionCount).keys()].filter((p) => !fixedPartitions.has(p));
  const handedOut = result.flatMap((m) => m.partitions ?? []);
  assert.equal(new Set(handedOut).size, handedOut.length, `${label}: a partition is listed twice`);
  for (const p of handedOut) assert.ok(Number.isSafeInteger(p) && p >= 0 && p < partitionCount && !fixedPartitions.has(p), `${label}: partition ${p} is out of range or fixed`);
  for (const m of result) {
    assert.ok(sharing.includes(m.member), `${label}: ${m.member} is not a sharing member`);
    assert.ok((m.partitions ?? []).length > 0, `${label}: ${m.member} has an empty mapping`);
    assert.deepEqual(m.partitions, [...(m.partitions ?? [])].sort((a, b) => a - b), `${label}: partitions not ascending`);
  }
  assert.deepEqual(
    result.map((m) => m.member),
    result.map((m) => m.member).sort(compareByCodePoint),
    `${label}: not sorted by member`,
  );
  if (sharing.length > 0) assert.equal(handedOut.length, free.length, `${label}: a free partition has no owner`);
  const c = counts(sharing, result);
  if (c.length > 0) assert.ok(Math.max(...c) - Math.min(...c) <= 1, `${label}: unbalanced ${JSON.stringify(c)}`);
  assert.deepEqual(membersWithoutPartitions(sharing, result).length, c.filter((n) => n === 0).length, `${label}: idle members miscounted`);
  if (sharing.length > 0 || free.length === 0) validate(partitionCount, [...fixed, ...result]);
}

/** Code-point order, written independently of `compareCodePoints`. */
function compareByCodePoint(a: string, b: string): number {
  const x = Array.from(a, (ch) => ch.codePointAt(0) ?? 0);
  const y = Array.from(b, (ch) => ch.codePointAt(0) ?? 0);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return (x[i] ?? 0) - (y[i] ?? 0);
  return x.length - y.length;
}

/** Names whose code-point order differs from JavaScript's UTF-16 order, among plain ones. */
const NAMES = [...Array.from({ length: 60 }, (_, i) => `m${i}`), "m-😀", "m-\uFF01", "m-\u{1F600}x", "Z", "a b"];

interface Step {
  members: string[];
  moved: number;
  minimum: number;
  goMoved: number;
  goMinimum: number;
}

/**
 * A seeded random sequence of joins and leaves (one or several at a time, 1..maxMembers
 * members), each step checked with {@link assertSound}. Returns the moves per step for
 * sticky and, on the same sequence, for Go's balanced mode.
 */
function simulate(partitionCount: number, steps: number, seed: number, fixed: readonly MemberMapping[], maxMembers = 40): Step[] {
  const random = seededRandom(seed);
  const frozen = structuredClone(fixed);
  const pool = NAMES.filter((n) => !fixed.some((f) => f.member === n));
  let members: string[] = [];
  let auto: MemberMapping[] = [];
  let goBefore: Owners = new Array<string | undefined>(partitionCount).fill(undefined);
  const out: Step[] = [];
  for (let step = 0; step < steps; step++) {
    const changes = random() < 0.2 ? 1 + Math.floor(random() * 4) : 1;
    for (let i = 0; i < changes; i++) {
      const join = members.length <= 1 || (members.length < maxMembers && random() < 0.5);
      if (join) {
        const outside = pool.filter((n) => !members.includes(n));
        if (outside.length > 0) members.push(pick(random, outside));
      } else {
        members.splice(Math.floor(random() * members.length), 1);
      }
    }
    members = shuffled(random, members);
    const previous = shuffled(random, [...fixed, ...auto]);
    const before = ownersOf(partitionCount, [...fixed, ...auto]);
    const result = stickyMappings(partitionCount, previous, members, fixed);
    const label = `P=${partitionCount} seed=${seed} step ${step} (${members.length} members)`;
    assertSound(partitionCount, members, fixed, result, label);
    assert.deepEqual(fixed, frozen, `${label}: the fixed mappings were changed`);
    const moved = movedPartitions(before, ownersOf(partitionCount, [...fixed, ...result]));
    const minimum = minimumMoves(before, members, fixed);
    const goAfter = partitionOwners({ max_members: partitionCount, members });
    out.push({ members: [...members], moved, minimum, goMoved: movedPartitions(goBefore, goAfter), goMinimum: minimumMoves(goBefore, members) });
    auto = result;
    goBefore = goAfter;
  }
  return out;
}

/** A fixed mapping set holding about an eighth of the partitions, for two manual members. */
function someFixed(partitionCount: number, seed: number): MemberMapping[] {
  const random = seededRandom(seed);
  const held = shuffled(random, [...Array(partitionCount).keys()]).slice(0, Math.max(1, Math.floor(partitionCount / 8)));
  const half = Math.ceil(held.length / 2);
  const fixed = [{ member: "manual-a", partitions: held.slice(0, half) }];
  if (held.length > half) fixed.push({ member: "manual-b", partitions: held.slice(half) });
  return fixed;
}

const PARTITION_COUNTS = [1, 7, 16, 64, 1024];

describe("stickyMappings - random join/leave sequences", () => {
  for (const partitionCount of PARTITION_COUNTS) {
    for (const withFixed of [false, true]) {
      const seed = 1000 + partitionCount + (withFixed ? 7 : 0);
      const fixed = withFixed ? someFixed(partitionCount, seed) : [];
      test(`stickyMappings - ${partitionCount} partitions${withFixed ? " with fixed mappings" : ""}: balanced, sound, valid, at most one move over the minimum`, () => {
        const steps = simulate(partitionCount, 400, seed, fixed);
        for (const [i, s] of steps.entries()) {
          assert.ok(s.moved <= s.minimum + 1, `step ${i}: moved ${s.moved}, minimum ${s.minimum}`);
        }
      });
      test(`stickyMappings - ${partitionCount} partitions${withFixed ? " with fixed mappings" : ""}: moves exactly the minimum`, () => {
        const steps = simulate(partitionCount, 400, seed, fixed);
        assert.deepEqual(
          steps.map((s) => s.moved),
          steps.map((s) => s.minimum),
        );
      });
    }
  }

  test("stickyMappings - the moves check fails for Go's balanced mode on the same sequences", () => {
    // The check above must be able to fail: Go's contiguous blocks move more than
    // the minimum + 1 whenever a member sorts into the middle.
    for (const partitionCount of [16, 64, 1024]) {
      const steps = simulate(partitionCount, 100, 42 + partitionCount, []);
      const misses = steps.filter((s) => s.goMoved > s.goMinimum + 1).length;
      assert.ok(misses > steps.length / 4, `P=${partitionCount}: Go exceeded the bound on only ${misses} of ${steps.length} steps`);
    }
  });
});

describe("minimumMoves - brute force on tiny cases", () => {
  /** The fewest moves over every assignment balanced to ±1 over the sharing members. */
  function bruteForce(before: Owners, members: readonly string[], fixed: readonly MemberMapping[]): number {
    const fixedOwner = new Map<number, string>();
    for (const m of fixed) for (const p of m.partitions ?? []) fixedOwner.set(p, m.member);
    const sharing = [...new Set(members)].filter((m) => !fixed.some((f) => f.member === m));
    const free = before.map((_, p) => p).filter((p) => !fixedOwner.has(p));
    let best = Infinity;
    const after: Owners = before.map((_, p) => fixedOwner.get(p));
    const assign = (i: number): void => {
      if (i === free.length) {
        const c = counts(sharing, mappingsOf(after));
        if (c.length === 0 || Math.max(...c) - Math.min(...c) <= 1) best = Math.min(best, movedPartitions(before, after));
        return;
      }
      const p = free[i] as number;
      if (sharing.length === 0) {
        after[p] = undefined;
        assign(i + 1);
        return;
      }
      for (const m of sharing) {
        after[p] = m;
        assign(i + 1);
      }
    };
    assign(0);
    return best;
  }

  /** Every owner array of length P over `alphabet`. */
  function* ownerArrays(partitionCount: number, alphabet: readonly (string | undefined)[]): Generator<Owners> {
    if (partitionCount === 0) {
      yield [];
      return;
    }
    for (const rest of ownerArrays(partitionCount - 1, alphabet)) for (const o of alphabet) yield [...rest, o];
  }

  const alphabet = [undefined, "a", "b", "c", "d", "x"];
  const memberSets = [[], ["a"], ["b"], ["a", "b"], ["a", "c"], ["a", "b", "c"], ["c", "b", "a", "x"]];

  test("minimumMoves - equals the brute-forced minimum, and stickyMappings reaches it (P ≤ 4, exhaustive)", () => {
    let cases = 0;
    for (let partitionCount = 1; partitionCount <= 4; partitionCount++) {
      for (const fixed of [[], [{ member: "x", partitions: [0] }]]) {
        for (const before of ownerArrays(partitionCount, alphabet)) {
          for (const members of memberSets) {
            const expected = bruteForce(before, members, fixed);
            const label = `P=${partitionCount} before=${JSON.stringify(before)} members=${JSON.stringify(members)} fixed=${JSON.stringify(fixed)}`;
            assert.equal(minimumMoves(before, members, fixed), expected, label);
            const result = stickyMappings(partitionCount, mappingsOf(before), members, fixed);
            assertSound(partitionCount, members, fixed, result, label);
            assert.equal(movedPartitions(before, ownersOf(partitionCount, [...fixed, ...result])), expected, label);
            cases++;
          }
        }
      }
    }
    assert.ok(cases > 10_000);
  });

  test("minimumMoves - equals the brute-forced minimum on random P = 5..6 cases", () => {
    const random = seededRandom(7);
    for (let i = 0; i < 300; i++) {
      const partitionCount = 5 + Math.floor(random() * 2);
      const before = Array.from({ length: partitionCount }, () => pick(random, alphabet));
      const members = pick(random, memberSets);
      const fixed = random() < 0.5 ? [] : [{ member: "x", partitions: [partitionCount - 1, 1] }];
      assert.equal(minimumMoves(before, members, fixed), bruteForce(before, members, fixed), JSON.stringify({ before, members, fixed }));
    }
  });

  test("minimumMoves - the formula on a worked example", () => {
    // 8 partitions, a holds 5, c holds 2, d (departed) holds 1; members a, b, c:
    // q = 2, r = 2. departed 1 + surplus (5 − 2) + (2 − 2) = 4, minus min(r, members above q = 1) = 3.
    const before = ["a", "a", "a", "a", "a", "c", "c", "d"];
    assert.equal(minimumMoves(before, ["a", "b", "c"]), 3);
  });
});

describe("stickyMappings - behaviour", () => {
  test("stickyMappings - a member that sorts into the middle takes partitions from the others only", () => {
    const before = [
      { member: "a", partitions: [0, 1, 2, 3] },
      { member: "c", partitions: [4, 5, 6, 7] },
    ];
    const after = stickyMappings(8, before, ["a", "b", "c"]);
    assert.deepEqual(after, [
      { member: "a", partitions: [0, 1, 2] },
      { member: "b", partitions: [3, 7] },
      { member: "c", partitions: [4, 5, 6] },
    ]);
    assert.equal(movedPartitions(ownersOf(8, before), ownersOf(8, after)), 2);
    assert.equal(movedPartitions(ownersOf(8, before), partitionOwners({ max_members: 8, members: ["a", "b", "c"] })), 4);
  });

  test("stickyMappings - a departed member's partitions go to the members under their share", () => {
    const before = [
      { member: "a", partitions: [0, 1] },
      { member: "b", partitions: [2, 3] },
      { member: "c", partitions: [4, 5] },
    ];
    assert.deepEqual(stickyMappings(6, before, ["a", "c"]), [
      { member: "a", partitions: [0, 1, 2] },
      { member: "c", partitions: [3, 4, 5] },
    ]);
  });

  test("stickyMappings - the one more goes to the members that hold it already", () => {
    // 7 partitions over 3 members: shares 3, 2, 2; c holds 3, so c keeps its third.
    const before = [
      { member: "a", partitions: [0, 1] },
      { member: "c", partitions: [2, 3, 4] },
      { member: "d", partitions: [5, 6] },
    ];
    const after = stickyMappings(7, before, ["a", "b", "c"]);
    assert.deepEqual(counts(["a", "b", "c"], after), [2, 2, 3]);
    assert.equal(movedPartitions(ownersOf(7, before), ownersOf(7, after)), 2);
  });

  test("stickyMappings - no members gives no mappings", () => {
    assert.deepEqual(stickyMappings(4, [{ member: "a", partitions: [0, 1, 2, 3] }], []), []);
  });

  test("stickyMappings - more members than partitions: the holders stay, the rest are idle and left out", () => {
    const before = [
      { member: "b", partitions: [0] },
      { member: "d", partitions: [1] },
    ];
    const members = ["a", "b", "c", "d", "e"];
    const after = stickyMappings(2, before, members);
    assert.deepEqual(after, before);
    assert.deepEqual(membersWithoutPartitions(members, after), ["a", "c", "e"]);
    validate(2, after);
  });

  test("stickyMappings - a fixed mapping with an empty list caps the sharing members (Go's mapping count)", () => {
    // 3 partitions, 2 fixed mappings: one more mapping fits, so one member takes both free partitions.
    const fixed = [
      { member: "x", partitions: [0] },
      { member: "y", partitions: [] },
    ];
    const after = stickyMappings(3, [{ member: "c", partitions: [2] }], ["b", "c"], fixed);
    assert.deepEqual(after, [{ member: "c", partitions: [1, 2] }]);
    validate(3, [...fixed, ...after]);
    assert.equal(minimumMoves(["x", undefined, "c"], ["b", "c"], fixed), 0);
  });

  test("stickyMappings - throws on an invalid partition count", () => {
    for (const p of [0, -1, 1.5, 4097]) assert.throws(() => stickyMappings(p, [], ["a"]), { code: "INVALID_MAX_MEMBERS" });
    assert.throws(() => minimumMoves([], ["a"]), { code: "INVALID_MAX_MEMBERS" });
  });
});

describe("stickyMappings - determinism and hand-edited input", () => {
  test("stickyMappings - the same inputs in any order give the same result, duplicates included", () => {
    const random = seededRandom(99);
    for (let i = 0; i < 200; i++) {
      const partitionCount = 1 + Math.floor(random() * 40);
      const names = shuffled(random, NAMES).slice(0, 1 + Math.floor(random() * 12));
      const owners = Array.from({ length: partitionCount }, () => (random() < 0.2 ? undefined : pick(random, [...names, "gone"])));
      // Hand-edited extras: partitions listed twice, a member listed twice, out-of-range entries.
      const extras = Array.from({ length: Math.floor(random() * 3) }, () => ({
        member: pick(random, [...names, "gone"]),
        partitions: Array.from({ length: 1 + Math.floor(random() * 3) }, () => Math.floor(random() * (partitionCount + 2)) - 1),
      }));
      const previous = [...mappingsOf(owners), ...extras];
      const fixed = partitionCount > 2 && random() < 0.5 ? [{ member: "manual", partitions: [1] }] : [];
      const members = names.filter(() => random() < 0.7);
      const expected = stickyMappings(partitionCount, previous, members, fixed);
      assertSound(partitionCount, members, fixed, expected, `case ${i}`);
      for (let j = 0; j < 5; j++) {
        const shuffledPrevious = shuffled(random, previous).map((m) => ({ member: m.member, partitions: shuffled(random, m.partitions ?? []) }));
        const again = stickyMappings(partitionCount, shuffledPrevious, shuffled(random, [...members, ...members.slice(0, 2)]), shuffled(random, fixed));
        assert.deepEqual(again, expected);
      }
    }
  });

  test("stickyMappings - garbage in previous: duplicates, out of range, fixed partitions, null lists, departed members", () => {
    const fixed = [{ member: "manual", partitions: [0, 9] }];
    const previous: MemberMapping[] = [
      { member: "a", partitions: [1, 2, 2, 3, -1, 10, 1.5, Number.NaN, 0] },
      { member: "b", partitions: [3, 4, 9, 5] },
      { member: "a", partitions: [6] },
      { member: "gone", partitions: [7, 8] },
      { member: "c", partitions: null },
      { member: "manual", partitions: [4] },
      { member: "b", partitions: ["5" as unknown as number, -0] },
    ];
    const members = ["b", "a", "c"];
    const result = stickyMappings(10, previous, members, fixed);
    assertSound(10, members, fixed, result, "garbage");
    assert.deepEqual(fixed, [{ member: "manual", partitions: [0, 9] }]);
    // a holds 1, 2, 3, 6 (3 is listed by a and b: a sorts first); b holds 4, 5; c nothing.
    // 8 free partitions over 3 members: shares 3, 3, 2. a gives up one, the departed 7, 8 move.
    assert.deepEqual(result, [
      { member: "a", partitions: [1, 2, 3] },
      { member: "b", partitions: [4, 5, 6] },
      { member: "c", partitions: [7, 8] },
    ]);
  });

  test("stickyMappings - a member also named in fixed stays manual", () => {
    const fixed = [{ member: "a", partitions: [0] }];
    const result = stickyMappings(3, [{ member: "a", partitions: [0, 1] }], ["a", "b"], fixed);
    assert.deepEqual(result, [{ member: "b", partitions: [1, 2] }]);
    validate(3, [...fixed, ...result]);
  });

  test("stickyMappings - does not change its inputs", () => {
    const previous = [{ member: "a", partitions: [3, 0, 1, 2] }];
    const members = ["b", "a"];
    const fixed = [{ member: "x", partitions: [4] }];
    const copies = structuredClone({ previous, members, fixed });
    stickyMappings(5, previous, members, fixed);
    assert.deepEqual({ previous, members, fixed }, copies);
  });
});

describe("movedPartitions - what counts", () => {
  test("movedPartitions - counts owned partitions whose owner changed or went away, not newly owned ones", () => {
    assert.equal(movedPartitions(["a", "a", "b", undefined], ["a", "b", "b", "c"]), 1);
    assert.equal(movedPartitions(["a", "b"], ["a", undefined]), 1);
    assert.equal(movedPartitions(["a", "b"], ["a"]), 1);
    assert.equal(movedPartitions([undefined, undefined], ["a", "b"]), 0);
    assert.equal(movedPartitions(["a", "b"], ["b", "a"]), 2);
  });

  test("membersWithoutPartitions - lists members with no or empty mappings, deduplicated, in code-point order", () => {
    const mappings = [
      { member: "b", partitions: [0] },
      { member: "c", partitions: [] },
      { member: "d", partitions: null },
    ];
    assert.deepEqual(membersWithoutPartitions(["d", "c", "b", "\u{1F600}", "\uFF01", "c"], mappings), ["c", "d", "\uFF01", "\u{1F600}"]);
  });
});
