/**
 * The lag document: what `cg elastic lag --json` prints and what the `/lag` route of
 * `cg elastic consume --metrics-port` serves, built from the library's `groupLag`.
 * Pure. Its keys are a contract (KEDA's `valueLocation` points into it): add keys,
 * never rename or remove one.
 */
import type { GroupLag } from "../index.js";
import type { LagDoc } from "./model.js";

/** A rate for the document: three decimals, or null. */
const rate = (n: number | undefined): number | null => (n === undefined ? null : Math.round(n * 1000) / 1000);

/** The lag document of a library reading. */
export function lagDoc(l: GroupLag): LagDoc {
  return {
    stream: l.stream,
    group: l.group,
    work_queue: l.workQueue,
    partition_count: l.partitionCount,
    member_count: l.members.length,
    pending: l.pending,
    source_lag: l.sourceLag,
    backlog: l.backlog,
    recommended_members: l.recommendedMembers,
    needed_members: l.recommendation.needed,
    capped: l.recommendation.capped,
    basis: l.recommendation.basis,
    target_drain_ms: l.targetDrainMs,
    rate: {
      source: l.rate.source,
      per_member: rate(l.rate.perMember),
      measured_per_member: rate(l.rate.measuredPerMember),
      drained_per_sec: rate(l.rate.drainedPerSecond),
      inflow_per_sec: rate(l.rate.inflowPerSecond),
      window_ms: l.rate.windowMs ?? null,
      active_members: l.rate.activeMembers,
    },
    source: l.source ? { stream: l.source.stream, lag: l.source.lag, active: l.source.active, last_active_ms: l.source.lastActiveMs ?? null, error: l.source.error ?? null } : null,
    members: l.members.map((m) => ({ member: m.member, partitions: m.partitions, pending: m.pending, active: m.active, over_cap: m.overCap })),
    partitions: l.partitions.map((p) => ({ partition: p.partition, owner: p.owner ?? null, pending: p.pending })),
    notes: l.notes.map((n) => ({ code: n.code, message: n.message })),
    at: l.at,
  };
}
