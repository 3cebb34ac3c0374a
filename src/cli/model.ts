/**
 * The documents the CLI's commands produce. Each is printed as-is with `--json`
 * and rendered for people by `render.ts`. Keys are snake_case, like the stored configs.
 */
import type { ElasticConsumerGroupConfig, GroupKind, MemberMapping, MemberStatus, StaticConsumerGroupConfig } from "../index.js";

/** `ls`. */
export interface GroupListDoc {
  kind: GroupKind;
  stream: string;
  groups: string[];
}

/** One row of the partition → member table. */
export interface PartitionRow {
  partition: number;
  /** The owner, or null when no member owns the partition (e.g. no members yet). */
  member: string | null;
  /** Whether the owner has a running instance. */
  active: boolean;
}

/** `info`. */
export type InfoDoc =
  | { kind: "static"; stream: string; group: string; config: StaticConsumerGroupConfig; active_members: string[]; partitions: PartitionRow[] }
  | { kind: "elastic"; stream: string; group: string; config: ElasticConsumerGroupConfig; active_members: string[]; partitions: PartitionRow[] };

/** `member-info`. */
export interface MemberInfoDoc {
  kind: GroupKind;
  stream: string;
  group: string;
  member: string;
  in_membership: boolean;
  active: boolean;
  /** The partitions the member owns under the current config. */
  partitions: number[];
}

/** `create`. */
export interface CreatedDoc {
  kind: GroupKind;
  stream: string;
  group: string;
  created: true;
  config: StaticConsumerGroupConfig | ElasticConsumerGroupConfig;
  warnings: string[];
}

/** `delete`. */
export interface DeletedDoc {
  kind: GroupKind;
  stream: string;
  group: string;
  deleted: true;
}

/** `step-down`. */
export interface StepDownDoc {
  kind: GroupKind;
  stream: string;
  group: string;
  member: string;
  stepped_down: true;
}

/** `add` and `drop`. */
export interface MembersDoc {
  kind: "elastic";
  stream: string;
  group: string;
  /** The membership after the change. */
  members: string[];
  /** `add`: the members that were not members before. */
  added?: string[];
  /** `drop`: the members that were members before. */
  dropped?: string[];
}

/** `create-mapping` and `delete-mapping`. */
export interface MappingsDoc {
  kind: "elastic";
  stream: string;
  group: string;
  /** The mappings after the change (empty after `delete-mapping`). */
  member_mappings: MemberMapping[];
}

/** One message handled by `consume` (an NDJSON line). */
export interface MessageDoc {
  member: string;
  partition: number;
  /** The subject without the partition token. */
  subject: string;
  /** The sequence in the stream the member consumes from (the work-queue stream for elastic groups). */
  stream_seq: number;
  /** How many times the message has been delivered. */
  delivered: number;
  pin_id: string | null;
  /** When the message was received, ISO-8601 with milliseconds. */
  ts: string;
}

/**
 * The `event` of a `consume` event document: a member status type, or one of the
 * two the command adds itself (`started`, and `stopping` on a signal).
 */
export type MemberEventName = MemberStatus["type"] | "started" | "stopping";

/** What `consume` reports about the member instance (stderr). */
export interface MemberEventDoc {
  event: MemberEventName;
  member: string;
  ts: string;
  [key: string]: unknown;
}

/** `pub`. */
export interface PubDoc {
  subject_template: string;
  keys: number;
  /** Messages published and acknowledged. */
  published: number;
  /** Messages asked for. */
  requested: number;
  /** The stream the acks came from (the last one), if any. */
  stream: string | null;
  first_seq: number | null;
  last_seq: number | null;
  elapsed_ms: number;
  msgs_per_sec: number;
  /** True when Ctrl-C stopped it early. */
  interrupted: boolean;
}

/** One member in `describe`. */
export interface DescribeMemberDoc {
  member: string;
  /** The member's durable consumer. */
  consumer: string;
  partitions: number[];
  /** Listed as a member but beyond the partition count: idle. */
  over_cap: boolean;
  /** Some instance is pulling. */
  active: boolean;
  /** Whether the server has pinned one instance (it does so at the first delivery). */
  pinned: boolean;
  pin_id: string | null;
  pinned_at: string | null;
  /** Pull requests waiting on the consumer: each running instance keeps one or more. */
  waiting_pulls: number;
  /** At most this many standby instances (waiting pulls beyond one; 0 is exact). */
  standbys_max: number;
  /** Not yet delivered: the sum over the member's partitions. */
  pending: number;
  /** Delivered and not yet acked. */
  ack_pending: number;
  redelivered: number;
  last_delivery: string | null;
}

