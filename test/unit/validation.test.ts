/**
 * Config validation: Go's rules, Go's order and Go's messages (spec §6, §8, §10
 * TestBaseFunctions), plus the checks this port adds (filter syntax, overlap).
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  ConsumerGroupError,
  MAX_PARTITIONS,
  memberPartitions,
  validateElasticConfig,
  validatePartitioningFilter,
  validateStaticConfig,
  type ElasticConsumerGroupConfig,
  type ErrorCode,
  type MemberMapping,
  type PartitioningFilter,
  type StaticConsumerGroupConfig,
} from "../../src/index.js";

function assertThrowsCode(fn: () => unknown, code: ErrorCode, text?: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ConsumerGroupError, `expected a ConsumerGroupError, got ${String(err)}`);
    assert.equal(err.code, code, `wrong code; message: ${err.message}`);
    if (text !== undefined) assert.ok(err.message.includes(text), `message ${JSON.stringify(err.message)} lacks ${JSON.stringify(text)}`);
    return true;
  });
}

/** Go's messages (spec §8). */
const GO = {
  max: "the max number of members must be >= 1",
  both: "either members or member mappings must be provided, not both",
  mappingCount: "the number of member mappings must be between 1 and the max number of members",
  uniqueMember: "member names must be unique",
  uniquePartition: "partition numbers must be used only once",
  range: "partition numbers must be between 0 and one less than the max number of members",
  staticCoverage: "the number of unique partition numbers specified in the mappings must be equal to the max number of members",
  elasticCoverage: "the number of unique partition numbers must be equal to the max number of members",
  emptyFilter: "partitioning filters must have a non-empty filter",
  noWildcard: "partitioning filters must have at least one * wildcard or end with > wildcard",
  tooManyWildcards: "the number of partitioning wildcards must not be larger than the total number of * wildcards in the filter",
  uniqueWildcard: "partitioning wildcard indexes must be unique",
  wildcardRange: "partitioning wildcard indexes must be between 1 and the number of * wildcards in the filter",
} as const;

const FOO_STAR: PartitioningFilter[] = [{ filter: "foo.*", partitioning_wildcards: [1] }];

interface Membership {
  max: number;
  members?: string[];
  mappings?: MemberMapping[];
}

const staticOf = (m: Membership): StaticConsumerGroupConfig => ({
  max_members: m.max,
  ...(m.members ? { members: m.members } : {}),
  ...(m.mappings ? { member_mappings: m.mappings } : {}),
});
const elasticOf = (m: Membership, pfs: PartitioningFilter[] | null = FOO_STAR): ElasticConsumerGroupConfig => ({
  max_members: m.max,
  partitioning_filters: pfs,
  ...(m.members ? { members: m.members } : {}),
  ...(m.mappings ? { member_mappings: m.mappings } : {}),
});

const mm = (member: string, ...partitions: number[]): MemberMapping => ({ member, partitions });

