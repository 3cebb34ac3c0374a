/**
 * Reading a member's metrics back in a test: an in-memory OpenTelemetry reader, and
 * the number of messages the metrics count as handled.
 */
import { MetricReader, type ResourceMetrics } from "@opentelemetry/sdk-metrics";
import { MetricNames } from "../../src/index.js";

/** A reader that only collects when asked. */
export class TestReader extends MetricReader {
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

/** Messages counted as handled: the samples of `messaging.process.duration` (one per success). */
export function handledTotal(r: { resourceMetrics: ResourceMetrics }): number {
  let sum = 0;
  for (const scope of r.resourceMetrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      if (metric.descriptor.name !== MetricNames.processDuration) continue;
      for (const point of metric.dataPoints) sum += (point.value as { count: number }).count;
    }
  }
  return sum;
}