/** One partition in `describe`. */
export interface DescribePartitionDoc {
  partition: number;
  owner: string | null;
  pending: number | null;
  ack_pending: number | null;
  /** Known only when the owner's consumer covers only this partition. */
  redelivered: number | null;
  last_activity: string | null;
}

/** One health finding in `describe`, with what it means and what to do. */
export interface FindingDoc {
  code: string;
  severity: "error" | "warning" | "info";
  member: string | null;
  partition: number | null;
  message: string;
  explanation: string;
}

/** `describe`. */
export interface DescribeDoc {
  kind: GroupKind;
  stream: string;
  group: string;
  config: StaticConsumerGroupConfig | ElasticConsumerGroupConfig;
  partition_count: number;
  /** Member → the partitions it owns. */
  assignment: Record<string, number[]>;
  summary: { members: number; active: number; pinned: number; standbys_max: number; pending: number; ack_pending: number; redelivered: number };
  members: DescribeMemberDoc[];
  partitions: DescribePartitionDoc[];
  /** Elastic: the work-queue stream's fill (0 max = no limit). */
  buffer: { messages: number; bytes: number; max_messages: number; max_bytes: number } | null;
  /** Elastic: source messages not yet in the work-queue stream. */
  source_lag: number | null;
  stall_after_ms: number;
  findings: FindingDoc[];
  at: string;
}

/** The rates `top` computes between two refreshes (null: not known yet). */
export interface TopRatesDoc {
  /** Time between the two descriptions. */
  interval_ms: number | null;
  /** Deliveries settled per second, all members. */
  handled_per_sec: number | null;
  /** Per member: deliveries settled per second. */
  members: Record<string, number | null>;
  /** Per partition: the change of pending + ack pending per second (negative: draining). */
  partitions_backlog_per_sec: (number | null)[];
  /** Elastic: the change of the source lag per second. */
  source_lag_per_sec: number | null;
}

/** One `top` refresh: `--json` prints one per line. */
export interface TopFrameDoc extends DescribeDoc {
  rates: TopRatesDoc;
}

/** The rate behind a lag document's recommendation (null: not known). */
export interface LagRateDoc {
  /** `given` (--rate-per-member), `measured` (over the sample window) or `none`. */
  source: "given" | "measured" | "none";
  /** Messages per second per member used for the recommendation. */
  per_member: number | null;
  /** The measured rate per member: drained per second / active members. */
  measured_per_member: number | null;
  /** Messages acknowledged per second by all members over the window. */
  drained_per_sec: number | null;
  /** Messages sourced into the work queue per second over the window. */
  inflow_per_sec: number | null;
  /** The window the rates were measured over. */
  window_ms: number | null;
  /** Members consuming at the end of the window. */
  active_members: number;
}

/** `elastic lag`, and the `/lag` route of `consume --metrics-port`. */
export interface LagDoc {
  stream: string;
  group: string;
  /** The work-queue stream, `<stream>-<group>`. */
  work_queue: string;
  /** The most members the group can use. */
  partition_count: number;
  /** Members in the membership now. */
  member_count: number;
  /** Messages in the work queue not yet acknowledged, all partitions. */
  pending: number;
  /** Messages of the source stream not yet in the work queue. */
  source_lag: number;
  /** pending + source_lag: what the members have to work through. */
  backlog: number;
  /** The member count that drains the backlog within target_drain_ms, capped at partition_count. */
  recommended_members: number;
  /** The same before the cap. */
  needed_members: number;
  /** Whether the partition count capped the recommendation. */
  capped: boolean;
  /** `rate` (from the rate), `hold` (no rate: the current count, at least 1) or `idle` (nothing waiting). */
  basis: "rate" | "hold" | "idle";
  target_drain_ms: number;
  rate: LagRateDoc;
  /** The work queue's source; null when it has none. */
  source: { stream: string; lag: number; active: boolean; last_active_ms: number | null; error: string | null } | null;
  members: { member: string; partitions: number[]; pending: number; active: boolean; over_cap: boolean }[];
  partitions: { partition: number; owner: string | null; pending: number }[];
  notes: { code: string; message: string }[];
  at: string;
}
