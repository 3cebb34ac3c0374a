/**
 * Bad input, API side: a table of cases, one test each. Every case calls one public
 * function with something wrong (invalid names, numbers, mappings, filters, handlers
 * or templates; missing streams, groups or buckets; configs hand-edited in KV) and
 * checks that it fails with a ConsumerGroupError of the right `code`, with a message
 * that says what is wrong, and that it left nothing on the server: no KV write, no
 * stream, no consumer (a snapshot of the whole account before and after).
 *
 * A second table covers what must keep working: a hand-edited config with unknown
 * fields is read as Go reads it (the extra fields are ignored), and a handler that
 * throws or rejects is reported on status() and its message is redelivered, never lost.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import {
  ELASTIC_BUCKET,
  STATIC_BUCKET,
  addMembers,
  createElastic,
  createStatic,
  deleteElastic,
  deleteMemberMappings,
  deleteMembers,
  deleteStatic,
  describeGroup,
  elasticConsume,
  elasticIsInMembershipAndActive,
  elasticMemberStepDown,
  generatePartitionFilters,
  getElasticConsumerGroupConfig,
  getStaticConsumerGroupConfig,
  listElasticActiveMembers,
  listElasticConsumerGroups,
  listStaticActiveMembers,
  listStaticConsumerGroups,
  partitionOf,
  setMemberMappings,
  staticConsume,
  staticMemberStepDown,
  type ConsumerGroupMember,
  type ConsumerGroupMessage,
  type ErrorCode,
  type GroupKind,
  type MemberMapping,
  type MessageHandler,
  type PartitioningFilter,
} from "../../src/index.js";
import { waitFor, type Client } from "../helpers/nats.js";
import { CATALOGUE, assertTypedError, assertUnchanged, putRawConfig, serverState, startCatalogue, thrownBy, type CatalogueEnv } from "../helpers/security-state.js";
import { recordStatus } from "../helpers/static-fixtures.js";

const noop: MessageHandler = () => undefined;
const { S4, S3, EV, EVRUN } = CATALOGUE;
const TIMEOUT = 60_000;

/** Every public function of the catalogue; each must appear in at least one case. */
const PUBLIC_FUNCTIONS = [
  "createStatic",
  "deleteStatic",
  "getStaticConsumerGroupConfig",
  "listStaticConsumerGroups",
  "listStaticActiveMembers",
  "staticMemberStepDown",
  "staticConsume",
  "createElastic",
  "deleteElastic",
  "getElasticConsumerGroupConfig",
  "listElasticConsumerGroups",
  "addMembers",
  "deleteMembers",
  "setMemberMappings",
  "deleteMemberMappings",
  "listElasticActiveMembers",
  "elasticIsInMembershipAndActive",
  "elasticMemberStepDown",
  "elasticConsume",
  "partitionOf",
  "generatePartitionFilters",
  "describeGroup",
] as const;
type PublicFunction = (typeof PUBLIC_FUNCTIONS)[number];

/** What each case may use. */
interface Ctx {
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** A connection to an account with JetStream and no consumer group bucket at all. */
  emptyJs: JetStreamClient;
  /** Not a JetStream client: the plain connection. */
  notJs: JetStreamClient;
}

interface Case {
  fn: PublicFunction;
  /** What is wrong, for the test name. */
  what: string;
  call: (c: Ctx) => unknown;
  code: ErrorCode;
  /** The message must match every pattern. */
  message: RegExp[];
  /** Which connection's account to snapshot; default the main one. */
  account?: "main" | "empty";
}

const sc = (over: Partial<Parameters<typeof staticConsume>[1]>) => (c: Ctx) =>
  staticConsume(c.js, { stream: S4, group: "sg", member: "m1", handler: noop, ...over });
const ec = (over: Partial<Parameters<typeof elasticConsume>[1]>) => (c: Ctx) =>
  elasticConsume(c.js, { stream: EV, group: "eg", member: "m1", handler: noop, ...over });
const cs = (over: Record<string, unknown>) => (c: Ctx) =>
  createStatic(c.js, { stream: S4, group: "new_static", maxMembers: 4, members: ["m1", "m2"], onWarning: () => undefined, ...over });
const ce = (over: Record<string, unknown>) => (c: Ctx) =>
  createElastic(c.js, { stream: EV, group: "new_elastic", maxMembers: 4, partitioningFilters: [{ filter: "EV.*", partitioning_wildcards: [1] }], ...over });
const anyValue = <T>(v: unknown): T => v as T;