describe("validation - TestBaseFunctions (max 2, filter foo.* [1])", () => {
  const valid: { name: string; m: Membership }[] = [
    { name: "members m1,m2", m: { max: 2, members: ["m1", "m2"] } },
    { name: "m1:[0,1] alone", m: { max: 2, mappings: [mm("m1", 0, 1)] } },
    { name: "m1:[0] + m2:[1]", m: { max: 2, mappings: [mm("m1", 0), mm("m2", 1)] } },
    { name: "max 3, m1:[0,2] + m2:[1]", m: { max: 3, mappings: [mm("m1", 0, 2), mm("m2", 1)] } },
  ];
  for (const c of valid) {
    test(`validation - ${c.name} is valid (static and elastic)`, () => {
      validateStaticConfig(staticOf(c.m));
      validateElasticConfig(elasticOf(c.m));
    });
  }

  const invalid: { name: string; m: Membership; code: ErrorCode; text: string; elasticText?: string }[] = [
    { name: "members and mappings together", m: { max: 2, members: ["m1", "m2"], mappings: [mm("m1", 0, 1)] }, code: "MEMBERS_AND_MAPPINGS", text: GO.both },
    { name: "m1:[1,1] (duplicate partition)", m: { max: 2, mappings: [mm("m1", 1, 1)] }, code: "DUPLICATE_PARTITION", text: GO.uniquePartition },
    { name: "m1:[1] (not enough partitions)", m: { max: 2, mappings: [mm("m1", 1)] }, code: "PARTITION_COVERAGE", text: GO.staticCoverage, elasticText: GO.elasticCoverage },
    { name: "m1:[0,1,2] (too many partitions)", m: { max: 2, mappings: [mm("m1", 0, 1, 2)] }, code: "PARTITION_OUT_OF_RANGE", text: GO.range },
    { name: "m1:[0,2] (partition out of range)", m: { max: 2, mappings: [mm("m1", 0, 2)] }, code: "PARTITION_OUT_OF_RANGE", text: GO.range },
    { name: "m1:[0,1] twice (duplicate member)", m: { max: 2, mappings: [mm("m1", 0, 1), mm("m1", 0, 1)] }, code: "DUPLICATE_MEMBER", text: GO.uniqueMember },
    { name: "m1:[0,1] + m2:[0,1] (partition overlap)", m: { max: 2, mappings: [mm("m1", 0, 1), mm("m2", 0, 1)] }, code: "DUPLICATE_PARTITION", text: GO.uniquePartition },
    { name: "m1:[0,1] + m2:[2,3] (out of range)", m: { max: 2, mappings: [mm("m1", 0, 1), mm("m2", 2, 3)] }, code: "PARTITION_OUT_OF_RANGE", text: GO.range },
    { name: "max 3, m1:[0] + m2:[1] (partition 2 unmapped)", m: { max: 3, mappings: [mm("m1", 0), mm("m2", 1)] }, code: "PARTITION_COVERAGE", text: GO.staticCoverage, elasticText: GO.elasticCoverage },
    { name: "max 3, m1:[0,2] + m2:[1,2] (partial overlap)", m: { max: 3, mappings: [mm("m1", 0, 2), mm("m2", 1, 2)] }, code: "DUPLICATE_PARTITION", text: GO.uniquePartition },
  ];
  for (const c of invalid) {
    test(`validation - ${c.name} is rejected with ${c.code} (static)`, () => {
      assertThrowsCode(() => validateStaticConfig(staticOf(c.m)), c.code, c.text);
    });
    test(`validation - ${c.name} is rejected with ${c.code} (elastic)`, () => {
      assertThrowsCode(() => validateElasticConfig(elasticOf(c.m)), c.code, c.elasticText ?? c.text);
    });
  }

  test("validation - the static coverage message is not the elastic one and vice versa", () => {
    const m: Membership = { max: 3, mappings: [mm("m1", 0)] };
    assert.throws(
      () => validateElasticConfig(elasticOf(m)),
      (err: unknown) => err instanceof ConsumerGroupError && !err.message.includes("specified in the mappings"),
    );
    assert.throws(
      () => validateStaticConfig(staticOf(m)),
      (err: unknown) => err instanceof ConsumerGroupError && err.message.includes(GO.staticCoverage),
    );
  });
});

