/** Type and range checks of option values, each failing with an `INVALID_ARGUMENT` that quotes the value. */
import { ConsumerGroupError } from "./errors.js";

/** The longest delay a Node.js timer holds (a longer one fires at once, with a `TimeoutOverflowWarning`). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** The longest text {@link quoted} returns; past it the value is cut with an ellipsis. */
const MAX_QUOTED_CHARS = 200;
/** How deep {@link quoted} renders nested objects and arrays. */
const MAX_QUOTED_DEPTH = 4;

/**
 * The value as text for an error message: JSON where it has one (`"x"`, `null`,
 * `{"a":1}`), numbers as written (`NaN`, `Infinity`), BigInts with their `n` (`5n`, also
 * nested), a circular reference as `[Circular]`, and a type name for what has no text
 * (`a function`, `a symbol`). Never throws; cut to 200 characters.
 */
export function quoted(value: unknown): string {
  let text: string;
  try {
    text = render(value, [], 0);
  } catch {
    // A getter or a toJSON that throws.
    text = `${/^[aeiou]/.test(typeof value) ? "an" : "a"} ${typeof value} that cannot be shown`;
  }
  return text.length > MAX_QUOTED_CHARS ? `${text.slice(0, MAX_QUOTED_CHARS - 1)}…` : text;
}

function render(value: unknown, ancestors: object[], depth: number): string {
  switch (typeof value) {
    case "undefined":
      return "undefined";
    case "function":
      return "a function";
    case "symbol":
      return value.toString();
    case "number":
      return Object.is(value, -0) ? "-0" : String(value);
    case "bigint":
      return `${value}n`;
    case "string":
    case "boolean":
      return JSON.stringify(value);
  }
  if (value === null) return "null";
  const obj = value as object;
  if (ancestors.includes(obj)) return "[Circular]";
  const toJSON = (obj as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function") {
    const json: unknown = toJSON.call(obj);
    if (json !== obj) return render(json, [...ancestors, obj], depth);
  }
  if (depth >= MAX_QUOTED_DEPTH) return Array.isArray(obj) ? "[…]" : "{…}";
  const inner = [...ancestors, obj];
  if (Array.isArray(obj)) return `[${obj.map((v: unknown) => render(v, inner, depth + 1)).join(",")}]`;
  // As JSON does: keys whose values have no JSON form are left out.
  const entries = Object.entries(obj).filter(([, v]) => v !== undefined && typeof v !== "function" && typeof v !== "symbol");
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${render(v, inner, depth + 1)}`).join(",")}}`;
}

/**
 * Checks that `value` is an options object (not `null`, an array or a built-in object such as a Date) whose every key
 * is one of `accepted`, and returns it. A known key whose value is `undefined` is
 * fine (it means "the default"); an unknown key is refused even when its value is
 * `undefined`, since it is most often a misspelt option that would be silently ignored.
 *
 * @param value - what the caller passed
 * @param what - how the message names it, e.g. `"createElastic options"` or `"retry"`
 * @param accepted - the keys it takes
 * @returns `value`, typed as a record
 * @throws ConsumerGroupError `INVALID_ARGUMENT` naming the unknown key(s) and listing the accepted ones
 *
 * @example
 * ```ts
 * const given = optionsObject(options.retry, "retry", ["maxDeliver", "backoffMs", "exactAttempts"]);
 * ```
 */
export function optionsObject(value: unknown, what: string, accepted: readonly string[]): Record<string, unknown> {
  // A Date, a Map, an AbortSignal or a boxed primitive is no options object, though it has no unknown keys.
  if (typeof value !== "object" || value === null || Array.isArray(value) || Object.prototype.toString.call(value) !== "[object Object]") {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `${what} must be an object, got ${quoted(value)}: it takes ${accepted.length > 0 ? accepted.join(", ") : "no options"}`);
  }
  refuseUnknownKeys(value, what, accepted);
  return value as Record<string, unknown>;
}

/**
 * Refuses the keys of `value` that are not in `accepted`.
 *
 * @throws ConsumerGroupError `INVALID_ARGUMENT` naming the unknown key(s), the accepted ones, and the closest accepted key of a misspelt one
 */
export function refuseUnknownKeys(value: object, what: string, accepted: readonly string[]): void {
  const unknown = Object.keys(value).filter((k) => !accepted.includes(k));
  if (unknown.length === 0) return;
  const hints = unknown.flatMap((k) => {
    const near = closest(k, accepted);
    return near === undefined ? [] : [`${JSON.stringify(k)} → ${JSON.stringify(near)}`];
  });
  throw new ConsumerGroupError(
    "INVALID_ARGUMENT",
    `${what} has unknown option${unknown.length > 1 ? "s" : ""} ${unknown.map((k) => JSON.stringify(k)).join(", ")}: ` +
      `it takes ${accepted.length > 0 ? accepted.join(", ") : "no options"}${hints.length > 0 ? ` (did you mean ${hints.join(", ")}?)` : ""}`,
  );
}

/** The accepted key a misspelt one most likely meant: same letters but for case, or at most 2 edits away. */
function closest(key: string, accepted: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  const exact = accepted.find((a) => a.toLowerCase() === lower);
  if (exact !== undefined) return exact;
  let best: { key: string; distance: number } | undefined;
  for (const a of accepted) {
    const distance = editDistance(lower, a.toLowerCase());
    if (distance <= 2 && (best === undefined || distance < best.distance)) best = { key: a, distance };
  }
  return best?.key;
}

/** Levenshtein distance (insertions, deletions, substitutions). */
function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row.push(Math.min((previous[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    previous = row;
  }
  return previous[b.length] ?? 0;
}

/**
 * `value` when it is a whole number from `min` to `max`, `fallback` when it is undefined.
 *
 * @throws ConsumerGroupError `INVALID_ARGUMENT` for anything else (`null`, `1.5`, `NaN`, a BigInt, a string)
 */
export function optionalInteger(value: unknown, name: string, fallback: number, min: number, max: number = Number.MAX_SAFE_INTEGER, unit = ""): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`;
    throw new ConsumerGroupError("INVALID_ARGUMENT", `${name} must be a whole number${unit ? ` of ${unit}` : ""} ${range}, got ${quoted(value)}`);
  }
  return value;
}

/**
 * `value` when it is a function, undefined when it is undefined.
 *
 * @throws ConsumerGroupError `INVALID_ARGUMENT` for anything else (`null` included)
 */
export function optionalFunction<F>(value: F | undefined, name: string, shape = "a function"): F | undefined {
  if (value === undefined || typeof value === "function") return value;
  throw new ConsumerGroupError("INVALID_ARGUMENT", `${name} must be ${shape}, got ${quoted(value)}`);
}

/**
 * `value` when it is a boolean, `fallback` when it is undefined.
 *
 * @throws ConsumerGroupError `INVALID_ARGUMENT` for anything else (`0`, `"x"`, `null`)
 */
export function optionalBoolean(value: unknown, name: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== "boolean") throw new ConsumerGroupError("INVALID_ARGUMENT", `${name} must be true or false, got ${quoted(value)}`);
  return value;
}

/**
 * `value` when it is a positive number of ms that a timer can hold, `fallback` when undefined.
 *
 * @throws ConsumerGroupError `INVALID_ARGUMENT` otherwise
 */
export function optionalTimerMs(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0 || value > MAX_TIMER_MS) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `${name} must be a positive number of ms up to ${MAX_TIMER_MS} (about 24.8 days), got ${quoted(value)}`);
  }
  return value;
}
