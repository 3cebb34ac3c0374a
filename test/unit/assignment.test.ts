/**
 * Partition → member assignment, against Go's `GeneratePartitionFilters` (spec §6),
 * `ElasticGetPartitionFilters` (TestBaseFunctions) and the static filter order (§4.2).
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  ConsumerGroupError,
  compareCodePoints,
  effectiveMembers,
  elasticGetPartitionFilters,
  generatePartitionFilters,
  isInMembership,
  memberPartitions,
  partitionAssignment,
  partitionOwners,
  staticMemberFilters,
  type ElasticConsumerGroupConfig,
  type ErrorCode,
  type MemberMapping,
  type StaticConsumerGroupConfig,
} from "../../src/index.js";
import { memberRoster } from "../../src/core/assignment.js";

function assertThrowsCode(fn: () => unknown, code: ErrorCode, text?: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ConsumerGroupError, `expected a ConsumerGroupError, got ${String(err)}`);
    assert.equal(err.code, code, `wrong code; message: ${err.message}`);
    if (text !== undefined) assert.ok(err.message.includes(text), `message ${JSON.stringify(err.message)} lacks ${JSON.stringify(text)}`);
    return true;
  });
}

/** A line-by-line port of Go's GeneratePartitionFilters, balanced branch, as an oracle. */
function goBalanced(members: string[], maxMembers: number, memberName: string, filter: string): string[] {
  const utf8 = new TextEncoder();
  const byteCompare = (a: string, b: string): number => {
    const x = utf8.encode(a);
    const y = utf8.encode(b);
    for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return (x[i] ?? 0) - (y[i] ?? 0);
    return x.length - y.length;
  };
  let sorted = [...new Set(members)].sort(byteCompare);
  if (sorted.length > maxMembers) sorted = sorted.slice(0, maxMembers);
  const numMembers = sorted.length;
  if (numMembers === 0) return [];
  const numPer = Math.floor(maxMembers / numMembers);
  const out: string[] = [];
  for (let i = 0; i < maxMembers; i++) {
    const memberIndex = Math.floor(i / numPer);
    if (i < numMembers * numPer) {
      if (sorted[memberIndex % numMembers] === memberName) out.push(`${i}.${filter}`);
    } else if (sorted[(i - numMembers * numPer) % numMembers] === memberName) {
      out.push(`${i}.${filter}`);
    }
  }
  return out;
}

