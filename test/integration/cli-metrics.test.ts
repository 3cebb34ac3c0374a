/**
 * `cg static|elastic consume --metrics-port`: the member's OpenTelemetry metrics
 * served in the Prometheus text format on /metrics, labelled with stream, group,
 * member and partition, growing as messages are handled; the endpoint goes away
 * with the process; a busy port or a bad flag fails before the member joins.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { partitionOf } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { CgProcess, addSourceStream, addStaticStream, killAllCg, runCg } from "../helpers/cli-run.js";
import { samples, sum, type Sample } from "../helpers/prometheus-text.js";

let env: TestEnv;
let url: string;

before(async () => {
  env = await startEnv();
  url = env.server.url;
});

after(async () => {
  await killAllCg();
  await env.close();
});

async function scrape(metricsUrl: string): Promise<string> {
  const res = await fetch(metricsUrl);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain/);
  return res.text();
}

/**
 * Scrapes until `handled` messages are counted: cg prints a message's line before it
 * acks it, and the duration is recorded when the handler returns, just after.
 */
async function scrapeHandled(metricsUrl: string, handled: number): Promise<string> {
  return waitFor(async () => {
    const text = await scrape(metricsUrl);
    return sum(samples(text, "messaging_process_duration_seconds_count")) === handled ? text : undefined;
  }, 10_000, `${handled} handled in the scrape`);
}

/** Starts `consume --json --metrics-port 0` and returns the process and the URL from its `started` event. */
async function consumeWithMetrics(kind: "static" | "elastic", stream: string, group: string, member: string): Promise<{ p: CgProcess; metricsUrl: string; partitions: number[] }> {
  const p = new CgProcess(["-s", url, "--json", kind, "consume", stream, group, member, "--sleep", "0", "--metrics-port", "0"]);
  await p.waitForText(/"event":"started"/, 30_000, "stderr");
  const started = p.json<{ event: string; metrics_url?: string; partitions: number[] }>("stderr").find((e) => e.event === "started");
  assert.ok(started?.metrics_url, "the started event says where the metrics are");
  assert.match(started.metrics_url, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/, "loopback by default");
  return { p, metricsUrl: started.metrics_url, partitions: started.partitions };
}

