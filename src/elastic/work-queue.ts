/**
 * The work-queue stream `<stream>-<group>` of an elastic group, configured exactly
 * as Go's `CreateElastic` configures it, so that either side can create it and the
 * other's create is an idempotent no-op.
 */
import type { StreamConfig, StreamInfo } from "@nats-io/jetstream";
import { sourceTransforms, workQueueStreamName } from "../core/names.js";
import type { ElasticConsumerGroupConfig } from "../core/types.js";

/**
 * The work-queue stream config of a group.
 *
 * @param source - the origin stream's info (for its replicas and storage)
 * @param group - the group name
 * @param config - the group config (partition count, filters and buffer caps)
 */
export function workQueueStreamConfig(
  source: StreamInfo,
  group: string,
  config: ElasticConsumerGroupConfig,
): Partial<StreamConfig> & {
  /** `<stream>-<group>`. */
  name: string;
} {
  return {
    name: workQueueStreamName(source.config.name, group),
    retention: "workqueue",
    num_replicas: source.config.num_replicas,
    storage: source.config.storage,
    max_msgs: config.max_buffered_msg ?? 0,
    max_bytes: config.max_buffered_bytes ?? 0,
    discard: "new",
    allow_direct: true,
    sources: [{ name: source.config.name, subject_transforms: sourceTransforms(config.max_members, config.partitioning_filters) }],
  };
}

/** True when the config needs whole-subject partitioning (`{{Partition(N)}}`, server >= 2.12). */
export function needsWholeSubjectPartitioning(config: ElasticConsumerGroupConfig): boolean {
  const filters = config.partitioning_filters ?? [];
  return filters.length === 0 || filters.some((f) => (f.partitioning_wildcards ?? []).length === 0);
}
