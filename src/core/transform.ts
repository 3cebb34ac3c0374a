/**
 * Reads the `{{partition(N, i…)}}` function out of a subject transform destination,
 * the way the server parses it.
 */

/** What a partition transform says. */
export interface PartitionTransform {
  /** N, the partition count. */
  partitions: number;
  /** 1-based wildcard indexes; empty means the whole subject is hashed. */
  wildcards: number[];
}

const PARTITION_FN = /\{\{\s*[pP]artition\s*\((.*?)\)\s*\}\}/;

/**
 * Parses the partition function of a transform destination.
 *
 * @param dest - e.g. `{{partition(10,1)}}.foo.{{wildcard(1)}}`
 * @returns undefined when the destination has no partition function or it is malformed
 */
export function parsePartitionTransform(dest: string): PartitionTransform | undefined {
  const match = PARTITION_FN.exec(dest);
  if (!match) return undefined;
  const args = (match[1] ?? "").split(/,\s*/).map((a) => a.trim());
  const numbers = args.map((a) => (/^\d+$/.test(a) ? Number(a) : NaN));
  if (numbers.length === 0 || numbers.some((n) => Number.isNaN(n))) return undefined;
  const [partitions, ...wildcards] = numbers as [number, ...number[]];
  return { partitions, wildcards };
}