describe("generatePartitionFilters - balanced worked examples (spec §6)", () => {
  const examples: { p: number; members: string[]; expected: Record<string, number[]> }[] = [
    { p: 10, members: ["m1", "m2"], expected: { m1: [0, 1, 2, 3, 4], m2: [5, 6, 7, 8, 9] } },
    { p: 4, members: ["m1", "m2", "m3"], expected: { m1: [0, 3], m2: [1], m3: [2] } },
    { p: 10, members: ["m1", "m2", "m3"], expected: { m1: [0, 1, 2, 9], m2: [3, 4, 5], m3: [6, 7, 8] } },
    { p: 10, members: ["m1", "m2", "m3", "m4"], expected: { m1: [0, 1, 8], m2: [2, 3, 9], m3: [4, 5], m4: [6, 7] } },
    { p: 6, members: ["m1", "m2", "m3"], expected: { m1: [0, 1], m2: [2, 3], m3: [4, 5] } },
    { p: 7, members: ["m1", "m2", "m3"], expected: { m1: [0, 1, 6], m2: [2, 3], m3: [4, 5] } },
    { p: 8, members: ["m1", "m2", "m3"], expected: { m1: [0, 1, 6], m2: [2, 3, 7], m3: [4, 5] } },
    { p: 3, members: ["a", "b", "c", "d", "e"], expected: { a: [0], b: [1], c: [2], d: [], e: [] } },
    { p: 10, members: ["m3", "m1", "m2", "m1"], expected: { m1: [0, 1, 2, 9], m2: [3, 4, 5], m3: [6, 7, 8] } },
    { p: 1, members: ["z", "a"], expected: { a: [0], z: [] } },
    { p: 5, members: ["solo"], expected: { solo: [0, 1, 2, 3, 4] } },
    { p: 2, members: ["m2", "m1"], expected: { m1: [0], m2: [1] } },
  ];
  for (const { p, members, expected } of examples) {
    for (const [member, partitions] of Object.entries(expected)) {
      test(`generatePartitionFilters - P=${p} members [${members.join(",")}] gives ${member} {${partitions.join(",")}}`, () => {
        assert.deepEqual(generatePartitionFilters(members, p, [], member, ">"), partitions.map((i) => `${i}.>`));
        assert.deepEqual(generatePartitionFilters(members, p, null, member, "foo.*"), partitions.map((i) => `${i}.foo.*`));
        assert.deepEqual(memberPartitions(members, p, undefined, member), partitions);
      });
    }
  }

  test("generatePartitionFilters - a member not in the list gets nothing", () => {
    assert.deepEqual(generatePartitionFilters(["m1", "m2"], 10, [], "m3", ">"), []);
  });

  test("generatePartitionFilters - member names compare exactly (case, whitespace)", () => {
    assert.deepEqual(generatePartitionFilters(["m1"], 2, [], "M1", ">"), []);
    assert.deepEqual(generatePartitionFilters(["m1"], 2, [], "m1 ", ">"), []);
  });

  test("generatePartitionFilters - members take precedence over mappings", () => {
    const mappings: MemberMapping[] = [{ member: "m1", partitions: [0, 1, 2, 3] }];
    assert.deepEqual(generatePartitionFilters(["m1", "m2"], 4, mappings, "m1", "foo.*"), ["0.foo.*", "1.foo.*"]);
    assert.deepEqual(generatePartitionFilters(["m1", "m2"], 4, mappings, "m2", "foo.*"), ["2.foo.*", "3.foo.*"]);
  });

  test("generatePartitionFilters - sorts as strings, so m10 comes before m2", () => {
    const members = Array.from({ length: 10 }, (_, i) => `m${i + 1}`);
    // sorted: m1, m10, m2, m3, ..., m9
    assert.deepEqual(generatePartitionFilters(members, 10, [], "m10", ">"), ["1.>"]);
    assert.deepEqual(generatePartitionFilters(members, 10, [], "m2", ">"), ["2.>"]);
    assert.deepEqual(generatePartitionFilters(members, 10, [], "m9", ">"), ["9.>"]);
  });

  test("generatePartitionFilters - upper case sorts before lower case (byte order)", () => {
    assert.deepEqual(generatePartitionFilters(["b", "B", "a"], 3, [], "B", ">"), ["0.>"]);
    assert.deepEqual(generatePartitionFilters(["b", "B", "a"], 3, [], "a", ">"), ["1.>"]);
  });

  test("generatePartitionFilters - both members and mappings empty gives []", () => {
    assert.deepEqual(generatePartitionFilters([], 4, [], "m1", ">"), []);
    assert.deepEqual(generatePartitionFilters(null, 4, null, "m1", ">"), []);
    assert.deepEqual(generatePartitionFilters(undefined, 4, undefined, "m1", "foo.*"), []);
  });

  test("generatePartitionFilters - does not modify its inputs", () => {
    const members = ["m3", "m1", "m2", "m1"];
    const mappings: MemberMapping[] = [{ member: "m1", partitions: [3, 1] }];
    generatePartitionFilters(members, 10, [], "m1", ">");
    generatePartitionFilters([], 4, mappings, "m1", ">");
    assert.deepEqual(members, ["m3", "m1", "m2", "m1"]);
    assert.deepEqual(mappings, [{ member: "m1", partitions: [3, 1] }]);
  });

  test("generatePartitionFilters - rejects a partition count below 1 with INVALID_MAX_MEMBERS", () => {
    for (const p of [0, -1, 1.5, Number.NaN]) {
      assertThrowsCode(() => generatePartitionFilters(["m1"], p, [], "m1", ">"), "INVALID_MAX_MEMBERS");
      assertThrowsCode(() => memberPartitions([], p, [{ member: "m1", partitions: [0] }], "m1"), "INVALID_MAX_MEMBERS");
    }
  });
});

