/**
 * Every name orbit.go/pcgroups derives, built exactly as Go builds it, plus the
 * name checks Go lacks.
 */
import { ConsumerGroupError } from "./errors.js";
import type { GroupKind, PartitioningFilter } from "./types.js";

/** KV bucket of static group configs. */
export const STATIC_BUCKET = "static-consumer-groups";
/** KV bucket of elastic group configs. */
export const ELASTIC_BUCKET = "elastic-consumer-groups";
/** The priority group every member consumer uses. */
export const PRIORITY_GROUP = "PCG";

/** The longest stream or consumer name we accept (the server's limit). */
export const MAX_NAME_LENGTH = 255;
const NAME_PATTERN = /^[A-Za-z0-9_=-]+$/;

/**
 * The KV bucket of a flavour.
 *
 * @param kind - `static` or `elastic`
 */
export function bucketName(kind: GroupKind): string {
  return kind === "static" ? STATIC_BUCKET : ELASTIC_BUCKET;
}

/**
 * The KV key of a group's config: `<stream>.<group>`.
 *
 * @param stream - the source stream
 * @param group - the group name
 */
export function configKey(stream: string, group: string): string {
  return `${stream}.${group}`;
}

/**
 * Splits a KV key back into stream and group, as Go's listing does (`parts[0]`, `parts[1]`).
 *
 * @returns undefined when the key is not of that shape
 */
export function parseConfigKey(key: string): {
  /** The stream the group is on. */
  stream: string;
  /** The group name. */
  group: string;
} | undefined {
  const parts = key.split(".");
  if (parts.length !== 2 || !parts[0] || !parts[1]) return undefined;
  return { stream: parts[0], group: parts[1] };
}

/**
 * The durable consumer of a static member: `<group>-<member>`.
 */
export function staticConsumerName(group: string, member: string): string {
  return `${group}-${member}`;
}

/**
 * The consumer of an elastic member on the work-queue stream: the member name itself.
 */
export function elasticConsumerName(member: string): string {
  return member;
}

/**
 * The work-queue stream of an elastic group: `<stream>-<group>`.
 */
export function workQueueStreamName(stream: string, group: string): string {
  return `${stream}-${group}`;
}

/**
 * The subject transform destination of one partitioning filter, exactly as Go writes it,
 * e.g. `{{Partition(4,1,2)}}.foo.{{Wildcard(1)}}.{{Wildcard(2)}}.>`.
 *
 * @param partitions - N
 * @param filter - the partitioning filter
 */
export function transformDestination(partitions: number, filter: PartitioningFilter): string {
  const wildcards = filter.partitioning_wildcards ?? [];
  const fn = wildcards.length > 0 ? `{{Partition(${partitions},${wildcards.join(",")})}}` : `{{Partition(${partitions})}}`;
  let star = 0;
  const rest = filter.filter
    .split(".")
    .map((t) => (t === "*" ? `{{Wildcard(${++star})}}` : t))
    .join(".");
  return `${fn}.${rest}`;
}

/**
 * The source subject transforms of an elastic work-queue stream, in config order.
 * With no partitioning filters it is the single whole-subject transform `> → {{Partition(N)}}.>`.
 */
export function sourceTransforms(
  partitions: number,
  filters: readonly PartitioningFilter[] | null,
): {
  /** The subjects it applies to. */
  src: string;
  /** The subject they become, partition number first. */
  dest: string;
}[] {
  if (!filters || filters.length === 0) return [{ src: ">", dest: `{{Partition(${partitions})}}.>` }];
  return filters.map((f) => ({ src: f.filter, dest: transformDestination(partitions, f) }));
}

/**
 * Checks a stream, group or member name. Go does not check names; we do, before
 * anything is written, because a dot or wildcard breaks the KV key, the consumer
 * name or the work-queue stream name in ways that only show up later.
 *
 * @param kind - `stream`, `group` or `member`, for the message
 * @param name - the name to check
 * @throws ConsumerGroupError `INVALID_NAME`
 */
export function assertValidName(kind: "stream" | "group" | "member", name: unknown): asserts name is string {
  if (typeof name !== "string" || name.length === 0) {
    throw new ConsumerGroupError("INVALID_NAME", `the ${kind} name must be a non-empty string`);
  }
  if (name.length > MAX_NAME_LENGTH) {
    throw new ConsumerGroupError("INVALID_NAME", `the ${kind} name is ${name.length} characters long; the limit is ${MAX_NAME_LENGTH}`);
  }
  if (!NAME_PATTERN.test(name)) {
    const bad = [...name].find((c) => !/[A-Za-z0-9_=-]/.test(c)) ?? "";
    const shown = /\s/.test(bad) ? "whitespace" : `"${bad}"`;
    throw new ConsumerGroupError(
      "INVALID_NAME",
      `the ${kind} name "${name}" contains ${shown}; use only letters, digits, "_", "-" and "=" ` +
        `(it becomes part of a KV key, a consumer name and, for elastic groups, a stream name)`,
    );
  }
}

/**
 * Checks the names of a group and that the names derived from them fit the server's limits.
 *
 * @throws ConsumerGroupError `INVALID_NAME`
 */
export function assertValidGroupNames(stream: unknown, group: unknown, member?: unknown): void {
  assertValidName("stream", stream);
  assertValidName("group", group);
  if (workQueueStreamName(stream, group).length > MAX_NAME_LENGTH) {
    throw new ConsumerGroupError("INVALID_NAME", `"${stream}-${group}" (the elastic work-queue stream name) is longer than ${MAX_NAME_LENGTH} characters; use shorter names`);
  }
  if (member !== undefined) {
    assertValidName("member", member);
    if (staticConsumerName(group, member).length > MAX_NAME_LENGTH) {
      throw new ConsumerGroupError("INVALID_NAME", `"${group}-${member}" (the member's consumer name) is longer than ${MAX_NAME_LENGTH} characters; use shorter names`);
    }
  }
}

/** The characters nats-server refuses in a consumer name (`isValidAssetName`, 2.11 to 2.15). */
const CONSUMER_NAME_FORBIDDEN = /[ \t\r\n\f.*>\\/]/;

/**
 * Why the server would refuse `name` as a consumer name, or undefined when it takes it.
 * This is the server's rule, not our stricter one for new names: it is what a stored
 * config (written by Go, another port or by hand) must meet, since Go accepts any
 * member name and names such as `m@1` work there.
 *
 * @param name - the consumer name (`<group>-<member>` for static members, `<member>` for elastic ones)
 * @returns what is wrong with it, in plain language
 *
 * @example
 * ```ts
 * consumerNameProblem("g-m@1"); // undefined
 * consumerNameProblem("g-b.c"); // 'contains "."'
 * ```
 */
export function consumerNameProblem(name: string): string | undefined {
  if (name.length === 0) return "is empty";
  const bad = CONSUMER_NAME_FORBIDDEN.exec(name)?.[0];
  if (bad !== undefined) return /\s/.test(bad) ? "contains whitespace" : `contains "${bad}"`;
  const bytes = new TextEncoder().encode(name).length;
  if (bytes > MAX_NAME_LENGTH) return `is ${bytes} bytes long; the server's limit is ${MAX_NAME_LENGTH}`;
  return undefined;
}
