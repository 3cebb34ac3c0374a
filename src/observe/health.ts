/**
 * Health findings of a group, from its description. Pure.
 */
import type { ListedParkedKey } from "../elastic/parking.js";
import { FAST_FILTERS_RELEASE, slowFiltersRelease } from "./server-releases.js";

/** One thing worth an operator's attention, in plain language. */
export interface HealthFinding {
  /**
   * What kind of problem it is: a stable code. Besides the health findings computed here,
   * `describeGroup` reports the stored config's: `INVALID_CONFIG` (it breaks a rule, e.g. a
   * member name the server refuses as a consumer name), `CONFIG_MISMATCH` (its partition
   * count or partitioning filters disagree with the stream's or the work queue's transform)
   * and `DUPLICATE_MEMBERS` (a member listed twice).
   */
  code:
    | "NO_ACTIVE_INSTANCE"
    | "PARTITION_STALLED"
    | "PARTITION_UNOWNED"
    | "BUFFER_FULL"
    | "SOURCE_LAG_GROWING"
    | "MEMBER_OVER_CAP"
    | "REPARTITION_IN_PROGRESS"
    | "SLOW_SERVER_RELEASE"
    | "KEY_BLOCKED"
    | "INVALID_CONFIG"
    | "CONFIG_MISMATCH"
    | "DUPLICATE_MEMBERS";
  /** How bad it is: `error` means messages are not consumed. */
  severity: "warning" | "error" | "info";
  /** The member concerned, if one is. */
  member?: string;
  /** The partition concerned, if one is. */
  partition?: number;
  /** What is wrong, in plain language. */
  message: string;
}

/** What the findings are computed from. */
export interface HealthInput {
  /** The time of the description, in ms since the epoch. */
  now: number;
  /** A partition with pending messages and no delivery for this long is stalled. */
  stallAfterMs: number;
  /** The members of the membership. */
  members: {
    /** The member's name. */
    member: string;
    /** The partitions it owns. */
    partitions: number[];
    /** Beyond the partition count: idle. */
    overCap: boolean;
    /** Some instance of it is pulling. */
    active: boolean;
  }[];
  /** Every partition. */
  partitions: {
    /** The partition number. */
    partition: number;
    /** The member that owns it, if any. */
    owner: string | undefined;
    /** Messages not yet delivered, when known. */
    pending: number | undefined;
    /** The owner's last delivery, ISO-8601, if any. */
    lastActivity: string | undefined;
  }[];
  /** Elastic: the work-queue stream's fill. */
  buffer?: {
    /** Messages in the work-queue stream. */
    messages: number;
    /** Bytes in the work-queue stream. */
    bytes: number;
    /** The group's max buffered messages (0: no limit). */
    maxMessages: number;
    /** The group's max buffered bytes (0: no limit). */
    maxBytes: number;
  };
  /** Elastic: source messages not yet sourced into the work-queue stream. */
  sourceLag?: number;
  /** The source lag of the previous description, to tell whether it grows. */
  previousSourceLag?: number;
  /** The version of the server the description came from, when known. */
  serverVersion?: string;
  /** Elastic: the blocked keys the running instances reported (see `listParkedKeys`). */
  parkedKeys?: readonly Pick<ListedParkedKey, "member" | "key" | "mode" | "partition" | "seq" | "attempts" | "parkedMessages" | "error">[];
  /** The group's stream and name, for the commands a finding suggests. */
  names?: {
    /** The stream. */
    stream: string;
    /** The group. */
    group: string;
  };
  /** Elastic: a repartition in progress (the work-queue stream's record). */
  repartition?: {
    /** The partition count before. */
    from: number;
    /** The partition count after. */
    to: number;
    /** `moving` or `finishing`. */
    phase: string;
    /** When it started (ISO 8601). */
    started: string;
  };
}

/**
 * Computes the findings: a member with partitions but no running instance, a partition
 * with pending messages and no progress for `stallAfterMs`, a partition nobody owns, a
 * full work-queue buffer, a growing source lag, members beyond the partition count, a
 * repartition in progress, and a server release that makes member consumers with several
 * partitions slow.
 */
