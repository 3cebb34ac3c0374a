/**
 * The documents the CLI's commands produce. Each is printed as-is with `--json`
 * and rendered for people by `render.ts`. Keys are snake_case, like the stored configs.
 */
import type { ElasticConsumerGroupConfig, GroupKind, MemberMapping, StaticConsumerGroupConfig } from "../index.js";

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
  /** Whether the ack was confirmed by the server. */
  acked: boolean;
}

/** What `consume` reports about the member instance (stderr). */
export interface MemberEventDoc {
  event: string;
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
