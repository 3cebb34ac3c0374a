/**
 * Mutations of a stored group config, as Go, other ports and people write them, each
 * with what the rules say of the result. Pure: no server. The verdict comes from how a
 * mutation is built, not from the library's own checks:
 *
 * - `valid`: Go decodes it to a config its rules take, and it agrees with the server's
 *   transforms (an unknown field, a key in another case, a repeated key whose last value
 *   is good, other whitespace, a member dropped, mappings in place of members);
 * - `invalid`: not a config at all (`decode`), a config one of the rules refuses
 *   (`rules`), or one that disagrees with the stream's or work queue's partition
 *   transform (`mismatch`);
 * - `either`: the rules leave it open (a member listed twice, bytes that are not UTF-8).
 */
import { Random } from "./fuzz.js";

/** What a stored config's rules say of a mutated one, and which check must refuse it. */
export type StoredVerdict = { verdict: "valid" } | { verdict: "invalid"; by: "decode" | "rules" | "mismatch" } | { verdict: "either" };

/** One mutated config: its bytes, how it was made, and its verdict. */
export interface StoredMutation {
  /** The bytes to store. */
  bytes: Uint8Array;
  /** How it was made, for failure messages. */
  what: string;
  verdict: StoredVerdict;
}

/** The fixture a mutation starts from: the group's config as stored, and what the server's transforms say. */
export interface StoredBase {
  kind: "static" | "elastic";
  /** The stored config's JSON object. */
  config: Record<string, unknown>;
  /** The partition count of the stream's (static) or work queue's (elastic) transform. */
  partitions: number;
  /** Members the fixture's config lists. */
  members: readonly string[];
  /** Elastic: the filter its partitioning uses (e.g. `FE.*`, one wildcard). */
  filter?: string;
}

const VALID: StoredVerdict = { verdict: "valid" };
const EITHER: StoredVerdict = { verdict: "either" };
const invalid = (by: "decode" | "rules" | "mismatch"): StoredVerdict => ({ verdict: "invalid", by });
const text = (s: string): Uint8Array => new TextEncoder().encode(s);
const json = (o: unknown): Uint8Array => text(JSON.stringify(o));

/** Names the server refuses as consumer names (a dot, wildcards, white space, empty, a path separator). */
const BAD_NAMES = ["a.b", "*", ">", " m", "m\tx", "m/x", "m\\x"];
/** JSON values that are not a whole non-negative number. */
const BAD_NUMBERS: unknown[] = [-1, 1.5, "2", true, [], {}, 1e300, 2 ** 53];
/** Values for an unknown field: Go ignores them whatever they are. */
const ANY_JSON: unknown[] = [null, 0, -1, "x", [], {}, [1, "a", null], { nested: { deeper: [1e300] } }, "é\u0000\u2028"];

type Maker = (r: Random, base: StoredBase) => { bytes: Uint8Array; what: string; verdict: StoredVerdict } | undefined;

const clone = (o: Record<string, unknown>): Record<string, unknown> => JSON.parse(JSON.stringify(o)) as Record<string, unknown>;
const covering = (members: readonly string[], partitions: number): { member: string; partitions: number[] }[] =>
  members.map((member, i) => ({ member, partitions: Array.from({ length: partitions }, (_, p) => p).filter((p) => p % members.length === i) }));