const CASES: Case[] = [
  // --- createStatic ---------------------------------------------------------------
  { fn: "createStatic", what: "an empty stream name", call: cs({ stream: "" }), code: "INVALID_NAME", message: [/stream name must be a non-empty string/] },
  { fn: "createStatic", what: "a group name with a dot", call: cs({ group: "a.b" }), code: "INVALID_NAME", message: [/group name "a\.b" contains "\."/, /letters, digits/] },
  { fn: "createStatic", what: "a member name with a wildcard", call: cs({ members: ["m1", "m*"] }), code: "INVALID_NAME", message: [/member name "m\*" contains "\*"/] },
  { fn: "createStatic", what: "a 300-character group name", call: cs({ group: "g".repeat(300) }), code: "INVALID_NAME", message: [/300 characters long; the limit is 255/] },
  { fn: "createStatic", what: "maxMembers 0", call: cs({ maxMembers: 0 }), code: "INVALID_MAX_MEMBERS", message: [/max number of members must be >= 1/] },
  { fn: "createStatic", what: "maxMembers 2.5 (not an integer)", call: cs({ maxMembers: 2.5 }), code: "INVALID_MAX_MEMBERS", message: [/>= 1/] },
  { fn: "createStatic", what: 'maxMembers "4" (a string)', call: cs({ maxMembers: "4" }), code: "INVALID_MAX_MEMBERS", message: [/>= 1/] },
  {
    fn: "createStatic",
    what: "both members and member mappings",
    call: cs({ members: ["m1"], memberMappings: [{ member: "m2", partitions: [0, 1, 2, 3] }] }),
    code: "MEMBERS_AND_MAPPINGS",
    message: [/either members or member mappings must be provided, not both/],
  },
  {
    fn: "createStatic",
    what: "a mapping to partition 4 of 4",
    call: cs({ members: undefined, memberMappings: [{ member: "m1", partitions: [0, 1] }, { member: "m2", partitions: [2, 4] }] }),
    code: "PARTITION_OUT_OF_RANGE",
    message: [/between 0 and one less than the max number of members \(got 4, max members 4\)/],
  },
  {
    fn: "createStatic",
    what: "a partition mapped twice",
    call: cs({ members: undefined, memberMappings: [{ member: "m1", partitions: [0, 1] }, { member: "m2", partitions: [1, 2, 3] }] }),
    code: "DUPLICATE_PARTITION",
    message: [/partition 1 is mapped twice/],
  },
  {
    fn: "createStatic",
    what: "a member mapped twice",
    call: cs({ members: undefined, memberMappings: [{ member: "m1", partitions: [0, 1] }, { member: "m1", partitions: [2, 3] }] }),
    code: "DUPLICATE_MEMBER",
    message: [/member "m1" is mapped twice/],
  },
  {
    fn: "createStatic",
    what: "mappings that leave partition 3 unmapped",
    call: cs({ members: undefined, memberMappings: [{ member: "m1", partitions: [0, 1] }, { member: "m2", partitions: [2] }] }),
    code: "PARTITION_COVERAGE",
    message: [/unmapped partitions: 3/],
  },
  {
    fn: "createStatic",
    what: "more mappings than partitions",
    call: cs({ maxMembers: 1, stream: "S1", members: undefined, memberMappings: [{ member: "m1", partitions: [0] }, { member: "m2", partitions: [] }] }),
    code: "MAPPING_COUNT",
    message: [/number of member mappings must be between 1 and the max number of members/],
  },
  {
    fn: "createStatic",
    what: "a mapping whose partitions is not an array",
    call: cs({ members: undefined, memberMappings: [{ member: "m1", partitions: "0,1,2,3" }] }),
    code: "INVALID_ARGUMENT",
    message: [/each member mapping must be \{ member: string, partitions: number\[\] \}/],
  },
  { fn: "createStatic", what: "filters given as a string", call: cs({ filters: "S4.*" }), code: "INVALID_ARGUMENT", message: [/filters must be an array/] },
  { fn: "createStatic", what: 'a filter with ">" in the middle', call: cs({ filters: ["a.>.b"] }), code: "INVALID_SUBJECT", message: [/">" may only end a filter/] },
  { fn: "createStatic", what: "a missing stream", call: cs({ stream: "NOPE" }), code: "STREAM_NOT_FOUND", message: [/stream "NOPE" does not exist; create the stream first/] },
  {
    fn: "createStatic",
    what: "maxMembers 4 on a stream partitioned into 3",
    call: cs({ stream: S3 }),
    code: "PARTITION_COUNT_MISMATCH",
    message: [/partitions subjects into 3 partitions/, /use maxMembers 3/],
  },
  {
    fn: "createStatic",
    what: "an existing group with another membership",
    call: cs({ group: "sg", members: ["m1", "m3"] }),
    code: "CONFIG_MISMATCH",
    message: [/already exists with a different config; delete it first/],
  },
  {
    fn: "createStatic",
    what: "an existing group whose stored config is invalid JSON",
    call: cs({ group: "badjson" }),
    code: "CONFIG_DECODE",
    message: [/already exists and is not valid/, /invalid JSON value/, /delete the group first/],
  },
  { fn: "createStatic", what: "a NatsConnection instead of a JetStream client", call: (c) => createStatic(c.notJs, { stream: S4, group: "x", maxMembers: 4 }), code: "INVALID_ARGUMENT", message: [/pass jetstream\(nc\)/] },
  { fn: "createStatic", what: "no options at all", call: (c) => createStatic(c.js, anyValue(undefined)), code: "INVALID_ARGUMENT", message: [/options/] },

  // --- deleteStatic -----------------------------------------------------------------
  { fn: "deleteStatic", what: "a missing group", call: (c) => deleteStatic(c.js, S4, "nope"), code: "GROUP_NOT_FOUND", message: [/no static group "nope" on stream "S4"/] },
  { fn: "deleteStatic", what: "a missing stream", call: (c) => deleteStatic(c.js, "NOPE", "sg"), code: "STREAM_NOT_FOUND", message: [/"NOPE" does not exist/] },
  { fn: "deleteStatic", what: "a group name with a space", call: (c) => deleteStatic(c.js, S4, "s g"), code: "INVALID_NAME", message: [/contains whitespace/] },

  // --- getStaticConsumerGroupConfig ----------------------------------------------------
  { fn: "getStaticConsumerGroupConfig", what: "a missing group", call: (c) => getStaticConsumerGroupConfig(c.js, S4, "nope"), code: "GROUP_NOT_FOUND", message: [/not found \(no group "nope" on stream "S4"\)/] },
  { fn: "getStaticConsumerGroupConfig", what: "an undefined group", call: (c) => getStaticConsumerGroupConfig(c.js, S4, anyValue(undefined)), code: "INVALID_NAME", message: [/group name must be a non-empty string/] },
  {
    fn: "getStaticConsumerGroupConfig",
    what: "an account without the static bucket",
    call: (c) => getStaticConsumerGroupConfig(c.emptyJs, S4, "sg"),
    code: "BUCKET_NOT_FOUND",
    message: [/KV bucket "static-consumer-groups" doesn't exist/, /create one first/],
    account: "empty",
  },
  { fn: "getStaticConsumerGroupConfig", what: "a config hand-edited into invalid JSON", call: (c) => getStaticConsumerGroupConfig(c.js, S4, "badjson"), code: "CONFIG_DECODE", message: [/invalid JSON value for the static consumer group's config/] },
  {
    fn: "getStaticConsumerGroupConfig",
    what: 'a config hand-edited with "max_members":"x"',
    call: (c) => getStaticConsumerGroupConfig(c.js, S4, "wrongtype"),
    code: "CONFIG_DECODE",
    message: [/max_members must be a non-negative integer, got "x"/],
  },
  { fn: "getStaticConsumerGroupConfig", what: "a config hand-edited into a JSON array", call: (c) => getStaticConsumerGroupConfig(c.js, S4, "notobject"), code: "CONFIG_DECODE", message: [/must be a JSON object, got an array/] },
  {
    fn: "getStaticConsumerGroupConfig",
    what: "a config hand-edited with a mapping to partition 9 of 4",
    call: (c) => getStaticConsumerGroupConfig(c.js, S4, "badmapping"),
    code: "PARTITION_OUT_OF_RANGE",
    message: [/invalid static consumer group config/, /got 9, max members 4/],
  },
  { fn: "getStaticConsumerGroupConfig", what: "a config key purged instead of deleted", call: (c) => getStaticConsumerGroupConfig(c.js, S4, "purged"), code: "GROUP_NOT_FOUND", message: [/not found/] },

  // --- listStaticConsumerGroups ------------------------------------------------------
  { fn: "listStaticConsumerGroups", what: "a stream name with a space", call: (c) => listStaticConsumerGroups(c.js, "my stream"), code: "INVALID_NAME", message: [/stream name "my stream" contains whitespace/] },
  { fn: "listStaticConsumerGroups", what: "an account without the static bucket", call: (c) => listStaticConsumerGroups(c.emptyJs, S4), code: "BUCKET_NOT_FOUND", message: [/no static group was ever created/], account: "empty" },

  // --- listStaticActiveMembers -------------------------------------------------------
  { fn: "listStaticActiveMembers", what: "a missing group", call: (c) => listStaticActiveMembers(c.js, S4, "nope"), code: "GROUP_NOT_FOUND", message: [/no group "nope"/] },
  { fn: "listStaticActiveMembers", what: "a config hand-edited into invalid JSON", call: (c) => listStaticActiveMembers(c.js, S4, "badjson"), code: "CONFIG_DECODE", message: [/invalid JSON value/] },

  // --- staticMemberStepDown ------------------------------------------------------------
  { fn: "staticMemberStepDown", what: "a member outside the membership", call: (c) => staticMemberStepDown(c.js, S4, "sg", "m9"), code: "NOT_IN_MEMBERSHIP", message: [/member "m9" is not in the membership of static group "sg"/] },
  { fn: "staticMemberStepDown", what: "a member with no running instance", call: (c) => staticMemberStepDown(c.js, S4, "sg", "m2"), code: "GROUP_NOT_FOUND", message: [/no instance of it is running/] },
  { fn: "staticMemberStepDown", what: "a member name with a dot", call: (c) => staticMemberStepDown(c.js, S4, "sg", "m.1"), code: "INVALID_NAME", message: [/member name "m\.1" contains "\."/] },

  // --- staticConsume --------------------------------------------------------------------
  { fn: "staticConsume", what: "no handler", call: sc({ handler: anyValue(undefined) }), code: "INVALID_HANDLER", message: [/a message handler must be provided/] },
  { fn: "staticConsume", what: "a handler that is a string", call: sc({ handler: anyValue("log") }), code: "INVALID_HANDLER", message: [/a message handler must be provided/] },
  { fn: "staticConsume", what: "a member outside the membership", call: sc({ member: "m9" }), code: "NOT_IN_MEMBERSHIP", message: [/"m9" is not a member of "sg"/] },
  { fn: "staticConsume", what: "a missing group", call: sc({ group: "nope" }), code: "GROUP_NOT_FOUND", message: [/no group "nope"/] },
  { fn: "staticConsume", what: "a missing stream", call: sc({ stream: "NOPE" }), code: "STREAM_NOT_FOUND", message: [/"NOPE" does not exist; create the stream and the group first/] },
  { fn: "staticConsume", what: "a template with filter_subject", call: sc({ consumerConfig: { filter_subject: "0.>" } }), code: "INVALID_CONSUMER_TEMPLATE", message: [/sets filter_subject "0\.>"/, /remove it/] },
  { fn: "staticConsume", what: "a template with deliver_subject", call: sc({ consumerConfig: { deliver_subject: "push.here" } }), code: "INVALID_CONSUMER_TEMPLATE", message: [/deliver_subject/, /pull consumers/] },
  { fn: "staticConsume", what: "a negative ack_wait", call: sc({ consumerConfig: { ack_wait: -5 } }), code: "INVALID_CONSUMER_TEMPLATE", message: [/ack_wait must be a non-negative number of nanoseconds, got -5/] },
  { fn: "staticConsume", what: 'concurrency "parallel"', call: sc({ concurrency: anyValue("parallel") }), code: "INVALID_ARGUMENT", message: [/concurrency must be "serial", "partition" or "key", got "parallel"/] },
  { fn: "staticConsume", what: "maxInFlight 0 in partition mode", call: sc({ concurrency: "partition", maxInFlight: 0 }), code: "INVALID_ARGUMENT", message: [/maxInFlight must be a positive number, got 0/] },
  { fn: "staticConsume", what: "pullBatch 0.5", call: sc({ pullBatch: 0.5 }), code: "INVALID_ARGUMENT", message: [/pullBatch must be a whole number of messages >= 1, got 0\.5/] },
  { fn: "staticConsume", what: "pullBatch 0", call: sc({ pullBatch: 0 }), code: "INVALID_ARGUMENT", message: [/pullBatch must be a whole number of messages >= 1, got 0/] },
  { fn: "staticConsume", what: "maxBufferedBytes 1e20", call: sc({ maxBufferedBytes: 1e20 }), code: "INVALID_ARGUMENT", message: [/maxBufferedBytes must be a whole number of bytes from 1024 to 9007199254740991, got 100000000000000000000/] },
  { fn: "staticConsume", what: "maxBufferedBytes 512", call: sc({ maxBufferedBytes: 512 }), code: "INVALID_ARGUMENT", message: [/maxBufferedBytes must be a whole number of bytes from 1024/, /got 512/] },
  { fn: "staticConsume", what: "maxParked -1", call: sc({ maxParked: -1 }), code: "INVALID_ARGUMENT", message: [/maxParked must be a whole number of messages >= 0 \(0: no parking\), got -1/] },
  { fn: "staticConsume", what: "maxParked 2.5", call: sc({ maxParked: 2.5 }), code: "INVALID_ARGUMENT", message: [/maxParked must be a whole number/, /got 2\.5/] },
  { fn: "staticConsume", what: "maxParked \"many\"", call: sc({ maxParked: "many" as unknown as number }), code: "INVALID_ARGUMENT", message: [/maxParked must be a whole number/, /got "many"/] },
  { fn: "staticConsume", what: "handoff 0", call: sc({ handoff: anyValue(0) }), code: "INVALID_ARGUMENT", message: [/handoff must be true or false, got 0/] },
  { fn: "staticConsume", what: "retry 5", call: sc({ retry: anyValue(5) }), code: "INVALID_ARGUMENT", message: [/retry must be false or an object \{ maxDeliver\?, backoffMs\?, exactAttempts\? \}, got 5/] },
  { fn: "staticConsume", what: 'retry.exactAttempts "yes"', call: sc({ retry: { exactAttempts: anyValue("yes") } }), code: "INVALID_ARGUMENT", message: [/retry\.exactAttempts must be true or false, got "yes"/] },
  { fn: "elasticConsume", what: "retry.exactAttempts 1", call: ec({ retry: { exactAttempts: anyValue(1) } }), code: "INVALID_ARGUMENT", message: [/retry\.exactAttempts must be true or false, got 1/] },
  { fn: "staticConsume", what: "concurrency null", call: sc({ concurrency: anyValue(null) }), code: "INVALID_ARGUMENT", message: [/concurrency must be "serial", "partition" or "key", got null/] },
  { fn: "staticConsume", what: "an ack_wait of 60 days", call: sc({ consumerConfig: { ack_wait: 60 * 86_400 * 1e9 } }), code: "INVALID_CONSUMER_TEMPLATE", message: [/ack_wait must be at most 7 days/, /msg\.working\(\)/] },
  { fn: "staticConsume", what: "drainTimeoutMs 30 days", call: sc({ drainTimeoutMs: 30 * 86_400_000 }), code: "INVALID_ARGUMENT", message: [/drainTimeoutMs must be a positive number of ms up to 2147483647/, /got 2592000000/] },
  { fn: "staticConsume", what: "drainTimeoutMs a string", call: sc({ drainTimeoutMs: anyValue("5s") }), code: "INVALID_ARGUMENT", message: [/drainTimeoutMs must be a positive number of ms .*got "5s"/] },
  { fn: "staticConsume", what: "a nakBackoffMs step of 30 days", call: sc({ nakBackoffMs: [100, 30 * 86_400_000] }), code: "INVALID_ARGUMENT", message: [/nakBackoffMs must be a non-negative number of ms up to 2147483647/] },
  { fn: "staticConsume", what: "retry.maxDeliver 0", call: sc({ retry: { maxDeliver: 0 } }), code: "INVALID_ARGUMENT", message: [/retry\.maxDeliver must be an integer >= 1, got 0/] },
  { fn: "staticConsume", what: "a wildcard dead-letter subject", call: sc({ deadLetterSubject: "dlq.>" }), code: "INVALID_ARGUMENT", message: [/deadLetterSubject must be a literal subject/] },
  { fn: "staticConsume", what: "null options", call: (c) => staticConsume(c.js, anyValue(null)), code: "INVALID_ARGUMENT", message: [/consume options must be an object/] },
  { fn: "staticConsume", what: "a config hand-edited into invalid JSON", call: sc({ group: "badjson" }), code: "CONFIG_DECODE", message: [/invalid JSON value/] },
  { fn: "staticConsume", what: 'a config hand-edited with "max_members":"x"', call: sc({ group: "wrongtype" }), code: "CONFIG_DECODE", message: [/max_members must be a non-negative integer/] },
  { fn: "staticConsume", what: "a config key purged instead of deleted", call: sc({ group: "purged" }), code: "GROUP_NOT_FOUND", message: [/not found/] },
  { fn: "staticConsume", what: "an account without the stream", call: (c) => staticConsume(c.emptyJs, { stream: "S4", group: "sg", member: "m1", handler: noop }), code: "STREAM_NOT_FOUND", message: [/"S4" does not exist/], account: "empty" },
  {
    fn: "staticConsume",
    what: "an account with the stream but without the static bucket",
    call: (c) => staticConsume(c.emptyJs, { stream: "EMPTYS", group: "sg", member: "m1", handler: noop }),
    code: "BUCKET_NOT_FOUND",
    message: [/"static-consumer-groups" doesn't exist/],
    account: "empty",
  },

  // --- createElastic ------------------------------------------------------------------
  { fn: "createElastic", what: "a stream name with a wildcard", call: ce({ stream: "EV.>" }), code: "INVALID_NAME", message: [/stream name "EV\.>" contains "\."/] },
  { fn: "createElastic", what: "maxMembers -1", call: ce({ maxMembers: -1 }), code: "INVALID_MAX_MEMBERS", message: [/>= 1/] },
  { fn: "createElastic", what: "maxMembers 1e9 (above MAX_PARTITIONS)", call: ce({ maxMembers: 1e9 }), code: "INVALID_MAX_MEMBERS", message: [/must be at most 4096/, /one filter per partition/] },
  { fn: "createStatic", what: "maxMembers 4097 (above MAX_PARTITIONS)", call: cs({ maxMembers: 4097 }), code: "INVALID_MAX_MEMBERS", message: [/must be at most 4096/] },
  {
    fn: "createElastic",
    what: "a partitioning filter with no wildcard",
    call: ce({ partitioningFilters: [{ filter: "EV.orders", partitioning_wildcards: [] }] }),
    code: "INVALID_PARTITIONING_FILTER",
    message: [/at least one \* wildcard or end with > wildcard \(filter "EV\.orders"\)/],
  },
  {
    fn: "createElastic",
    what: "a wildcard index 0",
    call: ce({ partitioningFilters: [{ filter: "EV.*", partitioning_wildcards: [0] }] }),
    code: "INVALID_PARTITIONING_FILTER",
    message: [/indexes must be between 1 and the number of \* wildcards/],
  },
  {
    fn: "createElastic",
    what: "more wildcard indexes than * tokens",
    call: ce({ partitioningFilters: [{ filter: "EV.*", partitioning_wildcards: [1, 2] }] }),
    code: "INVALID_PARTITIONING_FILTER",
    message: [/must not be larger than the total number of \* wildcards/],
  },
  {
    fn: "createElastic",
    what: "a duplicate wildcard index",
    call: ce({ partitioningFilters: [{ filter: "EV.*.*", partitioning_wildcards: [2, 2] }] }),
    code: "INVALID_PARTITIONING_FILTER",
    message: [/indexes must be unique/],
  },
  {
    fn: "createElastic",
    what: "an empty partitioning filter",
    call: ce({ partitioningFilters: [{ filter: "", partitioning_wildcards: null }] }),
    code: "INVALID_PARTITIONING_FILTER",
    message: [/must have a non-empty filter/],
  },
  {
    fn: "createElastic",
    what: "overlapping partitioning filters",
    call: ce({
      partitioningFilters: [
        { filter: "EV.a.*", partitioning_wildcards: [1] },
        { filter: "EV.*.b", partitioning_wildcards: [1] },
      ],
    }),
    code: "OVERLAPPING_FILTERS",
    message: [/"EV\.a\.\*" and "EV\.\*\.b" overlap/],
  },
  { fn: "createElastic", what: "partitioningFilters as an object", call: ce({ partitioningFilters: { filter: "EV.*" } }), code: "INVALID_ARGUMENT", message: [/partitioningFilters must be an array/] },
  {
    fn: "createElastic",
    what: "partitioning_wildcards as a number",
    call: ce({ partitioningFilters: [{ filter: "EV.*", partitioning_wildcards: 1 }] }),
    code: "INVALID_ARGUMENT",
    message: [/partitioning_wildcards of "EV\.\*" must be an array/],
  },
  { fn: "createElastic", what: "maxBufferedMsgs -5", call: ce({ maxBufferedMsgs: -5 }), code: "INVALID_ARGUMENT", message: [/maxBufferedMsgs must be an integer >= -1/] },
  { fn: "createElastic", what: "maxBufferedBytes 1.5", call: ce({ maxBufferedBytes: 1.5 }), code: "INVALID_ARGUMENT", message: [/maxBufferedBytes must be an integer >= -1/] },
  { fn: "createElastic", what: "a missing source stream", call: ce({ stream: "NOPE" }), code: "STREAM_NOT_FOUND", message: [/source stream "NOPE" does not exist; create the stream first/] },
  { fn: "createElastic", what: "an existing group with another maxMembers", call: ce({ group: "eg", maxMembers: 8 }), code: "CONFIG_IMMUTABLE", message: [/can not be updated to the requested one/, /delete the existing elastic consumer group/] },
  {
    fn: "createElastic",
    what: "an existing group with other wildcards",
    call: ce({ group: "eg", partitioningFilters: [{ filter: "EV.*", partitioning_wildcards: null }] }),
    code: "CONFIG_IMMUTABLE",
    message: [/can not be updated/],
  },

  // --- deleteElastic ------------------------------------------------------------------
  { fn: "deleteElastic", what: "a missing group", call: (c) => deleteElastic(c.js, EV, "nope"), code: "GROUP_NOT_FOUND", message: [/no elastic group "nope" on stream "EV"/] },
  { fn: "deleteElastic", what: "an account without the elastic bucket", call: (c) => deleteElastic(c.emptyJs, EV, "eg"), code: "BUCKET_NOT_FOUND", message: [/"elastic-consumer-groups" doesn't exist/], account: "empty" },

  // --- getElasticConsumerGroupConfig ---------------------------------------------------
  { fn: "getElasticConsumerGroupConfig", what: "a missing group", call: (c) => getElasticConsumerGroupConfig(c.js, EV, "nope"), code: "GROUP_NOT_FOUND", message: [/elastic consumer group's config: not found/] },
  { fn: "getElasticConsumerGroupConfig", what: "a config hand-edited into invalid JSON", call: (c) => getElasticConsumerGroupConfig(c.js, EV, "ebadjson"), code: "CONFIG_DECODE", message: [/invalid JSON value for the elastic consumer group's config/] },
  {
    fn: "getElasticConsumerGroupConfig",
    what: 'a config hand-edited with "members":"m1"',
    call: (c) => getElasticConsumerGroupConfig(c.js, EV, "ewrongtype"),
    code: "CONFIG_DECODE",
    message: [/members must be an array, got "m1"/],
  },
  { fn: "getElasticConsumerGroupConfig", what: "a config hand-edited with max_members 0", call: (c) => getElasticConsumerGroupConfig(c.js, EV, "ezero"), code: "INVALID_MAX_MEMBERS", message: [/invalid elastic consumer group config/, />= 1/] },
  { fn: "getElasticConsumerGroupConfig", what: "a config key purged instead of deleted", call: (c) => getElasticConsumerGroupConfig(c.js, EV, "epurged"), code: "GROUP_NOT_FOUND", message: [/not found/] },

  // --- listElasticConsumerGroups -------------------------------------------------------
  { fn: "listElasticConsumerGroups", what: "an account without the elastic bucket", call: (c) => listElasticConsumerGroups(c.emptyJs, EV), code: "BUCKET_NOT_FOUND", message: [/no elastic group was ever created/], account: "empty" },
  { fn: "listElasticConsumerGroups", what: "a numeric stream name", call: (c) => listElasticConsumerGroups(c.js, anyValue(42)), code: "INVALID_NAME", message: [/stream name must be a non-empty string/] },

  // --- addMembers ---------------------------------------------------------------------
  { fn: "addMembers", what: "an empty member list", call: (c) => addMembers(c.js, EV, "eg", []), code: "INVALID_ARGUMENT", message: [/pass at least one member name/] },
  { fn: "addMembers", what: "a member list given as a string", call: (c) => addMembers(c.js, EV, "eg", anyValue("m2")), code: "INVALID_ARGUMENT", message: [/no member names/] },
  { fn: "addMembers", what: "a member name with a dot", call: (c) => addMembers(c.js, EV, "eg", ["m2", "m.3"]), code: "INVALID_NAME", message: [/member name "m\.3"/] },
  { fn: "addMembers", what: "a group that uses member mappings", call: (c) => addMembers(c.js, EV, "egmap", ["m3"]), code: "GROUP_USES_MAPPINGS", message: [/can't add members to an elastic consumer group that uses member mappings/] },
  { fn: "addMembers", what: "a missing group", call: (c) => addMembers(c.js, EV, "nope", ["m1"]), code: "GROUP_NOT_FOUND", message: [/no group "nope" on stream "EV"/] },
  { fn: "addMembers", what: "a config hand-edited into invalid JSON", call: (c) => addMembers(c.js, EV, "ebadjson", ["m1"]), code: "CONFIG_DECODE", message: [/invalid JSON value/] },

  // --- deleteMembers ------------------------------------------------------------------
  { fn: "deleteMembers", what: "a group that uses member mappings", call: (c) => deleteMembers(c.js, EV, "egmap", ["m1"]), code: "GROUP_USES_MAPPINGS", message: [/can't drop members from a elastic consumer group that uses member mappings/] },
  { fn: "deleteMembers", what: "an empty member list", call: (c) => deleteMembers(c.js, EV, "eg", []), code: "INVALID_ARGUMENT", message: [/at least one member name/] },
  { fn: "deleteMembers", what: "a missing group", call: (c) => deleteMembers(c.js, EV, "nope", ["m1"]), code: "GROUP_NOT_FOUND", message: [/not found/] },

  // --- setMemberMappings --------------------------------------------------------------
  { fn: "setMemberMappings", what: "no mappings", call: (c) => setMemberMappings(c.js, EV, "eg", []), code: "INVALID_ARGUMENT", message: [/pass at least one mapping/] },
  {
    fn: "setMemberMappings",
    what: "a mapping to partition 7 of 4",
    call: (c) => setMemberMappings(c.js, EV, "eg", [{ member: "m1", partitions: [0, 1, 2, 7] }]),
    code: "PARTITION_OUT_OF_RANGE",
    message: [/got 7, max members 4/],
  },
  {
    fn: "setMemberMappings",
    what: "mappings that leave partitions 2 and 3 unmapped",
    call: (c) => setMemberMappings(c.js, EV, "eg", [{ member: "m1", partitions: [0] }, { member: "m2", partitions: [1] }]),
    code: "PARTITION_COVERAGE",
    message: [/unmapped partitions: 2, 3/],
  },
  {
    fn: "setMemberMappings",
    what: "a member mapped twice",
    call: (c) => setMemberMappings(c.js, EV, "eg", [{ member: "m1", partitions: [0, 1] }, { member: "m1", partitions: [2, 3] }]),
    code: "DUPLICATE_MEMBER",
    message: [/"m1" is mapped twice/],
  },
  {
    fn: "setMemberMappings",
    what: "a mapping that is null",
    call: (c) => setMemberMappings(c.js, EV, "eg", anyValue<MemberMapping[]>([null])),
    code: "INVALID_ARGUMENT",
    message: [/each member mapping must be/],
  },
  {
    fn: "setMemberMappings",
    what: "a missing group",
    call: (c) => setMemberMappings(c.js, EV, "nope", [{ member: "m1", partitions: [0, 1, 2, 3] }]),
    code: "GROUP_NOT_FOUND",
    message: [/not found/],
  },

  // --- deleteMemberMappings -----------------------------------------------------------
  { fn: "deleteMemberMappings", what: "a missing group", call: (c) => deleteMemberMappings(c.js, EV, "nope"), code: "GROUP_NOT_FOUND", message: [/no group "nope"/] },
  { fn: "deleteMemberMappings", what: "an empty group name", call: (c) => deleteMemberMappings(c.js, EV, ""), code: "INVALID_NAME", message: [/group name must be a non-empty string/] },

  // --- listElasticActiveMembers -------------------------------------------------------
  { fn: "listElasticActiveMembers", what: "a missing group", call: (c) => listElasticActiveMembers(c.js, EV, "nope"), code: "GROUP_NOT_FOUND", message: [/not found/] },
  { fn: "listElasticActiveMembers", what: 'a config hand-edited with "members":"m1"', call: (c) => listElasticActiveMembers(c.js, EV, "ewrongtype"), code: "CONFIG_DECODE", message: [/members must be an array/] },

  // --- elasticIsInMembershipAndActive -------------------------------------------------
  { fn: "elasticIsInMembershipAndActive", what: "an empty member name", call: (c) => elasticIsInMembershipAndActive(c.js, EV, "eg", ""), code: "INVALID_NAME", message: [/member name must be a non-empty string/] },
  { fn: "elasticIsInMembershipAndActive", what: "a missing group", call: (c) => elasticIsInMembershipAndActive(c.js, EV, "nope", "m1"), code: "GROUP_NOT_FOUND", message: [/not found/] },

  // --- elasticMemberStepDown ----------------------------------------------------------
  { fn: "elasticMemberStepDown", what: "a member outside the membership", call: (c) => elasticMemberStepDown(c.js, EV, "eg", "m9"), code: "NOT_IN_MEMBERSHIP", message: [/"m9" is not in the membership of elastic group "eg"/] },
  { fn: "elasticMemberStepDown", what: "a member with no running instance", call: (c) => elasticMemberStepDown(c.js, EV, "eg", "m1"), code: "GROUP_NOT_FOUND", message: [/no instance of it is running/] },

  // --- elasticConsume -----------------------------------------------------------------
  { fn: "elasticConsume", what: 'a template with ack_policy "none"', call: ec({ consumerConfig: { ack_policy: anyValue("none") } }), code: "INVALID_CONSUMER_TEMPLATE", message: [/ack policy when consuming from elastic consumer groups must be explicit \(got "none"\)/] },
  { fn: "elasticConsume", what: "a missing group (no work-queue stream)", call: ec({ group: "nope" }), code: "STREAM_NOT_FOUND", message: [/"EV-nope" does not exist; create the group first/] },
  { fn: "elasticConsume", what: "no handler", call: ec({ handler: anyValue(undefined) }), code: "INVALID_HANDLER", message: [/a message handler must be provided/] },
  { fn: "elasticConsume", what: "a member name with a space", call: ec({ member: "m 1" }), code: "INVALID_NAME", message: [/contains whitespace/] },
  { fn: "elasticConsume", what: "a keyOf that is not a function", call: ec({ concurrency: "key", keyOf: anyValue("subject") }), code: "INVALID_ARGUMENT", message: [/keyOf must be a function/] },
  { fn: "elasticConsume", what: "an onError that is not a function", call: ec({ onError: anyValue(42) }), code: "INVALID_ARGUMENT", message: [/onError must be a function/] },
  { fn: "elasticConsume", what: "a config hand-edited into invalid JSON", call: ec({ group: "ebadjson" }), code: "CONFIG_DECODE", message: [/invalid JSON value/] },
  { fn: "elasticConsume", what: "a config key purged instead of deleted", call: ec({ group: "epurged" }), code: "GROUP_NOT_FOUND", message: [/not found/] },

  // --- partitionOf ---------------------------------------------------------------------
  { fn: "partitionOf", what: "0 partitions", call: () => partitionOf("a.b", 0), code: "INVALID_ARGUMENT", message: [/number of partitions must be an integer >= 1, got 0/] },
  { fn: "partitionOf", what: "a wildcard subject", call: () => partitionOf("orders.*", 4), code: "INVALID_SUBJECT", message: [/is a wildcard subject; a message subject must be literal/] },
  { fn: "partitionOf", what: "a subject that does not match the filter", call: () => partitionOf("a.b", 4, { filter: "x.*", wildcards: [1] }), code: "INVALID_SUBJECT", message: [/"a\.b" does not match the filter "x\.\*"/] },
  { fn: "partitionOf", what: "a wildcard index beyond the filter's * tokens", call: () => partitionOf("x.b", 4, { filter: "x.*", wildcards: [2] }), code: "INVALID_ARGUMENT", message: [/wildcard index 2 is out of range/] },
  { fn: "partitionOf", what: "wildcards without a filter", call: () => partitionOf("x.b", 4, { wildcards: [1] }), code: "INVALID_ARGUMENT", message: [/pass options\.filter too/] },
  { fn: "partitionOf", what: "an empty subject token", call: () => partitionOf("a..b", 4), code: "INVALID_SUBJECT", message: [/a\.\.b/] },

  // --- generatePartitionFilters ----------------------------------------------------------
  { fn: "generatePartitionFilters", what: "maxMembers 0", call: () => generatePartitionFilters(["m1"], 0, null, "m1", ">"), code: "INVALID_MAX_MEMBERS", message: [/>= 1 \(got 0\)/] },
  { fn: "generatePartitionFilters", what: "maxMembers NaN", call: () => generatePartitionFilters(["m1"], Number.NaN, null, "m1", ">"), code: "INVALID_MAX_MEMBERS", message: [/got NaN/] },

  // --- describeGroup ------------------------------------------------------------------
  { fn: "describeGroup", what: 'kind "dynamic"', call: (c) => describeGroup(c.js, anyValue<GroupKind>("dynamic"), S4, "sg"), code: "INVALID_ARGUMENT", message: [/kind must be "static" or "elastic", got "dynamic"/] },
  { fn: "describeGroup", what: "a missing static group", call: (c) => describeGroup(c.js, "static", S4, "nope"), code: "GROUP_NOT_FOUND", message: [/no group "nope"/] },
  { fn: "describeGroup", what: "an account without the elastic bucket", call: (c) => describeGroup(c.emptyJs, "elastic", EV, "eg"), code: "BUCKET_NOT_FOUND", message: [/doesn't exist/], account: "empty" },
  { fn: "describeGroup", what: "a group name with a slash", call: (c) => describeGroup(c.js, "elastic", EV, "e/g"), code: "INVALID_NAME", message: [/contains "\/"/] },
];

describe("bad input - API", () => {
  let env: CatalogueEnv;
  let main: Client;
  let empty: Client;
  let ctx: Ctx;
  const running: ConsumerGroupMember[] = [];

  before(async () => {
    env = await startCatalogue();
    main = env.main;
    empty = env.empty;
    ctx = { js: main.js, jsm: main.jsm, emptyJs: empty.js, notJs: anyValue<JetStreamClient>(main.nc) };
  });

  after(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    await env?.close();
  });

  test("bad input - API: the catalogue covers every public function", () => {
    const covered = new Set(CASES.map((c) => c.fn));
    assert.deepEqual(
      PUBLIC_FUNCTIONS.filter((f) => !covered.has(f)),
      [],
      "public functions without a bad-input case",
    );
    assert.ok(CASES.length >= 40, `at least 40 cases, got ${CASES.length}`);
  });

  for (const c of CASES) {
    test(`bad input - ${c.fn}: ${c.what} → ${c.code}`, { timeout: TIMEOUT }, async () => {
      const jsm = c.account === "empty" ? empty.jsm : main.jsm;
      const before = await serverState(jsm);
      const err = await thrownBy(() => c.call(ctx));
      assertTypedError(err, c.code, ...c.message);
      await assertUnchanged(jsm, before, `${c.fn} with ${c.what}`);
    });
  }

  // --- what must keep working ---------------------------------------------------------

  test("bad input - getStaticConsumerGroupConfig/staticConsume: unknown fields in a hand-edited config are ignored, as Go does", { timeout: TIMEOUT }, async () => {
    await putRawConfig(main.js, STATIC_BUCKET, `${S4}.extra`, '{"max_members":4,"members":["m1"],"future_field":{"nested":[1,2]},"Max_Buffered":7}');
    assert.deepEqual(await getStaticConsumerGroupConfig(main.js, S4, "extra"), { max_members: 4, members: ["m1"] });
    assert.ok((await listStaticConsumerGroups(main.js, S4)).includes("extra"));
    const handled: string[] = [];
    const member = await staticConsume(main.js, { stream: S4, group: "extra", member: "m1", handler: (m) => void handled.push(m.subject) });
    running.push(member);
    await main.js.publish(`${S4}.k1`, "x");
    await waitFor(() => handled.includes(`${S4}.k1`), 30_000, "the member of a config with unknown fields to handle a message");
    await member.stop();
  });

  test("bad input - elasticConsume/addMembers: unknown fields in a hand-edited config are ignored, as Go does", { timeout: TIMEOUT }, async () => {
    const pfs: PartitioningFilter[] = [{ filter: `${EVRUN}.*`, partitioning_wildcards: [1] }];
    await createElastic(main.js, { stream: EVRUN, group: "eextra", maxMembers: 2, partitioningFilters: pfs });
    await putRawConfig(
      main.js,
      ELASTIC_BUCKET,
      `${EVRUN}.eextra`,
      `{"max_members":2,"partitioning_filters":[{"filter":"${EVRUN}.*","partitioning_wildcards":[1],"hash":"fnv"}],"members":["m1"],"owner":"team-a"}`,
    );
    assert.deepEqual(await getElasticConsumerGroupConfig(main.js, EVRUN, "eextra"), { max_members: 2, partitioning_filters: pfs, members: ["m1"] });
    const handled: string[] = [];
    const member = await elasticConsume(main.js, { stream: EVRUN, group: "eextra", member: "m1", handler: (m) => void handled.push(m.subject), consumerConfig: { ack_wait: 2_000_000_000 } });
    running.push(member);
    await main.js.publish(`${EVRUN}.k1`, "x");
    await waitFor(() => handled.includes(`${EVRUN}.k1`), 30_000, "the member of a config with unknown fields to handle a message");
    assert.deepEqual(await addMembers(main.js, EVRUN, "eextra", ["m2"]), ["m1", "m2"]);
    await member.stop();
  });

  /** Runs one member whose handler fails on each message's first delivery, and checks that nothing is lost. */
  async function failingHandler(kind: GroupKind, group: string, fail: (msg: ConsumerGroupMessage) => unknown): Promise<void> {
    const stream = kind === "static" ? S4 : EVRUN;
    if (kind === "static") await createStatic(main.js, { stream, group, maxMembers: 4, members: ["m1"] });
    else {
      await createElastic(main.js, { stream, group, maxMembers: 2, partitioningFilters: [{ filter: `${EVRUN}.*`, partitioning_wildcards: [1] }] });
      await addMembers(main.js, stream, group, ["m1"]);
    }
    const handled = new Map<string, number>();
    const handler: MessageHandler = (msg) => {
      if (msg.info.deliveryCount === 1) return fail(msg) as void;
      handled.set(msg.subject, msg.info.deliveryCount);
    };
    const opts = { stream, group, member: "m1", handler, consumerConfig: { ack_wait: 2_000_000_000 } };
    const member = kind === "static" ? await staticConsume(main.js, opts) : await elasticConsume(main.js, opts);
    running.push(member);
    const status = recordStatus(member);
    const subjects = ["a", "b", "c", "d", "e"].map((k) => `${stream}.${group}${k}`);
    for (const s of subjects) await main.js.publish(s, s);
    // (The stream may hold older messages too: they fail once as well, and are handled the same way.)
    await waitFor(() => subjects.every((s) => handled.has(s)), 60_000, "every message to be redelivered and handled");
    for (const s of subjects) assert.ok((handled.get(s) ?? 0) >= 2, `${s} was handled on a redelivery`);
    const errors = status.events.flatMap((e) => (e.type === "handler_error" ? [e] : []));
    for (const s of subjects) {
      const reported = errors.find((e) => e.subject === s);
      assert.ok(reported, `the failure of ${s} was reported on status()`);
      assert.equal(reported.attempt, 1);
      assert.ok(reported.seq > 0 && reported.partition >= 0);
      assert.ok(reported.error !== undefined);
    }
    assert.equal(status.events.find((e) => e.type === "stopped"), undefined, "a failing handler does not stop the member");
    await member.stop();
  }

  test("bad input - staticConsume: a handler that throws is reported on status() and its message redelivered, never lost", { timeout: 120_000 }, async () => {
    await failingHandler("static", "hfail", () => {
      throw new Error("handler exploded");
    });
  });

  test("bad input - elasticConsume: a handler that returns a rejected promise is reported on status() and its message redelivered, never lost", { timeout: 120_000 }, async () => {
    await failingHandler("elastic", "ehfail", async () => {
      await new Promise((r) => setTimeout(r, 5));
      throw new Error("async handler rejected");
    });
  });

  test("bad input - staticConsume: a handler that rejects with a non-Error value is reported and redelivered", { timeout: 120_000 }, async () => {
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
    await failingHandler("static", "hfail2", () => Promise.reject("plain string rejection"));
  });
});
