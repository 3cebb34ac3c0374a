/**
 * The partition hash: FNV-1a 32 and `partitionOf`, against the standard FNV vectors,
 * the nats-server subject-transform test vectors and the cross-language table of the
 * Go spec (§10, §12.1).
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ConsumerGroupError, fnv1a32, partitionOf, type ErrorCode, type PartitionOptions } from "../../src/index.js";

const utf8 = new TextEncoder();
const hash = (s: string): number => fnv1a32(utf8.encode(s));

function assertThrowsCode(fn: () => unknown, code: ErrorCode, text?: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ConsumerGroupError, `expected a ConsumerGroupError, got ${String(err)}`);
    assert.equal(err.code, code, `wrong code; message: ${err.message}`);
    if (text !== undefined) assert.ok(err.message.includes(text), `message ${JSON.stringify(err.message)} lacks ${JSON.stringify(text)}`);
    return true;
  });
}

describe("fnv1a32", () => {
  const vectors: [string, number][] = [
    ["", 0x811c9dc5],
    ["a", 0xe40c292c],
    ["foobar", 0xbf9cf968],
    ["1", 0x340ca71c],
    ["foo.1", 0x825370fe],
    ["customer42", 0x053e547f],
    ["orders.customer42.created", 0xf7193fea],
    ["ab", 0x4d2505ca],
    ["foo.a.b", 0x105a9806],
    // multi-byte: the hash runs over UTF-8 bytes, not UTF-16 code units
    ["ü", 0x119dd44a],
    ["日本", 0x9f26ee51],
    ["😀", 0x33a29608],
  ];
  for (const [input, expected] of vectors) {
    test(`fnv1a32 - ${JSON.stringify(input)} hashes to 0x${expected.toString(16).padStart(8, "0")}`, () => {
      assert.equal(hash(input), expected);
    });
  }

  test("fnv1a32 - result is an unsigned 32-bit integer", () => {
    for (const s of ["", "a", "foobar", "x".repeat(1000), "😀😀😀"]) {
      const h = hash(s);
      assert.ok(Number.isInteger(h) && h >= 0 && h <= 0xffffffff, `${s}: ${h}`);
    }
  });

  test("fnv1a32 - hashes raw bytes, including non-UTF-8 ones", () => {
    assert.equal(fnv1a32(new Uint8Array([0x61])), 0xe40c292c);
    assert.equal(fnv1a32(new Uint8Array([])), 0x811c9dc5);
    // 0xff alone is not UTF-8; FNV-1a of one byte b is (basis ^ b) * prime mod 2^32
    assert.equal(fnv1a32(new Uint8Array([0xff])), Number((BigInt((0x811c9dc5 ^ 0xff) >>> 0) * 0x01000193n) % 2n ** 32n));
  });
});

describe("partitionOf - whole subject", () => {
  // nats-server's subject_transform_test.go vectors: key -> N -> partition
  const serverVectors: [string, number, number][] = [
    ["foo", 10, 3],
    ["baz", 10, 0],
    ["qux", 10, 9],
    ["foo.bar", 10, 6],
    ["foo.baz", 10, 4],
    ["test.subject", 5, 0],
    ["bar", 10, 2],
    ["ab", 4, 2],
    ["ü", 10, 0],
  ];
  for (const [subject, n, expected] of serverVectors) {
    test(`partitionOf - server vector ${subject} with N=${n} is ${expected}`, () => {
      assert.equal(partitionOf(subject, n), expected);
    });
  }

  test("partitionOf - orders.customer42.created whole subject at N=10 is 4", () => {
    assert.equal(partitionOf("orders.customer42.created", 10), 4);
  });

  test("partitionOf - foo.a.b whole subject at N=4 is 2", () => {
    assert.equal(partitionOf("foo.a.b", 4), 2);
  });

  test("partitionOf - foo.1 whole subject at N=2 is 0", () => {
    assert.equal(partitionOf("foo.1", 2), 0);
  });

  test("partitionOf - foo.0..foo.9 at N=2 give 1,0,1,0,...", () => {
    const got = Array.from({ length: 10 }, (_, i) => partitionOf(`foo.${i}`, 2));
    assert.deepEqual(got, [1, 0, 1, 0, 1, 0, 1, 0, 1, 0]);
  });

  test("partitionOf - bar.0..bar.9 and bad.0..bad.9 at N=2 give 0,1,0,1,...", () => {
    for (const prefix of ["bar", "bad"]) {
      const got = Array.from({ length: 10 }, (_, i) => partitionOf(`${prefix}.${i}`, 2));
      assert.deepEqual(got, [0, 1, 0, 1, 0, 1, 0, 1, 0, 1], prefix);
    }
  });

  test("partitionOf - a filter without wildcard indexes still hashes the whole subject", () => {
    assert.equal(partitionOf("orders.customer42.created", 10, { filter: "orders.*.*" }), 4);
    assert.equal(partitionOf("orders.customer42.created", 10, { filter: "orders.*.*", wildcards: [] }), 4);
    assert.equal(partitionOf("orders.customer42.created", 10, { filter: ">" }), 4);
    assert.equal(partitionOf("foo.a.b", 4, { filter: "foo.>" }), 2);
  });

  test("partitionOf - N=1 always gives 0", () => {
    for (const s of ["a", "foo.bar", "orders.customer42.created", "ü.日本.😀"]) assert.equal(partitionOf(s, 1), 0);
  });

  test("partitionOf - equals fnv1a32 of the UTF-8 subject modulo N", () => {
    for (const s of ["x", "a.b.c", "é.ß", "日本.中", "🚀.😀.x"]) {
      for (const n of [1, 2, 3, 7, 10, 64, 1000]) assert.equal(partitionOf(s, n), hash(s) % n, `${s} N=${n}`);
    }
  });
});

describe("partitionOf - wildcard keys", () => {
  const cases: { name: string; subject: string; n: number; options: PartitionOptions; expected: number }[] = [
    { name: "orders.*.* wildcard 1 at N=10", subject: "orders.customer42.created", n: 10, options: { filter: "orders.*.*", wildcards: [1] }, expected: 3 },
    { name: "foo.* wildcard 1 at N=2 (key 1)", subject: "foo.1", n: 2, options: { filter: "foo.*", wildcards: [1] }, expected: 0 },
    { name: "foo.*.* wildcards 1,2 at N=4 (key ab)", subject: "foo.a.b", n: 4, options: { filter: "foo.*.*", wildcards: [1, 2] }, expected: 2 },
    { name: "foo.*.* wildcards 2,1 at N=4 (key ba, order matters)", subject: "foo.a.b", n: 4, options: { filter: "foo.*.*", wildcards: [2, 1] }, expected: 0 },
    { name: "foo.*.*.> wildcards 1,2 with a tail", subject: "foo.a.b.c.d", n: 4, options: { filter: "foo.*.*.>", wildcards: [1, 2] }, expected: 2 },
    { name: "*.* wildcards 1,2 at N=16 (key abcxyz)", subject: "abc.xyz", n: 16, options: { filter: "*.*", wildcards: [1, 2] }, expected: 14 },
    { name: "*.* wildcards 2,1 at N=16 (key xyzabc)", subject: "abc.xyz", n: 16, options: { filter: "*.*", wildcards: [2, 1] }, expected: 0 },
    { name: "single-token key ab at N=4", subject: "ab", n: 4, options: { filter: "*", wildcards: [1] }, expected: 2 },
    { name: "multi-byte key ü at N=10", subject: "x.ü", n: 10, options: { filter: "x.*", wildcards: [1] }, expected: 0 },
    { name: "wildcards around a literal token", subject: "orders.eu.created.c7", n: 5, options: { filter: "orders.*.created.*", wildcards: [2, 1] }, expected: 2 },
  ];
  for (const c of cases) {
    test(`partitionOf - ${c.name} is ${c.expected}`, () => {
      assert.equal(partitionOf(c.subject, c.n, c.options), c.expected);
    });
  }

  test("partitionOf - partition(2,2) on *.* gives 1,0,1,0,... for digits 0-9 (TestStatic)", () => {
    for (const prefix of ["foo", "bar", "bad"]) {
      const got = Array.from({ length: 10 }, (_, i) => partitionOf(`${prefix}.${i}`, 2, { filter: "*.*", wildcards: [2] }));
      assert.deepEqual(got, [1, 0, 1, 0, 1, 0, 1, 0, 1, 0], prefix);
    }
  });

  test("partitionOf - wildcard 1 of foo.* gives the same split as partition(2,2) on *.*", () => {
    for (let i = 0; i < 10; i++) {
      assert.equal(
        partitionOf(`foo.${i}`, 2, { filter: "foo.*", wildcards: [1] }),
        partitionOf(`foo.${i}`, 2, { filter: "*.*", wildcards: [2] }),
      );
    }
  });

  test("partitionOf - the key concatenates tokens without a separator", () => {
    // a.bc and ab.c have the same key "abc", hence the same partition for every N
    for (const n of [3, 7, 10, 97]) {
      const opts = { filter: "k.*.*", wildcards: [1, 2] };
      assert.equal(partitionOf("k.a.bc", n, opts), partitionOf("k.ab.c", n, opts));
      assert.equal(partitionOf("k.a.bc", n, opts), hash("abc") % n);
    }
  });

  test("partitionOf - a repeated index repeats the token in the key", () => {
    assert.equal(partitionOf("foo.ab", 97, { filter: "foo.*", wildcards: [1, 1] }), hash("abab") % 97);
  });
});

describe("partitionOf - bad input", () => {
  const badSubjects: { name: string; subject: string; options?: PartitionOptions }[] = [
    { name: "subject does not match the filter (literal)", subject: "bar.x", options: { filter: "foo.*", wildcards: [1] } },
    { name: "subject has fewer tokens than the filter", subject: "foo", options: { filter: "foo.*", wildcards: [1] } },
    { name: "subject has more tokens than the filter", subject: "foo.a.b", options: { filter: "foo.*", wildcards: [1] } },
    { name: "subject does not reach the > of the filter", subject: "foo", options: { filter: "foo.>" } },
    { name: "wildcard subject with *", subject: "foo.*" },
    { name: "wildcard subject with >", subject: "foo.>" },
    { name: "a bare * subject", subject: "*" },
    { name: "wildcard subject matching a filter", subject: "foo.*", options: { filter: "foo.*", wildcards: [1] } },
    { name: "empty subject", subject: "" },
    { name: "empty middle token", subject: "foo..bar" },
    { name: "leading dot", subject: ".foo" },
    { name: "trailing dot", subject: "foo." },
    { name: "a lone dot", subject: "." },
    { name: "whitespace in a token", subject: "foo.b ar" },
    { name: "a tab", subject: "foo\tbar" },
    { name: "a filter with > before its end", subject: "foo.a.b", options: { filter: "foo.>.b" } },
    { name: "a filter token mixing * with text", subject: "foo.ab", options: { filter: "foo.a*", wildcards: [1] } },
    { name: "a filter with an empty token", subject: "foo.a", options: { filter: "foo..*" } },
  ];
  for (const c of badSubjects) {
    test(`partitionOf - rejects ${c.name} with INVALID_SUBJECT`, () => {
      assertThrowsCode(() => partitionOf(c.subject, 10, c.options), "INVALID_SUBJECT");
    });
  }

  test("partitionOf - a non-matching subject names both subject and filter", () => {
    assertThrowsCode(() => partitionOf("bar.x", 10, { filter: "foo.*", wildcards: [1] }), "INVALID_SUBJECT", 'the subject "bar.x" does not match the filter "foo.*"');
  });

  for (const n of [0, -1, -10, 1.5, 0.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) {
    test(`partitionOf - rejects N=${String(n)} with INVALID_ARGUMENT`, () => {
      assertThrowsCode(() => partitionOf("foo.bar", n), "INVALID_ARGUMENT", "the number of partitions must be an integer >= 1");
      assertThrowsCode(() => partitionOf("foo.bar", n, { filter: "foo.*", wildcards: [1] }), "INVALID_ARGUMENT");
    });
  }

  const badIndexes: { name: string; filter: string; wildcards: number[] }[] = [
    { name: "index 2 of a filter with one *", filter: "foo.*", wildcards: [2] },
    { name: "index 0 (indexes are 1-based)", filter: "foo.*", wildcards: [0] },
    { name: "a negative index", filter: "foo.*", wildcards: [-1] },
    { name: "a fractional index", filter: "foo.*.*", wildcards: [1.5] },
    { name: "NaN", filter: "foo.*", wildcards: [Number.NaN] },
    { name: "any index of a filter with no *", filter: "foo.>", wildcards: [1] },
    { name: "a good index followed by a bad one", filter: "foo.*.*", wildcards: [1, 3] },
  ];
  for (const c of badIndexes) {
    test(`partitionOf - rejects wildcard ${c.name} with INVALID_ARGUMENT`, () => {
      const subject = c.filter.replace(/\*/g, "x").replace(">", "y");
      assertThrowsCode(() => partitionOf(subject, 10, { filter: c.filter, wildcards: c.wildcards }), "INVALID_ARGUMENT", "out of range");
    });
  }

  test("partitionOf - rejects wildcard indexes without a filter with INVALID_ARGUMENT", () => {
    assertThrowsCode(() => partitionOf("foo.bar", 10, { wildcards: [1] }), "INVALID_ARGUMENT", "options.filter");
  });

  test("partitionOf - errors are ConsumerGroupError instances of Error", () => {
    try {
      partitionOf("foo.*", 10);
      assert.fail("should have thrown");
    } catch (err) {
      assert.ok(err instanceof Error);
      assert.ok(err instanceof ConsumerGroupError);
      assert.equal(err.name, "ConsumerGroupError");
    }
  });
});