describe("generatePartitionFilters - agrees with a port of Go's loop", () => {
  test("generatePartitionFilters - P 1..24 and 1..30 members, every member", () => {
    for (let p = 1; p <= 24; p++) {
      for (let n = 1; n <= 30; n++) {
        // unsorted and with a duplicate, to exercise dedupe and sort
        const members = Array.from({ length: n }, (_, i) => `w${(i * 7) % n}-${i % 3}`);
        members.push(members[0] ?? "");
        for (const m of new Set(members)) {
          assert.deepEqual(generatePartitionFilters(members, p, [], m, "x.*"), goBalanced(members, p, m, "x.*"), `P=${p} n=${n} member ${m}`);
        }
      }
    }
  });

  test("generatePartitionFilters - every partition has exactly one owner and shares differ by at most one", () => {
    for (let p = 1; p <= 32; p++) {
      for (let n = 1; n <= 40; n++) {
        const members = Array.from({ length: n }, (_, i) => `m${String(i).padStart(2, "0")}`);
        const owned = members.map((m) => memberPartitions(members, p, [], m));
        const all = owned.flat().sort((a, b) => a - b);
        assert.deepEqual(all, Array.from({ length: p }, (_, i) => i), `P=${p} n=${n}`);
        const active = owned.slice(0, Math.min(n, p)).map((o) => o.length);
        assert.ok(Math.max(...active) - Math.min(...active) <= 1, `P=${p} n=${n}: ${active.join(",")}`);
        assert.ok(owned.slice(p).every((o) => o.length === 0), `P=${p} n=${n}: members over the cap own partitions`);
      }
    }
  });
});

describe("generatePartitionFilters - mapping mode", () => {
  const mappings: MemberMapping[] = [
    { member: "m1", partitions: [3, 0] },
    { member: "m2", partitions: [1, 2] },
  ];

  test("generatePartitionFilters - mapping mode emits <p>.> in listed order", () => {
    assert.deepEqual(generatePartitionFilters([], 4, mappings, "m1", ">"), ["3.>", "0.>"]);
    assert.deepEqual(generatePartitionFilters(null, 4, mappings, "m2", ">"), ["1.>", "2.>"]);
  });

  test("generatePartitionFilters - mapping mode ignores the filter (Go quirk)", () => {
    assert.deepEqual(generatePartitionFilters([], 4, mappings, "m1", "foo.*"), ["3.>", "0.>"]);
    assert.deepEqual(generatePartitionFilters([], 4, mappings, "m2", "foo.*.*.>"), ["1.>", "2.>"]);
  });

  test("generatePartitionFilters - mapping mode for an unmapped member gives []", () => {
    assert.deepEqual(generatePartitionFilters([], 4, mappings, "m3", ">"), []);
  });

  test("generatePartitionFilters - mapping with null or empty partitions gives []", () => {
    const m: MemberMapping[] = [
      { member: "a", partitions: null },
      { member: "b", partitions: [] },
      { member: "c", partitions: [0, 1] },
    ];
    assert.deepEqual(generatePartitionFilters([], 2, m, "a", ">"), []);
    assert.deepEqual(generatePartitionFilters([], 2, m, "b", ">"), []);
    assert.deepEqual(generatePartitionFilters([], 2, m, "c", ">"), ["0.>", "1.>"]);
  });

  test("generatePartitionFilters - a member mapped twice gets both lists, in order (as Go's loop)", () => {
    const m: MemberMapping[] = [
      { member: "a", partitions: [2] },
      { member: "b", partitions: [1] },
      { member: "a", partitions: [0] },
    ];
    assert.deepEqual(generatePartitionFilters([], 3, m, "a", ">"), ["2.>", "0.>"]);
  });
});