const makers: Record<string, Maker> = {
  unknownField: (r, b) => {
    const c = clone(b.config);
    const value = r.pick(ANY_JSON);
    c["zz_" + String(r.below(100))] = value;
    return { bytes: json(c), what: `an unknown field ${JSON.stringify(value)}`, verdict: VALID };
  },
  keyInOtherCase: (_r, b) => {
    const { max_members: max, ...rest } = b.config;
    return { bytes: json({ Max_Members: max, ...rest }), what: `"Max_Members" for max_members`, verdict: VALID };
  },
  repeatedKeyLastGood: (r, b) => {
    // The first value is a whole number too: Go reports a wrong type even when a later key overwrites it.
    const body = JSON.stringify(b.config);
    const first = r.pick([0, 1, 9, 100]);
    return { bytes: text(`{"max_members":${first},${body.slice(1)}`), what: `max_members ${first} then the good value`, verdict: VALID };
  },
  whitespace: (_r, b) => ({ bytes: text(JSON.stringify(b.config, null, 3).replace(/\n/g, "\r\n\t")), what: "other white space", verdict: VALID }),
  memberDropped: (_r, b) => {
    if (b.members.length < 2) return undefined;
    return { bytes: json({ ...clone(b.config), members: b.members.slice(0, 1) }), what: `members ${JSON.stringify(b.members.slice(0, 1))}`, verdict: VALID };
  },
  mappingsForMembers: (_r, b) => {
    const { members: _m, ...rest } = clone(b.config);
    const mappings = covering(b.members, b.partitions);
    return { bytes: json({ ...rest, member_mappings: mappings }), what: `member_mappings ${JSON.stringify(mappings)}`, verdict: VALID };
  },
  memberTwice: (_r, b) => ({ bytes: json({ ...clone(b.config), members: [...b.members, b.members[0]] }), what: "a member listed twice", verdict: EITHER }),
  notUtf8: (r, b) => {
    const good = json(b.config);
    const bytes = new Uint8Array(good.length + 2);
    const at = 1 + r.below(good.length - 2);
    bytes.set(good.subarray(0, at));
    bytes.set([0xff, 0xfe], at);
    bytes.set(good.subarray(at), at + 2);
    return { bytes, what: `bytes 0xff 0xfe at ${at}`, verdict: EITHER };
  },
  truncated: (r, b) => {
    const good = JSON.stringify(b.config);
    const cut = r.below(good.length - 1);
    return { bytes: text(good.slice(0, cut)), what: `cut to ${cut} bytes`, verdict: invalid("decode") };
  },
  notAnObject: (r) => {
    const v = r.pick(["[]", "5", '"x"', "null", "true", "[{}]"]);
    return { bytes: text(v), what: `the value ${v}`, verdict: invalid("decode") };
  },
  maxMembersWrongType: (r, b) => {
    const v = r.pick(BAD_NUMBERS);
    return { bytes: json({ ...clone(b.config), max_members: v }), what: `max_members ${JSON.stringify(v)}`, verdict: invalid("decode") };
  },
  maxMembersZero: (r, b) => {
    const v = r.pick([0, null]);
    return { bytes: json({ ...clone(b.config), max_members: v }), what: `max_members ${JSON.stringify(v)}`, verdict: invalid("rules") };
  },
  maxMembersOtherCount: (r, b) => {
    const v = r.pick([b.partitions + 1, b.partitions * 2, b.partitions + 5].filter((n) => n !== b.partitions));
    return { bytes: json({ ...clone(b.config), max_members: v }), what: `max_members ${v} on ${b.partitions} partitions`, verdict: invalid("mismatch") };
  },
  memberBadName: (r, b) => {
    const name = r.pick(BAD_NAMES);
    return { bytes: json({ ...clone(b.config), members: [name, ...b.members.slice(1)] }), what: `member ${JSON.stringify(name)}`, verdict: invalid("rules") };
  },
  membersWrongType: (r, b) => {
    const v = r.pick<unknown>(["m1", [1], [{}], {}, [["m1"]], 7]);
    return { bytes: json({ ...clone(b.config), members: v }), what: `members ${JSON.stringify(v)}`, verdict: invalid("decode") };
  },
  membersAndMappings: (_r, b) => ({
    bytes: json({ ...clone(b.config), member_mappings: covering(b.members, b.partitions) }),
    what: "members and member_mappings both",
    verdict: invalid("rules"),
  }),
  mappingsBad: (r, b) => {
    const { members: _m, ...rest } = clone(b.config);
    const all = Array.from({ length: b.partitions }, (_, p) => p);
    const choices: [string, unknown][] = [
      ["a partition unmapped", [{ member: b.members[0], partitions: all.slice(1) }]],
      ["a partition mapped twice", [{ member: b.members[0], partitions: all }, { member: "mz", partitions: [0] }]],
      ["a partition out of range", [{ member: b.members[0], partitions: [...all, b.partitions] }]],
      ["a member mapped twice", [{ member: b.members[0], partitions: all.slice(0, 1) }, { member: b.members[0], partitions: all.slice(1) }]],
      ["a negative partition", [{ member: b.members[0], partitions: [-1, ...all] }]],
    ];
    // No members at all: Go's rules take an empty membership, static or elastic (no member then consumes).
    if (r.below(choices.length + 1) === 0) return { bytes: json({ ...rest, member_mappings: [] }), what: "member_mappings []", verdict: VALID };
    const [what, mappings] = r.pick(choices);
    return { bytes: json({ ...rest, member_mappings: mappings }), what: `member_mappings with ${what}`, verdict: invalid("rules") };
  },
  filtersBad: (r, b) => {
    if (b.kind !== "elastic" || b.filter === undefined) return undefined;
    const choices: [string, unknown, "rules" | "mismatch" | "decode"][] = [
      // Whether the rules or only the work queue's transforms refuse these is left open: the weaker claim is checked.
      ["none", [], "mismatch"],
      ["null", null, "mismatch"],
      ["a wildcard index past the filter's", [{ filter: b.filter, partitioning_wildcards: [2] }], "rules"],
      ["wildcard index 0", [{ filter: b.filter, partitioning_wildcards: [0] }], "rules"],
      ["another filter", [{ filter: "elsewhere.*", partitioning_wildcards: [1] }], "mismatch"],
      ["a filter that is not an object", ["x"], "decode"],
      ["wildcards of the wrong type", [{ filter: b.filter, partitioning_wildcards: "1" }], "decode"],
    ];
    const [what, filters, by] = r.pick(choices);
    return { bytes: json({ ...clone(b.config), partitioning_filters: filters }), what: `partitioning_filters ${what}`, verdict: invalid(by) };
  },
};

/** The mutation kinds, by name (for a fixed choice in unit tests). */
export const STORED_MUTATIONS: readonly string[] = Object.keys(makers);

/** One mutation of `base`, chosen at random among those that apply to it (or `kind` when given). */
export function mutateStored(r: Random, base: StoredBase, kind?: string): StoredMutation {
  const names = kind === undefined ? STORED_MUTATIONS : [kind];
  for (let tries = 0; tries < 50; tries++) {
    const name = r.pick(names);
    const made = makers[name]?.(r, base);
    if (made) return { ...made, what: `${name}: ${made.what}` };
  }
  throw new Error(`no mutation of ${names.join(", ")} applies to this ${base.kind} config`);
}
