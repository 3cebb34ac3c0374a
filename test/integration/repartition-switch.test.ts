/**
 * Issue 18, the source switches under the second review's attacks: a kill -9 of the
 * process running the repartition between a switch's stream update and its clean-up
 * (the next run deletes the old copies and resumes the paused consumers), and a
 * member joining while a switch waits for its anchor (its new consumer is paused too).
 * Either way: nothing lost, nothing repeated, per-key order of first handling kept.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { addMembers, repartition, REPARTITION_ATTEMPTS, workQueueStreamName, type ConsumerGroupMember, type RepartitionRetry } from "../../src/index.js";
import { checkDelivery } from "../../src/cli/demo/delivery-check.js";
import { sleep } from "../helpers/load-harness.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { createKeyedElasticGroup, findOrderBreaks, recordingMember, type HandlerSpan } from "../helpers/repartition-run.js";

/**
 * Keyed messages over 20 keys (`{ key, seq }`, seq counting per key), and whether every
 * one published so far was handled.
 *
 * @param pauseMs - the wait after each publish
 */
function keyedTraffic(env: TestEnv, stream: string, spans: HandlerSpan[], pauseMs: number): { published: Map<string, number>; publish: (count: number) => Promise<void>; handledAll: () => boolean } {
  const published = new Map<string, number>();
  return {
    published,
    publish: async (count) => {
      for (let i = 0; i < count; i++) {
        const key = `k${i % 20}`;
        const seq = (published.get(key) ?? 0) + 1;
        published.set(key, seq);
        await env.js.publish(`${stream}.${key}`, JSON.stringify({ key, seq }));
        if (pauseMs > 0) await sleep(pauseMs);
      }
    },
    handledAll: () => new Set(spans.map((x) => `${x.key}/${x.seq}`)).size === [...published.values()].reduce((a, b) => a + b, 0),
  };
}

const CRASH_CHILD = fileURLToPath(new URL("../helpers/repartition-crash-child.js", import.meta.url));

