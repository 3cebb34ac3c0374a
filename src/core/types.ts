/**
 * The stored config shapes, field for field as orbit.go/pcgroups v0.2.x writes
 * them to KV. Wire-facing keys stay snake_case, as on the wire.
 *
 * `null` and `[]` are different values here on purpose: Go's `reflect.DeepEqual`
 * tells them apart, so a rewrite that turned one into the other would make every
 * running Go member quit. See `codec.ts`.
 */

/** An explicit member → partitions mapping (Go `MemberMapping`). */
export interface MemberMapping {
  /** The member name. */
  member: string;
  /** The partitions it owns. Go writes a nil list as `null`. */
  partitions: number[] | null;
}

/** One partitioning filter of an elastic group (Go `PartitioningFilter`). */
export interface PartitioningFilter {
  /** A subject filter on the source stream, e.g. `orders.*.*`. */
  filter: string;
  /**
   * 1-based indexes of the `*` tokens of `filter` whose values make the partition key.
   * Empty or `null` hashes the whole subject (server >= 2.12).
   */
  partitioning_wildcards: number[] | null;
}

/** The static group config stored under `<stream>.<group>` in `static-consumer-groups`. */
export interface StaticConsumerGroupConfig {
  /** The number of partitions, fixed at creation. */
  max_members: number;
  /** Optional filters, relative to the subject after the partition token. */
  filters?: string[];
  /** Balanced membership. */
  members?: string[];
  /** Explicit membership. Exclusive with `members`. */
  member_mappings?: MemberMapping[];
}

/** The elastic group config stored under `<stream>.<group>` in `elastic-consumer-groups`. */
export interface ElasticConsumerGroupConfig {
  /** The number of partitions, fixed at creation. */
  max_members: number;
  /** How subjects are partitioned; `null` or `[]` hash the whole subject. Never omitted. */
  partitioning_filters: PartitioningFilter[] | null;
  /** Caps the work-queue stream's `max_msgs` (note the singular `msg`, as Go spells it). */
  max_buffered_msg?: number;
  /** Caps the work-queue stream's `max_bytes`. */
  max_buffered_bytes?: number;
  /** Balanced membership. */
  members?: string[];
  /** Explicit membership. Exclusive with `members`. */
  member_mappings?: MemberMapping[];
}

/** Which flavour a group is. */
export type GroupKind = "static" | "elastic";
