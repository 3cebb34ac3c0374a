/**
 * Derived names and subject transforms, byte for byte as Go builds them (spec §3,
 * §4.1, §5), the partition-transform parser (§12.1) and the name checks.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  ConsumerGroupError,
  ELASTIC_BUCKET,
  PRIORITY_GROUP,
  STATIC_BUCKET,
  assertValidGroupNames,
  assertValidName,
  bucketName,
  configKey,
  elasticConsumerName,
  isConsumerGroupError,
  parseConfigKey,
  parsePartitionTransform,
  sourceTransforms,
  staticConsumerName,
  transformDestination,
  workQueueStreamName,
  type ErrorCode,
  type PartitioningFilter,
} from "../../src/index.js";

function assertThrowsCode(fn: () => unknown, code: ErrorCode, text?: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ConsumerGroupError, `expected a ConsumerGroupError, got ${String(err)}`);
    assert.equal(err.code, code, `wrong code; message: ${err.message}`);
    if (text !== undefined) assert.ok(err.message.includes(text), `message ${JSON.stringify(err.message)} lacks ${JSON.stringify(text)}`);
    return true;
  });
}

describe("names - constants and derived names", () => {
  test("names - buckets and priority group are Go's", () => {
    assert.equal(STATIC_BUCKET, "static-consumer-groups");
    assert.equal(ELASTIC_BUCKET, "elastic-consumer-groups");
    assert.equal(PRIORITY_GROUP, "PCG");
    assert.equal(bucketName("static"), "static-consumer-groups");
    assert.equal(bucketName("elastic"), "elastic-consumer-groups");
  });

  test("names - configKey is <stream>.<group>", () => {
    assert.equal(configKey("ORDERS", "workers"), "ORDERS.workers");
    assert.equal(configKey("s", "g"), "s.g");
  });

  test("names - staticConsumerName is <group>-<member>", () => {
    assert.equal(staticConsumerName("workers", "m1"), "workers-m1");
    assert.equal(staticConsumerName("a-b", "m1"), "a-b-m1");
  });

  test("names - elasticConsumerName is the member name", () => {
    assert.equal(elasticConsumerName("m1"), "m1");
  });

  test("names - workQueueStreamName is <stream>-<group>", () => {
    assert.equal(workQueueStreamName("ORDERS", "workers"), "ORDERS-workers");
  });
});

describe("names - parseConfigKey", () => {
  const good: [string, { stream: string; group: string }][] = [
    ["ORDERS.workers", { stream: "ORDERS", group: "workers" }],
    ["s.g", { stream: "s", group: "g" }],
    ["my-stream.my_group=1", { stream: "my-stream", group: "my_group=1" }],
  ];
  for (const [key, expected] of good) {
    test(`parseConfigKey - ${key} splits into stream and group`, () => {
      assert.deepEqual(parseConfigKey(key), expected);
    });
  }

  for (const key of ["", "nodot", ".g", "s.", ".", "a.b.c", "a..b"]) {
    test(`parseConfigKey - ${JSON.stringify(key)} is not a config key`, () => {
      assert.equal(parseConfigKey(key), undefined);
    });
  }

  test("parseConfigKey - inverts configKey", () => {
    for (const [s, g] of [
      ["ORDERS", "workers"],
      ["a", "b"],
      ["x-y", "z_w"],
    ] as const) {
      assert.deepEqual(parseConfigKey(configKey(s, g)), { stream: s, group: g });
    }
  });
});

describe("names - transformDestination", () => {
  const cases: { n: number; pf: PartitioningFilter; expected: string }[] = [
    { n: 10, pf: { filter: "foo.*", partitioning_wildcards: [1] }, expected: "{{Partition(10,1)}}.foo.{{Wildcard(1)}}" },
    { n: 4, pf: { filter: "foo.*.*.>", partitioning_wildcards: [1, 2] }, expected: "{{Partition(4,1,2)}}.foo.{{Wildcard(1)}}.{{Wildcard(2)}}.>" },
    { n: 4, pf: { filter: "foo.*.*.>", partitioning_wildcards: [2, 1] }, expected: "{{Partition(4,2,1)}}.foo.{{Wildcard(1)}}.{{Wildcard(2)}}.>" },
    { n: 7, pf: { filter: "foo.>", partitioning_wildcards: [] }, expected: "{{Partition(7)}}.foo.>" },
    { n: 7, pf: { filter: "foo.*", partitioning_wildcards: [] }, expected: "{{Partition(7)}}.foo.{{Wildcard(1)}}" },
    { n: 3, pf: { filter: "foo.*", partitioning_wildcards: null }, expected: "{{Partition(3)}}.foo.{{Wildcard(1)}}" },
    { n: 3, pf: { filter: "foo.>", partitioning_wildcards: null }, expected: "{{Partition(3)}}.foo.>" },
    { n: 2, pf: { filter: ">", partitioning_wildcards: [] }, expected: "{{Partition(2)}}.>" },
    { n: 12, pf: { filter: "a.*.b.*.c.>", partitioning_wildcards: [2] }, expected: "{{Partition(12,2)}}.a.{{Wildcard(1)}}.b.{{Wildcard(2)}}.c.>" },
    { n: 100, pf: { filter: "*.*.*", partitioning_wildcards: [3, 1, 2] }, expected: "{{Partition(100,3,1,2)}}.{{Wildcard(1)}}.{{Wildcard(2)}}.{{Wildcard(3)}}" },
  ];
  for (const c of cases) {
    test(`transformDestination - ${c.pf.filter} ${JSON.stringify(c.pf.partitioning_wildcards)} N=${c.n} is ${c.expected}`, () => {
      assert.equal(transformDestination(c.n, c.pf), c.expected);
    });
  }

  test("transformDestination - output parses back to the same partition function", () => {
    for (const c of cases) {
      assert.deepEqual(parsePartitionTransform(transformDestination(c.n, c.pf)), { partitions: c.n, wildcards: c.pf.partitioning_wildcards ?? [] });
    }
  });
});

describe("names - sourceTransforms", () => {
  test("sourceTransforms - null filters give the whole-subject transform", () => {
    assert.deepEqual(sourceTransforms(5, null), [{ src: ">", dest: "{{Partition(5)}}.>" }]);
  });

  test("sourceTransforms - [] filters give the whole-subject transform", () => {
    assert.deepEqual(sourceTransforms(8, []), [{ src: ">", dest: "{{Partition(8)}}.>" }]);
  });

  test("sourceTransforms - one transform per filter, in config order, src = the filter", () => {
    assert.deepEqual(
      sourceTransforms(2, [
        { filter: "foo.*", partitioning_wildcards: [1] },
        { filter: "bar.*", partitioning_wildcards: [1] },
        { filter: "baz.>", partitioning_wildcards: null },
      ]),
      [
        { src: "foo.*", dest: "{{Partition(2,1)}}.foo.{{Wildcard(1)}}" },
        { src: "bar.*", dest: "{{Partition(2,1)}}.bar.{{Wildcard(1)}}" },
        { src: "baz.>", dest: "{{Partition(2)}}.baz.>" },
      ],
    );
  });
});

describe("names - parsePartitionTransform", () => {
  const cases: [string, { partitions: number; wildcards: number[] } | undefined][] = [
    ["{{partition(10,1)}}.foo.{{wildcard(1)}}", { partitions: 10, wildcards: [1] }],
    ["{{Partition(10,1)}}.foo.{{Wildcard(1)}}", { partitions: 10, wildcards: [1] }],
    ["{{ Partition(4, 1, 2) }}.x", { partitions: 4, wildcards: [1, 2] }],
    ["{{partition(8)}}.>", { partitions: 8, wildcards: [] }],
    ["{{partition(2,2)}}.{{wildcard(1)}}.{{wildcard(2)}}", { partitions: 2, wildcards: [2] }],
    ["{{Partition(4,2,1)}}.foo.{{Wildcard(1)}}.{{Wildcard(2)}}.>", { partitions: 4, wildcards: [2, 1] }],
    ["prefix.{{partition(3,1)}}.{{wildcard(1)}}", { partitions: 3, wildcards: [1] }],
    ["foo.{{wildcard(1)}}", undefined],
    ["foo.>", undefined],
    ["", undefined],
    ["{{PARTITION(8)}}.>", undefined],
    ["{{partition()}}.>", undefined],
    ["{{partition(a)}}.>", undefined],
    ["{{partition(8,x)}}.>", undefined],
    ["{{partition(-1)}}.>", undefined],
    ["{{partition(8)}.>", undefined],
  ];
  for (const [dest, expected] of cases) {
    test(`parsePartitionTransform - ${JSON.stringify(dest)} gives ${JSON.stringify(expected)}`, () => {
      assert.deepEqual(parsePartitionTransform(dest), expected);
    });
  }
});

describe("names - assertValidName", () => {
  const valid = ["ORDERS", "m1", "my-group_1=x", "a", "_", "-", "=", "0", "x".repeat(255)];
  for (const name of valid) {
    test(`assertValidName - accepts ${JSON.stringify(name.length > 20 ? `${name.slice(0, 8)}…(${name.length})` : name)}`, () => {
      for (const kind of ["stream", "group", "member"] as const) assertValidName(kind, name);
    });
  }

  const invalid: { name: string; value: unknown; text?: string }[] = [
    { name: "a dot", value: "a.b", text: '"."' },
    { name: "a *", value: "a*", text: '"*"' },
    { name: "a >", value: "a>", text: '">"' },
    { name: "a space", value: "a b", text: "whitespace" },
    { name: "a tab", value: "a\tb", text: "whitespace" },
    { name: "a newline", value: "a\n", text: "whitespace" },
    { name: "a /", value: "a/b", text: '"/"' },
    { name: "a backslash", value: "a\\b" },
    { name: "a non-ASCII letter", value: "é" },
    { name: "an emoji", value: "m😀" },
    { name: "an empty string", value: "", text: "non-empty string" },
    { name: "a number", value: 42, text: "non-empty string" },
    { name: "null", value: null, text: "non-empty string" },
    { name: "undefined", value: undefined, text: "non-empty string" },
    { name: "an object", value: { toString: () => "x" }, text: "non-empty string" },
    { name: "256 characters", value: "x".repeat(256), text: "the limit is 255" },
  ];
  for (const c of invalid) {
    test(`assertValidName - rejects ${c.name} with INVALID_NAME`, () => {
      assertThrowsCode(() => assertValidName("group", c.value), "INVALID_NAME", c.text);
    });
  }

  test("assertValidName - the message names the kind", () => {
    assertThrowsCode(() => assertValidName("stream", "a.b"), "INVALID_NAME", "the stream name");
    assertThrowsCode(() => assertValidName("member", ""), "INVALID_NAME", "the member name");
  });
});

describe("names - assertValidGroupNames", () => {
  test("assertValidGroupNames - accepts good names with and without a member", () => {
    assertValidGroupNames("ORDERS", "workers");
    assertValidGroupNames("ORDERS", "workers", "m1");
    // exactly 255: 127 + "-" + 127
    assertValidGroupNames("s".repeat(127), "g".repeat(127), "m".repeat(127));
  });

  const invalid: { name: string; args: [unknown, unknown, unknown?]; text?: string }[] = [
    { name: "a dotted stream", args: ["a.b", "g"], text: "stream" },
    { name: "a dotted group", args: ["s", "a.b"], text: "group" },
    { name: "a wildcard member", args: ["s", "g", "m*"], text: "member" },
    { name: "an empty group", args: ["s", ""] },
    { name: "a non-string stream", args: [1, "g"] },
    { name: "a null member", args: ["s", "g", null] },
    { name: "a work-queue stream name over 255 characters", args: ["s".repeat(200), "g".repeat(55)], text: "work-queue stream name" },
    { name: "a consumer name over 255 characters", args: ["s", "g".repeat(100), "m".repeat(155)], text: "consumer name" },
    { name: "a whitespace member", args: ["s", "g", " "], text: "whitespace" },
    { name: "a slash in the stream", args: ["s/t", "g"] },
  ];
  for (const c of invalid) {
    test(`assertValidGroupNames - rejects ${c.name} with INVALID_NAME`, () => {
      assertThrowsCode(() => assertValidGroupNames(...c.args), "INVALID_NAME", c.text);
    });
  }

  test("assertValidGroupNames - an undefined member is not checked", () => {
    assertValidGroupNames("s", "g", undefined);
  });
});

describe("errors - ConsumerGroupError", () => {
  test("errors - carries code, message, name, cause and serverCode", () => {
    const cause = new Error("boom");
    const err = new ConsumerGroupError("SERVER_ERROR", "it failed", { cause, serverCode: 10058 });
    assert.ok(err instanceof Error);
    assert.equal(err.name, "ConsumerGroupError");
    assert.equal(err.code, "SERVER_ERROR");
    assert.equal(err.message, "it failed");
    assert.equal(err.cause, cause);
    assert.equal(err.serverCode, 10058);
  });

  test("errors - cause and serverCode are absent by default", () => {
    const err = new ConsumerGroupError("INVALID_NAME", "bad");
    assert.equal(err.serverCode, undefined);
    assert.equal("cause" in err, false);
  });

  test("errors - isConsumerGroupError matches the class and, optionally, codes", () => {
    const err = new ConsumerGroupError("INVALID_NAME", "bad");
    assert.equal(isConsumerGroupError(err), true);
    assert.equal(isConsumerGroupError(err, "INVALID_NAME"), true);
    assert.equal(isConsumerGroupError(err, "CONFIG_DECODE", "INVALID_NAME"), true);
    assert.equal(isConsumerGroupError(err, "CONFIG_DECODE"), false);
    assert.equal(isConsumerGroupError(new Error("x")), false);
    assert.equal(isConsumerGroupError({ code: "INVALID_NAME" }), false);
    assert.equal(isConsumerGroupError(undefined), false);
  });
});