export function healthFindings(input: HealthInput): HealthFinding[] {
  const findings: HealthFinding[] = [];
  for (const k of input.parkedKeys ?? []) {
    const names = input.names ? `${input.names.stream} ${input.names.group}` : "<stream> <name>";
    const what = k.mode === "key" && k.key !== "" ? `key "${k.key}"` : k.mode === "serial" ? "the instance" : `partition ${k.partition}`;
    findings.push({
      code: "KEY_BLOCKED",
      severity: "error",
      member: k.member,
      partition: k.partition,
      message: `${what} of member ${k.member} is blocked on seq ${k.seq} after ${k.attempts} attempts (${k.error}), ${k.parkedMessages} messages wait behind it: fix what fails and run "cg elastic park release ${names} ${k.seq}", or dead-letter it with --dead-letter <subject>`,
    });
  }
  for (const m of input.members) {
    if (m.overCap) {
      findings.push({
        code: "MEMBER_OVER_CAP",
        severity: "info",
        member: m.member,
        message: `member ${m.member} is beyond the partition count: it owns no partitions and stays idle until another member leaves`,
      });
    } else if (m.partitions.length > 0 && !m.active) {
      findings.push({
        code: "NO_ACTIVE_INSTANCE",
        severity: "error",
        member: m.member,
        message: `member ${m.member} owns partitions ${m.partitions.join(", ")} but has no running instance: their messages wait until one starts`,
      });
    }
  }
  for (const p of input.partitions) {
    if (p.owner === undefined) {
      if ((p.pending ?? 0) > 0) {
        findings.push({ code: "PARTITION_UNOWNED", severity: "error", partition: p.partition, message: `partition ${p.partition} has ${p.pending} pending messages and no owner: add members or mappings` });
      }
      continue;
    }
    const idleFor = p.lastActivity ? input.now - Date.parse(p.lastActivity) : Infinity;
    if ((p.pending ?? 0) > 0 && idleFor > input.stallAfterMs) {
      findings.push({
        code: "PARTITION_STALLED",
        severity: "warning",
        partition: p.partition,
        member: p.owner,
        message: `partition ${p.partition} has ${p.pending} pending messages and its owner ${p.owner} ${Number.isFinite(idleFor) ? `delivered nothing for ${Math.round(idleFor / 1000)} s` : "has never delivered anything"}`,
      });
    }
  }
  const b = input.buffer;
  if (b && ((b.maxMessages > 0 && b.messages >= b.maxMessages) || (b.maxBytes > 0 && b.bytes >= b.maxBytes))) {
    findings.push({
      code: "BUFFER_FULL",
      severity: "warning",
      message: `the work-queue buffer is full (${b.messages} messages, ${b.bytes} bytes): sourcing from the stream is paused until members ack`,
    });
  }
  if (input.sourceLag !== undefined && input.previousSourceLag !== undefined && input.sourceLag > input.previousSourceLag && input.sourceLag > 0) {
    findings.push({
      code: "SOURCE_LAG_GROWING",
      severity: "warning",
      message: `the work-queue stream is falling behind the source stream: lag grew from ${input.previousSourceLag} to ${input.sourceLag} messages`,
    });
  }
  const r = input.repartition;
  if (r) {
    findings.push({
      code: "REPARTITION_IN_PROGRESS",
      severity: "info",
      message: `a repartition from ${r.from} to ${r.to} partitions is in progress (phase ${r.phase}, started ${r.started}): the new layout's messages of some partitions wait until the old layout's are handled. If no "cg elastic repartition" runs any more, run it again with ${r.to} to finish`,
    });
  }
  const slow = slowFiltersRelease(input.serverVersion);
  const most = Math.max(0, ...input.members.map((m) => m.partitions.length));
  if (slow && most > 1) {
    findings.push({
      code: "SLOW_SERVER_RELEASE",
      severity: "warning",
      message:
        `nats-server ${slow.version} serves a consumer with many filter subjects several times slower than one with a single filter (${slow.slowdown} measured with 16 on releases before ${FAST_FILTERS_RELEASE}), ` +
        `and a member consumer carries one filter per owned partition (up to ${most} here): run nats-server ${FAST_FILTERS_RELEASE} or newer (2.15.x recommended)`,
    });
  }
  return findings;
}
