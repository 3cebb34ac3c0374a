/**
 * The stored-config codec against Go's `encoding/json` (spec §3): byte-exact
 * examples, escaping, null vs [] vs absent, omitempty, decoding rules and the
 * comparison helpers.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  ConsumerGroupError,
  decodeElasticConfig,
  decodeStaticConfig,
  encodeElasticConfig,
  encodeStaticConfig,
  goJsonString,
  sameElasticSettings,
  sameMembership,
  sameStaticConfig,
  type ElasticConsumerGroupConfig,
  type ErrorCode,
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

const utf8 = new TextEncoder();

describe("codec - Go's byte-exact examples (spec §3)", () => {
  const statics: { json: string; config: StaticConsumerGroupConfig }[] = [
    {
      json: '{"max_members":10,"filters":["\\u003e"],"members":["m1","m2"]}',
      config: { max_members: 10, filters: [">"], members: ["m1", "m2"] },
    },
    {
      json: '{"max_members":4,"member_mappings":[{"member":"m1","partitions":[0,1]},{"member":"m2","partitions":[2,3]}]}',
      config: {
        max_members: 4,
        member_mappings: [
          { member: "m1", partitions: [0, 1] },
          { member: "m2", partitions: [2, 3] },
        ],
      },
    },
  ];
  const elastics: { json: string; config: ElasticConsumerGroupConfig }[] = [
    {
      json: '{"max_members":10,"partitioning_filters":[{"filter":"foo.*","partitioning_wildcards":[1]}]}',
      config: { max_members: 10, partitioning_filters: [{ filter: "foo.*", partitioning_wildcards: [1] }] },
    },
    {
      json: '{"max_members":2,"partitioning_filters":null,"max_buffered_msg":-1,"max_buffered_bytes":-1,"members":["m2","m1"]}',
      config: { max_members: 2, partitioning_filters: null, max_buffered_msg: -1, max_buffered_bytes: -1, members: ["m2", "m1"] },
    },
    {
      json: '{"max_members":2,"partitioning_filters":[]}',
      config: { max_members: 2, partitioning_filters: [] },
    },
  ];

  for (const { json, config } of statics) {
    test(`codec - static ${json} decodes, and encodes back byte for byte`, () => {
      const decoded = decodeStaticConfig(json);
      assert.deepEqual(decoded, config);
      assert.equal(encodeStaticConfig(decoded), json);
      assert.equal(encodeStaticConfig(config), json);
      assert.deepEqual(decodeStaticConfig(utf8.encode(json)), config);
    });
  }
  for (const { json, config } of elastics) {
    test(`codec - elastic ${json} decodes, and encodes back byte for byte`, () => {
      const decoded = decodeElasticConfig(json);
      assert.deepEqual(decoded, config);
      assert.equal(encodeElasticConfig(decoded), json);
      assert.equal(encodeElasticConfig(config), json);
      assert.deepEqual(decodeElasticConfig(utf8.encode(json)), config);
    });
  }
});

describe("codec - goJsonString escaping", () => {
  const cases: [string, string][] = [
    ["<", '"\\u003c"'],
    [">", '"\\u003e"'],
    ["&", '"\\u0026"'],
    ["\u2028", '"\\u2028"'],
    ["\u2029", '"\\u2029"'],
    ["a<b>&c", '"a\\u003cb\\u003e\\u0026c"'],
    ["foo.>", '"foo.\\u003e"'],
    ['"', '"\\""'],
    ["\\", '"\\\\"'],
    ["\n\r\t", '"\\n\\r\\t"'],
    // Go >= 1.22 writes \b and \f; other control characters as lowercase \u00xx
    ["\b\f", '"\\b\\f"'],
    ["\u0001\u001f", '"\\u0001\\u001f"'],
    ["\u007f", '"\u007f"'],
    ["é日本😀", '"é日本😀"'],
    ["\uFFFD", '"\uFFFD"'],
    ["", '""'],
    ["plain", '"plain"'],
    ["/", '"/"'],
    // a lone surrogate is what JS has for invalid UTF-8; Go's decode-then-encode gives U+FFFD
    ["a\uD800b", '"a\uFFFDb"'],
    ["\uDC00", '"\uFFFD"'],
  ];
  for (const [input, expected] of cases) {
    test(`goJsonString - ${JSON.stringify(input)} is written as ${expected}`, () => {
      assert.equal(goJsonString(input), expected);
    });
  }

  test("goJsonString - escapes in member names and filters of both configs", () => {
    assert.equal(
      encodeStaticConfig({ max_members: 1, filters: ["a<b"], members: ["x&y"], member_mappings: [] }),
      '{"max_members":1,"filters":["a\\u003cb"],"members":["x\\u0026y"]}',
    );
    assert.equal(
      encodeElasticConfig({ max_members: 1, partitioning_filters: [{ filter: ">", partitioning_wildcards: [] }], member_mappings: [{ member: "a\u2028", partitions: [0] }] }),
      '{"max_members":1,"partitioning_filters":[{"filter":"\\u003e","partitioning_wildcards":[]}],"member_mappings":[{"member":"a\\u2028","partitions":[0]}]}',
    );
  });

  test("goJsonString - output is JSON that parses back to the input", () => {
    for (const [input] of cases) {
      if (/[\uD800-\uDFFF]/.test(input) && !/[\uD800-\uDBFF][\uDC00-\uDFFF]/.test(input)) continue;
      assert.equal(JSON.parse(goJsonString(input)), input);
    }
  });
});

describe("codec - encoding", () => {
  test("codec - static fields come out in Go's order whatever the object order", () => {
    const config = { member_mappings: [{ partitions: [0], member: "b" }], members: ["a"], filters: ["f"], max_members: 1 } as StaticConsumerGroupConfig;
    assert.equal(
      encodeStaticConfig(config),
      '{"max_members":1,"filters":["f"],"members":["a"],"member_mappings":[{"member":"b","partitions":[0]}]}',
    );
  });

  test("codec - elastic fields come out in Go's order whatever the object order", () => {
    const config = {
      member_mappings: [{ partitions: [1], member: "b" }],
      members: ["a"],
      max_buffered_bytes: 2048,
      max_buffered_msg: 100,
      partitioning_filters: [{ partitioning_wildcards: [1], filter: "x.*" }],
      max_members: 3,
    } as ElasticConsumerGroupConfig;
    assert.equal(
      encodeElasticConfig(config),
      '{"max_members":3,"partitioning_filters":[{"filter":"x.*","partitioning_wildcards":[1]}],"max_buffered_msg":100,"max_buffered_bytes":2048,"members":["a"],"member_mappings":[{"member":"b","partitions":[1]}]}',
    );
  });

  test("codec - static omitempty: empty filters, members and mappings are left out", () => {
    assert.equal(encodeStaticConfig({ max_members: 3 }), '{"max_members":3}');
    assert.equal(encodeStaticConfig({ max_members: 3, filters: [], members: [], member_mappings: [] }), '{"max_members":3}');
  });

  test("codec - elastic omitempty: zero or absent caps and empty membership are left out", () => {
    assert.equal(encodeElasticConfig({ max_members: 3, partitioning_filters: null }), '{"max_members":3,"partitioning_filters":null}');
    assert.equal(
      encodeElasticConfig({ max_members: 3, partitioning_filters: null, max_buffered_msg: 0, max_buffered_bytes: 0, members: [], member_mappings: [] }),
      '{"max_members":3,"partitioning_filters":null}',
    );
  });

  test("codec - -1 buffer caps are kept", () => {
    assert.equal(
      encodeElasticConfig({ max_members: 1, partitioning_filters: [], max_buffered_msg: -1, max_buffered_bytes: -1 }),
      '{"max_members":1,"partitioning_filters":[],"max_buffered_msg":-1,"max_buffered_bytes":-1}',
    );
    assert.equal(encodeElasticConfig({ max_members: 1, partitioning_filters: [], max_buffered_bytes: -1 }), '{"max_members":1,"partitioning_filters":[],"max_buffered_bytes":-1}');
  });

  test("codec - the key is max_buffered_msg, singular", () => {
    const json = encodeElasticConfig({ max_members: 1, partitioning_filters: null, max_buffered_msg: 5 });
    assert.ok(json.includes('"max_buffered_msg":5'));
    assert.ok(!json.includes("max_buffered_msgs"));
  });

  test("codec - partitioning_filters null, [] and absent", () => {
    assert.equal(encodeElasticConfig({ max_members: 1, partitioning_filters: null }), '{"max_members":1,"partitioning_filters":null}');
    assert.equal(encodeElasticConfig({ max_members: 1, partitioning_filters: [] }), '{"max_members":1,"partitioning_filters":[]}');
    // a JS caller may leave it out; Go's nil is written as null, never omitted
    const absent = { max_members: 1 } as unknown as ElasticConsumerGroupConfig;
    assert.equal(encodeElasticConfig(absent), '{"max_members":1,"partitioning_filters":null}');
  });

  test("codec - partitioning_wildcards null and [] are kept apart", () => {
    assert.equal(
      encodeElasticConfig({
        max_members: 1,
        partitioning_filters: [
          { filter: "a.*", partitioning_wildcards: null },
          { filter: "b.*", partitioning_wildcards: [] },
        ],
      }),
      '{"max_members":1,"partitioning_filters":[{"filter":"a.*","partitioning_wildcards":null},{"filter":"b.*","partitioning_wildcards":[]}]}',
    );
  });

  test("codec - mapping partitions null and [] are kept apart", () => {
    const mappings = [
      { member: "a", partitions: [0, 1] },
      { member: "b", partitions: null },
      { member: "c", partitions: [] },
    ];
    const expected = '"member_mappings":[{"member":"a","partitions":[0,1]},{"member":"b","partitions":null},{"member":"c","partitions":[]}]';
    assert.equal(encodeStaticConfig({ max_members: 2, member_mappings: mappings }), `{"max_members":2,${expected}}`);
    assert.equal(encodeElasticConfig({ max_members: 2, partitioning_filters: null, member_mappings: mappings }), `{"max_members":2,"partitioning_filters":null,${expected}}`);
  });

  test("codec - a member list with an empty name is not empty", () => {
    assert.equal(encodeStaticConfig({ max_members: 1, members: [""] }), '{"max_members":1,"members":[""]}');
  });
});

describe("codec - decoding", () => {
  test("codec - null vs [] vs absent survive a decode/encode round trip", () => {
    const jsons = [
      '{"max_members":2,"partitioning_filters":null}',
      '{"max_members":2,"partitioning_filters":[]}',
      '{"max_members":2,"partitioning_filters":[{"filter":"a.*","partitioning_wildcards":null},{"filter":"b.*","partitioning_wildcards":[]}]}',
      '{"max_members":2,"partitioning_filters":null,"member_mappings":[{"member":"a","partitions":[0,1]},{"member":"b","partitions":null},{"member":"c","partitions":[]}]}',
    ];
    for (const json of jsons) assert.equal(encodeElasticConfig(decodeElasticConfig(json)), json);
  });

  test("codec - decoded null and [] are distinct values", () => {
    assert.equal(decodeElasticConfig('{"max_members":1,"partitioning_filters":null}').partitioning_filters, null);
    assert.deepEqual(decodeElasticConfig('{"max_members":1,"partitioning_filters":[]}').partitioning_filters, []);
    const pfs = decodeElasticConfig('{"max_members":1,"partitioning_filters":[{"filter":"a.*","partitioning_wildcards":null},{"filter":"b.*","partitioning_wildcards":[]},{"filter":"c.*"}]}').partitioning_filters;
    assert.deepEqual(pfs, [
      { filter: "a.*", partitioning_wildcards: null },
      { filter: "b.*", partitioning_wildcards: [] },
      { filter: "c.*", partitioning_wildcards: null },
    ]);
    const mappings = decodeStaticConfig('{"max_members":1,"member_mappings":[{"member":"a","partitions":null},{"member":"b","partitions":[]},{"member":"c"}]}').member_mappings;
    assert.deepEqual(mappings, [
      { member: "a", partitions: null },
      { member: "b", partitions: [] },
      { member: "c", partitions: null },
    ]);
  });

  test("codec - absent partitioning_filters decodes as null and encodes as null", () => {
    const config = decodeElasticConfig('{"max_members":4}');
    assert.deepEqual(config, { max_members: 4, partitioning_filters: null });
    assert.equal(encodeElasticConfig(config), '{"max_members":4,"partitioning_filters":null}');
  });

  test("codec - absent and null lists decode as absent properties", () => {
    assert.deepEqual(decodeStaticConfig('{"max_members":2,"filters":null,"members":null,"member_mappings":null}'), { max_members: 2 });
    const e = decodeElasticConfig('{"max_members":2,"partitioning_filters":null,"members":null,"member_mappings":null,"max_buffered_msg":null}');
    assert.deepEqual(e, { max_members: 2, partitioning_filters: null });
    assert.equal("members" in e, false);
    assert.equal("max_buffered_msg" in e, false);
  });

  test("codec - empty lists decode as [] and are then omitted on encode (as Go)", () => {
    const s = decodeStaticConfig('{"max_members":2,"filters":[],"members":[],"member_mappings":[]}');
    assert.deepEqual(s, { max_members: 2, filters: [], members: [], member_mappings: [] });
    assert.equal(encodeStaticConfig(s), '{"max_members":2}');
  });

  test("codec - zero buffer caps decode as absent, -1 is kept", () => {
    const zero = decodeElasticConfig('{"max_members":1,"partitioning_filters":[],"max_buffered_msg":0,"max_buffered_bytes":0}');
    assert.deepEqual(zero, { max_members: 1, partitioning_filters: [] });
    const minus = decodeElasticConfig('{"max_members":1,"partitioning_filters":[],"max_buffered_msg":-1,"max_buffered_bytes":-1}');
    assert.equal(minus.max_buffered_msg, -1);
    assert.equal(minus.max_buffered_bytes, -1);
  });

  test("codec - unknown fields are ignored", () => {
    assert.deepEqual(decodeStaticConfig('{"max_members":3,"filter":">","future":{"x":[1,2]},"members":["a"],"revision":9}'), { max_members: 3, members: ["a"] });
    assert.deepEqual(
      decodeElasticConfig('{"max_members":3,"filter":"foo.*","partitioning_wildcards":[1],"partitioning_filters":null,"extra":true}'),
      { max_members: 3, partitioning_filters: null },
    );
    assert.deepEqual(
      decodeElasticConfig('{"max_members":1,"partitioning_filters":[{"filter":"a.*","partitioning_wildcards":[1],"x":1}],"member_mappings":[{"member":"m","partitions":[0],"y":"z"}]}'),
      { max_members: 1, partitioning_filters: [{ filter: "a.*", partitioning_wildcards: [1] }], member_mappings: [{ member: "m", partitions: [0] }] },
    );
  });

  test("codec - keys match case-insensitively", () => {
    assert.deepEqual(decodeStaticConfig('{"Max_Members":3,"FILTERS":["x"],"Members":["a"]}'), { max_members: 3, filters: ["x"], members: ["a"] });
    assert.deepEqual(
      decodeElasticConfig(
        '{"MAX_MEMBERS":2,"Partitioning_Filters":[{"FILTER":"a.*","Partitioning_Wildcards":[1]}],"Max_Buffered_Msg":5,"MAX_BUFFERED_BYTES":6,"Member_Mappings":[{"MEMBER":"m","Partitions":[0,1]}]}',
      ),
      {
        max_members: 2,
        partitioning_filters: [{ filter: "a.*", partitioning_wildcards: [1] }],
        max_buffered_msg: 5,
        max_buffered_bytes: 6,
        member_mappings: [{ member: "m", partitions: [0, 1] }],
      },
    );
  });

  test("codec - a later key overwrites an earlier one", () => {
    assert.equal(decodeStaticConfig('{"max_members":1,"Max_Members":7}').max_members, 7);
  });

  test("codec - escaped characters decode", () => {
    assert.deepEqual(decodeStaticConfig('{"max_members":1,"filters":["\\u003e","a\\u0026b","\\u003cx"]}').filters, [">", "a&b", "<x"]);
  });

  test("codec - null max_members, members and wildcards decode as zero values (Go leaves them unset)", () => {
    assert.equal(decodeStaticConfig('{"max_members":null}').max_members, 0);
    assert.equal(decodeStaticConfig("{}").max_members, 0);
    assert.deepEqual(decodeStaticConfig('{"max_members":1,"members":[null,"a"]}').members, ["", "a"]);
    assert.deepEqual(decodeElasticConfig('{"max_members":1,"partitioning_filters":[{"filter":null,"partitioning_wildcards":[null,2]}]}').partitioning_filters, [
      { filter: "", partitioning_wildcards: [0, 2] },
    ]);
  });

  test("codec - a JSON string and its UTF-8 bytes decode alike, multi-byte included", () => {
    const json = '{"max_members":2,"members":["é","日本","😀"]}';
    assert.deepEqual(decodeStaticConfig(utf8.encode(json)), decodeStaticConfig(json));
    assert.deepEqual(decodeStaticConfig(json).members, ["é", "日本", "😀"]);
  });

  const badStatic: { name: string; raw: string | Uint8Array; text?: string }[] = [
    { name: "a string max_members", raw: '{"max_members":"2"}', text: "max_members" },
    { name: "a negative max_members", raw: '{"max_members":-1}', text: "max_members" },
    { name: "a fractional max_members", raw: '{"max_members":1.5}' },
    { name: "a boolean max_members", raw: '{"max_members":true}' },
    { name: "members that is not an array", raw: '{"max_members":1,"members":"m1"}', text: "members" },
    { name: "members that is an object", raw: '{"max_members":1,"members":{"0":"m1"}}' },
    { name: "a member that is a number", raw: '{"max_members":1,"members":[1]}' },
    { name: "filters that is a string", raw: '{"max_members":1,"filters":">"}' },
    { name: "a mapping that is a string", raw: '{"max_members":1,"member_mappings":["m1"]}' },
    { name: "a mapping member that is a number", raw: '{"max_members":1,"member_mappings":[{"member":1,"partitions":[0]}]}' },
    { name: "mapping partitions that are strings", raw: '{"max_members":1,"member_mappings":[{"member":"a","partitions":["0"]}]}' },
    { name: "a JSON array", raw: "[]", text: "JSON object" },
    { name: "a JSON string", raw: '"x"' },
    { name: "a JSON number", raw: "42" },
    { name: "a JSON boolean", raw: "true" },
    { name: "invalid JSON", raw: "{", text: "invalid JSON value for the static consumer group's config" },
    { name: "trailing garbage", raw: '{"max_members":1}x' },
    { name: "an empty value, as left by a purge (string)", raw: "", text: "empty value" },
    { name: "an empty value, as left by a purge (bytes)", raw: new Uint8Array(0), text: "empty value" },
  ];
  for (const c of badStatic) {
    test(`codec - static decode rejects ${c.name} with CONFIG_DECODE`, () => {
      assertThrowsCode(() => decodeStaticConfig(c.raw), "CONFIG_DECODE", c.text);
    });
  }

  const badElastic: { name: string; raw: string; text?: string }[] = [
    { name: "a string max_members", raw: '{"max_members":"2","partitioning_filters":null}' },
    { name: "a negative max_members", raw: '{"max_members":-3,"partitioning_filters":null}' },
    { name: "partitioning_filters that is an object", raw: '{"max_members":1,"partitioning_filters":{}}', text: "partitioning_filters" },
    { name: "a partitioning filter that is a string", raw: '{"max_members":1,"partitioning_filters":["foo.*"]}' },
    { name: "partitioning_wildcards that is a string", raw: '{"max_members":1,"partitioning_filters":[{"filter":"a.*","partitioning_wildcards":"1"}]}' },
    { name: "a wildcard index that is a string", raw: '{"max_members":1,"partitioning_filters":[{"filter":"a.*","partitioning_wildcards":["1"]}]}' },
    { name: "a filter that is a number", raw: '{"max_members":1,"partitioning_filters":[{"filter":1,"partitioning_wildcards":[]}]}' },
    { name: "a string max_buffered_msg", raw: '{"max_members":1,"partitioning_filters":null,"max_buffered_msg":"1"}' },
    { name: "a fractional max_buffered_bytes", raw: '{"max_members":1,"partitioning_filters":null,"max_buffered_bytes":0.5}' },
    { name: "members not an array", raw: '{"max_members":1,"partitioning_filters":null,"members":"m1"}' },
    { name: "a JSON array", raw: "[1]" },
    { name: "invalid JSON", raw: "{not json}", text: "invalid JSON value for the elastic consumer group's config" },
    { name: "an empty value, as left by a purge", raw: "", text: "empty value" },
  ];
  for (const c of badElastic) {
    test(`codec - elastic decode rejects ${c.name} with CONFIG_DECODE`, () => {
      assertThrowsCode(() => decodeElasticConfig(c.raw), "CONFIG_DECODE", c.text);
    });
  }

  test("codec - decode errors say which config and keep the cause", () => {
    try {
      decodeElasticConfig("{");
      assert.fail("should have thrown");
    } catch (err) {
      assert.ok(err instanceof ConsumerGroupError);
      assert.ok(err.message.startsWith("invalid JSON value for the elastic consumer group's config: "), err.message);
      assert.ok(err.cause instanceof SyntaxError);
    }
  });
});

describe("codec - comparisons", () => {
  test("sameMembership - absent equals empty", () => {
    assert.equal(sameMembership({}, { members: [], member_mappings: [] }), true);
    assert.equal(sameMembership({ members: [] }, {}), true);
    assert.equal(sameMembership({ member_mappings: [] }, { members: [] }), true);
  });

  test("sameMembership - order, names and partitions matter", () => {
    assert.equal(sameMembership({ members: ["a", "b"] }, { members: ["a", "b"] }), true);
    assert.equal(sameMembership({ members: ["a", "b"] }, { members: ["b", "a"] }), false);
    assert.equal(sameMembership({ members: ["a"] }, { members: ["a", "a"] }), false);
    assert.equal(sameMembership({ members: ["a"] }, {}), false);
    assert.equal(sameMembership({ member_mappings: [{ member: "a", partitions: [0, 1] }] }, { member_mappings: [{ member: "a", partitions: [0, 1] }] }), true);
    assert.equal(sameMembership({ member_mappings: [{ member: "a", partitions: [0, 1] }] }, { member_mappings: [{ member: "a", partitions: [1, 0] }] }), false);
    assert.equal(sameMembership({ member_mappings: [{ member: "a", partitions: [0] }] }, { member_mappings: [{ member: "b", partitions: [0] }] }), false);
    assert.equal(sameMembership({ members: ["a"] }, { member_mappings: [{ member: "a", partitions: [0] }] }), false);
  });

  test("sameMembership - null and [] mapping partitions are equal", () => {
    assert.equal(sameMembership({ member_mappings: [{ member: "a", partitions: null }] }, { member_mappings: [{ member: "a", partitions: [] }] }), true);
  });

  test("sameStaticConfig - CreateStatic's comparison: max, filters, membership", () => {
    const base: StaticConsumerGroupConfig = { max_members: 2, filters: ["foo.*"], members: ["m1", "m2"] };
    assert.equal(sameStaticConfig(base, { max_members: 2, filters: ["foo.*"], members: ["m1", "m2"] }), true);
    assert.equal(sameStaticConfig(base, { ...base, max_members: 3 }), false);
    assert.equal(sameStaticConfig(base, { ...base, filters: ["bar.*"] }), false);
    assert.equal(sameStaticConfig(base, { ...base, filters: ["foo.*", "bar.*"] }), false);
    assert.equal(sameStaticConfig(base, { ...base, members: ["m2", "m1"] }), false);
    assert.equal(sameStaticConfig({ max_members: 2, filters: ["a.*", "b.*"] }, { max_members: 2, filters: ["b.*", "a.*"] }), false);
  });

  test("sameStaticConfig - absent equals empty for filters, members and mappings", () => {
    assert.equal(sameStaticConfig({ max_members: 2 }, { max_members: 2, filters: [], members: [], member_mappings: [] }), true);
    // the Go bug (spec §11.7): a stored config without mappings vs an empty, non-nil mappings list
    const stored = decodeStaticConfig(encodeStaticConfig({ max_members: 2, members: ["a"], member_mappings: [] }));
    assert.equal(sameStaticConfig(stored, { max_members: 2, members: ["a"], member_mappings: [] }), true);
  });

  test("sameElasticSettings - compares max, caps and partitioning filters", () => {
    const base: ElasticConsumerGroupConfig = {
      max_members: 2,
      partitioning_filters: [{ filter: "foo.*", partitioning_wildcards: [1] }],
      max_buffered_msg: -1,
      max_buffered_bytes: -1,
    };
    assert.equal(sameElasticSettings(base, structuredClone(base)), true);
    assert.equal(sameElasticSettings(base, { ...base, max_members: 3 }), false);
    assert.equal(sameElasticSettings(base, { ...base, max_buffered_msg: 10 }), false);
    assert.equal(sameElasticSettings(base, { ...base, max_buffered_bytes: 10 }), false);
    assert.equal(sameElasticSettings(base, { ...base, partitioning_filters: [{ filter: "bar.*", partitioning_wildcards: [1] }] }), false);
    assert.equal(sameElasticSettings(base, { ...base, partitioning_filters: [{ filter: "foo.*", partitioning_wildcards: [] }] }), false);
    assert.equal(
      sameElasticSettings(
        { max_members: 2, partitioning_filters: [{ filter: "a.*.*", partitioning_wildcards: [1, 2] }] },
        { max_members: 2, partitioning_filters: [{ filter: "a.*.*", partitioning_wildcards: [2, 1] }] },
      ),
      false,
    );
    assert.equal(
      sameElasticSettings(base, {
        ...base,
        partitioning_filters: [...(base.partitioning_filters ?? []), { filter: "bar.*", partitioning_wildcards: [1] }],
      }),
      false,
    );
  });

  test("sameElasticSettings - absent caps equal zero caps", () => {
    assert.equal(sameElasticSettings({ max_members: 1, partitioning_filters: null }, { max_members: 1, partitioning_filters: null, max_buffered_msg: 0, max_buffered_bytes: 0 }), true);
    assert.equal(sameElasticSettings({ max_members: 1, partitioning_filters: null }, { max_members: 1, partitioning_filters: null, max_buffered_msg: -1 }), false);
  });

  test("sameElasticSettings - membership is ignored", () => {
    const a: ElasticConsumerGroupConfig = { max_members: 2, partitioning_filters: null, members: ["m1"] };
    const b: ElasticConsumerGroupConfig = { max_members: 2, partitioning_filters: null, member_mappings: [{ member: "x", partitions: [0, 1] }] };
    assert.equal(sameElasticSettings(a, b), true);
    assert.equal(sameElasticSettings(a, { max_members: 2, partitioning_filters: null }), true);
  });
});