describe("compareCodePoints - Go (UTF-8 byte) string order", () => {
  const ordered: [string, string][] = [
    ["", "a"],
    ["a", "ab"],
    ["A", "a"],
    ["Z", "a"],
    ["m1", "m10"],
    ["m10", "m2"],
    ["z", "é"],
    ["é", "日"],
    ["\uE000", "\uFFFD"],
    ["\uFFFD", "😀"],
    ["\uE000", "😀"],
    ["\uFFFF", "\u{10000}"],
    ["😀", "😁"],
    ["a😀", "a\u{1F601}"],
  ];
  for (const [lo, hi] of ordered) {
    test(`compareCodePoints - ${JSON.stringify(lo)} sorts before ${JSON.stringify(hi)}`, () => {
      assert.ok(compareCodePoints(lo, hi) < 0);
      assert.ok(compareCodePoints(hi, lo) > 0);
      assert.equal(compareCodePoints(lo, lo), 0);
    });
  }

  test("compareCodePoints - agrees with UTF-8 byte order where UTF-16 order does not", () => {
    const names = ["😀", "\uFFFD", "\uE000", "a", "\u{10FFFF}", "\uD7FF"];
    const byCodePoint = [...names].sort(compareCodePoints);
    assert.deepEqual(byCodePoint, ["a", "\uD7FF", "\uE000", "\uFFFD", "😀", "\u{10FFFF}"]);
    // the JS default sort (UTF-16 code units) puts the astral characters before U+E000
    assert.notDeepEqual([...names].sort(), byCodePoint);
  });
});

describe("effectiveMembers", () => {
  test("effectiveMembers - dedupes, sorts by code point and caps at P", () => {
    assert.deepEqual(effectiveMembers(["m3", "m1", "m2", "m1"], 10), ["m1", "m2", "m3"]);
    assert.deepEqual(effectiveMembers(["e", "d", "c", "b", "a"], 3), ["a", "b", "c"]);
    assert.deepEqual(effectiveMembers(["😀", "\uFFFD", "\uE000"], 2), ["\uE000", "\uFFFD"]);
    assert.deepEqual(effectiveMembers([], 3), []);
  });
});

describe("generatePartitionFilters - sorting by code point, not UTF-16", () => {
  const members = ["😀", "\uFFFD", "\uE000"];
  test("generatePartitionFilters - U+E000 < U+FFFD < U+1F600 as in Go", () => {
    assert.deepEqual(generatePartitionFilters(members, 3, [], "\uE000", ">"), ["0.>"]);
    assert.deepEqual(generatePartitionFilters(members, 3, [], "\uFFFD", ">"), ["1.>"]);
    assert.deepEqual(generatePartitionFilters(members, 3, [], "😀", ">"), ["2.>"]);
  });

  test("generatePartitionFilters - the emoji is the one capped out at P=2", () => {
    assert.deepEqual(generatePartitionFilters(members, 2, [], "😀", ">"), []);
    assert.deepEqual(generatePartitionFilters(members, 2, [], "\uE000", ">"), ["0.>"]);
    assert.deepEqual(generatePartitionFilters(members, 2, [], "\uFFFD", ">"), ["1.>"]);
  });
});

