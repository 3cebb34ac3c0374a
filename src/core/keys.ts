/**
 * Which part of a (partition-stripped) subject is the ordering key: exactly the
 * tokens the partition hash uses, so that "same key" never splits what the server
 * keeps together. Pure.
 */
import { matchesFilter } from "./subjects.js";
import type { PartitioningFilter } from "./types.js";
import { parsePartitionTransform } from "./transform.js";

/** Maps a stripped subject to its key; undefined when the key cannot be told from the subject. */
export type SubjectKeyExtractor = (strippedSubject: string) => string | undefined;

/**
 * The key extractor of an elastic group: the tokens at the matching partitioning
 * filter's wildcard positions, joined with `.`; the whole subject for whole-subject
 * partitioning. (In elastic groups the stripped subject is the origin subject.)
 *
 * @param filters - the group's partitioning filters
 */
export function elasticKeyExtractor(filters: readonly PartitioningFilter[] | null): SubjectKeyExtractor {
  const parsed = (filters ?? []).map((f) => {
    const tokens = f.filter.split(".");
    const stars = tokens.flatMap((t, i) => (t === "*" ? [i] : []));
    return { tokens, positions: (f.partitioning_wildcards ?? []).map((w) => stars[w - 1] ?? -1) };
  });
  return (subject) => {
    if (parsed.length === 0) return subject;
    const tokens = subject.split(".");
    const match = parsed.find((p) => matchesFilter(tokens, p.tokens));
    if (!match) return undefined;
    if (match.positions.length === 0) return subject;
    return match.positions.map((i) => tokens[i] ?? "").join(".");
  };
}

/**
 * The key extractor of a static group, from its stream's subject transform
 * destination, e.g. `{{partition(10,1)}}.orders.{{wildcard(1)}}`: the stripped
 * subject's tokens where the hashed wildcards land. Returns undefined when the
 * destination does not say (no partition function, or a hashed wildcard that
 * does not appear in the destination); callers then fall back to the partition.
 *
 * @param dest - the stream's `subject_transform.dest`
 */
export function staticKeyExtractor(dest: string | undefined): SubjectKeyExtractor | undefined {
  if (!dest) return undefined;
  const partition = parsePartitionTransform(dest);
  if (!partition) return undefined;
  const destTokens = dest.split(".");
  if (!/partition/i.test(destTokens[0] ?? "")) return undefined;
  const rest = destTokens.slice(1);
  if (partition.wildcards.length === 0) return (subject) => subject;
  const wildcardAt = (index: number): number =>
    rest.findIndex((t) => new RegExp(`^\\{\\{\\s*[wW]ildcard\\s*\\(\\s*${index}\\s*\\)\\s*\\}\\}$`).test(t) || t === `$${index}`);
  const positions = partition.wildcards.map(wildcardAt);
  if (positions.some((p) => p < 0)) return undefined;
  return (subject) => {
    const tokens = subject.split(".");
    return positions.map((i) => tokens[i] ?? "").join(".");
  };
}
