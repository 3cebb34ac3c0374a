/**
 * Checks of a stored group config against the server state it must agree with:
 * a static group's partition count against its stream's `{{partition(N,…)}}`
 * transform, an elastic group's partition count and partitioning filters against
 * its work-queue stream's source transforms. A config edited by hand (or written
 * by another port) can disagree with them while passing every rule of its own;
 * then messages land in partitions no member consumes. Pure: no NATS import.
 */
import { sourceTransforms } from "./names.js";
import { parsePartitionTransform } from "./transform.js";
import type { ElasticConsumerGroupConfig, PartitioningFilter, StaticConsumerGroupConfig } from "./types.js";

/** A subject transform as the server stores it. */
export interface SubjectTransform {
  /** The subjects it applies to. */
  src: string;
  /** What they become. */
  dest: string;
}

/** How a stored config disagrees with the server state. */
export interface LayoutProblem {
  /** `PARTITION_COUNT_MISMATCH` (static) or `CONFIG_MISMATCH` (elastic): the error code a member or an admin call raises. */
  code: "PARTITION_COUNT_MISMATCH" | "CONFIG_MISMATCH";
  /** What disagrees, in plain language. */
  message: string;
  /**
   * Elastic: the config with the partition count and partitioning filters the
   * work-queue stream says (the membership kept), when the transforms can be read back
   * into one; what to put back to repair a hand edit.
   */
  repaired?: ElasticConsumerGroupConfig;
}

/**
 * Compares a static config's partition count with its stream's partition transform.
 * A stream without one (publishers or an account mapping put the partition number
 * first) cannot be checked.
 *
 * @param config - the stored config
 * @param dest - the stream's `subject_transform.dest`, if it has one
 * @returns the problem, or undefined when they agree or cannot be compared
 *
 * @example
 * ```ts
 * staticLayoutProblem({ max_members: 8, members: ["a"] }, "{{partition(4,1)}}.orders.{{wildcard(1)}}")?.code;
 * // "PARTITION_COUNT_MISMATCH"
 * ```
 */
export function staticLayoutProblem(config: StaticConsumerGroupConfig, dest: string | undefined): LayoutProblem | undefined {
  const parsed = dest === undefined ? undefined : parsePartitionTransform(dest);
  if (!parsed || parsed.partitions === config.max_members) return undefined;
  const effect =
    config.max_members > parsed.partitions
      ? `partitions ${parsed.partitions} to ${config.max_members - 1} never get a message and their owners idle`
      : `the messages of partitions ${config.max_members} to ${parsed.partitions - 1} are never consumed`;
  return {
    code: "PARTITION_COUNT_MISMATCH",
    message: `the config says max_members ${config.max_members} but the stream's transform "${dest ?? ""}" hashes into ${parsed.partitions} partitions: ${effect}`,
  };
}

/** `{{ Partition( 4, 1 ) }}` and `{{partition(4,1)}}` are the same function to the server. */
function normalizeDest(dest: string): string {
  return dest.replace(/\{\{\s*([A-Za-z]+)\s*\(([^)]*)\)\s*\}\}/g, (_, fn: string, args: string) => `{{${fn.toLowerCase()}(${args.replace(/\s+/g, "")})}}`);
}

const wildcardsOf = (f: PartitioningFilter | undefined): string => JSON.stringify(f?.partitioning_wildcards ?? []);

/**
 * Compares an elastic config's partition count and partitioning filters with the
 * source transforms of its work-queue stream, which the group's creation derived
 * from them. While a repartition runs the two legitimately differ (it changes the
 * transforms first and the config after), so nothing is compared then.
 *
 * @param config - the stored config
 * @param transforms - the work-queue stream's source subject transforms (`sources[0].subject_transforms`)
 * @param repartitioning - a repartition is in progress (its record is in the stream's metadata, or the source is in the transition layout)
 * @returns the problem, or undefined when they agree
 *
 * @example
 * ```ts
 * elasticLayoutProblem({ max_members: 8, partitioning_filters: null }, [{ src: ">", dest: "{{Partition(4)}}.>" }], false)?.code;
 * // "CONFIG_MISMATCH"
 * ```
 */