describe("validation - membership rules beyond TestBaseFunctions", () => {
  for (const max of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY]) {
    test(`validation - max_members ${String(max)} is rejected with INVALID_MAX_MEMBERS`, () => {
      assertThrowsCode(() => validateStaticConfig({ max_members: max }), "INVALID_MAX_MEMBERS", GO.max);
      assertThrowsCode(() => validateElasticConfig({ max_members: max, partitioning_filters: null }), "INVALID_MAX_MEMBERS", GO.max);
    });
  }

  test("validation - the partition count is capped at MAX_PARTITIONS (4096): 4096 is valid, 4097 and 1e9 are INVALID_MAX_MEMBERS saying why", () => {
    assert.equal(MAX_PARTITIONS, 4096);
    validateStaticConfig({ max_members: 4096 });
    validateElasticConfig({ max_members: 4096, partitioning_filters: null, members: ["m1"] });
    for (const max of [4097, 1e9]) {
      assertThrowsCode(() => validateStaticConfig({ max_members: max }), "INVALID_MAX_MEMBERS", "must be at most 4096");
      assertThrowsCode(() => validateElasticConfig({ max_members: max, partitioning_filters: null }), "INVALID_MAX_MEMBERS", "one filter per partition");
      // The pure assignment refuses too, instead of building a list of a billion partitions.
      assertThrowsCode(() => memberPartitions(["m1"], max, null, "m1"), "INVALID_MAX_MEMBERS", "must be at most 4096");
    }
  });

  test("validation - max_members 0 is reported before any other problem", () => {
    const m: Membership = { max: 0, members: ["a"], mappings: [mm("a", 5, 5)] };
    assertThrowsCode(() => validateStaticConfig(staticOf(m)), "INVALID_MAX_MEMBERS");
    assertThrowsCode(() => validateElasticConfig(elasticOf(m, [{ filter: "", partitioning_wildcards: null }])), "INVALID_MAX_MEMBERS");
  });

  const valid: { name: string; m: Membership }[] = [
    { name: "an empty membership", m: { max: 4 } },
    { name: "empty members and mappings lists", m: { max: 4, members: [], mappings: [] } },
    { name: "empty members with mappings", m: { max: 2, members: [], mappings: [mm("a", 0, 1)] } },
    { name: "duplicate balanced members (tolerated)", m: { max: 2, members: ["a", "a", "b"] } },
    { name: "more members than partitions (tolerated)", m: { max: 2, members: ["a", "b", "c", "d"] } },
    { name: "a mapping with an empty partition list", m: { max: 2, mappings: [mm("a", 0, 1), mm("b")] } },
    { name: "a mapping with null partitions", m: { max: 2, mappings: [mm("a", 1, 0), { member: "b", partitions: null }] } },
    { name: "as many mappings as partitions", m: { max: 3, mappings: [mm("a", 2), mm("b", 0), mm("c", 1)] } },
    { name: "max 1 with one member", m: { max: 1, members: ["a"] } },
  ];
  for (const c of valid) {
    test(`validation - ${c.name} is valid`, () => {
      validateStaticConfig(staticOf(c.m));
      validateElasticConfig(elasticOf(c.m));
    });
  }

  const invalid: { name: string; m: Membership; code: ErrorCode; text: string }[] = [
    { name: "more mappings than partitions", m: { max: 2, mappings: [mm("a", 0), mm("b", 1), mm("c")] }, code: "MAPPING_COUNT", text: GO.mappingCount },
    { name: "a negative partition", m: { max: 2, mappings: [mm("a", -1, 0, 1)] }, code: "PARTITION_OUT_OF_RANGE", text: GO.range },
    { name: "a fractional partition", m: { max: 2, mappings: [mm("a", 0.5, 0, 1)] }, code: "PARTITION_OUT_OF_RANGE", text: GO.range },
    // Go checks the repeat before the range, so a repeated out-of-range partition is "out of range" on first sight
    { name: "an out-of-range partition repeated", m: { max: 2, mappings: [mm("a", 0, 1), mm("b", 7, 7)] }, code: "PARTITION_OUT_OF_RANGE", text: GO.range },
    // a duplicate member is reported before that member's partitions are looked at
    { name: "a duplicate member whose partitions are also bad", m: { max: 2, mappings: [mm("a", 0, 1), mm("a", 9)] }, code: "DUPLICATE_MEMBER", text: GO.uniqueMember },
    { name: "a duplicate empty member name", m: { max: 2, mappings: [mm("", 0), mm("", 1)] }, code: "DUPLICATE_MEMBER", text: GO.uniqueMember },
    { name: "mappings that all have no partitions", m: { max: 2, mappings: [mm("a"), mm("b")] }, code: "PARTITION_COVERAGE", text: GO.staticCoverage },
  ];
  for (const c of invalid) {
    test(`validation - ${c.name} is rejected with ${c.code}`, () => {
      assertThrowsCode(() => validateStaticConfig(staticOf(c.m)), c.code, c.text);
      const elasticText = c.text === GO.staticCoverage ? GO.elasticCoverage : c.text;
      assertThrowsCode(() => validateElasticConfig(elasticOf(c.m)), c.code, elasticText);
    });
  }

  test("validation - static filters are not validated (Go does not)", () => {
    validateStaticConfig({ max_members: 2, filters: ["", "foo..bar", "*.>.*"], members: ["a"] });
  });

  test("validation - the coverage error lists the unmapped partitions", () => {
    assertThrowsCode(() => validateStaticConfig(staticOf({ max: 4, mappings: [mm("a", 0, 2)] })), "PARTITION_COVERAGE", "1, 3");
  });
});

