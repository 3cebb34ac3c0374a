/**
 * Member metrics through the OpenTelemetry metrics API, named by the OpenTelemetry
 * messaging semantic conventions where one fits (`messaging.process.duration`, in
 * seconds, and the `messaging.*` attributes) and `pcg.*` where none does.
 * `@opentelemetry/api` is an optional peer dependency: when it is not installed,
 * or no SDK is registered, every instrument is a no-op.
 */
import type { Attributes, MeterProvider } from "@opentelemetry/api";

type OtelApi = typeof import("@opentelemetry/api");

/**
 * An OpenTelemetry `MeterProvider` (from `@opentelemetry/api` or an SDK), as the
 * options take it: the same shape, declared here so that this package's typings
 * compile in an application without the optional `@opentelemetry/api` peer.
 */
export interface MeterProviderLike {
  /** The meter of an instrumentation scope (OpenTelemetry's `MeterProvider.getMeter`). */
  getMeter(name: string, version?: string, options?: { schemaUrl?: string }): unknown;
}
const otel: OtelApi | undefined = await import("@opentelemetry/api").catch(() => undefined);

/** The meter name this library reports under. */
export const METER_NAME = "nats-pcgroups";

/**
 * Metric names, for dashboards and tests. `processDuration` is the messaging
 * semantic conventions' `messaging.process.duration` (seconds; its count is the
 * number of messages handled); the others are this library's own, since the
 * conventions have nothing for them.
 */
export const MetricNames = {
  /** Histogram, seconds: one sample per handler run that succeeded (OpenTelemetry messaging conventions). */
  processDuration: "messaging.process.duration",
  /** Counter: handler failures, each attempt. */
  failed: "pcg.messages.failed",
  /** Counter: messages received with a delivery count above 1. */
  redelivered: "pcg.messages.redelivered",
  /** Counter: messages published to the dead-letter subject. */
  deadLettered: "pcg.messages.dead_lettered",
  /** Gauge: messages whose handler is running. */
  inFlight: "pcg.messages.in_flight",
  /** Counter: times this instance became pinned or unpinned (attribute `pcg.event`). */
  pinChanges: "pcg.pin.changes",
  /** Counter: membership changes that moved this member's partitions. */
  rebalances: "pcg.rebalances",
  /** Gauge: partitions this member owns. */
  partitionsOwned: "pcg.partitions.owned",
} as const;

/**
 * Attribute names: the messaging semantic conventions' where one fits, `pcg.*`
 * for the member and the pin event.
 */
export const MetricAttributes = {
  /** Always `"nats"`. */
  system: "messaging.system",
  /** The group's stream (the stream the user publishes to, also for elastic groups). */
  destination: "messaging.destination.name",
  /** The consumer group's name. */
  group: "messaging.consumer.group.name",
  /** The partition number, as a string (the conventions' type). */
  partition: "messaging.destination.partition.id",
  /** `"process"` on `messaging.process.duration`. */
  operation: "messaging.operation.name",
  /** The member's name (the conventions have no name for a group member). */
  member: "pcg.member",
  /** `"pinned"` or `"unpinned"` on `pcg.pin.changes`. */
  event: "pcg.event",
} as const;

/**
 * The bucket boundaries, in seconds, the messaging conventions recommend for
 * their duration histograms.
 */
export const DURATION_BUCKETS_S: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];

/** What a member instance records. Durations come in milliseconds and are reported in seconds. */
export interface MemberMetrics {
  /** A handler run succeeded after `durationMs`. */
  handled(partition: number, durationMs: number): void;
  /** A handler run failed. */
  failed(partition: number): void;
  /** A message arrived with a delivery count above 1. */
  redelivered(partition: number): void;
  /** A message was published to the dead-letter subject. */
  deadLettered(partition: number): void;
  /** This instance became pinned or unpinned. */
  pinChanged(event: "pinned" | "unpinned"): void;
  /** A membership change moved this member's partitions. */
  rebalanced(): void;
  /** Stops the observable gauges' callbacks. */
  close(): void;
}

