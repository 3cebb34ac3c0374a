/**
 * Member metrics read back through an in-memory OpenTelemetry reader.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { MeterProvider, MetricReader, type ResourceMetrics } from "@opentelemetry/sdk-metrics";
import { createStatic, MetricNames, staticConsume } from "../../src/index.js";
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
      },
    });
    for (let i = 0; i < 20; i++) await env.js.publish(`${stream}.k${i}`);
    await waitFor(() => handled.size === 20, 15_000, "all 20 messages handled");
    const { resourceMetrics } = await waitFor(async () => {
      const r = await reader.collect();
      return total(r.resourceMetrics, MetricNames.handled) === 20 ? r : undefined;
    }, 5_000, "20 handled in the metrics");
    assert.equal(total(resourceMetrics, MetricNames.failed), 1);
    assert.equal(total(resourceMetrics, MetricNames.redelivered), 1, "the failed message came back once");
    assert.equal(total(resourceMetrics, MetricNames.handlerDuration), 20, "one latency sample per success");
    assert.equal(total(resourceMetrics, MetricNames.partitionsOwned, { "pcg.member": "m1" }), 4);
    assert.equal(total(resourceMetrics, MetricNames.inFlight), 0);
    assert.ok(total(resourceMetrics, MetricNames.pinChanges, { "pcg.event": "pinned" }) >= 1);
    const perPartition = [0, 1, 2, 3].map((p) => total(resourceMetrics, MetricNames.handled, { "pcg.partition": p }));
    assert.equal(perPartition.reduce((a, b) => a + b, 0), 20);
    assert.ok(perPartition.filter((n) => n > 0).length > 1, "labelled by partition");
    await member.stop();
    await provider.shutdown();
  });
});
