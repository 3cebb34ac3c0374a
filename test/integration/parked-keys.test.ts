/**
 * Issue 25 item 3: without a dead-letter subject a blocked key is parked. Its later
 * messages hold no buffer slot (other keys keep flowing), its head is retried less and
 * less often, it is listed (in-process and through `$PCG.presence`), and it can be
 * released: tried again at once, or dead-lettered to a subject given then.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createElastic, addMembers, describeGroup, elasticConsume, listParkedKeys, releaseParkedKey, workQueueStreamName, type ConsumerGroupMember, type MemberStatus } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { nanos } from "../helpers/load-scenario.js";
import { sleep } from "../helpers/load-harness.js";
import { killAllCg, runCg, runCgJson } from "../helpers/cli-run.js";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

describe("parked keys (issue 25 item 3)", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await killAllCg();
    await env.close();
  });

  /** One member in key mode, a 32-message buffer; key "stuck" fails while `broken.on`. */
  async function blockedBehindFullBuffer(name: string): Promise<{
    stream: string;
    member: ConsumerGroupMember;
    handled: Map<string, number[]>;
    broken: { on: boolean };
    events: MemberStatus[];
    stuckHeadSeq: number;
  }> {
    const stream = uniqueName(name);
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], storage: "memory" });
    await createElastic(env.js, { stream, group: "g", maxMembers: 4, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, stream, "g", ["m1"]);
    const handled = new Map<string, number[]>();
    const broken = { on: true };
    const events: MemberStatus[] = [];
    // The blocked key first, with 99 more behind it (more than the buffer holds), then 20 messages of other keys.
    let stuckHeadSeq = 0;
    for (let i = 0; i < 100; i++) {
      const ack = await env.js.publish(`${stream}.stuck`, JSON.stringify({ key: "stuck", n: i }));
      if (i === 0) stuckHeadSeq = ack.seq;
    }
    for (let i = 0; i < 20; i++) await env.js.publish(`${stream}.k${i}`, JSON.stringify({ key: `k${i}`, n: 0 }));
    const member = await elasticConsume(env.js, {
      stream,
      group: "g",
      member: "m1",
      concurrency: "key",
      maxInFlight: 4,
      maxBuffered: 32,
      retry: { maxDeliver: 2, backoffMs: 100 },
      consumerConfig: { ack_wait: nanos(2000) },
      handler: (msg) => {
        const { key, n } = msg.json<{ key: string; n: number }>();
        if (key === "stuck" && n === 0 && broken.on) throw new Error("downstream refuses it");
        const seen = handled.get(key) ?? [];
        seen.push(n);
        handled.set(key, seen);
      },
    });
    void (async () => {
      for await (const e of member.status()) events.push(e);
    })();
    return { stream, member, handled, broken, events, stuckHeadSeq };
  }

  test("a blocked key with more messages behind it than the buffer holds: the other keys are all handled, the key is listed with what it holds", async () => {
    const s = await blockedBehindFullBuffer("park");
    try {
      const others = (): number => [...s.handled.keys()].filter((k) => k !== "stuck").length;
      await waitFor(() => others() === 20, 20_000, `the 20 messages of other keys handled (${others()} of 20)`);
      assert.equal(s.handled.get("stuck"), undefined, "nothing of the blocked key was handled");
      const parked = await waitFor(() => s.member.parkedKeys().find((p) => p.key === "stuck" && p.parkedMessages === 99), 20_000, "the key parked with the 99 behind it");
      assert.equal(parked.subject, `${s.stream}.stuck`);
      assert.equal(parked.seq, s.stuckHeadSeq, "the blocked message is the key's first (work queue seq = origin seq here)");
      assert.ok(parked.attempts >= 2, `attempts ${parked.attempts}`);
      assert.match(parked.error, /downstream refuses it/);
      const blocked = s.events.filter((e) => e.type === "blocked");
      assert.equal(blocked.length, 1, "blocked is reported once");
      // Asked from another connection, through the presence subject.
      const other = await env.connect();
      try {
        const listed = await listParkedKeys(other.nc, s.stream, "g");
        assert.equal(listed.length, 1);
        assert.equal(listed[0]?.member, "m1");
        assert.equal(listed[0]?.key, "stuck");
        assert.equal(listed[0]?.seq, s.stuckHeadSeq);
        assert.equal(listed[0]?.parkedMessages, 99);
        // describe asks the instances too: the key and a finding that says what to do.
        const d = await describeGroup(other.js, "elastic", s.stream, "g", { askInstancesMs: 500 });
        assert.deepEqual(d.parkedKeys?.map((p) => [p.member, p.key, p.seq]), [["m1", "stuck", s.stuckHeadSeq]]);
        const finding = d.findings.find((f) => f.code === "KEY_BLOCKED");
        assert.equal(finding?.severity, "error");
        assert.match(finding?.message ?? "", new RegExp(`key "stuck" of member m1 is blocked on seq ${s.stuckHeadSeq} .*99 messages wait behind it: fix what fails and run "cg elastic park release ${s.stream} g ${s.stuckHeadSeq}"`));
        assert.equal((await describeGroup(other.js, "elastic", s.stream, "g")).parkedKeys, undefined, "not asked by default");
      } finally {
        await other.nc.close();
      }
    } finally {
      await s.member.stop();
    }
  });

  test("release: the fixed key's messages are all handled, in order, and the parked count is gone", async () => {
    const s = await blockedBehindFullBuffer("rel");
    try {
      await waitFor(() => s.member.parkedKeys().find((p) => p.parkedMessages === 99), 20_000, "the key parked");
      // Its retries back off: by now the wait between them is longer than the 100 ms backoff.
      s.broken.on = false;
      const other = await env.connect();
      try {
        const outcome = await releaseParkedKey(other.nc, s.stream, "g", s.stuckHeadSeq);
        assert.deepEqual(outcome, { member: "m1", seq: s.stuckHeadSeq, action: "retry", released: true, result: "retrying" });
      } finally {
        await other.nc.close();
      }
      await waitFor(() => s.handled.get("stuck")?.length === 100, 10_000, `the 100 messages of the key handled (${s.handled.get("stuck")?.length ?? 0})`);
      assert.deepEqual(s.handled.get("stuck"), Array.from({ length: 100 }, (_, i) => i), "in order");
      assert.deepEqual(s.member.parkedKeys(), []);
      await waitFor(async () => (await env.jsm.streams.info(workQueueStreamName(s.stream, "g"))).state.messages === 0, 10_000, "the work queue empty");
      assert.ok(s.events.some((e) => e.type === "unblocked"), "unblocked is reported");
    } finally {
      await s.member.stop();
    }
  });

  test("release with a dead-letter subject: the blocked message goes there, the rest of its key is handled, in order", async () => {
    const s = await blockedBehindFullBuffer("reldl");
    const dlq = uniqueName("DLQ");
    await env.jsm.streams.add({ name: dlq, subjects: [`${dlq}.letters`], storage: "memory" });
    try {
      await waitFor(() => s.member.parkedKeys().find((p) => p.parkedMessages === 99), 20_000, "the key parked");
      const outcome = await s.member.releaseParkedKey(s.stuckHeadSeq, { deadLetterSubject: `${dlq}.letters` });
      assert.deepEqual(outcome, { member: "m1", seq: s.stuckHeadSeq, action: "dead_letter", released: true, result: "dead_lettered" });
      await waitFor(() => s.handled.get("stuck")?.length === 99, 10_000, "the 99 behind it handled");
      assert.deepEqual(s.handled.get("stuck"), Array.from({ length: 99 }, (_, i) => i + 1), "in order");
      const letter = await env.jsm.streams.getMessage(dlq, { last_by_subj: `${dlq}.letters` });
      assert.deepEqual(letter?.json(), { key: "stuck", n: 0 });
      assert.equal(letter?.header.get("Pcg-Key"), "stuck");
      // Releasing what is not parked says so.
      const again = await s.member.releaseParkedKey(s.stuckHeadSeq);
      assert.equal(again.released, false);
    } finally {
      await s.member.stop();
    }
  });

  test("release of a sequence nobody holds: a clear answer, nothing changes", async () => {
    const s = await blockedBehindFullBuffer("relnone");
    try {
      await waitFor(() => s.member.parkedKeys().find((p) => p.parkedMessages === 99), 20_000, "the key parked");
      const other = await env.connect();
      try {
        await assert.rejects(releaseParkedKey(other.nc, s.stream, "g", s.stuckHeadSeq + 5, { waitMs: 500 }), (e: Error & { code?: string }) => {
          assert.equal(e.code, "NOT_PARKED");
          assert.match(e.message, /no running instance .* parks seq/);
          return true;
        });
      } finally {
        await other.nc.close();
      }
      // Bad input: a typed error saying what is wrong; nothing changes.
      await assert.rejects(s.member.releaseParkedKey(0), (e: Error & { code?: string }) => e.code === "INVALID_ARGUMENT" && /seq must be a stream sequence/.test(e.message));
      await assert.rejects(s.member.releaseParkedKey(s.stuckHeadSeq, { deadLetterSubject: "ops.*" }), (e: Error & { code?: string }) => e.code === "INVALID_ARGUMENT" && /literal subject/.test(e.message));
      await assert.rejects(releaseParkedKey(env.nc, s.stream, "g", 1.5), (e: Error & { code?: string }) => e.code === "INVALID_ARGUMENT");
      await assert.rejects(releaseParkedKey(env.nc, s.stream, "g bad", 1), (e: Error & { code?: string }) => e.code === "INVALID_NAME");
      // Through the presence subject, the instance's own check answers.
      await assert.rejects(releaseParkedKey(env.nc, s.stream, "g", s.stuckHeadSeq, { deadLetterSubject: "ops.>" }), (e: Error & { code?: string }) => e.code === "INVALID_ARGUMENT" && /literal subject/.test(e.message));
      // A dead-letter subject no stream stores: the publish's error, and the key stays blocked.
      await assert.rejects(s.member.releaseParkedKey(s.stuckHeadSeq, { deadLetterSubject: "nobody.stores.this" }), (e: Error) => /dead letter/.test(e.message));
      await sleep(300);
      assert.equal(s.member.parkedKeys().length, 1);
      assert.equal(s.member.parkedKeys()[0]?.parkedMessages, 99, "nothing was lost");
    } finally {
      await s.member.stop();
    }
  });

  test("cg elastic park ls / release: the blocked key in a table and as JSON, a clear error for a sequence nobody parks, a release that lets the key go on", async () => {
    const s = await blockedBehindFullBuffer("cgpark");
    const url = env.server.url;
    try {
      await waitFor(() => s.member.parkedKeys().find((p) => p.parkedMessages === 99), 20_000, "the key parked");
      const ls = await runCg(["-s", url, "elastic", "park", "ls", s.stream, "g"]);
      assert.equal(ls.code, 0, ls.stderr);
      const [header, row] = ls.stdout.split("\n");
      assert.match(header ?? "", /^MEMBER\s+KEY\s+PARTITION\s+SEQ\s+ATTEMPTS\s+WAITING\s+SINCE\s+LAST ERROR$/);
      assert.match(row ?? "", new RegExp(`^m1\\s+stuck\\s+\\d\\s+${s.stuckHeadSeq}\\s+\\d+\\s+99\\s+\\S+\\s+downstream refuses it$`));
      assert.match(ls.stdout, new RegExp(`cg elastic park release ${s.stream} g <seq>`));
      const { doc } = await runCgJson<{ parked: { member: string; key: string; seq: number; parkedMessages: number }[] }>(["-s", url, "elastic", "park", "ls", s.stream, "g"]);
      assert.deepEqual(
        doc.parked.map((p) => [p.member, p.key, p.seq, p.parkedMessages]),
        [["m1", "stuck", s.stuckHeadSeq, 99]],
      );
      const described = await runCg(["-s", url, "elastic", "describe", s.stream, "g"]);
      assert.match(described.stdout, new RegExp(`key "stuck" of member m1 is blocked on seq ${s.stuckHeadSeq}`), "cg describe shows the blocked key");
      const wrong = await runCg(["-s", url, "elastic", "park", "release", s.stream, "g", String(s.stuckHeadSeq + 7)]);
      assert.equal(wrong.code, 1);
      assert.match(wrong.stderr, /NOT_PARKED|parks seq/);
      const bad = await runCg(["-s", url, "elastic", "park", "release", s.stream, "g", "x"]);
      assert.equal(bad.code, 2, "a sequence that is not a number is a usage error");
      s.broken.on = false;
      const ok = await runCg(["-s", url, "elastic", "park", "release", s.stream, "g", String(s.stuckHeadSeq)]);
      assert.equal(ok.code, 0, ok.stderr);
      assert.equal(ok.stdout, `seq ${s.stuckHeadSeq} released on member m1: its next attempt runs now (if it fails again, its key blocks again)\n`);
      await waitFor(() => s.handled.get("stuck")?.length === 100, 10_000, "the key's messages handled");
      const empty = await runCg(["-s", url, "elastic", "park", "ls", s.stream, "g"]);
      assert.equal(empty.stdout, `no blocked keys in ${s.stream}.g (among the running instances that answered)\n`);
    } finally {
      await s.member.stop();
    }
  });

  test("a dead-letter release asked over the presence subject while the blocked message's attempt runs longer than the wait: answered pending, then dead-lettered (review F2)", async () => {
    const stream = uniqueName("pend");
    const dlq = uniqueName("DLQ");
    await env.jsm.streams.add({ name: dlq, subjects: [`${dlq}.letters`], storage: "memory" });
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], storage: "memory" });
    await createElastic(env.js, { stream, group: "g", maxMembers: 2, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, stream, "g", ["m1"]);
    const head = await env.js.publish(`${stream}.slow`, JSON.stringify({ key: "slow", n: 0 }));
    const events: MemberStatus[] = [];
    let attemptRuns = false;
    const member = await elasticConsume(env.js, {
      stream,
      group: "g",
      member: "m1",
      concurrency: "key",
      retry: { maxDeliver: 1, backoffMs: 100 },
      consumerConfig: { ack_wait: nanos(5000) },
      handler: async () => {
        attemptRuns = true;
        await sleep(1500);
        attemptRuns = false;
        throw new Error("times out downstream");
      },
    });
    void (async () => {
      for await (const e of member.status()) events.push(e);
    })();
    try {
      await waitFor(() => member.parkedKeys().length === 1, 10_000, "the key to block");
      // Asked while a blocked retry runs: it takes 1.5 s, longer than half the 1 s wait.
      await waitFor(() => attemptRuns, 10_000, "a blocked retry to start");
      const outcome = await releaseParkedKey(env.nc, stream, "g", head.seq, { deadLetterSubject: `${dlq}.letters`, waitMs: 1000 });
      assert.deepEqual(outcome, { member: "m1", seq: head.seq, action: "dead_letter", released: true, result: "pending" });
      assert.equal((await env.jsm.streams.info(dlq)).state.messages, 0, "not yet: the attempt still runs");
      await waitFor(async () => (await env.jsm.streams.info(dlq)).state.messages === 1, 10_000, "the dead letter once the attempt failed");
      await waitFor(() => member.parkedKeys().length === 0, 5000, "the key no longer blocked");
    } finally {
      await member.stop();
    }
  });

  test("a release that reaches a stalled instance only after the requester stopped waiting does nothing: NOT_PARKED holds (review F3)", { timeout: 90_000 }, async () => {
    const stream = uniqueName("stall");
    const dlq = uniqueName("DLQ");
    await env.jsm.streams.add({ name: dlq, subjects: [`${dlq}.letters`], storage: "memory" });
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], storage: "memory" });
    await createElastic(env.js, { stream, group: "g", maxMembers: 2, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, stream, "g", ["m1"]);
    const head = await env.js.publish(`${stream}.stuck`, JSON.stringify({ key: "stuck", n: 0 }));
    const childFile = fileURLToPath(new URL("../helpers/parked-member-child.js", import.meta.url));
    const child = spawn(process.execPath, [childFile, JSON.stringify({ url: env.server.url, stream, group: "g", member: "m1" })], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.on("data", (d: Buffer) => d.toString().includes('"ready"') && resolve());
        child.once("exit", (code) => reject(new Error(`the member process exited (${code})`)));
      });
      await waitFor(async () => (await listParkedKeys(env.nc, stream, "g", { waitMs: 300 })).length === 1, 20_000, "the key parked in the member process");
      child.kill("SIGSTOP");
      await assert.rejects(releaseParkedKey(env.nc, stream, "g", head.seq, { deadLetterSubject: `${dlq}.letters`, waitMs: 1000 }), (e: Error & { code?: string }) => e.code === "NOT_PARKED");
      await sleep(1500);
      child.kill("SIGCONT");
      await sleep(1500);
      assert.equal((await env.jsm.streams.info(dlq)).state.messages, 0, "the stale request was not carried out");
      const still = await listParkedKeys(env.nc, stream, "g", { waitMs: 500 });
      assert.deepEqual(still.map((p) => p.seq), [head.seq], "the key is still parked");
    } finally {
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    }
  });
});
