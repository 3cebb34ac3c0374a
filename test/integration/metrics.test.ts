/**
 * Member metrics read back through an in-memory OpenTelemetry reader.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { MeterProvider, MetricReader, type ResourceMetrics } from "@opentelemetry/sdk-metrics";
import { createStatic, MetricNames, staticConsume } from "../../src/index.js";
import { DURATION_BUCKETS_S, MetricAttributes as A } from "../../src/nats/metrics.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";

class TestReader extends MetricReader {
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

/** Sums a metric's data points (counters and gauges) or histogram counts, optionally for one attribute value. */
function total(resource: ResourceMetrics, name: string, where: Record<string, string | number> = {}): number {
  let sum = 0;
  for (const scope of resource.scopeMetrics) {
    for (const metric of scope.metrics) {
      if (metric.descriptor.name !== name) continue;
      for (const point of metric.dataPoints) {
        if (!Object.entries(where).every(([k, v]) => point.attributes[k] === v)) continue;
        const value = point.value as number | { count: number };
        sum += typeof value === "number" ? value : value.count;
      }
    }
  }
  return sum;
}

describe("metrics - a running member's instruments", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  test("metrics - handled, failed, redelivered, latency, pins and partitions are recorded per partition", async () => {
    const stream = uniqueName("met");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], subject_transform: { src: `${stream}.*`, dest: `{{partition(4,1)}}.${stream}.{{wildcard(1)}}` } });
    await createStatic(env.js, { stream, group: "g", maxMembers: 4, members: ["m1"], onWarning: () => undefined });
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    let failedOnce = false;
    const handled = new Set<string>();
    const member = await staticConsume(env.js, {
      stream,
      group: "g",
      member: "m1",
      meterProvider: provider,
      consumerConfig: { ack_wait: 2_000_000_000 },
      handler: (msg) => {
        if (msg.subject === `${stream}.k7` && !failedOnce) {
          failedOnce = true;
          throw new Error("injected");
        }
        handled.add(msg.subject);
        // one slow handler, so the duration's unit shows: 0.15 in seconds, 150 in ms
        if (msg.subject === `${stream}.k3`) return new Promise<void>((resolve) => setTimeout(resolve, 150));
        return undefined;
      },
    });
    for (let i = 0; i < 20; i++) await env.js.publish(`${stream}.k${i}`);
    await waitFor(() => handled.size === 20, 15_000, "all 20 messages handled");
    const { resourceMetrics } = await waitFor(async () => {
      const r = await reader.collect();
      return total(r.resourceMetrics, MetricNames.processDuration) === 20 ? r : undefined;
    }, 5_000, "20 handled in the metrics");
    assert.equal(total(resourceMetrics, MetricNames.failed), 1);
    assert.equal(total(resourceMetrics, MetricNames.redelivered), 1, "the failed message came back once");
    assert.equal(total(resourceMetrics, MetricNames.processDuration, { [A.operation]: "process", [A.system]: "nats" }), 20, "one duration sample per success");
    assert.equal(total(resourceMetrics, MetricNames.partitionsOwned, { [A.member]: "m1" }), 4);
    assert.equal(total(resourceMetrics, MetricNames.inFlight), 0);
    assert.ok(total(resourceMetrics, MetricNames.pinChanges, { [A.event]: "pinned" }) >= 1);
    const perPartition = [0, 1, 2, 3].map((p) => total(resourceMetrics, MetricNames.processDuration, { [A.partition]: String(p) }));
    assert.equal(perPartition.reduce((a, b) => a + b, 0), 20);
    assert.ok(perPartition.filter((n) => n > 0).length > 1, "labelled by partition");

    const metric = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === MetricNames.processDuration);
    assert.ok(metric, "messaging.process.duration is reported");
    assert.equal(metric.descriptor.unit, "s");
    const points = metric.dataPoints as { attributes: Record<string, unknown>; value: { sum?: number; count: number; buckets: { boundaries: number[] } } }[];
    for (const point of points) {
      assert.equal(point.attributes[A.system], "nats");
      assert.equal(point.attributes[A.destination], stream);
      assert.equal(point.attributes[A.group], "g");
      assert.equal(point.attributes[A.member], "m1");
      assert.deepEqual(point.value.buckets.boundaries, DURATION_BUCKETS_S, "the conventions' buckets, in seconds");
    }
    const seconds = points.reduce((n, p) => n + (p.value.sum ?? 0), 0);
    assert.ok(seconds >= 0.14 && seconds < 10, `the durations are in seconds (sum ${seconds}, one handler ran 150 ms)`);
    await member.stop();
    await provider.shutdown();
  });
});
