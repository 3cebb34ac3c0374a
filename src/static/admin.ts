/**
 * Static consumer groups: create, read, list, delete, step down. Static groups sit
 * on a stream whose subjects already start with the partition number; their
 * membership is fixed at creation.
 */
import type { JetStreamClient } from "@nats-io/jetstream";
import { isInMembership } from "../core/assignment.js";
import { sameStaticConfig } from "../core/codec.js";
import { ConsumerGroupError } from "../core/errors.js";
import { assertValidGroupNames, assertValidName, consumerNameProblem, staticConsumerName } from "../core/names.js";
import { parseFilter } from "../core/subjects.js";
import { parsePartitionTransform } from "../core/transform.js";
import type { MemberMapping, StaticConsumerGroupConfig } from "../core/types.js";
import { validateStaticConfig } from "../core/validation.js";
import { checkMembersAndMappings } from "../core/arguments.js";
import { optionalFunction, optionsObject } from "../core/option-checks.js";
import { STATIC, createConfig, deleteConfig, ensureConfigBucket, listGroupNames, openConfigBucket, readConfig, readConfigIfAny, readConfigUnchecked } from "../nats/config-store.js";
import { MIN_SERVER, consumerNames, managerOf, requireServer, streamInfo, unpinMember } from "../nats/context.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../nats/server-errors.js";

/** Options of {@link createStatic}. */
export interface CreateStaticOptions {
  /** The source stream; its stored subjects must start with the partition number. */
  stream: string;
  /** The group name. */
  group: string;
  /** The number of partitions (Go's `maxNumMembers`). */
  maxMembers: number;
  /** Optional filters on the subject after the partition token, e.g. `orders.*`. */
  filters?: string[];
  /** Balanced membership. Exclusive with `memberMappings`. */
  members?: string[];
  /** Explicit membership: which member owns which partitions. */
  memberMappings?: MemberMapping[];
  /** Receives warnings (e.g. no partition transform on the stream). Default: `process.emitWarning`. */
  onWarning?: (message: string) => void;
}

/** The keys of {@link CreateStaticOptions}. */
const CREATE_STATIC_KEYS: readonly string[] = Object.keys({
  stream: true,
  group: true,
  maxMembers: true,
  filters: true,
  members: true,
  memberMappings: true,
  onWarning: true,
} satisfies Record<keyof CreateStaticOptions, true>);

const NO_TRANSFORM_WARNING =
  "has no {{partition(...)}} subject transform: the first token of every stored subject must be the partition number, " +
  "so it must come from an account-level subject mapping or from the publishers themselves";



/**
 * Creates a static group: validates it, then stores its config in the
 * `static-consumer-groups` bucket exactly as Go does. Creating the same group again
 * is a no-op; a different config for an existing group is an error.
 *
 * @returns the stored config
 * @throws ConsumerGroupError `INVALID_NAME`, `INVALID_ARGUMENT`, validation codes, `STREAM_NOT_FOUND`,
 *   `PARTITION_COUNT_MISMATCH`, `CONFIG_MISMATCH`, `SERVER_TOO_OLD`
 *
 * @example
 * ```ts
 * const js = jetstream(nc);
 * await createStatic(js, { stream: "orders", group: "billing", maxMembers: 4, members: ["m1", "m2"] });
 * ```
 */
export async function createStatic(js: JetStreamClient, options: CreateStaticOptions): Promise<StaticConsumerGroupConfig> {
  optionsObject(options, "createStatic options", CREATE_STATIC_KEYS);
  const { stream, group, maxMembers, filters, members, memberMappings } = options;
  optionalFunction(options.onWarning, "onWarning", "a function (message: string) => void");
  assertValidGroupNames(stream, group);
  if (filters !== undefined && !Array.isArray(filters)) throw new ConsumerGroupError("INVALID_ARGUMENT", "filters must be an array of subject filters");
  filters?.forEach((f) => parseFilter(f));
  checkMembersAndMappings(members, memberMappings);
  const config: StaticConsumerGroupConfig = { max_members: maxMembers };
  if (filters && filters.length > 0) config.filters = [...filters];
  if (members && members.length > 0) config.members = [...members];
  if (memberMappings && memberMappings.length > 0) config.member_mappings = memberMappings.map((m) => ({ member: m.member, partitions: [...m.partitions ?? []] }));
  try {
    validateStaticConfig(config);
  } catch (err) {
    if (err instanceof ConsumerGroupError) throw new ConsumerGroupError(err.code, `invalid static consumer group config: ${err.message}`, { cause: err });
    throw err;
  }

  const jsm = await managerOf(js);
  requireServer(js, MIN_SERVER, "static consumer groups (priority groups with pinned_client)");
  const info = await streamInfo(jsm, stream, "the static consumer group's stream", "create the stream first");
  const transform = info.config.subject_transform;
  const parsed = transform ? parsePartitionTransform(transform.dest) : undefined;
  if (parsed && parsed.partitions !== maxMembers) {
    throw new ConsumerGroupError(
      "PARTITION_COUNT_MISMATCH",
      `the stream "${stream}" partitions subjects into ${parsed.partitions} partitions (its transform is "${transform?.dest ?? ""}") but maxMembers is ${maxMembers}; ` +
        `use maxMembers ${parsed.partitions}, or change the stream's transform`,
    );
  }
  if (!parsed) {
    const warn = options.onWarning ?? ((message: string) => process.emitWarning(message, { code: "PCG_NO_PARTITION_TRANSFORM" }));
    warn(`the stream "${stream}" ${NO_TRANSFORM_WARNING}`);
  }

  const kv = await ensureConfigBucket(js, jsm, "static", info.config.num_replicas);
  for (let attempt = 0; attempt < 3; attempt++) {
    const existing = await readConfigIfAny(kv, STATIC, stream, group).catch((err: unknown) => {
      // A config that cannot be decoded or validated; not a read that failed (SERVER_ERROR, PERMISSION_DENIED).
      if (err instanceof ConsumerGroupError && err.code !== "SERVER_ERROR" && err.code !== "PERMISSION_DENIED" && (err.code === "CONFIG_DECODE" || err.serverCode === undefined)) {
        throw new ConsumerGroupError(err.code, `static consumer group config already exists and is not valid: ${err.message}; delete the group first`, { cause: err });
      }
      throw err;
    });
    if (existing) {
      if (!sameStaticConfig(existing.config, config)) {
        throw new ConsumerGroupError(
          "CONFIG_MISMATCH",
          `the existing static consumer group config doesn't match ours: "${group}" on "${stream}" already exists with a different config; delete it first to change it`,
        );
      }
      return existing.config;
    }
    if ((await createConfig(kv, STATIC, stream, group, config)) !== undefined) return config;
  }
  throw new ConsumerGroupError("CONFIG_CONFLICT", `another client keeps writing the config of "${group}" on "${stream}"; try again`);
}

