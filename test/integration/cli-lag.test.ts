/**
 * `cg elastic lag` and the lag on `cg elastic consume --metrics-port`, through the
 * built binary: exact numbers for a known published set in the human output and in
 * the one JSON document; the gauges on /metrics and the JSON document on /lag (what
 * KEDA's metrics-api scaler reads), fetched over 127.0.0.1; usage and operational
 * errors with their exit codes.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { memberPartitions, partitionOf, workQueueStreamName } from "../../src/index.js";
import type { LagDoc } from "../../src/cli/model.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { CgProcess, addSourceStream, addStaticStream, killAllCg, runCg, runCgJson } from "../helpers/cli-run.js";
import { publishAll } from "../helpers/elastic-util.js";
import { samples, sum } from "../helpers/prometheus-text.js";

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

/**
 * An elastic group `g` of `partitions` partitions on a new stream, with `members`, and
 * `count` messages on `keys` keys published and sourced; returns the expected pending
 * per partition (from the partition hash).
 */
async function loadedGroup(partitions: number, members: string[], count: number, keys: number): Promise<{ stream: string; expected: number[] }> {
  const stream = uniqueName("L");
  await addSourceStream(env.jsm, stream);
  const created = await runCg(["-s", url, "elastic", "create", stream, "g", String(partitions), "--filter", `${stream}.*`, "--wildcards", "1"]);
  assert.equal(created.code, 0, created.stderr);
  if (members.length > 0) assert.equal((await runCg(["-s", url, "elastic", "add", stream, "g", ...members])).code, 0);
  const expected = new Array<number>(partitions).fill(0);
  const items = Array.from({ length: count }, (_, i) => ({ subject: `${stream}.k${i % keys}`, data: String(i) }));
  for (const m of items) expected[partitionOf(m.subject, partitions, { filter: `${stream}.*`, wildcards: [1] })]! += 1;
  await publishAll(env.js, items);
  await waitFor(async () => (await env.jsm.streams.info(workQueueStreamName(stream, "g"))).state.messages === count, 15_000, `${count} messages sourced`);
  return { stream, expected };
}

const owned = (members: string[], partitions: number, member: string): number[] => memberPartitions(members, partitions, null, member);

