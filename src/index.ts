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
