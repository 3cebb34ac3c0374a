/**
 * The partition function of the server's `{{partition(N, i…)}}` subject transform:
 * FNV-1a 32-bit over the UTF-8 bytes of the selected tokens, concatenated with no
 * separator, modulo N. With no indexes the whole subject string is hashed.
 */
import { ConsumerGroupError } from "./errors.js";
import { matchesFilter, parseFilter, tokenize } from "./subjects.js";

const FNV_OFFSET_BASIS = 0x811c9dc5;
const FNV_PRIME = 0x01000193;
const utf8 = new TextEncoder();

/**
 * FNV-1a 32-bit hash of some bytes (Go's `hash/fnv.New32a`).
 *
 * @param bytes - the input
 * @returns the unsigned 32-bit hash
 */
export function fnv1a32(bytes: Uint8Array): number {
  let hash = FNV_OFFSET_BASIS;
  for (const byte of bytes) {
    hash = Math.imul(hash ^ byte, FNV_PRIME) >>> 0;
  }
  return hash >>> 0;
}

/** Options of {@link partitionOf}. */
export interface PartitionOptions {
  /** The filter the subject matched, e.g. `orders.*.*`. Required with `wildcards`. */
  filter?: string;
  /** 1-based indexes of `*` tokens in `filter` that make the key, as in `{{partition(N, i…)}}`. */
  wildcards?: readonly number[];
}

/**
 * The partition the server's partition transform gives a subject.
 *
 * @param subject - a literal subject, e.g. `orders.customer42.created`
 * @param partitions - N, the number of partitions (an integer >= 1)
 * @param options - the filter and wildcard indexes; none hashes the whole subject
 * @returns a partition in `[0, partitions)`
 * @throws ConsumerGroupError `INVALID_SUBJECT` if the subject is not literal or does not match the filter;
 *   `INVALID_ARGUMENT` for a bad partition count or bad wildcard indexes
 *
 * @example
 * ```ts
 * partitionOf("orders.customer42.created", 10, { filter: "orders.*.*", wildcards: [1] }); // 3
 * partitionOf("orders.customer42.created", 10); // 4 (whole subject)
 * ```
 */
export function partitionOf(subject: string, partitions: number, options: PartitionOptions = {}): number {
  if (!Number.isSafeInteger(partitions) || partitions < 1) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `the number of partitions must be an integer >= 1, got ${String(partitions)}`);
  }
  const tokens = tokenize(subject);
  if (tokens.some((t) => t === "*" || t === ">")) {
    throw new ConsumerGroupError("INVALID_SUBJECT", `"${subject}" is a wildcard subject; a message subject must be literal`);
  }
  const { filter, wildcards = [] } = options;
  if (filter === undefined) {
    if (wildcards.length > 0) {
      throw new ConsumerGroupError("INVALID_ARGUMENT", "wildcard indexes need the filter they refer to: pass options.filter too");
    }
    return fnv1a32(utf8.encode(subject)) % partitions;
  }
  const filterTokens = parseFilter(filter);
  if (!matchesFilter(tokens, filterTokens)) {
    throw new ConsumerGroupError("INVALID_SUBJECT", `the subject "${subject}" does not match the filter "${filter}"`);
  }
  if (wildcards.length === 0) return fnv1a32(utf8.encode(subject)) % partitions;
  const starPositions = filterTokens.flatMap((t, i) => (t === "*" ? [i] : []));
  let key = "";
  for (const index of wildcards) {
    const position = Number.isSafeInteger(index) ? starPositions[index - 1] : undefined;
    if (position === undefined) {
      throw new ConsumerGroupError(
        "INVALID_ARGUMENT",
        `wildcard index ${String(index)} is out of range: the filter "${filter}" has ${starPositions.length} "*" token(s), indexes are 1-based`,
      );
    }
    key += tokens[position];
  }
  return fnv1a32(utf8.encode(key)) % partitions;
}