describe("partitionAssignment and partitionOwners", () => {
  test("partitionAssignment - balanced: every deduped member in sorted order, over-cap members with []", () => {
    const a = partitionAssignment({ max_members: 3, members: ["e", "c", "a", "b", "d", "a"] });
    assert.deepEqual([...a.entries()], [
      ["a", [0]],
      ["b", [1]],
      ["c", [2]],
      ["d", []],
      ["e", []],
    ]);
  });

  test("partitionAssignment - balanced P=10 m1..m3", () => {
    const a = partitionAssignment({ max_members: 10, members: ["m3", "m2", "m1"] });
    assert.deepEqual([...a.entries()], [
      ["m1", [0, 1, 2, 9]],
      ["m2", [3, 4, 5]],
      ["m3", [6, 7, 8]],
    ]);
  });

  test("partitionAssignment - mapped: mapping order", () => {
    const a = partitionAssignment({
      max_members: 4,
      member_mappings: [
        { member: "m2", partitions: [2, 3] },
        { member: "m1", partitions: [0, 1] },
      ],
    });
    assert.deepEqual([...a.entries()], [
      ["m2", [2, 3]],
      ["m1", [0, 1]],
    ]);
  });

  test("partitionAssignment - members win over mappings; no membership gives an empty map", () => {
    const a = partitionAssignment({ max_members: 2, members: ["x"], member_mappings: [{ member: "m1", partitions: [0, 1] }] });
    assert.deepEqual([...a.entries()], [["x", [0, 1]]]);
    assert.equal(partitionAssignment({ max_members: 2 }).size, 0);
    assert.equal(partitionAssignment({ max_members: 2, members: [], member_mappings: [] }).size, 0);
  });

  test("partitionOwners - indexes are partitions", () => {
    assert.deepEqual(partitionOwners({ max_members: 4, members: ["m1", "m2", "m3"] }), ["m1", "m2", "m3", "m1"]);
    assert.deepEqual(partitionOwners({ max_members: 10, members: ["m1", "m2", "m3", "m4"] }), ["m1", "m1", "m2", "m2", "m3", "m3", "m4", "m4", "m1", "m2"]);
    assert.deepEqual(
      partitionOwners({
        max_members: 3,
        member_mappings: [
          { member: "b", partitions: [2, 0] },
          { member: "a", partitions: [1] },
        ],
      }),
      ["b", "a", "b"],
    );
  });

  test("partitionOwners - unowned partitions are undefined", () => {
    assert.deepEqual(partitionOwners({ max_members: 3 }), [undefined, undefined, undefined]);
    assert.deepEqual(partitionOwners({ max_members: 3, member_mappings: [{ member: "a", partitions: [1] }] }), [undefined, "a", undefined]);
  });
});

describe("isInMembership", () => {
  const cases: { name: string; config: Pick<StaticConsumerGroupConfig, "members" | "member_mappings">; member: string; expected: boolean }[] = [
    { name: "a listed member", config: { members: ["m1", "m2"] }, member: "m2", expected: true },
    { name: "a member over the cap (it gets no partitions)", config: { members: ["a", "b", "c", "d", "e"] }, member: "e", expected: true },
    { name: "a mapped member", config: { member_mappings: [{ member: "m1", partitions: [0] }] }, member: "m1", expected: true },
    { name: "a mapped member with no partitions", config: { member_mappings: [{ member: "m1", partitions: null }] }, member: "m1", expected: true },
    { name: "an unknown member", config: { members: ["m1"] }, member: "m2", expected: false },
    { name: "a different case", config: { members: ["m1"] }, member: "M1", expected: false },
    { name: "no membership at all", config: {}, member: "m1", expected: false },
    { name: "empty lists", config: { members: [], member_mappings: [] }, member: "m1", expected: false },
    { name: "either list (both set)", config: { members: ["a"], member_mappings: [{ member: "b", partitions: [0] }] }, member: "b", expected: true },
  ];
  for (const c of cases) {
    test(`isInMembership - ${c.name} is ${String(c.expected)}`, () => {
      assert.equal(isInMembership(c.config, c.member), c.expected);
    });
  }
});

