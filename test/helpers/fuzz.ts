/**
 * The pieces of the input fuzz: a seeded random source, a pool of hostile values, the
 * verdict each option's contract gives a value, option mutations, and a snapshot of
 * everything a call could write (streams, consumers, and every KV key with its revision).
 */
import assert from "node:assert/strict";
import type { JetStreamManager } from "@nats-io/jetstream";
import { ConsumerGroupError, type ErrorCode } from "../../src/index.js";
import { serverState, type ServerState } from "./security-state.js";

/** A seeded random source (mulberry32): the same seed gives the same run. */
export class Random {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0;
  }
  /** A number in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** An integer in [0, n). */
  below(n: number): number {
    return Math.floor(this.next() * n);
  }
  /** One of `items`. */
  pick<T>(items: readonly T[]): T {
    return items[this.below(items.length)] as T;
  }
}

/** The seed of this run: `FUZZ_SEED` when set (to repeat a run), else a random one. */
export function fuzzSeed(env: NodeJS.ProcessEnv = process.env): number {
  const given = env["FUZZ_SEED"];
  if (given === undefined || given === "") return Math.floor(Math.random() * 2 ** 31);
  const seed = Number(given);
  if (!Number.isSafeInteger(seed) || seed < 0) throw new Error(`FUZZ_SEED must be a whole number >= 0, got ${JSON.stringify(given)}`);
  return seed;
}

/** What an option's contract says of a value: it must be taken, it must be refused, or it depends on the rest. */
export type Verdict = "valid" | "invalid" | "either";
/** The verdict of one option's values. */
export type Rule = (value: unknown) => Verdict;

/** A circular object: JSON.stringify throws on it. */
function circular(): Record<string, unknown> {
  const o: Record<string, unknown> = { a: 1 };
  o["self"] = o;
  return o;
}

/** Hostile values: wrong types, edges of ranges, names the server refuses, nested garbage. */
export function hostileValues(): unknown[] {
  return [
    undefined, null, Number.NaN, Infinity, -Infinity, -1, 0, 1, 1.5, 3, 2 ** 31, 2 ** 40, 2 ** 53, 1e300, -0,
    5n, 2n ** 64n, "", " ", "a b", "*", ">", "a.b", "x", "m1", "orders.*", "5", "true",
    true, false, [], [1], ["a"], [null], {}, { zz: 1 }, { nested: { deeper: [{ x: 5n }] } }, circular(),
    () => 1, Symbol("s"), new Date(0), new AbortController().signal, Object.create(null) as object,
  ];
}

/** A name the server takes for streams, groups and members (letters, digits, `_` and `-`). */
const NAME = /^[A-Za-z0-9_-]+$/;

/** Rules for the common option shapes. */
export const rules = {
  /** A stream, group or member name. */
  name: (v: unknown): Verdict => (typeof v === "string" && NAME.test(v) ? "either" : "invalid"),
  /** Absent or a function. */
  optionalFunction: (v: unknown): Verdict => (v === undefined || typeof v === "function" ? "valid" : "invalid"),
  /** Absent or a boolean. */
  optionalBoolean: (v: unknown): Verdict => (v === undefined || typeof v === "boolean" ? "valid" : "invalid"),
  /** Absent, or a whole number >= min. */
  optionalInteger:
    (min: number, max = Number.MAX_SAFE_INTEGER): Rule =>
    (v) =>
      v === undefined ? "valid" : typeof v === "number" && Number.isSafeInteger(v) && v >= min && v <= max ? "valid" : "invalid",
  /** Absent, or a whole number >= min whose acceptance depends on other options. */
  optionalIntegerEither:
    (min: number): Rule =>
    (v) =>
      v === undefined ? "valid" : typeof v === "number" && Number.isSafeInteger(v) && v >= min ? "either" : "invalid",
  /** Absent, or a finite number in [min, max] (excluding min when `open`). */
  optionalNumber:
    (min: number, max: number, open = false): Rule =>
    (v) =>
      v === undefined ? "valid" : typeof v === "number" && Number.isFinite(v) && (open ? v > min : v >= min) && v <= max ? "valid" : "invalid",
  /** Absent, or a delay (ms) or non-empty list of delays a timer holds. */
  optionalDelays: (v: unknown): Verdict => {
    if (v === undefined) return "valid";
    const steps: unknown[] = Array.isArray(v) ? v : [v];
    const ok = steps.length > 0 && steps.every((s) => typeof s === "number" && Number.isFinite(s) && s >= 0 && s <= 2 ** 31 - 1);
    return ok ? "valid" : "invalid";
  },
  /** Absent, or a literal subject. */
  optionalLiteralSubject: (v: unknown): Verdict => (v === undefined ? "valid" : typeof v === "string" && v !== "" && !/[\s*>]/.test(v) ? "valid" : "invalid"),
  /** Absent, or any object (its fields checked elsewhere, if at all); null, arrays and primitives refused. */
  optionalObject: (v: unknown): Verdict => (v === undefined ? "valid" : typeof v === "object" && v !== null && !Array.isArray(v) ? "either" : "invalid"),
  /** Absent, or an array whose elements are checked elsewhere. */
  optionalArray: (v: unknown): Verdict => (v === undefined ? "valid" : Array.isArray(v) ? "either" : "invalid"),
  /** One of the given values. */
  oneOf:
    (...allowed: unknown[]): Rule =>
    (v) =>
      allowed.includes(v) ? "valid" : "invalid",
  /** Anything: no rule known. */
  any: (): Verdict => "either",
};