export function elasticLayoutProblem(config: ElasticConsumerGroupConfig, transforms: readonly SubjectTransform[] | undefined, repartitioning: boolean): LayoutProblem | undefined {
  if (repartitioning) return undefined;
  const actual = transforms ?? [];
  const expected = sourceTransforms(config.max_members, config.partitioning_filters);
  const same =
    actual.length === expected.length && expected.every((e, i) => actual[i]?.src === e.src && normalizeDest(actual[i]?.dest ?? "") === normalizeDest(e.dest));
  if (same) return undefined;
  const repaired = configFromTransforms(config, actual);
  return { code: "CONFIG_MISMATCH", message: describeDifference(config, actual, repaired), ...(repaired ? { repaired } : {}) };
}

/** The config the transforms were made from: their partition count and filters, with `config`'s membership and caps. */
function configFromTransforms(config: ElasticConsumerGroupConfig, transforms: readonly SubjectTransform[]): ElasticConsumerGroupConfig | undefined {
  const parsed = transforms.map((t) => ({ src: t.src, fn: parsePartitionTransform(t.dest) }));
  const first = parsed[0]?.fn;
  if (!first || parsed.some((p) => !p.fn || p.fn.partitions !== first.partitions)) return undefined;
  const wholeSubject = parsed.length === 1 && parsed[0]?.src === ">" && first.wildcards.length === 0;
  const storedEmpty = (config.partitioning_filters ?? []).length === 0;
  const partitioning_filters: PartitioningFilter[] | null = wholeSubject
    ? storedEmpty
      ? config.partitioning_filters
      : null
    : parsed.map((p) => ({ filter: p.src, partitioning_wildcards: p.fn && p.fn.wildcards.length > 0 ? p.fn.wildcards : null }));
  const repaired: ElasticConsumerGroupConfig = { ...config, max_members: first.partitions, partitioning_filters };
  // Only when it really gives back these transforms (a filter of a foreign shape would not).
  const again = sourceTransforms(repaired.max_members, repaired.partitioning_filters);
  const roundTrips = again.length === transforms.length && again.every((e, i) => transforms[i]?.src === e.src && normalizeDest(transforms[i]?.dest ?? "") === normalizeDest(e.dest));
  return roundTrips ? repaired : undefined;
}

function describeDifference(config: ElasticConsumerGroupConfig, actual: readonly SubjectTransform[], repaired: ElasticConsumerGroupConfig | undefined): string {
  const shown = actual.map((t) => `"${t.src}" → "${t.dest}"`).join(", ") || "none";
  const differences: string[] = [];
  if (repaired) {
    if (repaired.max_members !== config.max_members) {
      differences.push(`max_members ${config.max_members} but the work queue hashes into ${repaired.max_members} partitions`);
    }
    const stored = config.partitioning_filters ?? [];
    const theirs = repaired.partitioning_filters ?? [];
    for (let i = 0; i < Math.max(stored.length, theirs.length); i++) {
      const a = stored[i];
      const b = theirs[i];
      if (a?.filter !== b?.filter) differences.push(`partitioning filter ${i + 1} is ${a ? `"${a.filter}"` : "absent"} but the work queue's is ${b ? `"${b.filter}"` : "absent"}`);
      else if (wildcardsOf(a) !== wildcardsOf(b)) differences.push(`the partitioning wildcards of "${a?.filter ?? ""}" are ${wildcardsOf(a)} but the work queue hashes ${wildcardsOf(b)}`);
    }
  }
  const what = differences.length > 0 ? differences.join("; ") : "its partition count or partitioning filters differ from the work queue's";
  return `the config disagrees with its work-queue stream's source transforms (${shown}): ${what}`;
}