describe("cli metrics", () => {
  test("cli metrics - static consume --metrics-port: messaging_process_duration_seconds per group, member and partition, growing; gone after SIGINT", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 4);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "4", "m1"])).code, 0);
    const { p, metricsUrl } = await consumeWithMetrics("static", stream, group, "m1");

    const perPartition = [0, 0, 0, 0];
    const publish = async (from: number, count: number): Promise<void> => {
      for (let i = from; i < from + count; i++) {
        const subject = `${stream}.k${i}`;
        perPartition[partitionOf(subject, 4, { filter: `${stream}.*`, wildcards: [1] })]! += 1;
        await env.js.publish(subject, String(i));
      }
    };
    await publish(0, 30);
    await p.waitFor(() => p.json().length === 30, 60_000, "30 messages handled");
    const first = await scrapeHandled(metricsUrl, 30);
    const handled = samples(first, "messaging_process_duration_seconds_count");
    assert.equal(sum(handled), 30);
    for (const s of handled) {
      assert.equal(s.labels["messaging_system"], "nats");
      assert.equal(s.labels["messaging_destination_name"], stream);
      assert.equal(s.labels["messaging_consumer_group_name"], group);
      assert.equal(s.labels["messaging_operation_name"], "process");
      assert.equal(s.labels["pcg_member"], "m1");
      assert.match(s.labels["messaging_destination_partition_id"] ?? "", /^[0-3]$/);
    }
    const byPartition = (xs: Sample[]): number[] => [0, 1, 2, 3].map((q) => sum(xs.filter((s) => s.labels["messaging_destination_partition_id"] === String(q))));
    assert.deepEqual(byPartition(handled), perPartition, "labelled with the message's partition");
    assert.match(first, /^# TYPE messaging_process_duration_seconds histogram$/m);
    assert.match(first, /^# UNIT messaging_process_duration_seconds s$/m);
    assert.doesNotMatch(first, /pcg_handler_duration|pcg_messages_handled/, "the old names are gone");
    const buckets = samples(first, "messaging_process_duration_seconds_bucket").map((s) => s.labels["le"]);
    assert.deepEqual([...new Set(buckets)], ["0.005", "0.01", "0.025", "0.05", "0.075", "0.1", "0.25", "0.5", "0.75", "1", "2.5", "5", "7.5", "10", "+Inf"], "the conventions' buckets, in seconds");
    const seconds = sum(samples(first, "messaging_process_duration_seconds_sum"));
    assert.ok(seconds > 0 && seconds < 30, `30 handler runs of ~0 ms take far less than 30 s (sum ${seconds}; in ms it would not be)`);
    assert.equal(sum(samples(first, "pcg_partitions_owned").filter((s) => s.labels["pcg_member"] === "m1")), 4);
    assert.equal(sum(samples(first, "pcg_messages_in_flight")), 0);
    assert.ok(sum(samples(first, "pcg_pin_changes_total").filter((s) => s.labels["pcg_event"] === "pinned")) >= 1);

    await publish(30, 20);
    await p.waitFor(() => p.json().length === 50, 60_000, "50 messages handled");
    const second = samples(await scrapeHandled(metricsUrl, 50), "messaging_process_duration_seconds_count");
    assert.equal(sum(second), 50, "the counters grow");
    assert.deepEqual(byPartition(second), perPartition);

    const other = await fetch(metricsUrl.replace(/\/metrics$/, "/nope"));
    assert.equal(other.status, 404);
    await other.text();
    assert.doesNotMatch(first, /pcg_group_/, "a static member serves no group lag");
    const lag = await fetch(metricsUrl.replace(/\/metrics$/, "/lag"));
    assert.equal(lag.status, 404, "no /lag route for a static group");
    await lag.text();

    p.signal("SIGINT");
    assert.equal((await p.exited(30_000)).code, 130);
    await assert.rejects(fetch(metricsUrl), "the endpoint is closed with the process");
  });

  test("cli metrics - elastic consume --metrics-port, and the human started line says where", async () => {
    const stream = uniqueName("E");
    await addSourceStream(env.jsm, stream);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "elastic", "create", stream, group, "2", "--filter", `${stream}.*`, "--wildcards", "1"])).code, 0);
    assert.equal((await runCg(["-s", url, "elastic", "add", stream, group, "a"])).code, 0);
    const { p, metricsUrl } = await consumeWithMetrics("elastic", stream, group, "a");
    for (let i = 0; i < 12; i++) await env.js.publish(`${stream}.k${i}`, String(i));
    await p.waitFor(() => p.json().length === 12, 60_000, "12 messages handled");
    const handled = samples(await scrapeHandled(metricsUrl, 12), "messaging_process_duration_seconds_count");
    assert.equal(sum(handled), 12);
    assert.ok(handled.every((s) => s.labels["messaging_consumer_group_name"] === group && s.labels["pcg_member"] === "a" && s.labels["messaging_destination_name"] === stream));
    p.signal("SIGTERM");
    assert.equal((await p.exited(30_000)).code, 143);

    const human = new CgProcess(["-s", url, "elastic", "consume", stream, group, "a", "--metrics-port", "0", "--metrics-host", "127.0.0.1"]);
    await human.waitForText(/consuming from elastic group .* metrics at http:\/\/127\.0\.0\.1:(\d+)\/metrics, lag at http:\/\/127\.0\.0\.1:\1\/lag \(Ctrl-C to stop\)/, 30_000, "stderr");
    human.signal("SIGINT");
    assert.equal((await human.exited(30_000)).code, 130);
  });

  test("cli metrics - a busy port fails with exit 1 before joining; bad flags are usage errors", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "2", "m1"])).code, 0);
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    try {
      const port = (blocker.address() as { port: number }).port;
      const busy = await runCg(["-s", url, "static", "consume", stream, group, "m1", "--metrics-port", String(port)]);
      assert.equal(busy.code, 1);
      assert.match(busy.stderr, new RegExp(`cannot serve metrics on 127\\.0\\.0\\.1:${port}: .*EADDRINUSE.*choose another --metrics-port`));
      assert.doesNotMatch(busy.stderr, /consuming from/, "the member never joined");
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
    const badPort = await runCg(["-s", url, "static", "consume", stream, group, "m1", "--metrics-port", "70000"]);
    assert.equal(badPort.code, 2);
    assert.match(badPort.stderr, /--metrics-port must be a port number from 0 to 65535/);
    const hostOnly = await runCg(["-s", url, "static", "consume", stream, group, "m1", "--metrics-host", "127.0.0.1"]);
    assert.equal(hostOnly.code, 2);
    assert.match(hostOnly.stderr, /--metrics-host needs --metrics-port/);
  });
});