/** Combines verdicts: one refusal refuses the call, every value taken takes it. */
export function combine(verdicts: Verdict[]): Verdict {
  if (verdicts.includes("invalid")) return "invalid";
  return verdicts.every((v) => v === "valid") ? "valid" : "either";
}

/** A nested option object and the rules of its keys. */
export interface NestedSpec {
  /** Builds a valid value to mutate. */
  base(): Record<string, unknown>;
  /** Its keys' rules. */
  keys: Record<string, Rule>;
  /** Whether the nested object sits in a one-element array (partitioning filters, mappings). */
  inArray?: boolean;
  /** Whether unknown keys are refused (false: keys the server defines, like a consumer config). */
  closed?: boolean;
}

/** What a mutation did and what the contract says of it. */
export interface Mutation {
  options: unknown;
  verdict: Verdict;
  what: string;
}

/** Random keys: near misses of real ones, other casing, and plain garbage. */
function unknownKey(random: Random, known: string[]): string {
  const k = random.pick(known.length > 0 ? known : ["x"]);
  return random.pick([`${k}s`, k.toUpperCase(), k.slice(0, -1) || "y", `${k}_`, "constructor", "extra", "zz", " ", "", "__pcg"]);
}

/**
 * One to three random mutations of valid options: an unknown key, a known key set to a
 * hostile value, a nested object's key mutated or an unknown key added to it, or the
 * whole options replaced by a hostile value.
 *
 * @param wholeOptional - whether the options object may be left out (defaults apply)
 */
export function mutate(random: Random, base: () => Record<string, unknown>, keys: Record<string, Rule>, nested: Record<string, NestedSpec>, wholeOptional: boolean): Mutation {
  const pool = hostileValues();
  if (random.below(12) === 0) {
    const value = random.pick(pool);
    // Left out, or an empty options object: the defaults, where the options may be left out.
    const empty = value === undefined || (typeof value === "object" && value !== null && Object.prototype.toString.call(value) === "[object Object]" && Object.keys(value).length === 0);
    return { options: value, verdict: empty && wholeOptional ? "valid" : "invalid", what: `options = ${describe(value)}` };
  }
  const options = base();
  // By key: a later mutation of the same key replaces the earlier one, and its verdict with it.
  const byKey = new Map<string, Verdict>();
  const what: string[] = [];
  const count = 1 + (random.below(4) === 0 ? random.below(3) : 0);
  const known = Object.keys(keys);
  for (let i = 0; i < count; i++) {
    const kind = random.below(10);
    if (kind === 0) {
      const key = unknownKey(random, known);
      if (known.includes(key)) continue;
      options[key] = random.pick(pool);
      byKey.set(key, "invalid");
      what.push(`unknown key ${JSON.stringify(key)}`);
    } else if (kind <= 2 && Object.keys(nested).length > 0) {
      const name = random.pick(Object.keys(nested));
      const spec = nested[name] as NestedSpec;
      const inner = spec.base();
      const innerKeys = Object.keys(spec.keys);
      if (random.below(3) === 0) {
        const key = unknownKey(random, innerKeys);
        if (innerKeys.includes(key)) continue;
        inner[key] = random.pick(pool);
        byKey.set(name, spec.closed === false ? "either" : "invalid");
        what.push(`${name}: unknown key ${JSON.stringify(key)}`);
      } else {
        const key = random.pick(innerKeys);
        const value = random.pick(pool);
        inner[key] = value;
        byKey.set(name, (spec.keys[key] as Rule)(value));
        what.push(`${name}.${key} = ${describe(value)}`);
      }
      options[name] = spec.inArray ? [inner] : inner;
      // The nested object replaces what the base had: its own verdict is that of a valid object.
    } else {
      const key = random.pick(known);
      const value = random.pick(pool);
      options[key] = value;
      byKey.set(key, (keys[key] as Rule)(value));
      what.push(`${key} = ${describe(value)}`);
    }
  }
  return { options, verdict: combine([...byKey.values()]), what: what.join("; ") || "no change" };
}

