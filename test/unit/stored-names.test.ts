/**
 * Member names of stored configs: the server's consumer-name rule (not our stricter
 * one for new names), checked on static and elastic configs as they are read.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ConsumerGroupError } from "../../src/core/errors.js";
import { assertValidName, consumerNameProblem } from "../../src/core/names.js";
import { checkStoredMemberNames, validateReadElasticConfig, validateStoredStaticConfig } from "../../src/core/validation.js";

describe("stored names - the server's consumer name rule", () => {
  const cases: [string, string | undefined][] = [
    ["m1", undefined],
    ["m@1", undefined],
    ["m:1", undefined],
    ["ünïcode", undefined],
    ["g-m_1=x", undefined],
    ["b.c", 'contains "."'],
    ["*", 'contains "*"'],
    ["m>", 'contains ">"'],
    ["a/b", 'contains "/"'],
    ["a\\b", 'contains "\\"'],
    ["a b", "contains whitespace"],
    ["a\tb", "contains whitespace"],
    ["a\nb", "contains whitespace"],
    ["a\fb", "contains whitespace"],
    ["", "is empty"],
    ["x".repeat(255), undefined],
    ["x".repeat(256), "is 256 bytes long; the server's limit is 255"],
    ["é".repeat(128), "is 256 bytes long; the server's limit is 255"],
  ];
  for (const [name, problem] of cases) {
    test(`stored names - ${JSON.stringify(name.length > 20 ? `${name.slice(0, 8)}…(${name.length})` : name)}: ${problem ?? "accepted"}`, () => {
      assert.equal(consumerNameProblem(name), problem);
    });
  }

  test("stored names - names the server takes but new names may not use (m@1) pass on read, not on create", () => {
    assert.throws(() => assertValidName("member", "m@1"), (e: unknown) => e instanceof ConsumerGroupError && e.code === "INVALID_NAME");
    validateStoredStaticConfig({ max_members: 2, members: ["a", "m@1"] }, "g");
    validateReadElasticConfig({ max_members: 2, partitioning_filters: null, members: ["a", "m@1"] });
  });
});

describe("stored names - configs as read", () => {
  const refused = (fn: () => void, ...mentions: string[]): void =>
    assert.throws(fn, (e: unknown) => {
      assert.ok(e instanceof ConsumerGroupError && e.code === "INVALID_NAME", String(e));
      for (const m of mentions) assert.ok(e.message.includes(m), e.message);
      return true;
    });

  test("stored names - a static member in members or mappings, with its consumer name", () => {
    refused(() => validateStoredStaticConfig({ max_members: 2, members: ["a", "b.c"] }, "g"), '"b.c"', '"g-b.c"', 'contains "."');
    refused(() => validateStoredStaticConfig({ max_members: 2, member_mappings: [{ member: "a", partitions: [0] }, { member: "*", partitions: [1] }] }, "g"), '"*"');
  });

  test("stored names - a static consumer name over the limit only with its group", () => {
    const member = "m".repeat(250);
    validateStoredStaticConfig({ max_members: 1, members: [member] });
    refused(() => validateStoredStaticConfig({ max_members: 1, members: [member] }, "group1"), "bytes long");
  });

  test("stored names - an elastic member (its consumer is its name)", () => {
    refused(() => validateReadElasticConfig({ max_members: 2, partitioning_filters: null, members: ["a", "m.x"] }), '"m.x"', 'contains "."');
    refused(() => checkStoredMemberNames("elastic", { member_mappings: [{ member: "a b", partitions: [0, 1] }] }), "whitespace");
  });

  test("stored names - Go's rules come first: a config Go refuses gets Go's error", () => {
    assert.throws(
      () => validateStoredStaticConfig({ max_members: 0, members: ["b.c"] }, "g"),
      (e: unknown) => e instanceof ConsumerGroupError && e.code === "INVALID_MAX_MEMBERS",
    );
  });

  test("stored names - duplicates are not refused on read (Go counts each member once)", () => {
    validateStoredStaticConfig({ max_members: 4, members: ["a", "a", "b"] }, "g");
  });
});