describe("validation - elastic partitioning filters", () => {
  const valid: PartitioningFilter[] = [
    { filter: ">", partitioning_wildcards: [] },
    { filter: ">", partitioning_wildcards: null },
    { filter: "foo.>", partitioning_wildcards: [] },
    { filter: "foo.*", partitioning_wildcards: [1] },
    { filter: "foo.*", partitioning_wildcards: [] },
    { filter: "foo.*", partitioning_wildcards: null },
    { filter: "*", partitioning_wildcards: [1] },
    { filter: "foo.*.*.>", partitioning_wildcards: [1, 2] },
    { filter: "foo.*.*.>", partitioning_wildcards: [2, 1] },
    { filter: "foo.*.*.>", partitioning_wildcards: [2] },
    { filter: "a.*.b.*.c", partitioning_wildcards: [2] },
    { filter: "*.*.*", partitioning_wildcards: [3, 1, 2] },
  ];
  for (const pf of valid) {
    test(`validation - partitioning filter ${pf.filter} ${JSON.stringify(pf.partitioning_wildcards)} is valid`, () => {
      validatePartitioningFilter(pf);
      validateElasticConfig({ max_members: 2, partitioning_filters: [pf] });
    });
  }

  const invalid: { name: string; pf: PartitioningFilter; text: string }[] = [
    { name: "an empty filter", pf: { filter: "", partitioning_wildcards: [] }, text: GO.emptyFilter },
    { name: "an empty filter with null wildcards", pf: { filter: "", partitioning_wildcards: null }, text: GO.emptyFilter },
    { name: "foo (no wildcard)", pf: { filter: "foo", partitioning_wildcards: [] }, text: GO.noWildcard },
    { name: "foo.bar (no wildcard)", pf: { filter: "foo.bar", partitioning_wildcards: null }, text: GO.noWildcard },
    { name: "foo.>.bar (> not last, no *)", pf: { filter: "foo.>.bar", partitioning_wildcards: [] }, text: GO.noWildcard },
    { name: "foo.a* (a partial-token * is not a wildcard)", pf: { filter: "foo.a*", partitioning_wildcards: [] }, text: GO.noWildcard },
    { name: "foo.* with wildcards [1,2] (too many)", pf: { filter: "foo.*", partitioning_wildcards: [1, 2] }, text: GO.tooManyWildcards },
    { name: "foo.> with wildcards [1] (no * at all)", pf: { filter: "foo.>", partitioning_wildcards: [1] }, text: GO.tooManyWildcards },
    { name: "foo.*.* with wildcards [1,1] (duplicate index)", pf: { filter: "foo.*.*", partitioning_wildcards: [1, 1] }, text: GO.uniqueWildcard },
    { name: "foo.*.* with wildcards [3] (index out of range)", pf: { filter: "foo.*.*", partitioning_wildcards: [3] }, text: GO.wildcardRange },
    { name: "foo.* with wildcards [0]", pf: { filter: "foo.*", partitioning_wildcards: [0] }, text: GO.wildcardRange },
    { name: "foo.* with wildcards [-1]", pf: { filter: "foo.*", partitioning_wildcards: [-1] }, text: GO.wildcardRange },
    { name: "foo.*.* with wildcards [1.5]", pf: { filter: "foo.*.*", partitioning_wildcards: [1.5] }, text: GO.wildcardRange },
    // Go checks "unique" before "range" for each index, in list order
    { name: "foo.*.* with wildcards [5,5] (first bad range)", pf: { filter: "foo.*.*", partitioning_wildcards: [5, 5] }, text: GO.wildcardRange },
    { name: "foo.*.* with wildcards [1,1] before range", pf: { filter: "foo.*.*", partitioning_wildcards: [1, 1] }, text: GO.uniqueWildcard },
    // beyond Go: malformed subjects fail here instead of at stream creation
    { name: "foo..* (empty token)", pf: { filter: "foo..*", partitioning_wildcards: [] }, text: "empty token" },
    { name: "*.>.* (> before the end)", pf: { filter: "*.>.*", partitioning_wildcards: [1] }, text: '">" may only end a filter' },
    { name: "foo.* bar (whitespace)", pf: { filter: "foo.* bar.*", partitioning_wildcards: [] }, text: "whitespace" },
  ];
  for (const c of invalid) {
    test(`validation - partitioning filter ${c.name} is rejected with INVALID_PARTITIONING_FILTER`, () => {
      assertThrowsCode(() => validatePartitioningFilter(c.pf), "INVALID_PARTITIONING_FILTER", c.text);
      assertThrowsCode(() => validateElasticConfig({ max_members: 2, partitioning_filters: [c.pf] }), "INVALID_PARTITIONING_FILTER", c.text);
    });
  }

  test("validation - a bad filter after a good one is found", () => {
    assertThrowsCode(
      () =>
        validateElasticConfig({
          max_members: 2,
          partitioning_filters: [
            { filter: "foo.*", partitioning_wildcards: [1] },
            { filter: "bar", partitioning_wildcards: [] },
          ],
        }),
      "INVALID_PARTITIONING_FILTER",
      GO.noWildcard,
    );
  });

  test("validation - null and [] partitioning filters are valid", () => {
    validateElasticConfig({ max_members: 2, partitioning_filters: null });
    validateElasticConfig({ max_members: 2, partitioning_filters: [] });
  });

  test("validation - Go checks the filters before the membership (elastic)", () => {
    const bad: ElasticConsumerGroupConfig = {
      max_members: 2,
      partitioning_filters: [{ filter: "foo", partitioning_wildcards: [] }],
      members: ["m1"],
      member_mappings: [mm("m1", 0, 1)],
    };
    assertThrowsCode(() => validateElasticConfig(bad), "INVALID_PARTITIONING_FILTER", GO.noWildcard);
    const badCoverage: ElasticConsumerGroupConfig = {
      max_members: 3,
      partitioning_filters: [{ filter: "foo.*", partitioning_wildcards: [1, 1] }],
      member_mappings: [mm("m1", 0)],
    };
    assertThrowsCode(() => validateElasticConfig(badCoverage), "INVALID_PARTITIONING_FILTER", GO.tooManyWildcards);
  });

  test("validation - Go's membership errors come before this port's own filter checks", () => {
    const config: ElasticConsumerGroupConfig = {
      max_members: 2,
      partitioning_filters: [
        { filter: "foo.*", partitioning_wildcards: [1] },
        { filter: "foo.bar.*", partitioning_wildcards: [1] },
        { filter: "x..*", partitioning_wildcards: [] },
      ],
      members: ["m1"],
      member_mappings: [mm("m1", 0, 1)],
    };
    assertThrowsCode(() => validateElasticConfig(config), "MEMBERS_AND_MAPPINGS", GO.both);
  });
});

