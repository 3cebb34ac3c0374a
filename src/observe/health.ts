/**
 * Health findings of a group, from its description. Pure.
 */

/** One thing worth an operator's attention, in plain language. */
export interface HealthFinding {
  code: "NO_ACTIVE_INSTANCE" | "PARTITION_STALLED" | "PARTITION_UNOWNED" | "BUFFER_FULL" | "SOURCE_LAG_GROWING" | "MEMBER_OVER_CAP";
  severity: "warning" | "error" | "info";
  member?: string;
  partition?: number;
  message: string;
}

/** What the findings are computed from. */
export interface HealthInput {
  now: number;
  stallAfterMs: number;
  members: { member: string; partitions: number[]; overCap: boolean; active: boolean }[];
  partitions: { partition: number; owner: string | undefined; pending: number | undefined; lastActivity: string | undefined }[];
  buffer?: { messages: number; bytes: number; maxMessages: number; maxBytes: number };
  sourceLag?: number;
  previousSourceLag?: number;
}

/**
 * Computes the findings: a member with partitions but no running instance, a partition
 * with pending messages and no progress for `stallAfterMs`, a partition nobody owns, a
 * full work-queue buffer, a growing source lag, and members beyond the partition count.
 */
export function healthFindings(input: HealthInput): HealthFinding[] {
  const findings: HealthFinding[] = [];
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
  return findings;
}
