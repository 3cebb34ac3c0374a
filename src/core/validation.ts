/**
 * Config validation with Go's rules, in Go's order, with Go's messages as the
 * error text and a typed `code`.
 */
import { ConsumerGroupError } from "./errors.js";
import { assertPartitionCount } from "./limits.js";
import { quoted } from "./option-checks.js";
import { consumerNameProblem, elasticConsumerName, staticConsumerName } from "./names.js";
import { filtersOverlap, parseFilter } from "./subjects.js";
import type { ElasticConsumerGroupConfig, MemberMapping, PartitioningFilter, StaticConsumerGroupConfig } from "./types.js";

function validateMaxMembers(maxMembers: number): void {
  assertPartitionCount(maxMembers);
}

function validateMembership(
  maxMembers: number,
  members: readonly string[] | undefined,
  mappings: readonly MemberMapping[] | undefined,
  coverageMessage: string,
): void {
  validateMaxMembers(maxMembers);
  const hasMembers = !!members && members.length > 0;
  const hasMappings = !!mappings && mappings.length > 0;
  if (hasMembers && hasMappings) {
    throw new ConsumerGroupError("MEMBERS_AND_MAPPINGS", "either members or member mappings must be provided, not both");
  }
  if (!hasMappings) return;
  if (mappings.length > maxMembers) {
    throw new ConsumerGroupError("MAPPING_COUNT", "the number of member mappings must be between 1 and the max number of members");
  }
  const seenMembers = new Set<string>();
  const seenPartitions = new Set<number>();
  for (const mapping of mappings) {
    if (seenMembers.has(mapping.member)) {
      throw new ConsumerGroupError("DUPLICATE_MEMBER", `member names must be unique (member "${mapping.member}" is mapped twice)`);
    }
    seenMembers.add(mapping.member);
    for (const p of mapping.partitions ?? []) {
      if (seenPartitions.has(p)) {
        throw new ConsumerGroupError("DUPLICATE_PARTITION", `partition numbers must be used only once (partition ${p} is mapped twice)`);
      }
      if (!Number.isSafeInteger(p) || p < 0 || p >= maxMembers) {
        throw new ConsumerGroupError(
          "PARTITION_OUT_OF_RANGE",
          `partition numbers must be between 0 and one less than the max number of members (got ${quoted(p)}, max members ${maxMembers})`,
        );
      }
      seenPartitions.add(p);
    }
  }
  if (seenPartitions.size !== maxMembers) {
    const missing = [...Array(maxMembers).keys()].filter((p) => !seenPartitions.has(p));
    throw new ConsumerGroupError("PARTITION_COVERAGE", `${coverageMessage} (unmapped partitions: ${missing.join(", ")})`);
  }
}

/**
 * Validates a static config with Go's `validateStaticConfig` rules.
 *
 * @throws ConsumerGroupError with codes `INVALID_MAX_MEMBERS`, `MEMBERS_AND_MAPPINGS`, `MAPPING_COUNT`,
 *   `DUPLICATE_MEMBER`, `DUPLICATE_PARTITION`, `PARTITION_OUT_OF_RANGE`, `PARTITION_COVERAGE`
 */
export function validateStaticConfig(config: StaticConsumerGroupConfig): void {
  validateMembership(
    config.max_members,
    config.members,
    config.member_mappings,
    "the number of unique partition numbers specified in the mappings must be equal to the max number of members",
  );
}

/**
 * Validates one partitioning filter with Go's rules.
 *
 * @throws ConsumerGroupError `INVALID_PARTITIONING_FILTER`
 */
export function validatePartitioningFilter(pf: PartitioningFilter): void {
  checkPartitioningFilterGoRules(pf);
  checkPartitioningFilterSyntax(pf);
}

const filterError = (pf: PartitioningFilter, msg: string): never => {
  throw new ConsumerGroupError("INVALID_PARTITIONING_FILTER", `${msg} (filter ${quoted(pf.filter)})`);
};

/** Go's per-filter checks, in Go's order. */
function checkPartitioningFilterGoRules(pf: PartitioningFilter): void {
  const fail = (msg: string): never => filterError(pf, msg);
  if (typeof pf.filter !== "string" || pf.filter === "") fail("partitioning filters must have a non-empty filter");
  const tokens = pf.filter.split(".");
  const stars = tokens.filter((t) => t === "*").length;
  if (stars === 0 && tokens[tokens.length - 1] !== ">") fail("partitioning filters must have at least one * wildcard or end with > wildcard");
  const wildcards = pf.partitioning_wildcards ?? [];
  if (wildcards.length > stars) fail("the number of partitioning wildcards must not be larger than the total number of * wildcards in the filter");
  const seen = new Set<number>();
  for (const w of wildcards) {
    if (seen.has(w)) fail("partitioning wildcard indexes must be unique");
    seen.add(w);
    if (!Number.isSafeInteger(w) || w < 1 || w > stars) fail("partitioning wildcard indexes must be between 1 and the number of * wildcards in the filter");
  }
}

