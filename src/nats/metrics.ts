/**
 * Member metrics through the OpenTelemetry metrics API. `@opentelemetry/api` is an
 * optional peer dependency: when it is not installed, or no SDK is registered,
 * every instrument is a no-op.
 */
import type { Attributes, MeterProvider } from "@opentelemetry/api";

type OtelApi = typeof import("@opentelemetry/api");
const otel: OtelApi | undefined = await import("@opentelemetry/api").catch(() => undefined);

/** The meter name and version this library reports under. */
export const METER_NAME = "nats-pcgroups";

/** Metric names, for dashboards and tests. */
export const MetricNames = {
  handled: "pcg.messages.handled",
  failed: "pcg.messages.failed",
  redelivered: "pcg.messages.redelivered",
  deadLettered: "pcg.messages.dead_lettered",
  inFlight: "pcg.messages.in_flight",
  handlerDuration: "pcg.handler.duration",
  pinChanges: "pcg.pin.changes",
  rebalances: "pcg.rebalances",
  partitionsOwned: "pcg.partitions.owned",
} as const;

/** What a member instance records. */
export interface MemberMetrics {
  handled(partition: number, durationMs: number): void;
  failed(partition: number): void;
  redelivered(partition: number): void;
  deadLettered(partition: number): void;
  pinChanged(event: "pinned" | "unpinned"): void;
  rebalanced(): void;
  /** Stops the observable gauges' callbacks. */
  close(): void;
}

/** Where gauges read from. */
export interface MemberGauges {
  inFlight(): number;
  partitionsOwned(): number;
}

/**
 * Creates the instruments of one member instance, labelled with its stream, group
 * and member (and partition where it applies).
 *
 * @param provider - a MeterProvider; default: the globally registered one
 */
export function createMemberMetrics(labels: { stream: string; group: string; member: string }, gauges: MemberGauges, provider?: MeterProvider): MemberMetrics {
  const meterProvider = provider ?? otel?.metrics.getMeterProvider();
  if (!meterProvider) return NOOP;
  const meter = meterProvider.getMeter(METER_NAME);
  const base: Attributes = { "pcg.stream": labels.stream, "pcg.group": labels.group, "pcg.member": labels.member };
  // Attribute objects are reused: building one per message costs more than the no-op instruments.
  const byPartition = new Map<number, Attributes>();
  const withPartition = (partition: number): Attributes => {
    let attrs = byPartition.get(partition);
    if (!attrs) byPartition.set(partition, (attrs = { ...base, "pcg.partition": partition }));
    return attrs;
  };
  const handled = meter.createCounter(MetricNames.handled, { description: "messages whose handler succeeded" });
  const failed = meter.createCounter(MetricNames.failed, { description: "handler failures (each attempt)" });
  const redelivered = meter.createCounter(MetricNames.redelivered, { description: "messages received with a delivery count above 1" });
  const deadLettered = meter.createCounter(MetricNames.deadLettered, { description: "messages published to the dead-letter subject" });
  const duration = meter.createHistogram(MetricNames.handlerDuration, { description: "handler latency", unit: "ms" });
  const pinChanges = meter.createCounter(MetricNames.pinChanges, { description: "times this instance became pinned or unpinned" });
  const rebalances = meter.createCounter(MetricNames.rebalances, { description: "membership changes that moved this member's partitions" });
  const inFlight = meter.createObservableGauge(MetricNames.inFlight, { description: "messages whose handler is running" });
  const owned = meter.createObservableGauge(MetricNames.partitionsOwned, { description: "partitions this member owns" });
  const observe = (result: import("@opentelemetry/api").BatchObservableResult): void => {
    result.observe(inFlight, gauges.inFlight(), base);
    result.observe(owned, gauges.partitionsOwned(), base);
  };
  meter.addBatchObservableCallback(observe, [inFlight, owned]);
  return {
    handled(partition, ms) {
      handled.add(1, withPartition(partition));
      duration.record(ms, withPartition(partition));
    },
    failed: (partition) => failed.add(1, withPartition(partition)),
    redelivered: (partition) => redelivered.add(1, withPartition(partition)),
    deadLettered: (partition) => deadLettered.add(1, withPartition(partition)),
    pinChanged: (event) => pinChanges.add(1, { ...base, "pcg.event": event }),
    rebalanced: () => rebalances.add(1, base),
    close: () => meter.removeBatchObservableCallback(observe, [inFlight, owned]),
  };
}

const NOOP: MemberMetrics = {
  handled: () => undefined,
  failed: () => undefined,
  redelivered: () => undefined,
  deadLettered: () => undefined,
  pinChanged: () => undefined,
  rebalanced: () => undefined,
  close: () => undefined,
};
