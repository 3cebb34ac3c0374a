/**
 * `cg static|elastic describe`: the JSON document against known states (exact
 * pending per partition, the pin and a standby, a member without an instance,
 * `--stall-after`, a full elastic buffer), the human tables and findings, colour on
 * a terminal, and the errors.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { partitionOf } from "../../src/index.js";
import type { DescribeDoc } from "../../src/cli/model.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { CG_BIN, CgProcess, addSourceStream, addStaticStream, cgEnv, killAllCg, runCg, runCgJson } from "../helpers/cli-run.js";

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

async function describeJson(kind: "static" | "elastic", stream: string, group: string, extra: string[] = []): Promise<DescribeDoc> {
  return (await runCgJson<DescribeDoc>(["-s", url, kind, "describe", stream, group, ...extra])).doc;
}

const codes = (doc: DescribeDoc, code: string): (string | number | null)[] =>
  doc.findings.filter((f) => f.code === code).map((f) => f.partition ?? f.member);

/** Publishes to `<stream>.k<i>` and counts the messages per partition. */
async function publishKeys(stream: string, from: number, count: number, perPartition: number[]): Promise<void> {
  for (let i = from; i < from + count; i++) {
    const subject = `${stream}.k${i % 37}`;
    const p = partitionOf(subject, perPartition.length, { filter: `${stream}.*`, wildcards: [1] });
    perPartition[p] = (perPartition[p] ?? 0) + 1;
    await env.js.publish(subject, String(i));
  }
}

