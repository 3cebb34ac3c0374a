/**
 * `cg static consume` / `cg elastic consume`: each member receives exactly its
 * partitions (NDJSON checked), human output and status events, and the graceful
 * stop on SIGINT/SIGTERM (exit 130/143) that hands the pin to a standby at once.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { partitionOf, staticConsumerName } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { CgProcess, addSourceStream, addStaticStream, killAllCg, runCg } from "../helpers/cli-run.js";
import { startAckHoldProxy } from "../helpers/ack-hold-proxy.js";

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

interface Record {
  member: string;
  partition: number;
  subject: string;
  stream_seq: number;
  delivered: number;
  pin_id: string | null;
  ts: string;
}

const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

function consume(kind: "static" | "elastic", stream: string, group: string, member: string, extra: string[] = []): CgProcess {
  return new CgProcess(["-s", url, "--json", kind, "consume", stream, group, member, ...extra]);
}

async function started(p: CgProcess): Promise<{ partitions: number[] }> {
  await p.waitForText(/"event":"started"/, 30_000, "stderr");
  const event = p.json<{ event: string; partitions: number[] }>("stderr").find((e) => e.event === "started");
  assert.ok(event);
  return event;
}

function checkRecords(records: Record[], member: string, owned: number[], expected: (subject: string) => number): void {
  for (const r of records) {
    assert.equal(r.member, member);
    assert.ok(owned.includes(r.partition), `${member} got partition ${r.partition}, owns ${owned.join(",")}`);
    assert.equal(r.partition, expected(r.subject), `partition of ${r.subject}`);
    assert.match(r.ts, ISO_MS);
    assert.ok(Number.isInteger(r.stream_seq) && r.stream_seq > 0);
    assert.ok(r.delivered >= 1);
    assert.equal(typeof r.pin_id, "string");
  }
}

async function stopAll(...ps: CgProcess[]): Promise<void> {
  for (const p of ps) p.signal("SIGINT");
  for (const p of ps) assert.equal((await p.exited(30_000)).code, 130);
}

describe("cli consume", () => {
  test("cli consume - static members receive exactly their partitions (NDJSON)", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 4);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "4", "m1", "m2"])).code, 0);
    const m1 = consume("static", stream, group, "m1", ["--sleep", "0"]);
    const m2 = consume("static", stream, group, "m2", ["--sleep", "0"]);
    assert.deepEqual((await started(m1)).partitions, [0, 1]);
    assert.deepEqual((await started(m2)).partitions, [2, 3]);

    const subjects = Array.from({ length: 40 }, (_, i) => `${stream}.k${i}`);
    for (const s of subjects) await env.js.publish(s, s);
    const total = (): number => m1.json<Record>().length + m2.json<Record>().length;
    await waitFor(() => total() >= subjects.length, 60_000, "every message to be consumed");
    const expected = (subject: string): number => partitionOf(subject, 4, { filter: `${stream}.*`, wildcards: [1] });
    checkRecords(m1.json<Record>(), "m1", [0, 1], expected);
    checkRecords(m2.json<Record>(), "m2", [2, 3], expected);
    const seen = [...m1.json<Record>(), ...m2.json<Record>()].map((r) => r.subject).sort();
    assert.deepEqual(seen, [...subjects].sort(), "each message exactly once");
    await stopAll(m1, m2);
  });

  test("cli consume - elastic members receive exactly their partitions (NDJSON)", async () => {
    const stream = uniqueName("E");
    await addSourceStream(env.jsm, stream);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "elastic", "create", stream, group, "4", "--filter", `${stream}.*`, "--wildcards", "1"])).code, 0);
    assert.equal((await runCg(["-s", url, "elastic", "add", stream, group, "m1", "m2"])).code, 0);
    const m1 = consume("elastic", stream, group, "m1", ["--sleep", "0"]);
    const m2 = consume("elastic", stream, group, "m2", ["--sleep", "0"]);
    assert.deepEqual((await started(m1)).partitions, [0, 1]);
    assert.deepEqual((await started(m2)).partitions, [2, 3]);

    const subjects = Array.from({ length: 40 }, (_, i) => `${stream}.k${i}`);
    for (const s of subjects) await env.js.publish(s, s);
    const total = (): number => m1.json<Record>().length + m2.json<Record>().length;
    await waitFor(() => total() >= subjects.length, 60_000, "every message to be consumed");
    const expected = (subject: string): number => partitionOf(subject, 4, { filter: `${stream}.*`, wildcards: [1] });
    checkRecords(m1.json<Record>(), "m1", [0, 1], expected);
    checkRecords(m2.json<Record>(), "m2", [2, 3], expected);
    const seen = [...m1.json<Record>(), ...m2.json<Record>()].map((r) => r.subject).sort();
    assert.deepEqual(seen, [...subjects].sort(), "each message exactly once");
    await stopAll(m1, m2);
  });

  test("cli consume - human output: one line per message, status events on stderr", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "2", "m1"])).code, 0);
    const p = new CgProcess(["-s", url, "static", "join", stream, group, "m1", "--sleep", "5ms"]);
    await p.waitForText(`[m1] consuming from static group ${group} on stream ${stream}, partitions [0 1], processing time 5ms (Ctrl-C to stop)`, 30_000, "stderr");
    for (let i = 0; i < 3; i++) await env.js.publish(`${stream}.k${i}`, "x");
    await p.waitFor((out) => out.split("\n").filter((l) => l.includes("pinnedID=")).length === 3, 30_000, "three message lines");
    const lines = p.stdout.trim().split("\n");
    assert.equal(lines.length, 3);
    lines.forEach((line, i) => assert.match(line, new RegExp(`^\\d\\d:\\d\\d:\\d\\d\\.\\d{3} \\[m1\\] partition=[01] subject=${stream}\\.k${i} seq=${i + 1} pinnedID=\\S+$`)));
    assert.match(p.stderr, /\[m1\] pinned \(pin id \S+\): this instance is the active one/);
    p.signal("SIGINT");
    const r = await p.exited(30_000);
    assert.equal(r.code, 130);
    assert.match(r.stderr, /SIGINT received: finishing the message in flight/);
    assert.match(r.stderr, /\[m1\] stopped\n$/);
  });

  test("cli consume - SIGINT finishes the message in flight, exits 130 and unpins so the standby takes over", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "2", "m1"])).code, 0);
    const consumer = staticConsumerName(group, "m1");

    const a = consume("static", stream, group, "m1", ["--sleep", "1500ms"]);
    await started(a);
    const first = await env.js.publish(`${stream}.first`, "1");
    await a.waitForText(/"event":"pinned"/, 30_000, "stderr"); // the message is being handled now
    const b = consume("static", stream, group, "m1", ["--sleep", "0"]);
    await started(b);

    a.signal("SIGINT");
    const ra = await a.exited(30_000);
    assert.equal(ra.code, 130, ra.stderr);
    const handled = a.json<Record>();
    assert.equal(handled.length, 1, "the message in flight was finished");
    const pinA = handled[0]?.pin_id;
    assert.equal(handled[0]?.stream_seq, first.seq);
    assert.ok(!a.json("stderr").some((e) => e["event"] === "ack_failed"), "its ack was confirmed");
    assert.ok(a.json("stderr").some((e) => e["event"] === "stopped"));

    // A unpinned on the way out: its pin id is gone at once, not after the pin's TTL
    const info = (await env.jsm.consumers.info(stream, consumer)) as unknown as { num_ack_pending: number; priority_groups?: { pinned_client_id?: string }[] };
    assert.notEqual(info.priority_groups?.[0]?.pinned_client_id, pinA);
    assert.equal(info.num_ack_pending, 0);

    for (let i = 0; i < 3; i++) await env.js.publish(`${stream}.after${i}`, "x");
    await b.waitFor(() => b.json<Record>().length >= 3, 30_000, "the standby to take over");
    const taken = b.json<Record>();
    assert.deepEqual(
      taken.map((r) => r.subject),
      [0, 1, 2].map((i) => `${stream}.after${i}`),
      "B gets the new messages, and never the one A acked",
    );
    assert.ok(taken.every((r) => r.pin_id !== pinA));

    b.signal("SIGTERM");
    const rb = await b.exited(30_000);
    assert.equal(rb.code, 143, "SIGTERM exits 128 + 15");
  });

  test("cli consume - an elastic member outside the membership idles, then joins when added", async () => {
    const stream = uniqueName("E");
    await addSourceStream(env.jsm, stream);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "elastic", "create", stream, group, "2"])).code, 0);
    const p = consume("elastic", stream, group, "late");
    assert.deepEqual((await started(p)).partitions, []);
    assert.equal((await runCg(["-s", url, "elastic", "add", stream, group, "late"])).code, 0);
    await p.waitForText(/"event":"partitions_changed"/, 30_000, "stderr");
    const changed = p.json<{ event: string; partitions: number[]; assigned: number[] }>("stderr").find((e) => e.event === "partitions_changed");
    assert.deepEqual(changed?.partitions, [0, 1]);
    assert.deepEqual(changed?.assigned, [0, 1]);
    await env.js.publish(`${stream}.a`, "x");
    await p.waitFor(() => p.json<Record>().length === 1, 30_000, "a message after joining");
    await stopAll(p);
  });

  test("cli consume - deleting the group stops the member with exit 0", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "2", "m1"])).code, 0);
    const p = new CgProcess(["-s", url, "static", "consume", stream, group, "m1"]);
    await p.waitForText("consuming from static group", 30_000, "stderr");
    assert.equal((await runCg(["-s", url, "static", "rm", stream, group, "-f"])).code, 0);
    const r = await p.exited(30_000);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, new RegExp(`the static consumer group ${group} on stream ${stream} was deleted: member m1 stopped`));
  });

  test("cli consume - the record is printed before the ack: kill -9 once the server has the ack, the acked message was printed", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "2", "m1"])).code, 0);
    // The ack reaches the server; its confirmation never reaches cg. Printing after
    // the confirmed ack (the old order) prints nothing in this window.
    const proxy = await startAckHoldProxy(env.server.port);
    try {
      const acks: string[] = [];
      const sub = env.nc.subscribe(`$JS.ACK.${stream}.>`, { callback: (_err, msg) => void acks.push(msg.subject) });
      await env.nc.flush();
      const p = new CgProcess(["-s", proxy.url, "--json", "static", "consume", stream, group, "m1", "--sleep", "0"]);
      await started(p);
      const { seq } = await env.js.publish(`${stream}.k1`, "x");
      await waitFor(() => acks.length > 0, 30_000, "the server receives the ack");
      p.signal("SIGKILL");
      const exit = await p.exited(30_000);
      sub.unsubscribe();
      assert.equal(exit.signal, "SIGKILL");
      assert.ok(proxy.holding(), "the ack's confirmation was held back");
      const info = await env.jsm.consumers.info(stream, staticConsumerName(group, "m1"));
      assert.equal(info.ack_floor.stream_seq, seq, "the server has the ack");
      assert.deepEqual(p.json<Record>().map((r) => r.stream_seq), [seq], "every acked message was printed");
    } finally {
      await proxy.close();
    }
  });
});
