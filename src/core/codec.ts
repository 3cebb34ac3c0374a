/**
 * Reads and writes the stored configs exactly as Go's `encoding/json` does:
 * Go's field order and omitempty rules, `null` kept distinct from `[]`, unknown
 * fields ignored, keys matched case-insensitively, and `<`, `>`, `&`, U+2028 and
 * U+2029 escaped as `\u003c`, `\u003e`, `\u0026`, `\u2028`, `\u2029`.
 */
import { ConsumerGroupError } from "./errors.js";
import type { ElasticConsumerGroupConfig, MemberMapping, PartitioningFilter, StaticConsumerGroupConfig } from "./types.js";

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
const GO_HTML_ESCAPES: Record<string, string> = {
  "<": "\\u003c",
  ">": "\\u003e",
  "&": "\\u0026",
  "\u2028": "\\u2028",
  "\u2029": "\\u2029",
};

/**
 * A JSON string literal as Go's `encoding/json` writes it.
 *
 * @param s - the string
 */
export function goJsonString(s: string): string {
  // Go replaces invalid UTF-8 with U+FFFD; a lone surrogate is what JS has instead.
  return JSON.stringify(s.replace(LONE_SURROGATE, "\uFFFD")).replace(/[<>&\u2028\u2029]/g, (c) => GO_HTML_ESCAPES[c] ?? c);
}

const list = <T>(items: readonly T[] | null, item: (v: T) => string): string => (items === null ? "null" : `[${items.map(item).join(",")}]`);
const intList = (items: readonly number[] | null): string => list(items, (n) => String(n));
const strList = (items: readonly string[]): string => list(items, goJsonString);
const mappingList = (items: readonly MemberMapping[]): string =>
  list(items, (m) => `{"member":${goJsonString(m.member)},"partitions":${intList(m.partitions)}}`);
const filterList = (items: readonly PartitioningFilter[] | null): string =>
  list(items, (f) => `{"filter":${goJsonString(f.filter)},"partitioning_wildcards":${intList(f.partitioning_wildcards)}}`);

function omitEmpty<T>(key: string, value: readonly T[] | undefined, encode: (v: readonly T[]) => string): string {
  return value && value.length > 0 ? `,"${key}":${encode(value)}` : "";
}

/**
 * Encodes a static config byte for byte as Go does.
 *
 * @example
 * ```ts
 * encodeStaticConfig({ max_members: 10, filters: [">"], members: ["m1", "m2"] });
 * // '{"max_members":10,"filters":["\u003e"],"members":["m1","m2"]}'
 * ```
 */
export function encodeStaticConfig(config: StaticConsumerGroupConfig): string {
  return (
    `{"max_members":${config.max_members}` +
    omitEmpty("filters", config.filters, strList) +
    omitEmpty("members", config.members, strList) +
    omitEmpty("member_mappings", config.member_mappings, mappingList) +
    "}"
  );
}

/**
 * Encodes an elastic config byte for byte as Go does. `partitioning_filters` is never
 * omitted (`null` stays `null`, `[]` stays `[]`); zero buffer caps are omitted.
 */
export function encodeElasticConfig(config: ElasticConsumerGroupConfig): string {
  const cap = (key: string, v: number | undefined): string => (v ? `,"${key}":${v}` : "");
  return (
    `{"max_members":${config.max_members}` +
    `,"partitioning_filters":${filterList(config.partitioning_filters ?? null)}` +
    cap("max_buffered_msg", config.max_buffered_msg) +
    cap("max_buffered_bytes", config.max_buffered_bytes) +
    omitEmpty("members", config.members, strList) +
    omitEmpty("member_mappings", config.member_mappings, mappingList) +
    "}"
  );
}

// --- decoding -------------------------------------------------------------

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

class DecodeError extends Error {}