describe("staticMemberFilters", () => {
  test("staticMemberFilters - one block per filter, in filter order then partition order", () => {
    const config: StaticConsumerGroupConfig = { max_members: 4, filters: ["foo.*", "bar.*"], members: ["m1", "m2"] };
    assert.deepEqual(staticMemberFilters(config, "m1"), ["0.foo.*", "1.foo.*", "0.bar.*", "1.bar.*"]);
    assert.deepEqual(staticMemberFilters(config, "m2"), ["2.foo.*", "3.foo.*", "2.bar.*", "3.bar.*"]);
  });

  test("staticMemberFilters - no filters (absent or []) gives <p>.>", () => {
    assert.deepEqual(staticMemberFilters({ max_members: 2, members: ["m1", "m2"] }, "m1"), ["0.>"]);
    assert.deepEqual(staticMemberFilters({ max_members: 2, filters: [], members: ["m1", "m2"] }, "m2"), ["1.>"]);
  });

  test("staticMemberFilters - mapping mode repeats <p>.> once per filter (Go quirk)", () => {
    const config: StaticConsumerGroupConfig = { max_members: 2, filters: ["foo.*", "bar.*"], member_mappings: [{ member: "m1", partitions: [1, 0] }] };
    assert.deepEqual(staticMemberFilters(config, "m1"), ["1.>", "0.>", "1.>", "0.>"]);
  });

  test("staticMemberFilters - a non-member or an empty group gets []", () => {
    assert.deepEqual(staticMemberFilters({ max_members: 2, filters: ["foo.*"], members: ["m1"] }, "m9"), []);
    assert.deepEqual(staticMemberFilters({ max_members: 2, filters: ["foo.*"] }, "m1"), []);
  });
});

describe("elasticGetPartitionFilters", () => {
  const base: ElasticConsumerGroupConfig = {
    max_members: 4,
    partitioning_filters: [{ filter: "foo.*.*.>", partitioning_wildcards: [1, 2] }],
    members: ["m1", "m2", "m3"],
  };
  const tbf: { p: number; expected: Record<string, number[]> }[] = [
    { p: 6, expected: { m1: [0, 1], m2: [2, 3], m3: [4, 5] } },
    { p: 7, expected: { m1: [0, 1, 6], m2: [2, 3], m3: [4, 5] } },
    { p: 8, expected: { m1: [0, 1, 6], m2: [2, 3, 7], m3: [4, 5] } },
  ];
  for (const { p, expected } of tbf) {
    for (const [member, partitions] of Object.entries(expected)) {
      test(`elasticGetPartitionFilters - TestBaseFunctions P=${p} ${member} gets ${partitions.join(",")} of foo.*.*.>`, () => {
        assert.deepEqual(elasticGetPartitionFilters({ ...base, max_members: p }, member), partitions.map((i) => `${i}.foo.*.*.>`));
      });
    }
  }

  test("elasticGetPartitionFilters - null or [] partitioning filters give <p>.>", () => {
    assert.deepEqual(elasticGetPartitionFilters({ max_members: 2, partitioning_filters: null, members: ["m1", "m2"] }, "m1"), ["0.>"]);
    assert.deepEqual(elasticGetPartitionFilters({ max_members: 2, partitioning_filters: [], members: ["m1", "m2"] }, "m2"), ["1.>"]);
  });

  test("elasticGetPartitionFilters - several filters, filter order then partition order", () => {
    const config: ElasticConsumerGroupConfig = {
      max_members: 2,
      partitioning_filters: [
        { filter: "foo.*", partitioning_wildcards: [1] },
        { filter: "bar.*", partitioning_wildcards: [1] },
      ],
      members: ["m1"],
    };
    assert.deepEqual(elasticGetPartitionFilters(config, "m1"), ["0.foo.*", "1.foo.*", "0.bar.*", "1.bar.*"]);
  });

  test("elasticGetPartitionFilters - mapping mode ignores the filters", () => {
    const config: ElasticConsumerGroupConfig = {
      max_members: 2,
      partitioning_filters: [{ filter: "foo.*", partitioning_wildcards: [1] }],
      member_mappings: [
        { member: "m1", partitions: [1] },
        { member: "m2", partitions: [0] },
      ],
    };
    assert.deepEqual(elasticGetPartitionFilters(config, "m1"), ["1.>"]);
    assert.deepEqual(elasticGetPartitionFilters(config, "m2"), ["0.>"]);
  });

  test("elasticGetPartitionFilters - no membership gives []", () => {
    assert.deepEqual(elasticGetPartitionFilters({ max_members: 4, partitioning_filters: null }, "m1"), []);
  });
});

