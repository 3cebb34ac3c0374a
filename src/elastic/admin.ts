/**
 * Elastic consumer groups: create, read, list, delete, and who is active. The
 * library sources any stream into a work-queue stream `<stream>-<group>` with the
 * partition transform; membership changes live (see `membership.ts`).
 */
import type { JetStreamClient, JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { isInMembership } from "../core/assignment.js";
import { sameElasticSettings } from "../core/codec.js";
import { ConsumerGroupError } from "../core/errors.js";
import { assertValidGroupNames, assertValidName, elasticConsumerName, workQueueStreamName } from "../core/names.js";
import type { ElasticConsumerGroupConfig, PartitioningFilter } from "../core/types.js";
import { validateElasticConfig } from "../core/validation.js";
import { optionsObject, quoted } from "../core/option-checks.js";
import { ELASTIC, createConfig, deleteConfig, ensureConfigBucket, listGroupNames, openConfigBucket, readConfig, readConfigIfAny } from "../nats/config-store.js";
import { MIN_SERVER, MIN_SERVER_WHOLE_SUBJECT, consumerNames, managerOf, requireServer, streamExists, streamInfo, unpinMember } from "../nats/context.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../nats/server-errors.js";
import { needsWholeSubjectPartitioning, workQueueStreamConfig } from "./work-queue.js";

/** Options of {@link createElastic}. */
export interface CreateElasticOptions {
  /** The source stream: any stream. */
  stream: string;
  /** The group name. */
  group: string;
  /** The number of partitions (Go's `maxNumMembers`). */
  maxMembers: number;
  /**
   * How subjects are partitioned. Each filter's `partitioning_wildcards` are 1-based
   * indexes of its `*` tokens. Omitted, `null` or `[]`: the whole subject is hashed
   * (server >= 2.12). `null` and `[]` are stored as given, as Go does.
   */
  partitioningFilters?: PartitioningFilter[] | null;
  /** Caps the messages buffered in the work-queue stream (0: no cap). */
  maxBufferedMsgs?: number;
  /** Caps the bytes buffered in the work-queue stream (0: no cap). */
  maxBufferedBytes?: number;
}

/** The keys of {@link CreateElasticOptions}. */
const CREATE_ELASTIC_KEYS: readonly string[] = Object.keys({
  stream: true,
  group: true,
  maxMembers: true,
  partitioningFilters: true,
  maxBufferedMsgs: true,
  maxBufferedBytes: true,
} satisfies Record<keyof CreateElasticOptions, true>);

/** The keys of a {@link PartitioningFilter}. */
const FILTER_KEYS: readonly string[] = Object.keys({ filter: true, partitioning_wildcards: true } satisfies Record<keyof PartitioningFilter, true>);

function buildConfig(options: CreateElasticOptions): ElasticConsumerGroupConfig {
  const { maxMembers, partitioningFilters, maxBufferedMsgs, maxBufferedBytes } = options;
  if (partitioningFilters !== undefined && partitioningFilters !== null && !Array.isArray(partitioningFilters)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", "partitioningFilters must be an array of { filter, partitioning_wildcards }");
  }
  for (const [name, value] of [["maxBufferedMsgs", maxBufferedMsgs], ["maxBufferedBytes", maxBufferedBytes]] as const) {
    if (value !== undefined && (!Number.isSafeInteger(value) || value < -1)) {
      throw new ConsumerGroupError("INVALID_ARGUMENT", `${name} must be an integer >= -1 (0 or -1: no cap), got ${quoted(value)}`);
    }
  }
  const config: ElasticConsumerGroupConfig = {
    max_members: maxMembers,
    partitioning_filters:
      partitioningFilters === undefined || partitioningFilters === null
        ? null
        : partitioningFilters.map((f) => {
            optionsObject(f, "each partitioning filter", FILTER_KEYS);
            const wildcards = f.partitioning_wildcards;
            if (wildcards !== null && wildcards !== undefined && !Array.isArray(wildcards)) {
              throw new ConsumerGroupError("INVALID_ARGUMENT", `partitioning_wildcards of ${quoted(f.filter)} must be an array of 1-based indexes, got ${quoted(wildcards)}`);
            }
            return { filter: f.filter, partitioning_wildcards: wildcards === undefined || wildcards === null ? null : [...wildcards] };
          }),
  };
  if (maxBufferedMsgs) config.max_buffered_msg = maxBufferedMsgs;
  if (maxBufferedBytes) config.max_buffered_bytes = maxBufferedBytes;
  try {
    validateElasticConfig(config);
  } catch (err) {
    if (err instanceof ConsumerGroupError) throw new ConsumerGroupError(err.code, `invalid elastic consumer group config: ${err.message}`, { cause: err });
    throw err;
  }
  return config;
}

async function addWorkQueueStream(jsm: JetStreamManager, source: StreamInfo, group: string, config: ElasticConsumerGroupConfig): Promise<void> {
  try {
    await jsm.streams.add(workQueueStreamConfig(source, group, config));
  } catch (err) {
    const name = workQueueStreamName(source.config.name, group);
    if (apiErrorCode(err) === ApiCode.StreamNameInUse) {
      throw new ConsumerGroupError(
        "CONFIG_CONFLICT",
        `can't create the elastic consumer group's stream: "${name}" already exists with a different configuration; delete the group (or that stream) and create it again`,
        { cause: err, serverCode: ApiCode.StreamNameInUse },
      );
    }
    throw wrapServerError(err, `can't create the elastic consumer group's stream "${name}"`);
  }
}

/**
 * Creates an elastic group: its config in the `elastic-consumer-groups` bucket and
 * its work-queue stream, both exactly as Go creates them. Everything is checked
 * before anything is written, and the work-queue stream is made before the config
 * (Go writes the config first and leaves it behind when the server refuses the
 * stream): a refused call leaves no config, no delete marker and no stream. A new
 * group starts with no members and processes the source stream's whole history.
 *
 * @returns the stored config
 * @throws ConsumerGroupError `INVALID_NAME`, validation codes (`OVERLAPPING_FILTERS` among them), `STREAM_NOT_FOUND`,
 *   `SERVER_TOO_OLD`, `CONFIG_IMMUTABLE` (exists with other settings), `CONFIG_CONFLICT`
 *
 * @example
 * ```ts
 * await createElastic(js, {
 *   stream: "orders", group: "shipping", maxMembers: 8,
 *   partitioningFilters: [{ filter: "orders.*.*", partitioning_wildcards: [1] }],
 * });
 * await addMembers(js, "orders", "shipping", ["m1", "m2"]);
 * ```
 */
export async function createElastic(js: JetStreamClient, options: CreateElasticOptions): Promise<ElasticConsumerGroupConfig> {
  optionsObject(options, "createElastic options", CREATE_ELASTIC_KEYS);
  assertValidGroupNames(options.stream, options.group);
  const { stream, group } = options;
  const config = buildConfig(options);
  const jsm = await managerOf(js);
  requireServer(js, MIN_SERVER, "elastic consumer groups (priority groups with pinned_client)");
  if (needsWholeSubjectPartitioning(config)) requireServer(js, MIN_SERVER_WHOLE_SUBJECT, "whole-subject partitioning (no partitioning filters, or a filter with no wildcard indexes)");
  const source = await streamInfo(jsm, stream, "the elastic consumer group's source stream", "create the stream first");
  const wqName = workQueueStreamName(stream, group);
  const wqExisted = await streamExists(jsm, wqName);
  const existingKv = await openConfigBucket(js, jsm, "elastic").catch((err: unknown) => {
    if (err instanceof ConsumerGroupError && err.code === "BUCKET_NOT_FOUND") return undefined;
    throw err;
  });
  const existing = existingKv ? await readConfigIfAny(existingKv, ELASTIC, stream, group) : undefined;
  if (existing && !sameElasticSettings(existing.config, config)) throw immutable();
  if (existing) {
    // An existing work-queue stream must match; the server says whether it does.
    if (wqExisted) await addWorkQueueStream(jsm, source, group, existing.config);
    return existing.config;
  }
  // The work-queue stream comes first: a stream the server refuses (a byte cap over the account's
  // storage, a name in use with other settings) then leaves nothing behind, not even a delete marker
  // in the config's history. A stream this call made is deleted again when the config is not written.
  await addWorkQueueStream(jsm, source, group, config);
  let revision: number | undefined;
  let kv: KV;
  try {
    kv = existingKv ?? (await ensureConfigBucket(js, jsm, "elastic", source.config.num_replicas));
    revision = await createConfig(kv, ELASTIC, stream, group, config);
  } catch (err) {
    if (!wqExisted) await deleteCreatedStream(jsm, wqName);
    throw err;
  }
  if (revision === undefined) {
    const raced = await readConfig(kv, ELASTIC, stream, group);
    if (!sameElasticSettings(raced.config, config)) {
      // Another client wrote other settings meanwhile: its group, whose stream is not the one made here.
      if (!wqExisted) await deleteCreatedStream(jsm, wqName);
      throw immutable();
    }
    return raced.config;
  }
  return config;
}

function immutable(): ConsumerGroupError {
  return new ConsumerGroupError(
    "CONFIG_IMMUTABLE",
    "the existing elastic consumer group config can not be updated to the requested one, please delete the existing elastic consumer group and create a new one",
  );
}

/** Deletes the work-queue stream this call created, when its config could not be written. */
async function deleteCreatedStream(jsm: JetStreamManager, name: string): Promise<void> {
  try {
    await jsm.streams.delete(name);
  } catch {
    // already gone, or unreachable: deleteElastic removes a stream left without a config
  }
}

/**
 * Reads an elastic group's config.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND`, `CONFIG_DECODE`, validation codes
 */
export async function getElasticConsumerGroupConfig(js: JetStreamClient, stream: string, group: string): Promise<ElasticConsumerGroupConfig> {
  assertValidGroupNames(stream, group);
  const jsm = await managerOf(js);
  return (await readConfig(await openConfigBucket(js, jsm, "elastic"), ELASTIC, stream, group)).config;
}

/**
 * The elastic groups of a stream, sorted.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `BUCKET_NOT_FOUND`
 */
export async function listElasticConsumerGroups(js: JetStreamClient, stream: string): Promise<string[]> {
  assertValidName("stream", stream);
  const jsm = await managerOf(js);
  return listGroupNames(await openConfigBucket(js, jsm, "elastic"), "elastic", stream);
}

/**
 * Deletes an elastic group: its config (a delete marker, so members stop cleanly),
 * then its work-queue stream. Either may already be gone.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND` (neither exists)
 */
export async function deleteElastic(js: JetStreamClient, stream: string, group: string): Promise<void> {
  assertValidGroupNames(stream, group);
  const jsm = await managerOf(js);
  const kv = await openConfigBucket(js, jsm, "elastic");
  const entry = await kv.get(`${stream}.${group}`);
  const hasConfig = entry !== null && entry.operation === "PUT";
  const wqName = workQueueStreamName(stream, group);
  const hasStream = await streamExists(jsm, wqName);
  if (!hasConfig && !hasStream) throw new ConsumerGroupError("GROUP_NOT_FOUND", `there is no elastic group "${group}" on stream "${stream}"`);
  if (hasConfig) await deleteConfig(kv, "elastic", stream, group);
  if (hasStream) {
    try {
      await jsm.streams.delete(wqName);
    } catch (err) {
      if (apiErrorCode(err) !== ApiCode.StreamNotFound) throw wrapServerError(err, `could not delete the elastic consumer group's stream "${wqName}"`);
    }
  }
}

/**
 * The members with a running instance: their consumer exists on the work-queue
 * stream (it lives only while some instance pulls). Sorted by name.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND`, `STREAM_NOT_FOUND`
 */
export async function listElasticActiveMembers(js: JetStreamClient, stream: string, group: string): Promise<string[]> {
  const config = await getElasticConsumerGroupConfig(js, stream, group);
  const members = new Set([...(config.members ?? []), ...(config.member_mappings ?? []).map((m) => m.member)]);
  if (members.size === 0) return [];
  const consumers = await consumerNames(await managerOf(js), workQueueStreamName(stream, group));
  return [...members].filter((m) => consumers.has(elasticConsumerName(m))).sort();
}

/**
 * Whether a member is in the membership, and whether an instance of *that* member
 * is active (Go answers the second for any member).
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND`, `STREAM_NOT_FOUND`
 */
export async function elasticIsInMembershipAndActive(
  js: JetStreamClient,
  stream: string,
  group: string,
  member: string,
): Promise<{
  /** The member is in the group's membership (its members or its mappings). */
  inMembership: boolean;
  /** The member's consumer exists, so an instance of it runs or ran lately. */
  active: boolean;
}> {
  assertValidGroupNames(stream, group, member);
  const config = await getElasticConsumerGroupConfig(js, stream, group);
  const inMembership = isInMembership(config, member);
  const consumers = await consumerNames(await managerOf(js), workQueueStreamName(stream, group));
  return { inMembership, active: consumers.has(elasticConsumerName(member)) };
}

/**
 * Unpins the member's consumer so that the server pins another of its instances.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `NOT_IN_MEMBERSHIP`, `GROUP_NOT_FOUND` (no instance running)
 */
export async function elasticMemberStepDown(js: JetStreamClient, stream: string, group: string, member: string): Promise<void> {
  assertValidGroupNames(stream, group, member);
  const config = await getElasticConsumerGroupConfig(js, stream, group);
  if (!isInMembership(config, member)) {
    throw new ConsumerGroupError("NOT_IN_MEMBERSHIP", `member "${member}" is not in the membership of elastic group "${group}"`);
  }
  await unpinMember(await managerOf(js), workQueueStreamName(stream, group), elasticConsumerName(member), member);
}

