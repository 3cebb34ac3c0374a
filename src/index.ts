/**
 * nats-pcgroups: partitioned consumer groups for NATS JetStream, wire-compatible
 * with orbit.go/pcgroups v0.2.x.
 *
 * @packageDocumentation
 */
export { ConsumerGroupError, isConsumerGroupError } from "./core/errors.js";
export type { ErrorCode, ConsumerGroupErrorOptions } from "./core/errors.js";
export type { ElasticConsumerGroupConfig, GroupKind, MemberMapping, PartitioningFilter, StaticConsumerGroupConfig } from "./core/types.js";
export { fnv1a32, partitionOf } from "./core/partition.js";
export type { PartitionOptions } from "./core/partition.js";
export {
  compareCodePoints,
  effectiveMembers,
  elasticGetPartitionFilters,
  generatePartitionFilters,
  isInMembership,
  memberPartitions,
  partitionAssignment,
  partitionOwners,
  staticMemberFilters,
} from "./core/assignment.js";
export { validateElasticConfig, validatePartitioningFilter, validateStaticConfig } from "./core/validation.js";
export { membersWithoutPartitions, minimumMoves, movedPartitions, stickyMappings } from "./core/sticky-assignment.js";
export {
  ELASTIC_BUCKET,
  PRIORITY_GROUP,
  STATIC_BUCKET,
  assertValidGroupNames,
  assertValidName,
  bucketName,
  configKey,
  elasticConsumerName,
  parseConfigKey,
  sourceTransforms,
  staticConsumerName,
  transformDestination,
  workQueueStreamName,
} from "./core/names.js";
export {
  decodeElasticConfig,
  decodeStaticConfig,
  encodeElasticConfig,
  encodeStaticConfig,
  goJsonString,
  sameElasticSettings,
  sameMembership,
  sameStaticConfig,
} from "./core/codec.js";
export { parsePartitionTransform } from "./core/transform.js";
export type { PartitionTransform } from "./core/transform.js";

// --- NATS-facing: messages and member instances -------------------------------
export { ConsumerGroupMessage } from "./nats/message.js";
export type { Settlement } from "./nats/message.js";
export type { MessageHandler } from "./nats/pinned-consumer.js";
export type { ConsumerGroupMember, MemberLifecycle, MemberStatus } from "./nats/member.js";
export type { ReleaseOptions, ReleaseOutcome } from "./nats/member-types.js";
export type { ParkedKey, ReleaseResult, UnblockOutcome } from "./nats/dispatcher.js";
export { DeadLetterHeaders } from "./nats/dead-letter.js";
export { METER_NAME, MetricAttributes, MetricNames } from "./nats/metrics.js";
export type { MeterProviderLike } from "./nats/metrics.js";
export type { ConcurrencyMode } from "./nats/dispatcher.js";
export { elasticKeyExtractor, staticKeyExtractor } from "./core/keys.js";
export type { SubjectKeyExtractor } from "./core/keys.js";
export type { ConsumeOptions } from "./nats/consume-options.js";

// --- static groups ------------------------------------------------------------
export {
  createStatic,
  deleteStatic,
  getStaticConsumerGroupConfig,
  listStaticActiveMembers,
  listStaticConsumerGroups,
  staticMemberStepDown,
} from "./static/admin.js";
export type { CreateStaticOptions } from "./static/admin.js";
export { staticConsume } from "./static/consume.js";

// --- elastic groups -----------------------------------------------------------
export {
  createElastic,
  deleteElastic,
  elasticIsInMembershipAndActive,
  elasticMemberStepDown,
  getElasticConsumerGroupConfig,
  listElasticActiveMembers,
  listElasticConsumerGroups,
} from "./elastic/admin.js";
export type { CreateElasticOptions } from "./elastic/admin.js";
export { addMembers, deleteMembers, deleteMemberMappings, setMemberMappings } from "./elastic/membership.js";
export { elasticConsume } from "./elastic/consume.js";
export type { ElasticConsumeOptions } from "./elastic/consume.js";
export { defaultMemberName } from "./elastic/auto-join/settings.js";
export type { AutoJoinOptions } from "./elastic/auto-join/settings.js";
export type { AutoJoinedMember } from "./elastic/auto-join/auto-member.js";
export type { AssignmentPolicy } from "./core/auto-membership.js";
export { LEASE_BUCKET } from "./elastic/auto-join/lease-store.js";
export { ATTEMPTS_BUCKET } from "./elastic/attempt-ledger.js";
export { listParkedKeys, releaseParkedKey, PARKING_WAIT_MS } from "./elastic/parking.js";
export type { ListedParkedKey, ParkingRequestOptions } from "./elastic/parking.js";
export { workQueueStreamConfig } from "./elastic/work-queue.js";
export { repartition, REPARTITION_ATTEMPTS } from "./elastic/repartition/repartition.js";
export { staticRepartitionPlan } from "./static/repartition-plan.js";
export type { StaticRepartitionPlan } from "./static/repartition-plan.js";
export type { RepartitionOptions, RepartitionProgress, RepartitionResult, RepartitionRetry } from "./elastic/repartition/repartition.js";
export { feedingPartitions, splitStoredSubject, TRANSITION_TOKEN } from "./core/repartition.js";
export { MAX_PARTITIONS } from "./core/limits.js";
export type { RepartitionPhase, RepartitionRecord } from "./core/repartition.js";

// --- permissions ----------------------------------------------------------------
export { INBOX_ROOT, PERMISSION_ROLES, groupPermissions, inboxPrefixFor } from "./core/permissions.js";
export type { PermissionRequest, PermissionRole, PermissionSet } from "./core/permissions.js";
export { defaultUserName, nscCommand, serverConfigBlock, userConfigEntry } from "./core/permissions-text.js";
export type { UserText } from "./core/permissions-text.js";

// --- observability --------------------------------------------------------------
export { describeGroup } from "./observe/describe.js";
export type { DescribeOptions, GroupDescription, MemberDescription, PartitionDescription } from "./observe/describe.js";
export { healthFindings } from "./observe/health.js";
export type { HealthFinding, HealthInput } from "./observe/health.js";
export { DEFAULT_LAG_SAMPLE_MS, DEFAULT_TARGET_DRAIN_MS, MAX_LAG_SAMPLE_MS, SOURCE_ACTIVE_WITHIN_MS, groupLag } from "./observe/lag.js";
export type { DrainRate, GroupLag, GroupLagOptions, LagNote, MemberLag, PartitionLag, RateSource, SourceState } from "./observe/lag.js";
export { measureDrain, measuredRatePerMember, recommendMembers } from "./core/scaling.js";
export type { DrainMeasurement, QueueSample, Recommendation, RecommendationBasis, RecommendationInput } from "./core/scaling.js";