/** Go matches JSON keys to fields exactly first, else case-insensitively; a later key overwrites an earlier one. */
function fields(obj: Json, where: string, names: readonly string[]): Map<string, Json> {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    throw new DecodeError(`${where} must be a JSON object, got ${Array.isArray(obj) ? "an array" : JSON.stringify(obj)}`);
  }
  const found = new Map<string, Json>();
  for (const [key, value] of Object.entries(obj)) {
    const name = names.includes(key) ? key : names.find((n) => n.toLowerCase() === key.toLowerCase());
    if (name !== undefined) found.set(name, value);
  }
  return found;
}

function asInt(v: Json, where: string, unsigned: boolean): number {
  if (typeof v !== "number" || !Number.isSafeInteger(v) || (unsigned && v < 0)) {
    throw new DecodeError(`${where} must be ${unsigned ? "a non-negative" : "an"} integer, got ${JSON.stringify(v)}`);
  }
  return v;
}

/** Missing or `null` → undefined (Go's nil slice); otherwise an array, possibly empty. */
function asArray<T>(v: Json | undefined, where: string, item: (x: Json, where: string) => T): T[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw new DecodeError(`${where} must be an array, got ${JSON.stringify(v)}`);
  return v.map((x, i) => item(x, `${where}[${i}]`));
}

function asString(v: Json, where: string): string {
  if (v === null) return ""; // Go leaves the zero value for a JSON null
  if (typeof v !== "string") throw new DecodeError(`${where} must be a string, got ${JSON.stringify(v)}`);
  return v;
}

const asIntItem = (x: Json, where: string): number => (x === null ? 0 : asInt(x, where, false));

function asMapping(x: Json, where: string): MemberMapping {
  const f = fields(x, where, ["member", "partitions"]);
  const member = f.get("member");
  return {
    member: member === undefined ? "" : asString(member, `${where}.member`),
    partitions: asArray(f.get("partitions"), `${where}.partitions`, asIntItem) ?? null,
  };
}

function asPartitioningFilter(x: Json, where: string): PartitioningFilter {
  const f = fields(x, where, ["filter", "partitioning_wildcards"]);
  const filter = f.get("filter");
  return {
    filter: filter === undefined ? "" : asString(filter, `${where}.filter`),
    partitioning_wildcards: asArray(f.get("partitioning_wildcards"), `${where}.partitioning_wildcards`, asIntItem) ?? null,
  };
}

function parse(raw: Uint8Array | string, kind: string): Json {
  const text = typeof raw === "string" ? raw : new TextDecoder().decode(raw);
  try {
    return JSON.parse(text) as Json;
  } catch (err) {
    const shown = text.length === 0 ? "an empty value (was the key purged instead of deleted?)" : `"${text.slice(0, 80)}"`;
    throw new ConsumerGroupError("CONFIG_DECODE", `invalid JSON value for the ${kind} consumer group's config: ${shown}`, { cause: err });
  }
}

function decodeWith<T>(raw: Uint8Array | string, kind: string, build: (obj: Json) => T): T {
  const obj = parse(raw, kind);
  try {
    return build(obj);
  } catch (err) {
    if (err instanceof DecodeError) {
      throw new ConsumerGroupError("CONFIG_DECODE", `invalid JSON value for the ${kind} consumer group's config: ${err.message}`, { cause: err });
    }
    throw err;
  }
}

const setIf = <T extends object, K extends keyof T>(target: T, key: K, value: T[K] | undefined): void => {
  if (value !== undefined) target[key] = value;
};

/**
 * Decodes a stored static config with Go's decoding rules.
 *
 * @throws ConsumerGroupError `CONFIG_DECODE` for invalid JSON or wrong types
 */