/** Beyond Go: a malformed subject would only fail later, at stream creation. */
function checkPartitioningFilterSyntax(pf: PartitioningFilter): void {
  try {
    parseFilter(pf.filter);
  } catch (err) {
    filterError(pf, err instanceof Error ? err.message : String(err));
  }
}

/**
 * Validates an elastic config with Go's `validateConfig` rules, plus one check Go
 * lacks: partitioning filters must not overlap (the server would refuse the
 * work-queue stream after Go had already written the config).
 *
 * @throws ConsumerGroupError as {@link validateStaticConfig}, plus `INVALID_PARTITIONING_FILTER` and `OVERLAPPING_FILTERS`
 */
export function validateElasticConfig(config: ElasticConsumerGroupConfig): void {
  // Go's order (validateConfig): the partition count, then every partitioning filter,
  // then the membership. Our own checks come after all of Go's, so a config Go rejects
  // gets Go's error.
  validateStoredElasticConfig(config);
  const pfs = config.partitioning_filters ?? [];
  pfs.forEach(checkPartitioningFilterSyntax);
  for (let i = 0; i < pfs.length; i++) {
    for (let j = i + 1; j < pfs.length; j++) {
      const a = pfs[i]?.filter ?? "";
      const b = pfs[j]?.filter ?? "";
      if (filtersOverlap(a, b)) {
        throw new ConsumerGroupError(
          "OVERLAPPING_FILTERS",
          `the partitioning filters "${a}" and "${b}" overlap; a subject may match only one partitioning filter`,
        );
      }
    }
  }
}

/**
 * Validates an elastic config with Go's `validateConfig` rules only, for configs
 * already stored (read, watched or edited). A group Go created must be usable from
 * TypeScript whenever Go accepts it: the server itself only refuses partitioning
 * filters where one contains the other, so e.g. `ev.a.*` with `ev.*.b` is a valid
 * Go group that our stricter creation-time overlap check must not reject on read.
 *
 * @throws ConsumerGroupError as {@link validateStaticConfig}, plus `INVALID_PARTITIONING_FILTER`
 */
export function validateStoredElasticConfig(config: ElasticConsumerGroupConfig): void {
  validateMaxMembers(config.max_members);
  (config.partitioning_filters ?? []).forEach(checkPartitioningFilterGoRules);
  validateMembership(
    config.max_members,
    config.members,
    config.member_mappings,
    "the number of unique partition numbers must be equal to the max number of members",
  );
}

/**
 * Checks that every member of a stored config can have a consumer: Go accepts any
 * member name, but the server refuses a consumer name with `.`, `*`, `>`,
 * whitespace or a path separator, so such a member's partitions would never be
 * consumed. The server's rule, not our stricter one for new names: `m@1` passes.
 *
 * @param kind - the flavour, which decides the consumer name (`<group>-<member>` or `<member>`)
 * @param config - the membership of a stored config
 * @param group - the group name, for a static member's consumer name; without it the member name alone is checked
 * @throws ConsumerGroupError `INVALID_NAME` naming the member and what is wrong
 */
export function checkStoredMemberNames(
  kind: "static" | "elastic",
  config: { members?: readonly string[] | undefined; member_mappings?: readonly MemberMapping[] | undefined },
  group?: string,
): void {
  const names = [...(config.members ?? []), ...(config.member_mappings ?? []).map((m) => m.member)];
  for (const member of names) {
    const consumer = kind === "elastic" ? elasticConsumerName(member) : group === undefined ? member : staticConsumerName(group, member);
    const problem = consumerNameProblem(consumer);
    if (problem !== undefined) {
      const what = consumer === member ? "" : ` (its consumer "${consumer}")`;
      throw new ConsumerGroupError(
        "INVALID_NAME",
        `member ${JSON.stringify(member)} cannot be a consumer name: it${what} ${problem}, which the server refuses, so its partitions would never be consumed`,
      );
    }
  }
}

/**
 * Validates a static config as it is read from the KV bucket: Go's rules
 * ({@link validateStaticConfig}), then that every member can have a consumer.
 *
 * @param config - the decoded config
 * @param group - the group name (a static member's consumer is `<group>-<member>`)
 * @throws ConsumerGroupError as {@link validateStaticConfig}, plus `INVALID_NAME`
 */
export function validateStoredStaticConfig(config: StaticConsumerGroupConfig, group?: string): void {
  validateStaticConfig(config);
  checkStoredMemberNames("static", config, group);
}

/**
 * Validates an elastic config as it is read from the KV bucket: Go's rules
 * ({@link validateStoredElasticConfig}), then that every member can have a consumer.
 *
 * @param config - the decoded config
 * @throws ConsumerGroupError as {@link validateStoredElasticConfig}, plus `INVALID_NAME`
 */
export function validateReadElasticConfig(config: ElasticConsumerGroupConfig): void {
  validateStoredElasticConfig(config);
  checkStoredMemberNames("elastic", config);
}