describe("memberRoster", () => {
  test("memberRoster - balanced: every listed member sorted by name, with its partitions; those beyond the cap own nothing", () => {
    assert.deepEqual(memberRoster({ max_members: 2, members: ["c", "a", "b", "a"] }), [
      { member: "a", partitions: [0], overCap: false },
      { member: "b", partitions: [1], overCap: false },
      { member: "c", partitions: [], overCap: true },
    ]);
  });

  test("memberRoster - mappings: the mapped members sorted by name, none over the cap; no membership gives []", () => {
    assert.deepEqual(memberRoster({ max_members: 3, member_mappings: [{ member: "z", partitions: [2, 0] }, { member: "y", partitions: [1] }] }), [
      { member: "y", partitions: [1], overCap: false },
      { member: "z", partitions: [2, 0], overCap: false }, // in the mapping's order, as Go gives them
    ]);
    assert.deepEqual(memberRoster({ max_members: 3 }), []);
  });
});

describe("memberPartitions - the arithmetic form equals the partition-by-partition definition", () => {
  /** Go's definition, one partition at a time. */
  function reference(members: string[], maxMembers: number, member: string): number[] {
    const sorted = [...new Set(members)].sort(compareCodePoints).slice(0, maxMembers);
    const n = sorted.length;
    const q = Math.floor(maxMembers / n);
    const owned: number[] = [];
    for (let i = 0; i < maxMembers; i++) {
      const owner = i < n * q ? sorted[Math.floor(i / q)] : sorted[(i - n * q) % n];
      if (owner === member) owned.push(i);
    }
    return owned;
  }
  const alphabet = ["a", "b", "z", "\uE000", "\uFFFD", "😀", "\u{10FFFF}", "0"];
  let state = 12345;
  const random = (below: number): number => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state % below;
  };
  test("memberPartitions - 500 random memberships (with astral names, duplicates, more members than partitions)", () => {
    for (let round = 0; round < 500; round++) {
      const count = 1 + random(12);
      const members = Array.from({ length: count }, () => Array.from({ length: 1 + random(3) }, () => alphabet[random(alphabet.length)]).join(""));
      const maxMembers = 1 + random(40);
      for (const member of [...members, "absent"]) {
        assert.deepEqual(memberPartitions(members, maxMembers, null, member), reference(members, maxMembers, member), `${JSON.stringify(members)} P=${maxMembers} ${member}`);
      }
    }
  });
});

test("partitionAssignment - equals memberPartitions of each member, balanced and mapped, over random memberships", () => {
  let state = 777;
  const random = (below: number): number => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state % below;
  };
  const alphabet = ["a", "b", "\uE000", "😀", "0"];
  for (let round = 0; round < 300; round++) {
    const members = Array.from({ length: 1 + random(10) }, () => Array.from({ length: 1 + random(2) }, () => alphabet[random(alphabet.length)]).join(""));
    const max = 1 + random(30);
    const balanced = partitionAssignment({ max_members: max, members, member_mappings: [] });
    assert.deepEqual([...balanced.keys()], [...new Set(members)].sort(compareCodePoints));
    for (const [m, ps] of balanced) assert.deepEqual(ps, memberPartitions(members, max, null, m));
    const mappings: MemberMapping[] = members.map((member, i) => ({ member, partitions: [i % max] }));
    const mapped = partitionAssignment({ max_members: max, members: [], member_mappings: mappings });
    for (const [m, ps] of mapped) assert.deepEqual(ps, memberPartitions(null, max, mappings, m));
    assert.deepEqual([...mapped.keys()], [...new Set(members)]);
  }
});