describe("repartition - interrupted and joined switches (issue 18, second review)", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  /** A key-mode member recording its handler runs (1 ms each). */
  function member(stream: string, name: string, spans: HandlerSpan[]): Promise<ConsumerGroupMember> {
    return recordingMember(env.js, stream, name, spans, 1);
  }

  /** Publishes keyed messages (per-key order kept) until stopped. */
  function publisher(stream: string, pad: string): { published: Map<string, number>; stop: () => Promise<void> } {
    const published = new Map<string, number>();
    let running = true;
    const loop = (async () => {
      while (running) {
        await Promise.all(
          Array.from({ length: 50 }, (_, i) => {
            const key = `k${i}`;
            const seq = (published.get(key) ?? 0) + 1;
            published.set(key, seq);
            return env.js.publish(`${stream}.${key}`, JSON.stringify({ key, seq, pad }), { timeout: 10_000 });
          }),
        );
        await sleep(10); // about 4,000 messages/s

      }
    })();
    return {
      published,
      stop: async () => {
        running = false;
        await loop;
      },
    };
  }

  function assertExactlyOnce(published: Map<string, number>, spans: HandlerSpan[], what: string): void {
    const report = checkDelivery(
      published,
      spans.map((s) => ({ key: s.key, seq: s.seq, at: s.start })),
    );
    assert.deepEqual(
      { lost: report.lost.length, duplicates: report.duplicates, outOfOrder: report.outOfOrder.length, orderBreaks: findOrderBreaks(spans).length },
      { lost: 0, duplicates: 0, outOfOrder: 0, orderBreaks: 0 },
      what,
    );
  }

  for (const [payload, which, rerunAfterMs] of [
    ["pcg_switch_pause", "the cut's pause mark", 0],
    ["pcg_repartition", "the cut's switch", 0],
    ["finishing", "the finish's switch", 0],
    // The consumers' pause (30 s) runs out before the next run: members get the old source's copies and must drop them.
    ["pcg_repartition", "the cut's switch", 32_000],
    ["finishing", "the finish's switch", 32_000],
  ] as const) {
    test(`switch - a kill -9 right after ${which} (a stream update), before its clean-up, the next run ${rerunAfterMs ? `${rerunAfterMs / 1000} s later, after the pause ran out` : "at once"}: no old copy handled, the mark removed, nothing left paused`, async (t) => {
      const stream = uniqueName("rsw");
      await createKeyedElasticGroup(env, stream, "g", 4, ["m1", "m2"]);
      const spans: HandlerSpan[] = [];
      const members = [await member(stream, "m1", spans), await member(stream, "m2", spans)];
      const load = publisher(stream, "x".repeat(2000));
      try {
        await sleep(500);
        // The update goes out 500 ms late: the old source stores copies after the anchor meanwhile.
        const child = spawn(process.execPath, [CRASH_CHILD, env.server.url, stream, "g", "8", "STREAM.UPDATE", payload, "500"], { stdio: ["ignore", "pipe", "inherit"] });
        let out = "";
        child.stdout.on("data", (d: Buffer) => (out += d.toString()));
        const exit = await new Promise<NodeJS.Signals | null>((resolve) => child.on("exit", (_code, signal) => resolve(signal)));
        assert.equal(exit, "SIGKILL", `the child was killed where asked: ${out}`);
        const wq = workQueueStreamName(stream, "g");
        const paused = [];
        for await (const c of env.jsm.consumers.list(wq)) if ((c as { paused?: boolean }).paused) paused.push(c.name);
        t.diagnostic(`${out.trim()}; consumers left paused: ${paused.join(",") || "none"}`);
        if (rerunAfterMs > 0) {
          // The copies are stored; a quiet wait until the consumers' pause runs out and members get them.
          await load.stop();
          await sleep(rerunAfterMs);
        }
        // The next run deals with the interrupted switch before its first report: stopped right there, it leaves nothing paused.
        const stop = new AbortController();
        await assert.rejects(repartition(env.js, stream, "g", 8, { pollMs: 50, signal: stop.signal, onProgress: () => stop.abort() }), (err: Error & { code?: string }) => err.code === "STOPPED");
        const stillPaused: string[] = [];
        for await (const c of env.jsm.consumers.list(wq)) if ((c as { paused?: boolean }).paused) stillPaused.push(c.name);
        assert.deepEqual(stillPaused, [], "the next run resumed the consumers the killed one paused");
        assert.equal((await env.jsm.streams.info(wq)).config.metadata?.["pcg_switch_pause"], undefined, "the next run removed the pause mark");
        const result = await repartition(env.js, stream, "g", 8, { pollMs: 50 });
        assert.equal(result.resumed, true);
        for await (const c of env.jsm.consumers.list(wq)) assert.ok(!(c as { paused?: boolean }).paused, `${c.name} is not left paused`);
      } finally {
        await load.stop();
      }
      const total = [...load.published.values()].reduce((a, b) => a + b, 0);
      await waitFor(() => new Set(spans.filter((s) => s.end !== undefined).map((s) => `${s.key}/${s.seq}`)).size >= total, 60_000, "every message handled");
      await Promise.allSettled(members.map((m) => m.stop()));
      t.diagnostic(`${total} published, ${spans.length} handler runs`);
      assertExactlyOnce(load.published, spans, `a kill after ${which}'s update`);
    });
  }

  test("switch - a member that joins while the cut waits for its anchor is paused too: nothing repeated", async (t) => {
    const stream = uniqueName("rsj");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const spans: HandlerSpan[] = [];
    const members = [await member(stream, "m1", spans)];
    const published = new Map<string, number>();
    const publishOne = async (key: string): Promise<void> => {
      const seq = (published.get(key) ?? 0) + 1;
      published.set(key, seq);
      await env.js.publish(`${stream}.${key}`, JSON.stringify({ key, seq }));
    };
    for (let i = 0; i < 40; i++) await publishOne(`k${i % 20}`);
    const wq = workQueueStreamName(stream, "g");
    await waitFor(async () => (await env.jsm.streams.info(wq)).state.messages === 0, 10_000, "an idle, empty work queue");
    const running = repartition(env.js, stream, "g", 8, { pollMs: 50 });
    await sleep(300); // inside the switch's wait for an anchor (up to 2 s while nothing is sourced)
    await addMembers(env.js, stream, "g", ["m2"]);
    members.push(await member(stream, "m2", spans));
    for (let i = 0; i < 100; i++) {
      await publishOne(`k${i % 20}`);
      await sleep(20);
    }
    await running;
    const total = [...published.values()].reduce((a, b) => a + b, 0);
    await waitFor(() => new Set(spans.filter((s) => s.end !== undefined).map((s) => `${s.key}/${s.seq}`)).size >= total, 30_000, "every message handled");
    await Promise.allSettled(members.map((m) => m.stop()));
    t.diagnostic(`${total} published, ${spans.length} handler runs`);
    assertExactlyOnce(published, spans, "a member joining during the switch");
  });

  test("switch - a consumer made while a switch holds the consumers paused pauses itself before anything pulls from it; an expired mark is ignored", async () => {
    const stream = uniqueName("rsm");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1", "m2"]);
    const wq = workQueueStreamName(stream, "g");
    const mark = async (value: string | undefined): Promise<void> => {
      const info = await env.jsm.streams.info(wq);
      const metadata = { ...(info.config.metadata ?? {}) };
      if (value === undefined) delete metadata["pcg_switch_pause"];
      else metadata["pcg_switch_pause"] = value;
      await env.jsm.streams.update(wq, { ...info.config, metadata });
    };
    const pausedNow = async (name: string): Promise<boolean | undefined> => {
      try {
        return ((await env.jsm.consumers.info(wq, name)) as { paused?: boolean }).paused ?? false;
      } catch {
        return undefined;
      }
    };
    const spans: HandlerSpan[] = [];
    const members: ConsumerGroupMember[] = [];
    try {
      await mark(new Date(Date.now() - 1000).toISOString());
      members.push(await member(stream, "m1", spans));
      assert.equal(await waitFor(() => pausedNow("m1").then((p) => (p === undefined ? undefined : String(p))), 10_000, "m1's consumer"), "false", "an expired mark holds nothing");
      await mark(new Date(Date.now() + 20_000).toISOString());
      members.push(await member(stream, "m2", spans));
      await waitFor(() => pausedNow("m2"), 10_000, "m2's consumer, paused");
      const published = new Map<string, number>();
      for (let i = 0; i < 40; i++) {
        const key = `k${i % 20}`;
        const seq = (published.get(key) ?? 0) + 1;
        published.set(key, seq);
        await env.js.publish(`${stream}.${key}`, JSON.stringify({ key, seq }));
      }
      // m1 handles its partitions; m2 nothing while the mark holds it.
      await waitFor(() => spans.length > 0 && (env.jsm.streams.info(wq).then((i) => i.state.messages === 40 - spans.length)), 10_000, "m1 done with its share");
      await sleep(500);
      assert.ok(spans.length > 0 && spans.length < 40, `m1 handled its share (${spans.length} of 40)`);
      assert.equal(spans.filter((s) => s.member === "m2").length, 0, "m2 pulled nothing while paused");
      // The switch's end: the mark goes, every paused consumer resumes.
      await mark(undefined);
      await env.jsm.consumers.resume(wq, "m2");
      await waitFor(() => new Set(spans.map((s) => `${s.key}/${s.seq}`)).size === 40, 10_000, "every message handled once m2 resumes");
      assertExactlyOnce(published, spans, "a member joining while a switch's mark holds consumers paused");
    } finally {
      await Promise.allSettled(members.map((m) => m.stop()));
    }
  });

  test("switch - the server killed (kill -9) and restarted mid-repartition, with the work queue empty: the switch's start position is gone once its source stored past it, so nothing is sourced again", async (t) => {
    const own = await startEnv();
    const members: ConsumerGroupMember[] = [];
    try {
      const stream = uniqueName("rsk");
      await createKeyedElasticGroup(own, stream, "g", 4, ["m1", "m2"]);
      const wq = workQueueStreamName(stream, "g");
      const spans: HandlerSpan[] = [];
      members.push(await recordingMember(own.js, stream, "m1", spans), await recordingMember(own.js, stream, "m2", spans));
      const { published, publish, handledAll } = keyedTraffic(own, stream, spans, 2);
      await publish(100);
      // A consumer that is no member's holds the repartition in "moving" (it waits for every consumer to follow).
      await own.jsm.consumers.add(wq, { durable_name: "hold", ack_policy: "explicit", filter_subject: "hold.>" });
      const stop = new AbortController();
      const running = repartition(own.js, stream, "g", 8, { pollMs: 50, signal: stop.signal, force: true }).catch((err: unknown) => err);
      // Published once the cut is made (the "hold" consumer looks like Go's: the repartition waits its full presence ask first), so the source stores past the switch's start position.
      await waitFor(async () => (await own.jsm.streams.info(wq)).config.metadata?.["pcg_repartition"] !== undefined, 20_000, "the cut made");
      await publish(200);
      await waitFor(async () => {
        const info = await own.jsm.streams.info(wq);
        return handledAll() && info.state.messages === 0 && info.config.metadata?.["pcg_repartition"] !== undefined && info.config.sources?.[0]?.opt_start_seq === undefined;
      }, 20_000, "everything handled in the transition layout, and the start position dropped");
      stop.abort();
      assert.equal(((await running) as { code?: string }).code, "STOPPED");
      const before = (await own.jsm.streams.info(wq)).state.last_seq;
      const handledBefore = spans.length;
      await own.server.kill();
      await own.server.restart();
      await waitFor(async () => (await own.jsm.streams.info(wq).catch(() => undefined)) !== undefined, 20_000, "the server back");
      await sleep(3000);
      const after = (await own.jsm.streams.info(wq)).state.last_seq;
      t.diagnostic(`work queue last sequence ${before} before the crash, ${after} after; ${spans.length - handledBefore} handled since`);
      assert.equal(after, before, "the restarted source sourced nothing again");
      await own.jsm.consumers.delete(wq, "hold");
      await repartition(own.js, stream, "g", 8, { pollMs: 50 });
      await publish(40);
      await waitFor(handledAll, 20_000, "every message handled");
      await sleep(500);
      assertExactlyOnce(published, spans, "a server crash mid-repartition");
    } finally {
      await Promise.allSettled(members.map((m) => m.stop()));
      await own.close();
    }
  });

  test("switch - the server killed and restarted while a repartition runs, not aborted: the call tries again after the transient errors (onRetry says so) and finishes by itself", async (t) => {
    const own = await startEnv();
    const members: ConsumerGroupMember[] = [];
    try {
      const stream = uniqueName("rsr");
      await createKeyedElasticGroup(own, stream, "g", 4, ["m1", "m2"]);
      const wq = workQueueStreamName(stream, "g");
      const spans: HandlerSpan[] = [];
      members.push(await recordingMember(own.js, stream, "m1", spans), await recordingMember(own.js, stream, "m2", spans));
      const { published, publish, handledAll } = keyedTraffic(own, stream, spans, 0);
      await publish(100);
      // A consumer that is no member's (marked as this library's) holds the repartition in "moving" while the server goes away.
      await own.jsm.consumers.add(wq, { durable_name: "hold", ack_policy: "explicit", filter_subject: "hold.>", metadata: { pcg_concurrency: "key" } });
      const retries: RepartitionRetry[] = [];
      const running = repartition(own.js, stream, "g", 8, { pollMs: 50, onRetry: (r) => retries.push(r) }).then(
        (r) => r,
        (err: unknown) => err as Error,
      );
      await waitFor(async () => (await own.jsm.streams.info(wq)).config.metadata?.["pcg_repartition"] !== undefined, 20_000, "the repartition under way");
      await own.server.kill();
      await sleep(1500);
      await own.server.restart();
      await waitFor(async () => (await own.jsm.streams.info(wq).catch(() => undefined)) !== undefined, 30_000, "the server back");
      await waitFor(() => retries.length > 0, 30_000, "a retry reported");
      await waitFor(async () => (await own.jsm.consumers.delete(wq, "hold").catch(() => false)) === true, 20_000, "the holding consumer deleted");
      const result = await running;
      assert.ok(!(result instanceof Error), `the repartition finished by itself: ${result instanceof Error ? result.message : ""}`);
      t.diagnostic(`retries: ${JSON.stringify(retries.map((r) => [r.attempt, r.delayMs, r.error.message.slice(0, 120)]))}`);
      assert.deepEqual(retries.map((r) => r.maxAttempts).filter((n) => n !== REPARTITION_ATTEMPTS), []);
      assert.ok(retries.every((r) => r.attempt >= 2 && r.attempt <= REPARTITION_ATTEMPTS), "attempts within the bound");
      const info = await own.jsm.streams.info(wq);
      assert.equal(info.config.metadata?.["pcg_repartition"], undefined, "the record is cleared");
      await publish(40);
      await waitFor(handledAll, 30_000, "every message handled");
      await sleep(500);
      assertExactlyOnce(published, spans, "a server restart under a running repartition");
    } finally {
      await Promise.allSettled(members.map((m) => m.stop()));
      await own.close();
    }
  });
});
