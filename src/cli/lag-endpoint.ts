/**
 * The group's lag on the metrics endpoint of `cg elastic consume --metrics-port`:
 * Prometheus gauges on `/metrics`, and the lag document as JSON on `/lag` for KEDA's
 * metrics-api scaler. Both read one {@link LagCache}, so however often they are
 * scraped, the group is read at most once per few seconds.
 */
import type { Attributes, BatchObservableResult, MeterProvider } from "@opentelemetry/api";
import { METER_NAME, MetricAttributes, type GroupLag } from "../index.js";
import { describeError } from "./errors.js";
import type { LagCache } from "./lag-cache.js";
import { lagDoc } from "./lag-doc.js";
import type { JsonRoute } from "./metrics-endpoint.js";

/** Where the lag document is served. */
export const LAG_PATH = "/lag";

/**
 * The names of the lag gauges (OpenTelemetry names; Prometheus replaces the dots by
 * underscores: `pcg_group_partition_pending`, …). Every gauge carries the group's
 * stream and name; they describe the whole group, so every member serves the same values.
 */
export const LagMetricNames = {
  /** Pending messages of one partition (attributes: partition, and its owner as `pcg.member`). */
  partitionPending: "pcg.group.partition.pending",
  /** Pending messages of one member's partitions (attribute `pcg.member`). */
  memberPending: "pcg.group.member.pending",
  /** Pending messages of all partitions. */
  pending: "pcg.group.pending",
  /** Messages of the source stream the work queue has not taken in yet. */
  sourceLag: "pcg.group.source.lag",
  /** 1 when the work queue hears from its source, 0 when not. */
  sourceActive: "pcg.group.source.active",
  /** Pending plus source lag: what the members have to work through. */
  backlog: "pcg.group.backlog",
  /** Members in the membership. */
  members: "pcg.group.members",
  /** Members consuming (waiting pulls or messages in flight). */
  activeMembers: "pcg.group.members.active",
  /** The member count that drains the backlog within the target, capped at the partition count. */
  recommendedMembers: "pcg.group.members.recommended",
  /** Messages acknowledged per second by all members, while it is measured. */
  drainRate: "pcg.group.drain.rate",
} as const;

/**
 * Registers the lag gauges on a provider. They are observable gauges: a scrape asks
 * the cache, which reads the group when its reading is older than its max age. A
 * failed reading reports no lag samples (the `/lag` route says why).
 *
 * @param provider - the metrics endpoint's provider
 * @param cache - where the lag comes from
 * @param labels - the group's stream and name
 * @returns a function that unregisters the gauges
 */
export function registerLagGauges(provider: MeterProvider, cache: LagCache, labels: { stream: string; group: string }): () => void {
  const meter = provider.getMeter(METER_NAME);
  const A = MetricAttributes;
  const base: Attributes = { [A.system]: "nats", [A.destination]: labels.stream, [A.group]: labels.group };
  const N = LagMetricNames;
  const messages = { unit: "{message}" };
  const gauges = {
    partitionPending: meter.createObservableGauge(N.partitionPending, { description: "messages of the partition in the work queue, not yet acknowledged", ...messages }),
    memberPending: meter.createObservableGauge(N.memberPending, { description: "messages of the member's partitions in the work queue, not yet acknowledged", ...messages }),
    pending: meter.createObservableGauge(N.pending, { description: "messages in the work queue, not yet acknowledged", ...messages }),
    sourceLag: meter.createObservableGauge(N.sourceLag, { description: "messages of the source stream not yet in the work queue", ...messages }),
    sourceActive: meter.createObservableGauge(N.sourceActive, { description: "1 when the work queue hears from its source stream, else 0" }),
    backlog: meter.createObservableGauge(N.backlog, { description: "pending plus source lag: what the members have to work through", ...messages }),
    members: meter.createObservableGauge(N.members, { description: "members in the group's membership", unit: "{member}" }),
    activeMembers: meter.createObservableGauge(N.activeMembers, { description: "members consuming (waiting pulls or messages in flight)", unit: "{member}" }),
    recommendedMembers: meter.createObservableGauge(N.recommendedMembers, {
      description: "the member count that drains the backlog within the target drain time, capped at the partition count",
      unit: "{member}",
    }),
    drainRate: meter.createObservableGauge(N.drainRate, { description: "messages acknowledged per second by all members", unit: "{message}/s" }),
  };
  const observe = async (result: BatchObservableResult): Promise<void> => {
    let lag: GroupLag;
    try {
      lag = await cache.get();
    } catch {
      return;
    }
    for (const p of lag.partitions) {
      result.observe(gauges.partitionPending, p.pending, { ...base, [A.partition]: String(p.partition), ...(p.owner !== undefined ? { [A.member]: p.owner } : {}) });
    }
    for (const m of lag.members) result.observe(gauges.memberPending, m.pending, { ...base, [A.member]: m.member });
    result.observe(gauges.pending, lag.pending, base);
    result.observe(gauges.sourceLag, lag.sourceLag, base);
    result.observe(gauges.sourceActive, lag.source?.active ? 1 : 0, base);
    result.observe(gauges.backlog, lag.backlog, base);
    result.observe(gauges.members, lag.members.length, base);
    result.observe(gauges.activeMembers, lag.rate.activeMembers, base);
    result.observe(gauges.recommendedMembers, lag.recommendedMembers, base);
    if (lag.rate.drainedPerSecond !== undefined) result.observe(gauges.drainRate, lag.rate.drainedPerSecond, base);
  };
  const all = Object.values(gauges);
  meter.addBatchObservableCallback(observe, all);
  return () => meter.removeBatchObservableCallback(observe, all);
}

/**
 * The `/lag` route: the lag document (as `cg elastic lag --json` prints it) with
 * status 200, or `{"error":{"code","message"}}` with status 503 when the lag cannot be
 * read (KEDA then counts a failure, and applies its fallback after enough of them).
 */
export function lagRoute(cache: LagCache): JsonRoute {
  return async () => {
    try {
      return { status: 200, body: lagDoc(await cache.get()) };
    } catch (err) {
      const report = describeError(err);
      return { status: 503, body: { error: { code: report.code, message: report.message } } };
    }
  };
}
