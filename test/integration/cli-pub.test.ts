/**
 * `cg pub`: keyed traffic with JetStream acks, the --json summary, payloads,
 * --stream expectations and errors.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { CgProcess, killAllCg, runCg, runCgJson } from "../helpers/cli-run.js";

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

interface PubDoc {
  subject_template: string;
  keys: number;
  published: number;
  requested: number;
  stream: string | null;
  first_seq: number | null;
  last_seq: number | null;
  elapsed_ms: number;
  msgs_per_sec: number;
  interrupted: boolean;
}

describe("cli pub", () => {
  test("cli pub - --json summary, and every key gets its own ordered sequence", async () => {
    const stream = uniqueName("P");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    const template = `${stream}.{key}.n{seq}`;
    const { doc } = await runCgJson<PubDoc>(["-s", url, "pub", template, "--keys", "7", "--count", "500", "--window", "64", "--stream", stream]);
    assert.equal(doc.published, 500);
    assert.equal(doc.requested, 500);
    assert.equal(doc.keys, 7);
    assert.equal(doc.subject_template, template);
    assert.equal(doc.stream, stream);
    assert.equal(doc.first_seq, 1);
    assert.equal(doc.last_seq, 500);
    assert.equal(doc.interrupted, false);
    assert.ok(doc.elapsed_ms >= 0 && doc.msgs_per_sec > 0);
    assert.equal((await env.jsm.streams.info(stream)).state.messages, 500);

    const s = await env.jsm.streams.get(stream);
    const lastSeqOfKey = new Map<string, number>();
    for (let seq = 1; seq <= 500; seq++) {
      const m = await s.getMessage({ seq });
      assert.ok(m);
      const payload = m.json<{ key: string; seq: number; n: number }>();
      assert.equal(m.subject, `${stream}.${payload.key}.n${payload.n}`);
      assert.equal(payload.key, String((payload.n - 1) % 7));
      assert.equal(payload.seq, (lastSeqOfKey.get(payload.key) ?? 0) + 1, `key ${payload.key} in order`);
      lastSeqOfKey.set(payload.key, payload.seq);
    }
    assert.equal(lastSeqOfKey.size, 7);
  });

  test("cli pub - human summary and --rate", async () => {
    const stream = uniqueName("P");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    const r = await runCg(["-s", url, "pub", `${stream}.{key}`, "--keys", "3", "--count", "30", "--rate", "100"]);
    assert.equal(r.code, 0, r.stderr);
    const m = new RegExp(`^published 30 messages on 3 keys with subject ${stream}\\.\\{key\\} to stream ${stream} \\(seq 1\\.\\.30\\) in ([\\d.]+)(ms|s) \\(\\d+ msgs/s\\)\\n$`).exec(r.stdout);
    assert.ok(m, r.stdout);
    const ms = Number(m[1]) * (m[2] === "s" ? 1000 : 1);
    assert.ok(ms >= 250, `30 messages at 100/s take about 290 ms, took ${ms} ms`);
    assert.equal(r.stderr, "", "no progress bar when stderr is not a TTY");
  });

  test("cli pub - no stream for the subject, or another stream than --stream, exits 1", async () => {
    const none = await runCg(["-s", url, "pub", `${uniqueName("nostream")}.{key}`, "--count", "5"]);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /no stream stores .*: create a stream whose subjects match it first/);

    const stream = uniqueName("P");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    const wrong = await runCg(["-s", url, "--json", "pub", `${stream}.{key}`, "--count", "5", "--stream", "other"]);
    assert.equal(wrong.code, 1);
    assert.equal(wrong.stdout, "");
    assert.equal((JSON.parse(wrong.stderr) as { error: { code: string } }).error.code, "PUBLISH_FAILED");
  });

  test("cli pub - Ctrl-C stops publishing, prints the partial summary and exits 130", async () => {
    const stream = uniqueName("P");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    const p = new CgProcess(["-s", url, "--json", "pub", `${stream}.{key}`, "--count", "100000", "--rate", "200"]);
    await waitFor(async () => (await env.jsm.streams.info(stream)).state.messages >= 5, 30_000, "some messages to be published");
    p.signal("SIGINT");
    const r = await p.exited(30_000);
    assert.equal(r.code, 130, r.stderr);
    const doc = JSON.parse(r.stdout) as PubDoc;
    assert.equal(doc.interrupted, true);
    assert.ok(doc.published >= 5 && doc.published < 100000);
    assert.equal((await env.jsm.streams.info(stream)).state.messages, doc.published, "every publish sent was acked before exiting");
  });
});