describe("cli lag", () => {
  test("cli lag - elastic lag: exact numbers in --json and in the human output, the recommendation from --rate-per-member", async () => {
    const members = ["a", "b", "c", "d"];
    const { stream, expected } = await loadedGroup(6, members, 500, 37);
    const args = ["-s", url, "elastic", "lag", stream, "g", "--sample", "0", "--rate-per-member", "2", "--target-drain", "50s"];

    const { doc } = await runCgJson<LagDoc>(args);
    assert.deepEqual(
      { stream: doc.stream, group: doc.group, work_queue: doc.work_queue, partition_count: doc.partition_count, member_count: doc.member_count },
      { stream, group: "g", work_queue: `${stream}-g`, partition_count: 6, member_count: 4 },
    );
    assert.deepEqual(
      doc.partitions.map((p) => p.pending),
      expected,
    );
    for (const p of doc.partitions) assert.equal(p.owner, members.find((m) => owned(members, 6, m).includes(p.partition)) ?? null);
    assert.deepEqual(
      doc.members,
      members.map((m) => ({ member: m, partitions: owned(members, 6, m), pending: owned(members, 6, m).reduce((n, p) => n + (expected[p] ?? 0), 0), active: false, over_cap: false })),
    );
    assert.deepEqual(
      { pending: doc.pending, source_lag: doc.source_lag, backlog: doc.backlog, recommended: doc.recommended_members, needed: doc.needed_members, capped: doc.capped, basis: doc.basis, target: doc.target_drain_ms },
      { pending: 500, source_lag: 0, backlog: 500, recommended: 5, needed: 5, capped: false, basis: "rate", target: 50_000 },
      "ceil(500 / (2 msgs/s × 50 s)) = 5",
    );
    assert.deepEqual(doc.rate, { source: "given", per_member: 2, measured_per_member: null, drained_per_sec: null, inflow_per_sec: null, window_ms: null, active_members: 0 });
    assert.equal(doc.source?.stream, stream);
    assert.equal(doc.source?.active, true);
    assert.deepEqual(doc.notes, []);
    assert.ok(!Number.isNaN(Date.parse(doc.at)));

    const human = await runCg(args);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, new RegExp(`^elastic consumer group g on stream ${stream} \\(at .*\\)$`, "m"));
    assert.match(human.stdout, new RegExp(`^backlog: 500 messages \\(500 pending in ${stream}-g, source lag 0\\)$`, "m"));
    assert.match(human.stdout, /^drain rate: 2\.0 msgs\/s per member \(given\)$/m);
    assert.match(human.stdout, /^recommended members: 5 \(drains the backlog within 50s; the group has 4, at most 6 can work\)$/m);
    for (const m of doc.members) assert.match(human.stdout, new RegExp(`^${m.member} +\\[${m.partitions.join(" ")}\\] +${m.pending} +no$`, "m"));
    for (const p of doc.partitions) assert.match(human.stdout, new RegExp(`^${p.partition} +${p.owner ?? "-"} +${p.pending}$`, "m"));

    const measured = await runCgJson<LagDoc>(["-s", url, "elastic", "lag", stream, "g", "--sample", "300ms"]);
    assert.equal(measured.doc.rate.window_ms !== null && measured.doc.rate.window_ms >= 300, true, "--sample sets the window");
    assert.equal(measured.doc.rate.source, "none", "no instance runs: nothing drained");
    assert.equal(measured.doc.basis, "hold");
    assert.equal(measured.doc.recommended_members, 4);
    assert.deepEqual(measured.doc.notes.map((n) => n.code), ["NO_RATE"]);
    const holding = await runCg(["-s", url, "elastic", "lag", stream, "g", "--sample", "0"]);
    assert.match(holding.stdout, /^drain rate: unknown \(no sample window\)$/m);
    assert.match(holding.stdout, /^recommended members: 4 \(no rate: keeps the current count, at least 1;/m);
    assert.match(holding.stdout, /^NO_RATE {2}no drain rate: no sample window was measured/m);
  });

  test("cli lag - many partitions: the human output lists the ten with the most pending; a group with no members", async () => {
    const { stream, expected } = await loadedGroup(64, [], 300, 300);
    const r = await runCg(["-s", url, "elastic", "lag", stream, "g", "--sample", "0"]);
    assert.equal(r.code, 0, r.stderr);
    const rows = [...r.stdout.matchAll(/^(\d+) +- +(\d+)$/gm)].map((m) => ({ partition: Number(m[1]), pending: Number(m[2]) }));
    const top = expected.map((pending, partition) => ({ partition, pending })).sort((a, b) => b.pending - a.pending || a.partition - b.partition).slice(0, 10);
    assert.deepEqual(rows, top);
    assert.match(r.stdout, /\(the 10 of 64 partitions with the most pending messages; --json lists all\)/);
    assert.match(r.stdout, /^no members$/m);
    assert.match(r.stdout, /^NO_MEMBERS {2}the group has no members/m);
    assert.match(r.stdout, /^recommended members: 1 /m, "one member to start");
  });

  test("cli lag - consume --metrics-port serves the group's lag: gauges on /metrics, the lag document on /lag (KEDA's metrics-api)", async () => {
    const members = ["a", "b"];
    const { stream, expected } = await loadedGroup(4, members, 300, 53);
    // a long --sleep holds one message in flight: nothing is acknowledged, so every count stays put
    const p = new CgProcess(["-s", url, "--json", "elastic", "consume", stream, "g", "a", "--sleep", "10m", "--metrics-port", "0", "--target-drain", "50s", "--rate-per-member", "2"]);
    await p.waitForText(/"event":"started"/, 30_000, "stderr");
    const started = p.json<{ event: string; metrics_url?: string; lag_url?: string }>("stderr").find((e) => e.event === "started");
    assert.match(started?.lag_url ?? "", /^http:\/\/127\.0\.0\.1:\d+\/lag$/);
    assert.equal(started?.lag_url?.replace(/\/lag$/, "/metrics"), started?.metrics_url, "on the metrics port");
    const lagUrl = started?.lag_url ?? "";
    const metricsUrl = started?.metrics_url ?? "";

    const res = await fetch(lagUrl);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    const doc = (await res.json()) as LagDoc;
    assert.deepEqual(doc.partitions.map((x) => x.pending), expected, "in-flight messages are still pending");
    assert.equal(doc.pending, 300);
    assert.equal(doc.backlog, 300);
    assert.equal(doc.target_drain_ms, 50_000, "--target-drain");
    assert.equal(doc.rate.source, "given", "--rate-per-member");
    assert.equal(typeof doc.recommended_members, "number", "valueLocation: recommended_members is a top-level number");
    assert.equal(doc.recommended_members, 3, "ceil(300 / (2 × 50)) = 3");
    assert.equal(doc.member_count, 2);

    const again = (await (await fetch(lagUrl)).json()) as LagDoc;
    assert.equal(again.at, doc.at, "read at most every few seconds: the same reading");

    const text = await (await fetch(metricsUrl)).text();
    const labels = { messaging_system: "nats", messaging_destination_name: stream, messaging_consumer_group_name: "g" };
    const perPartition = samples(text, "pcg_group_partition_pending");
    assert.equal(perPartition.length, 4);
    for (const s of perPartition) {
      const partition = Number(s.labels["messaging_destination_partition_id"]);
      assert.equal(s.value, expected[partition], `partition ${partition}`);
      assert.equal(s.labels["pcg_member"], members.find((m) => owned(members, 4, m).includes(partition)));
      assert.equal(s.labels["messaging_consumer_group_name"], "g");
      assert.equal(s.labels["messaging_destination_name"], stream);
    }
    for (const m of members) {
      const value = sum(samples(text, "pcg_group_member_pending").filter((s) => s.labels["pcg_member"] === m));
      assert.equal(value, owned(members, 4, m).reduce((n, q) => n + (expected[q] ?? 0), 0), `member ${m}`);
    }
    const one = (name: string): number => {
      const xs = samples(text, name);
      assert.equal(xs.length, 1, name);
      for (const [k, v] of Object.entries(labels)) assert.equal(xs[0]?.labels[k], v, `${name} ${k}`);
      return xs[0]?.value ?? NaN;
    };
    assert.equal(one("pcg_group_pending"), 300);
    assert.equal(one("pcg_group_source_lag"), 0);
    assert.equal(one("pcg_group_source_active"), 1);
    assert.equal(one("pcg_group_backlog"), 300);
    assert.equal(one("pcg_group_members"), 2);
    assert.equal(one("pcg_group_members_recommended"), 3);
    assert.match(text, /^# TYPE pcg_group_members_recommended gauge$/m);

    const root = await (await fetch(metricsUrl.replace(/\/metrics$/, "/"))).text();
    assert.match(root, /Prometheus metrics at \/metrics; JSON at \/lag/);
    const post = await fetch(lagUrl, { method: "POST" });
    assert.equal(post.status, 404, "the route answers GET");
    await post.text();
    await p.kill();
  });

  test("cli lag - errors: a missing group and a static group (exit 1), bad flags (exit 2), lag flags on consume without --metrics-port", async () => {
    const { stream } = await loadedGroup(2, ["a"], 1, 1);
    const missing = await runCg(["-s", url, "elastic", "lag", stream, "nope"]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, new RegExp(`no group "nope" on stream "${stream}"\\); see the elastic groups of the stream with "cg elastic ls ${stream}"`));
    const missingJson = await runCg(["-s", url, "--json", "elastic", "lag", stream, "nope"]);
    assert.equal(missingJson.code, 1);
    assert.equal(missingJson.stdout, "", "no document on stdout");
    assert.equal((JSON.parse(missingJson.stderr) as { error: { code: string } }).error.code, "GROUP_NOT_FOUND");

    const s = uniqueName("LS");
    await addStaticStream(env.jsm, s, 2);
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", s, "sg", "2", "m1"])).code, 0);
    const isStatic = await runCg(["-s", url, "--json", "elastic", "lag", s, "sg"]);
    assert.equal(isStatic.code, 1);
    const err = (JSON.parse(isStatic.stderr) as { error: { code: string; message: string } }).error;
    assert.equal(err.code, "STATIC_GROUP");
    assert.match(err.message, /is a static consumer group.*cg static describe/);
    const noStaticLag = await runCg(["-s", url, "static", "lag", s, "sg"]);
    assert.equal(noStaticLag.code, 2, "static groups have no lag command");

    const usage: [string[], RegExp][] = [
      [["--target-drain", "0"], /--target-drain must be a duration > 0/],
      [["--target-drain", "soon"], /--target-drain must be a duration such as 20ms/],
      [["--rate-per-member", "0"], /--rate-per-member must be a number > 0, got "0"/],
      [["--rate-per-member", "fast"], /--rate-per-member must be a number > 0/],
      [["--sample", "2m"], /--sample must be at most 1m/],
      [["--sample", "-1s"], /--sample must be a duration/],
    ];
    for (const [flags, message] of usage) {
      const r = await runCg(["-s", url, "elastic", "lag", stream, "g", ...flags]);
      assert.equal(r.code, 2, flags.join(" "));
      assert.match(r.stderr, message, flags.join(" "));
    }
    const noPort = await runCg(["-s", url, "elastic", "consume", stream, "g", "a", "--target-drain", "10s"]);
    assert.equal(noPort.code, 2);
    assert.match(noPort.stderr, /--target-drain needs --metrics-port/);
    const noPortRate = await runCg(["-s", url, "elastic", "consume", stream, "g", "a", "--rate-per-member", "5"]);
    assert.equal(noPortRate.code, 2);
    assert.match(noPortRate.stderr, /--rate-per-member needs --metrics-port/);
    const staticFlag = await runCg(["-s", url, "static", "consume", s, "sg", "m1", "--metrics-port", "0", "--target-drain", "10s"]);
    assert.equal(staticFlag.code, 2);
    assert.match(staticFlag.stderr, /unknown option '--target-drain'/);
  });
});