/** A value as the fuzz log shows it. */
export function describe(value: unknown): string {
  if (typeof value === "bigint") return `${value}n`;
  if (typeof value === "function") return "a function";
  if (typeof value === "symbol") return value.toString();
  if (typeof value === "number") return Object.is(value, -0) ? "-0" : String(value);
  if (value instanceof AbortSignal) return "an AbortSignal";
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return "a circular object";
  }
}

/** The error codes that say an argument was refused before anything was asked of the server. */
export const ARGUMENT_CODES: readonly ErrorCode[] = [
  "INVALID_ARGUMENT",
  "INVALID_NAME",
  "INVALID_SUBJECT",
  "INVALID_HANDLER",
  "INVALID_CONSUMER_TEMPLATE",
  "INVALID_MAX_MEMBERS",
  "MEMBERS_AND_MAPPINGS",
  "MAPPING_COUNT",
  "DUPLICATE_MEMBER",
  "DUPLICATE_PARTITION",
  "PARTITION_OUT_OF_RANGE",
  "PARTITION_COVERAGE",
  "INVALID_PARTITIONING_FILTER",
  "OVERLAPPING_FILTERS",
  "STATIC_GROUP",
];

/** Everything a call could write: streams, their consumers and sequences, and every KV key with its revision. */
export interface FullState {
  streams: ServerState;
  keys: Record<string, string>;
}

/** Snapshots streams, consumers and each KV bucket's keys with their last revision and operation. */
export async function fullState(jsm: JetStreamManager): Promise<FullState> {
  const streams = await serverState(jsm);
  const keys: Record<string, string> = {};
  for (const name of Object.keys(streams).filter((n) => n.startsWith("KV_"))) {
    const info = await jsm.streams.info(name, { subjects_filter: ">" });
    for (const [subject, count] of Object.entries(info.state.subjects ?? {})) {
      const last = await jsm.streams.getMessage(name, { last_by_subj: subject });
      keys[subject] = last ? `rev ${last.seq} ${last.header?.get("KV-Operation") || "PUT"} (${count} kept)` : `${count} kept`;
    }
  }
  return { streams, keys };
}

/** The differences between two snapshots, in words. */
export function stateChanges(before: FullState, after: FullState): string[] {
  const changes: string[] = [];
  const names = [...new Set([...Object.keys(before.streams), ...Object.keys(after.streams)])].sort();
  for (const name of names) {
    const a = before.streams[name];
    const b = after.streams[name];
    if (!a) changes.push(`stream "${name}" was created`);
    else if (!b) changes.push(`stream "${name}" was deleted`);
    else {
      if (a.lastSeq !== b.lastSeq || a.messages !== b.messages) changes.push(`stream "${name}" was written (seq ${a.lastSeq} → ${b.lastSeq})`);
      const added = b.consumers.filter((c) => !a.consumers.includes(c));
      const removed = a.consumers.filter((c) => !b.consumers.includes(c));
      if (added.length > 0) changes.push(`consumers created on "${name}": ${added.join(", ")}`);
      if (removed.length > 0) changes.push(`consumers deleted on "${name}": ${removed.join(", ")}`);
    }
  }
  for (const key of [...new Set([...Object.keys(before.keys), ...Object.keys(after.keys)])].sort()) {
    if (before.keys[key] !== after.keys[key]) changes.push(`KV ${key}: ${before.keys[key] ?? "absent"} → ${after.keys[key] ?? "absent"}`);
  }
  return changes;
}

/** Fails when the call refused with `err` is not a ConsumerGroupError. */
export function assertTyped(err: unknown, what: string): asserts err is ConsumerGroupError {
  assert.ok(err instanceof ConsumerGroupError, `${what}: threw ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)} instead of a ConsumerGroupError`);
}