/**
 * Reads a static group's config.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND`, `CONFIG_DECODE`, validation codes
 */
export async function getStaticConsumerGroupConfig(js: JetStreamClient, stream: string, group: string): Promise<StaticConsumerGroupConfig> {
  assertValidGroupNames(stream, group);
  const jsm = await managerOf(js);
  const kv = await openConfigBucket(js, jsm, "static");
  return (await readConfig(kv, STATIC, stream, group)).config;
}

/**
 * The static groups of a stream, sorted.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `BUCKET_NOT_FOUND`
 */
export async function listStaticConsumerGroups(js: JetStreamClient, stream: string): Promise<string[]> {
  assertValidName("stream", stream);
  const jsm = await managerOf(js);
  return listGroupNames(await openConfigBucket(js, jsm, "static"), "static", stream);
}

/**
 * Deletes a static group: its config (with a delete marker, so running members
 * stop cleanly and delete their consumers), then the consumers of its members.
 * Unlike Go, it deletes only this group's members' consumers, never by name prefix.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `STREAM_NOT_FOUND`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND`
 */
export async function deleteStatic(js: JetStreamClient, stream: string, group: string): Promise<void> {
  assertValidGroupNames(stream, group);
  const jsm = await managerOf(js);
  await streamInfo(jsm, stream, "the static consumer group's stream", "nothing to delete");
  const kv = await openConfigBucket(js, jsm, "static");
  // An invalid config is deleted too, with the consumers of its members that can have one.
  const found = await readConfigUnchecked(kv, STATIC, stream, group).catch(() => undefined);
  const raw = await kv.get(`${stream}.${group}`);
  if (!found && (!raw || raw.operation !== "PUT")) {
    throw new ConsumerGroupError("GROUP_NOT_FOUND", `there is no static group "${group}" on stream "${stream}"`);
  }
  await deleteConfig(kv, "static", stream, group);
  const members = new Set([...(found?.config.members ?? []), ...(found?.config.member_mappings ?? []).map((m) => m.member)]);
  const errors: string[] = [];
  for (const member of members) {
    const name = staticConsumerName(group, member);
    if (consumerNameProblem(name) !== undefined) continue; // the server never made it
    try {
      await jsm.consumers.delete(stream, name);
    } catch (err) {
      if (apiErrorCode(err) !== ApiCode.ConsumerNotFound) errors.push(`error deleting consumer ${name}: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  if (errors.length > 0) throw new ConsumerGroupError("SERVER_ERROR", errors.join("; "));
}

/**
 * The members with a running instance: their consumer exists and has waiting pulls.
 * Sorted by name.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND`, `STREAM_NOT_FOUND`
 */
export async function listStaticActiveMembers(js: JetStreamClient, stream: string, group: string): Promise<string[]> {
  const config = await getStaticConsumerGroupConfig(js, stream, group);
  const consumers = await consumerNames(await managerOf(js), stream);
  const members = new Set([...(config.members ?? []), ...(config.member_mappings ?? []).map((m) => m.member)]);
  return [...members].filter((m) => (consumers.get(staticConsumerName(group, m))?.num_waiting ?? 0) > 0).sort();
}

/**
 * Unpins the member's consumer, so that the server pins another of its instances.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `NOT_IN_MEMBERSHIP`, `GROUP_NOT_FOUND` (no instance running)
 */
export async function staticMemberStepDown(js: JetStreamClient, stream: string, group: string, member: string): Promise<void> {
  assertValidGroupNames(stream, group, member);
  const config = await getStaticConsumerGroupConfig(js, stream, group);
  if (!isInMembership(config, member)) {
    throw new ConsumerGroupError("NOT_IN_MEMBERSHIP", `member "${member}" is not in the membership of static group "${group}"`);
  }
  try {
    await unpinMember(await managerOf(js), stream, staticConsumerName(group, member), member);
  } catch (err) {
    throw err instanceof ConsumerGroupError ? err : wrapServerError(err, "trying to unpin the member's consumer");
  }
}