describe("validation - overlapping partitioning filters", () => {
  const overlapping: [string, string][] = [
    ["foo.*.>", "foo.bar.>"],
    ["foo.*", "foo.*"],
    ["foo.>", "foo.*.*"],
    ["foo.>", "foo.*"],
    [">", "foo.*"],
    ["*.bar", "foo.*"],
    ["foo.*.x", "foo.y.*"],
    ["*.>", "foo.*.*"],
  ];
  for (const [a, b] of overlapping) {
    test(`validation - ${a} and ${b} overlap (OVERLAPPING_FILTERS)`, () => {
      const pfs: PartitioningFilter[] = [
        { filter: a, partitioning_wildcards: [] },
        { filter: b, partitioning_wildcards: [] },
      ];
      assertThrowsCode(() => validateElasticConfig({ max_members: 2, partitioning_filters: pfs }), "OVERLAPPING_FILTERS", `"${a}" and "${b}" overlap`);
      assertThrowsCode(() => validateElasticConfig({ max_members: 2, partitioning_filters: [...pfs].reverse() }), "OVERLAPPING_FILTERS");
    });
  }

  const disjoint: [string, string][] = [
    ["foo.*", "bar.*"],
    ["foo.*", "foo.*.*"],
    ["foo.>", "bar.>"],
    ["foo.a.*", "foo.b.*"],
    ["foo.*.x", "foo.*.y"],
    ["foo.*", "foo.*.>"],
  ];
  for (const [a, b] of disjoint) {
    test(`validation - ${a} and ${b} do not overlap`, () => {
      validateElasticConfig({
        max_members: 2,
        partitioning_filters: [
          { filter: a, partitioning_wildcards: [] },
          { filter: b, partitioning_wildcards: [] },
        ],
      });
    });
  }

  test("validation - an overlap between the first and the third filter is found", () => {
    const pfs: PartitioningFilter[] = [
      { filter: "a.*", partitioning_wildcards: [1] },
      { filter: "b.*", partitioning_wildcards: [1] },
      { filter: "*.x", partitioning_wildcards: [1] },
    ];
    assertThrowsCode(() => validateElasticConfig({ max_members: 2, partitioning_filters: pfs }), "OVERLAPPING_FILTERS", '"a.*" and "*.x"');
  });
});
