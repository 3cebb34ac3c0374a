/**
 * Pure parsers of command-line values: numbers, member mappings, durations,
 * wildcard indexes. Each throws a {@link UsageError} that says what is wrong and
 * what a good value looks like; the CLI maps it to exit code 2.
 */
import type { MemberMapping } from "../index.js";
import { UsageError } from "./errors.js";

/**
 * A positive integer, e.g. `max-members`.
 *
 * @param value - the text given
 * @param name - the argument's name, for the message
 * @throws UsageError when `value` is not an integer >= 1
 */
export function parsePositiveInt(value: string, name: string): number {
  const n = parseInteger(value, name);
  if (n < 1) throw new UsageError(`${name} must be an integer >= 1, got "${value}"`);
  return n;
}

/**
 * An integer >= 0, e.g. `--max-buffered-msgs`.
 *
 * @throws UsageError when `value` is not an integer >= 0
 */
export function parseNonNegativeInt(value: string, name: string): number {
  const n = parseInteger(value, name);
  if (n < 0) throw new UsageError(`${name} must be an integer >= 0, got "${value}"`);
  return n;
}

function parseInteger(value: string, name: string): number {
  const text = value.trim();
  if (!/^[+-]?\d+$/.test(text)) throw new UsageError(`${name} must be an integer, got "${value}"`);
  const n = Number(text);
  if (!Number.isSafeInteger(n)) throw new UsageError(`${name} is too large: "${value}"`);
  return n;
}

/**
 * A positive number, fractions allowed, e.g. `--rate-per-member 12.5`.
 *
 * @throws UsageError when `value` is not a finite number > 0
 */
export function parsePositiveNumber(value: string, name: string): number {
  const text = value.trim();
  const n = /^\+?(\d+(\.\d*)?|\.\d+)(e[+-]?\d+)?$/i.test(text) ? Number(text) : NaN;
  if (!Number.isFinite(n) || n <= 0) throw new UsageError(`${name} must be a number > 0, got "${value}"`);
  return n;
}

/**
 * A comma-separated list of partition numbers; ranges such as `0-3` are allowed.
 *
 * @example parsePartitionList("0,1,4-6") // [0, 1, 4, 5, 6]
 * @throws UsageError on anything else
 */
export function parsePartitionList(value: string): number[] {
  const parts = value
    .split(/[,\s]+/)
    .map((p) => p.trim())
    .filter((p) => p !== "");
  if (parts.length === 0) throw new UsageError(`expected a comma separated list of partition numbers such as "0,1,2", got "${value}"`);
  const result: number[] = [];
  for (const part of parts) {
    const range = /^(\d+)-(\d+)$/.exec(part);
    if (range) {
      const from = Number(range[1]);
      const to = Number(range[2]);
      if (to < from || to - from > 100_000) throw new UsageError(`bad partition range "${part}": write it low-high, e.g. 0-3`);
      for (let p = from; p <= to; p++) result.push(p);
    } else if (/^\d+$/.test(part)) {
      result.push(Number(part));
    } else {
      throw new UsageError(`"${part}" is not a partition number (partition numbers are integers >= 0)`);
    }
  }
  return result;
}

/**
 * A member mapping `member:p1,p2,…` (Go's syntax; ranges like `m1:0-3` also work).
 *
 * @throws UsageError when the text is not of that form
 */
export function parseMapping(value: string): MemberMapping {
  const colon = value.indexOf(":");
  if (colon <= 0 || colon !== value.lastIndexOf(":")) {
    throw new UsageError(`bad member mapping "${value}": write it as <member>:<partition>,<partition>,… e.g. m1:0,1,2`);
  }
  const member = value.slice(0, colon).trim();
  const list = value.slice(colon + 1);
  try {
    return { member, partitions: parsePartitionList(list) };
  } catch (err) {
    throw new UsageError(`bad member mapping "${value}": ${err instanceof Error ? err.message : String(err)}`);
  }
}

const DURATION_UNITS: Record<string, number> = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/**
 * A Go-style duration (`20ms`, `1.5s`, `2m`, `1m30s`) or a bare number of milliseconds, in ms.
 *
 * @throws UsageError on anything else
 */
export function parseDuration(value: string, name: string): number {
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  const re = /(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/gy;
  let total = 0;
  let end = 0;
  for (let m = re.exec(text); m; m = re.exec(text)) {
    total += Number(m[1]) * (DURATION_UNITS[m[2] ?? ""] ?? NaN);
    end = re.lastIndex;
  }
  if (text === "" || end !== text.length || !Number.isFinite(total)) {
    throw new UsageError(`${name} must be a duration such as 20ms, 1.5s or 2m, got "${value}"`);
  }
  return total;
}

/**
 * The partitioning wildcard indexes of one filter: `1`, `1,2` or `1 2`;
 * an empty value or `none` means none (the whole subject is hashed).
 *
 * @throws UsageError on anything else
 */
export function parseWildcards(value: string): number[] {
  const text = value.trim();
  if (text === "" || text.toLowerCase() === "none") return [];
  const parts = text.split(/[,\s]+/).filter((p) => p !== "");
  return parts.map((p) => {
    if (!/^\d+$/.test(p) || Number(p) < 1) {
      throw new UsageError(`partitioning wildcard indexes are 1-based positions of the filter's "*" tokens, e.g. "1" or "1,2" ("none" for the whole subject); got "${value}"`);
    }
    return Number(p);
  });
}

/** Splits a line into whitespace-separated words. */
export function words(line: string): string[] {
  return line.split(/\s+/).filter((w) => w !== "");
}

/** Go's confirmation rule: only `y` (we also accept `yes`) confirms. */
export function isYes(answer: string | undefined): boolean {
  const a = (answer ?? "").trim().toLowerCase();
  return a === "y" || a === "yes";
}

/** Formats milliseconds the way Go prints durations: `20ms`, `1.5s`. */
export function formatDuration(ms: number): string {
  if (ms < 1) return `${Math.round(ms * 1000)}µs`;
  if (ms < 1000) return `${Number(ms.toFixed(3))}ms`;
  if (ms < 60_000) return `${Number((ms / 1000).toFixed(3))}s`;
  const m = Math.floor(ms / 60_000);
  const s = (ms - m * 60_000) / 1000;
  return s === 0 ? `${m}m` : `${m}m${Number(s.toFixed(3))}s`;
}
