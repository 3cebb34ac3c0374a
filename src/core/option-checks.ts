/** Type and range checks of option values, each failing with an `INVALID_ARGUMENT` that quotes the value. */
import { ConsumerGroupError } from "./errors.js";

/** The longest delay a Node.js timer holds (a longer one fires at once, with a `TimeoutOverflowWarning`). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** The value as text for an error message: numbers as written (`NaN`, `0`), else JSON where it has one (`"x"`, `null`), else its type. */
export function quoted(value: unknown): string {
  if (value === undefined) return "undefined";
  if (typeof value === "function") return "a function";
  if (typeof value === "number" || typeof value === "bigint") return String(value);
  try {
    return JSON.stringify(value) ?? `a ${typeof value}`;
  } catch {
    return `a ${typeof value} that has no JSON form`;
  }
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