describe("cli describe", () => {
  test("cli describe - static --json: exact pending, the pin and a standby, a member with no instance, --stall-after", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 4);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "4", "m1", "m2"])).code, 0);
    const perPartition = [0, 0, 0, 0];
    await publishKeys(stream, 0, 200, perPartition);
    const m1Total = perPartition[0]! + perPartition[1]!;
    assert.ok(m1Total > 0 && perPartition[2]! + perPartition[3]! > 0, "both members have messages");

    const m1 = new CgProcess(["-s", url, "--json", "static", "consume", stream, group, "m1", "--sleep", "0"]);
    await m1.waitFor(() => m1.json().length === m1Total, 60_000, "m1 to handle its messages");
    const pinId = m1.json<{ pin_id: string }>()[0]?.pin_id;
    const standby = new CgProcess(["-s", url, "--json", "static", "consume", stream, group, "m1", "--sleep", "0"]);
    await standby.waitForText(/"event":"started"/, 30_000, "stderr");

    // wait for the standby's pull (and m1's settled acks) to show up, then check everything on that document
    const doc = await waitFor(async () => {
      const d = await describeJson("static", stream, group);
      const m = d.members.find((x) => x.member === "m1");
      return m && m.waiting_pulls >= 2 && m.ack_pending === 0 ? d : undefined;
    }, 30_000, "m1's standby pull to show up");
    assert.equal(doc.kind, "static");
    assert.equal(doc.partition_count, 4);
    assert.deepEqual(doc.assignment, { m1: [0, 1], m2: [2, 3] });
    assert.deepEqual(
      doc.partitions.map((p) => [p.partition, p.owner, p.pending, p.ack_pending]),
      [
        [0, "m1", 0, 0],
        [1, "m1", 0, 0],
        [2, "m2", perPartition[2], 0],
        [3, "m2", perPartition[3], 0],
      ],
    );
    const m1d = doc.members.find((m) => m.member === "m1");
    const m2d = doc.members.find((m) => m.member === "m2");
    assert.ok(m1d && m2d);
    assert.equal(m1d.active, true);
    assert.equal(m1d.pinned, true);
    assert.equal(m1d.pin_id, pinId, "the pin id of the instance that handled the messages");
    assert.equal(m1d.standbys_max, m1d.waiting_pulls - 1, "at most the pulls beyond one");
    assert.ok(m1d.standbys_max >= 1);
    assert.equal(m1d.pending, 0);
    assert.equal(m2d.active, false);
    assert.equal(m2d.pinned, false);
    assert.equal(m2d.pending, perPartition[2]! + perPartition[3]!);
    assert.deepEqual(doc.summary, { members: 2, active: 1, pinned: 1, standbys_max: m1d.standbys_max, pending: perPartition[2]! + perPartition[3]!, ack_pending: 0, redelivered: 0 });
    assert.deepEqual(codes(doc, "NO_ACTIVE_INSTANCE"), ["m2"]);
    assert.deepEqual(codes(doc, "PARTITION_STALLED"), [2, 3], "m2's partitions never delivered anything");
    const finding = doc.findings.find((f) => f.code === "NO_ACTIVE_INSTANCE");
    assert.equal(finding?.severity, "error");
    assert.match(finding?.explanation ?? "", new RegExp(`cg static consume ${stream} ${group} m2`));
    assert.equal(doc.buffer, null);
    assert.equal(doc.source_lag, null);
    assert.equal(doc.stall_after_ms, 30_000);

    // m1 stops; new messages wait on its partitions, which delivered recently
    m1.signal("SIGINT");
    standby.signal("SIGINT");
    assert.equal((await m1.exited(30_000)).code, 130);
    assert.equal((await standby.exited(30_000)).code, 130);
    const before = [...perPartition];
    await publishKeys(stream, 200, 50, perPartition);
    const added = perPartition.map((n, p) => n - (before[p] ?? 0));
    // the stopped instances' pulls go away with their connections
    const patient = await waitFor(async () => {
      const d = await describeJson("static", stream, group, ["--stall-after", "1h"]);
      return d.members.every((m) => !m.active) ? d : undefined;
    }, 30_000, "m1's instances to be gone");
    assert.deepEqual(
      patient.partitions.map((p) => p.pending),
      [added[0], added[1], perPartition[2], perPartition[3]],
    );
    assert.deepEqual(codes(patient, "NO_ACTIVE_INSTANCE").sort(), ["m1", "m2"]);
    assert.deepEqual(codes(patient, "PARTITION_STALLED"), [2, 3], "m1's partitions delivered less than an hour ago");
    assert.equal(patient.stall_after_ms, 3_600_000);
    const strict = await describeJson("static", stream, group, ["--stall-after", "1ms"]);
    assert.deepEqual(
      codes(strict, "PARTITION_STALLED"),
      [0, 1, 2, 3].filter((p) => (strict.partitions[p]?.pending ?? 0) > 0),
    );
  });

  test("cli describe - elastic --json: a full buffer (BUFFER_FULL), the source lag, a member over the cap", async () => {
    const stream = uniqueName("E");
    await addSourceStream(env.jsm, stream);
    for (let i = 0; i < 100; i++) await env.js.publish(`${stream}.k${i}`, String(i));
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "elastic", "create", stream, group, "2", "--filter", `${stream}.*`, "--wildcards", "1", "--max-buffered-msgs", "10"])).code, 0);
    assert.equal((await runCg(["-s", url, "elastic", "add", stream, group, "a", "b", "c"])).code, 0);
    const doc = await waitFor(async () => {
      const d = await describeJson("elastic", stream, group);
      return d.buffer?.messages === 10 ? d : undefined;
    }, 30_000, "the buffer to fill up");
    assert.deepEqual(doc.buffer && { messages: doc.buffer.messages, max_messages: doc.buffer.max_messages, max_bytes: doc.buffer.max_bytes }, { messages: 10, max_messages: 10, max_bytes: 0 });
    assert.equal(codes(doc, "BUFFER_FULL").length, 1);
    assert.equal(doc.findings.find((f) => f.code === "BUFFER_FULL")?.severity, "warning");
    assert.deepEqual(codes(doc, "MEMBER_OVER_CAP"), ["c"]);
    assert.deepEqual(codes(doc, "NO_ACTIVE_INSTANCE"), ["a", "b"]);
    assert.deepEqual(doc.assignment, { a: [0], b: [1], c: [] });
    assert.equal(doc.summary.pending, 10, "all 10 buffered messages are pending");
    assert.equal(doc.partitions.reduce((n, p) => n + (p.pending ?? 0), 0), 10);
    assert.deepEqual(
      doc.members.map((m) => [m.member, m.over_cap]),
      [
        ["a", false],
        ["b", false],
        ["c", true],
      ],
    );
    assert.equal(typeof doc.source_lag, "number");
    assert.ok((doc.source_lag ?? 0) > 0, "the rest waits in the source stream");

    const human = await runCg(["-s", url, "elastic", "describe", stream, group]);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, /^buffer: 10 of 10 messages \(100%\), .*; source lag: \d+ messages$/m);
    assert.match(human.stdout, /WARNING {2}BUFFER_FULL {2}the work-queue buffer is full/);
    assert.match(human.stdout, /→ the work-queue stream holds max buffered messages or bytes/);
    assert.match(human.stdout, /^c +over cap +no/m);
  });

  test("cli describe - human output: config, assignment, members and partitions tables, findings with explanations; colour on a terminal", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "mapped", stream, group, "2", "m1:0", "m2:1"])).code, 0);
    const perPartition = [0, 0];
    await publishKeys(stream, 0, 20, perPartition);
    assert.ok(perPartition.every((n) => n > 0), "both partitions have messages");

    const r = await runCg(["-s", url, "static", "describe", stream, group]);
    assert.equal(r.code, 0, r.stderr);
    const out = r.stdout;
    assert.ok(!out.includes("\u001b"), "no colour when stdout is not a terminal");
    assert.match(out, new RegExp(`^static consumer group ${group} on stream ${stream} \\(described at \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z\\)$`, "m"));
    assert.match(out, /^config: max members=2, filters=\[\]$/m);
    assert.match(out, /^member mappings: \[m1:0 m2:1\]$/m);
    assert.match(out, /^assignment: m1 → \[0\], m2 → \[1\]$/m);
    assert.match(out, new RegExp(`^members: 2 listed, 0 active, 0 pinned, standbys 0; pending ${perPartition[0]! + perPartition[1]!}, ack pending 0, redelivered 0$`, "m"));
    assert.match(out, /^MEMBER +PARTITIONS +ACTIVE +PINNED +PIN ID +PULLS +STANDBYS +PENDING +ACK PENDING +REDELIVERED +LAST DELIVERY$/m);
    assert.match(out, new RegExp(`^m1 +\\[0\\] +no +no +- +0 +0 +${perPartition[0]} +0 +0 +never$`, "m"));
    assert.match(out, /^PARTITION +OWNER +PENDING +ACK PENDING +REDELIVERED +LAST ACTIVITY$/m);
    assert.match(out, new RegExp(`^0 +m1 +${perPartition[0]} +0 +- +never$`, "m"));
    assert.match(out, new RegExp(`^1 +m2 +${perPartition[1]} +0 +- +never$`, "m"));
    assert.match(out, /^health: 4 findings$/m);
    assert.match(out, /^ {2}ERROR {4}NO_ACTIVE_INSTANCE {2}member m1 owns partitions 0 but has no running instance/m);
    assert.match(out, new RegExp(`^ +→ nothing consumes these partitions: start an instance \\(cg static consume ${stream} ${group} m2\\)`, "m"));
    assert.match(out, /^ {2}WARNING {2}PARTITION_STALLED {2}partition 1 has \d+ pending messages/m);
    const errorsFirst = out.indexOf("ERROR ") < out.indexOf("WARNING ");
    assert.ok(errorsFirst, "errors are listed before warnings");

    // on a terminal the findings are highlighted
    const tty = await new Promise<string>((resolve, reject) => {
      const child = spawn("script", ["-qefc", `exec ${process.execPath} ${CG_BIN} -s ${url} static describe ${stream} ${group}`, "/dev/null"], {
        env: cgEnv({ SHELL: "/bin/sh", TERM: "xterm" }),
        stdio: ["pipe", "pipe", "pipe"],
      });
      let text = "";
      child.stdout.setEncoding("utf8").on("data", (c: string) => (text += c));
      const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
      child.on("error", reject);
      child.on("close", (code) => {
        clearTimeout(timer);
        if (code === 0) resolve(text);
        else reject(new Error(`describe on a terminal exited ${String(code)}: ${text}`));
      });
    });
    assert.ok(tty.includes("\u001b[31mERROR  \u001b[39m"), "errors in red");
    assert.ok(tty.includes("\u001b[33mWARNING\u001b[39m"), "warnings in yellow");
    assert.ok(tty.includes("\u001b[1mNO_ACTIVE_INSTANCE\u001b[22m"), "codes in bold");
  });

  test("cli describe - errors: a missing group (exit 1, with a hint), a bad --stall-after (exit 2)", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, "exists", "2", "m1"])).code, 0);
    const missing = await runCg(["-s", url, "static", "describe", stream, "nope"]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, new RegExp(`cg static ls ${stream}`));
    assert.equal(missing.stdout, "");
    const json = await runCg(["-s", url, "--json", "elastic", "describe", stream, "nope"]);
    assert.equal(json.code, 1);
    assert.equal((JSON.parse(json.stderr.trim()) as { error: { exit_code: number } }).error.exit_code, 1);
    const bad = await runCg(["-s", url, "static", "describe", stream, "exists", "--stall-after", "soon"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--stall-after must be a duration/);
  });
});