export function decodeStaticConfig(raw: Uint8Array | string): StaticConsumerGroupConfig {
  return decodeWith(raw, "static", (obj) => {
    const f = fields(obj, "the config", ["max_members", "filters", "members", "member_mappings"]);
    const max = f.get("max_members");
    const config: StaticConsumerGroupConfig = { max_members: max === undefined || max === null ? 0 : asInt(max, "max_members", true) };
    setIf(config, "filters", asArray(f.get("filters"), "filters", asString));
    setIf(config, "members", asArray(f.get("members"), "members", asString));
    setIf(config, "member_mappings", asArray(f.get("member_mappings"), "member_mappings", asMapping));
    return config;
  });
}

/**
 * Decodes a stored elastic config with Go's decoding rules. A missing
 * `partitioning_filters` decodes to `null`, as Go's nil.
 *
 * @throws ConsumerGroupError `CONFIG_DECODE` for invalid JSON or wrong types
 */
export function decodeElasticConfig(raw: Uint8Array | string): ElasticConsumerGroupConfig {
  return decodeWith(raw, "elastic", (obj) => {
    const f = fields(obj, "the config", ["max_members", "partitioning_filters", "max_buffered_msg", "max_buffered_bytes", "members", "member_mappings"]);
    const num = (key: string, unsigned: boolean): number | undefined => {
      const v = f.get(key);
      return v === undefined || v === null ? undefined : asInt(v, key, unsigned);
    };
    const config: ElasticConsumerGroupConfig = {
      max_members: num("max_members", true) ?? 0,
      partitioning_filters: asArray(f.get("partitioning_filters"), "partitioning_filters", asPartitioningFilter) ?? null,
    };
    const msgs = num("max_buffered_msg", false);
    const bytes = num("max_buffered_bytes", false);
    if (msgs) config.max_buffered_msg = msgs;
    if (bytes) config.max_buffered_bytes = bytes;
    setIf(config, "members", asArray(f.get("members"), "members", asString));
    setIf(config, "member_mappings", asArray(f.get("member_mappings"), "member_mappings", asMapping));
    return config;
  });
}

// --- comparison -----------------------------------------------------------

const sameList = <T>(a: readonly T[] | null | undefined, b: readonly T[] | null | undefined, eq: (x: T, y: T) => boolean = (x, y) => x === y): boolean =>
  (a ?? []).length === (b ?? []).length && (a ?? []).every((x, i) => eq(x, (b ?? [])[i] as T));

const sameMapping = (x: MemberMapping, y: MemberMapping): boolean => x.member === y.member && sameList(x.partitions, y.partitions);

/**
 * True when two membership specs are the same. Unlike Go's `reflect.DeepEqual`, an
 * absent list equals an empty one (Go bug: `CreateStatic` was not idempotent).
 */
export function sameMembership(
  a: { members?: readonly string[] | undefined; member_mappings?: readonly MemberMapping[] | undefined },
  b: { members?: readonly string[] | undefined; member_mappings?: readonly MemberMapping[] | undefined },
): boolean {
  return sameList(a.members, b.members) && sameList(a.member_mappings, b.member_mappings, sameMapping);
}

/** True when two static configs are the same group (nil and empty lists equal). */
export function sameStaticConfig(a: StaticConsumerGroupConfig, b: StaticConsumerGroupConfig): boolean {
  return a.max_members === b.max_members && sameList(a.filters, b.filters) && sameMembership(a, b);
}

/**
 * True when two elastic configs have the same immutable part: partition count,
 * partitioning filters and buffer caps. Membership is not compared.
 */
export function sameElasticSettings(a: ElasticConsumerGroupConfig, b: ElasticConsumerGroupConfig): boolean {
  const sameFilter = (x: PartitioningFilter, y: PartitioningFilter): boolean => x.filter === y.filter && sameList(x.partitioning_wildcards, y.partitioning_wildcards);
  return (
    a.max_members === b.max_members &&
    (a.max_buffered_msg ?? 0) === (b.max_buffered_msg ?? 0) &&
    (a.max_buffered_bytes ?? 0) === (b.max_buffered_bytes ?? 0) &&
    sameList(a.partitioning_filters, b.partitioning_filters, sameFilter)
  );
}