/** Where gauges read from. */
export interface MemberGauges {
  /** Messages whose handler is running now. */
  inFlight(): number;
  /** Partitions the member owns now. */
  partitionsOwned(): number;
}

/**
 * Creates the instruments of one member instance, labelled with its stream, group
 * and member (and partition where it applies).
 *
 * @param labels - the member instance's stream, group and member
 * @param gauges - where the observable gauges read from
 * @param provider - a MeterProvider; default: the globally registered one
 */
export function createMemberMetrics(labels: { stream: string; group: string; member: string }, gauges: MemberGauges, provider?: MeterProviderLike): MemberMetrics {
  // The structural type stands for the real one: whatever is passed is an OpenTelemetry MeterProvider.
  const meterProvider = (provider as MeterProvider | undefined) ?? otel?.metrics.getMeterProvider();
  if (!meterProvider) return NOOP_METRICS;
  const meter = meterProvider.getMeter(METER_NAME);
  // No SDK registered: every instrument would be a no-op (a meter never changes its provider), so record nothing at all.
  if (otel && meter.constructor === otel.createNoopMeter().constructor) return NOOP_METRICS;
  const A = MetricAttributes;
  const base: Attributes = { [A.system]: "nats", [A.destination]: labels.stream, [A.group]: labels.group, [A.member]: labels.member };
  // Attribute objects are reused: building one per message costs more than the no-op instruments.
  const byPartition = new Map<number, { plain: Attributes; process: Attributes }>();
  const withPartition = (partition: number): { plain: Attributes; process: Attributes } => {
    let attrs = byPartition.get(partition);
    if (!attrs) {
      const plain = { ...base, [A.partition]: String(partition) };
      byPartition.set(partition, (attrs = { plain, process: { ...plain, [A.operation]: "process" } }));
    }
    return attrs;
  };
  const duration = meter.createHistogram(MetricNames.processDuration, {
    description: "Duration of processing operation: one sample per handler run that succeeded",
    unit: "s",
    advice: { explicitBucketBoundaries: [...DURATION_BUCKETS_S] },
  });
  const failed = meter.createCounter(MetricNames.failed, { description: "handler failures (each attempt)", unit: "{message}" });
  const redelivered = meter.createCounter(MetricNames.redelivered, { description: "messages received with a delivery count above 1", unit: "{message}" });
  const deadLettered = meter.createCounter(MetricNames.deadLettered, { description: "messages published to the dead-letter subject", unit: "{message}" });
  const pinChanges = meter.createCounter(MetricNames.pinChanges, { description: "times this instance became pinned or unpinned", unit: "{change}" });
  const rebalances = meter.createCounter(MetricNames.rebalances, { description: "membership changes that moved this member's partitions", unit: "{rebalance}" });
  const inFlight = meter.createObservableGauge(MetricNames.inFlight, { description: "messages whose handler is running", unit: "{message}" });
  const owned = meter.createObservableGauge(MetricNames.partitionsOwned, { description: "partitions this member owns", unit: "{partition}" });
  const observe = (result: import("@opentelemetry/api").BatchObservableResult): void => {
    result.observe(inFlight, gauges.inFlight(), base);
    result.observe(owned, gauges.partitionsOwned(), base);
  };
  meter.addBatchObservableCallback(observe, [inFlight, owned]);
  return {
    handled: (partition, ms) => duration.record(ms / 1000, withPartition(partition).process),
    failed: (partition) => failed.add(1, withPartition(partition).plain),
    redelivered: (partition) => redelivered.add(1, withPartition(partition).plain),
    deadLettered: (partition) => deadLettered.add(1, withPartition(partition).plain),
    pinChanged: (event) => pinChanges.add(1, { ...base, [A.event]: event }),
    rebalanced: () => rebalances.add(1, base),
    close: () => meter.removeBatchObservableCallback(observe, [inFlight, owned]),
  };
}

/** Metrics that record nothing: without a MeterProvider, and in tests. */
export const NOOP_METRICS: MemberMetrics = {
  handled: () => undefined,
  failed: () => undefined,
  redelivered: () => undefined,
  deadLettered: () => undefined,
  pinChanged: () => undefined,
  rebalanced: () => undefined,
  close: () => undefined,
};
