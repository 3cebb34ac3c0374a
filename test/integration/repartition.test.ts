/**
 * Issue 18: growing a live elastic group's partition count (`repartition`) under
 * load, on a real server: nothing lost, per-key order of first handling kept
 * across the cut (a message of a key never starts while an earlier one of that
 * key is unhandled), and no duplicates from the repartition itself.
 */
import { after, before, describe, test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { elasticConsume, getElasticConsumerGroupConfig, repartition, workQueueStreamName } from "../../src/index.js";
import { checkDelivery } from "../../src/cli/demo/delivery-check.js";
import { sleep } from "../helpers/load-harness.js";
import { deferred, startEnv, uniqueName, waitFor, type Client, type TestEnv } from "../helpers/nats.js";
import { assertClean, createKeyedElasticGroup, dip, growFromFour, publishSteadily, runRepartitionScenario, summary } from "../helpers/repartition-run.js";
import { startTcpProxy } from "../helpers/tcp-proxy.js";

const MESSAGES = Number(process.env["REPARTITION_MESSAGES"] ?? 20_000);
const KEYS = 500;
const RATE = 4_000;
/** Members handle about 3,200 messages/s together (4 × 4 handlers of 5 ms): a backlog builds, so the cut finds old-layout messages to wait for. */
const LOAD = { handlerMs: 5, maxInFlight: 4, concurrency: "key" } as const;

describe("repartition - growing a live elastic group (issue 18)", () => {
  let env: TestEnv;
  let clients: Client[];
  before(async () => {
    env = await startEnv();
    clients = [env, await env.connect(), await env.connect(), await env.connect()];
  });
  after(async () => {
    await env.close();
  });

  test("repartition - 4 members with a hot standby each, 4 -> 12 under 20,000 keyed messages over 500 keys: nothing lost, per-key order kept, no duplicates", async (t) => {
    const members = ["m1", "m2", "m3", "m4"];
    const baseline = await runRepartitionScenario({ clients, stream: uniqueName("rpb"), from: 4, members, standbys: 1, messages: MESSAGES, keys: KEYS, rate: RATE, ...LOAD });
    t.diagnostic(summary("baseline (no repartition)", baseline));
    assertClean(baseline);

    const stream = uniqueName("rp");
    const phases: string[] = [];
    const r = await runRepartitionScenario({
      clients,
      stream,
      from: 4,
      members,
      standbys: 1,
      messages: MESSAGES,
      keys: KEYS,
      rate: RATE,
      ...LOAD,
      repartitionAtMs: (0.3 * MESSAGES * 1000) / RATE,
      repartition: growFromFour(env.js, 12, phases),
    });
    t.diagnostic(summary("repartition 4 -> 12", r));
    t.diagnostic(dip(r, baseline));
    assertClean(r);
    assert.deepEqual(phases, ["moving", "finishing", "done"]);
    assert.ok(r.spans.some((s) => s.transition), "some messages were handled in the transition layout");
    const config = await getElasticConsumerGroupConfig(env.js, stream, "g");
    assert.equal(config.max_members, 12);
    const wq = await env.jsm.streams.info(workQueueStreamName(stream, "g"));
    assert.deepEqual(wq.config.sources?.[0]?.subject_transforms, [{ src: `${stream}.*`, dest: `{{Partition(12,1)}}.${stream}.{{Wildcard(1)}}` }], "Go's layout for 12");
    assert.equal(wq.config.metadata?.["pcg_repartition"], undefined, "the record is gone");
    const partitionsSeen = new Set(r.spans.filter((s) => s.start > 0).map((s) => s.partition));
    assert.ok([...partitionsSeen].some((p) => p >= 4), "the new partitions are consumed");
  });
  test("repartition - serial mode (Go's), 3 members, 4 -> 6 (not a multiple: new partitions wait for two old ones each)", async (t) => {
    const stream = uniqueName("rps");
    const messages = Math.round(MESSAGES / 4);
    const r = await runRepartitionScenario({
      clients,
      stream,
      from: 4,
      members: ["a", "b", "c"],
      messages,
      keys: 200,
      rate: 2_000,
      concurrency: "serial",
      handlerMs: 1,
      repartitionAtMs: (0.3 * messages * 1000) / 2_000,
      repartition: async (s, g, onProgress) => {
        // Serial-mode consumers keep Go's exact config (so Go and TypeScript instances can share a member); the running instances answer presence, so no force is needed.
        const result = await repartition(env.js, s, g, 6, { onProgress });
        assert.deepEqual(result.unverifiedMembers, []);
      },
    });
    t.diagnostic(summary("serial 4 -> 6", r));
    assertClean(r);
    assert.equal((await getElasticConsumerGroupConfig(env.js, stream, "g")).max_members, 6);
  });
  test("repartition - members on a slow link (50 ms each way): the finish never passes a member that made its consumer from an older reading", async (t) => {
    const proxy = await startTcpProxy(env.server.port, 50);
    try {
      const slow = [await env.connect({ servers: proxy.url }), await env.connect({ servers: proxy.url }), await env.connect({ servers: proxy.url })];
      for (let round = 0; round < 2; round++) {
        const messages = Math.round(MESSAGES / 2.5);
        const r = await runRepartitionScenario({
          clients: [env, ...slow],
          stream: uniqueName("rpl"),
          from: 4,
          members: ["m1", "m2", "m3", "m4"],
          messages,
          keys: 120,
          rate: 2_000,
          concurrency: "key",
          handlerMs: 3,
          repartitionAtMs: (0.3 * messages * 1000) / 2_000,
          repartition: async (s, g, onProgress) => {
            await repartition(env.js, s, g, 12, { onProgress });
          },
        });
        t.diagnostic(summary(`slow link, round ${round + 1}`, r));
        assertClean(r);
      }
    } finally {
      await proxy.close();
    }
  });
  test("repartition - the cut while the work-queue stream still holds its first message: the origin is not sourced again", async () => {
    const stream = uniqueName("rpf");
    await createKeyedElasticGroup(env, stream, "g", 2, ["m1", "m2"]);
    const release = deferred();
    const handled: string[] = [];
    const members = [];
    for (const m of ["m1", "m2"]) {
      members.push(
        await elasticConsume(env.js, {
          stream,
          group: "g",
          member: m,
          concurrency: "key",
          consumerConfig: { ack_wait: 1_000_000_000 },
          handler: async (msg) => {
            const { key, seq } = msg.json<{ key: string; seq: number }>();
            // The group's very first message runs until released (kept alive by working()).
            while (key === "k0" && seq === 1 && !(await Promise.race([release.promise.then(() => true), sleep(300).then(() => false)]))) msg.working();
            handled.push(`${key}/${seq}`);
          },
        }),
      );
    }
    try {
      const published = new Map<string, number>();
      await publishSteadily(env.js, stream, 500, 20, 5_000, published);
      const wq = workQueueStreamName(stream, "g");
      await waitFor(async () => (await env.jsm.streams.info(wq)).state.last_seq === 500, 10_000, "everything sourced");
      assert.equal((await env.jsm.streams.info(wq)).state.first_seq, 1, "the first message is still stored at the cut");
      const running = repartition(env.js, stream, "g", 4, { pollMs: 100 });
      await waitFor(async () => (await env.jsm.streams.info(wq)).config.metadata?.["pcg_repartition"], 10_000, "the cut");
      await sleep(1500);
      assert.equal((await env.jsm.streams.info(wq)).state.last_seq, 500, "nothing was sourced again");
      release.resolve();
      await running;
      await waitFor(() => handled.length >= 500, 10_000, "every message handled");
      const report = checkDelivery(published, handled.map((h, i) => ({ key: h.split("/")[0] ?? "", seq: Number(h.split("/")[1]), at: i })));
      assert.deepEqual({ lost: report.lost.length, duplicates: report.duplicates }, { lost: 0, duplicates: 0 });
    } finally {
      release.resolve();
      await Promise.allSettled(members.map((m) => m.stop()));
    }
  });

  test("repartition - both switches during a burst of 4 KB messages: nothing skipped, nothing repeated", async (t) => {
    await burstRound(t, 0);
  });

  async function burstRound(t: TestContext, round: number): Promise<void> {
    const stream = uniqueName("rpg");
    await createKeyedElasticGroup(env, stream, "g", 4, ["m1"]);
    const handled: string[] = [];
    const member = await elasticConsume(env.js, {
      stream,
      group: "g",
      member: "m1",
      concurrency: "key",
      handler: (msg) => void handled.push(`${msg.json<{ key: string; seq: number }>().key}/${msg.json<{ key: string; seq: number }>().seq}`),
    });
    try {
      const published = new Map<string, number>();
      const pad = "x".repeat(4000);
      const total = 15_000;
      const burst = (async () => {
        for (let i = 0; i < total; i += 100) {
          await Promise.all(
            Array.from({ length: 100 }, (_, j) => {
              const key = `k${j}`;
              const seq = (published.get(key) ?? 0) + 1;
              published.set(key, seq);
              return env.js.publish(`${stream}.${key}`, JSON.stringify({ key, seq, pad }), { timeout: 10_000 });
            }),
          );
        }
      })();
      const wq = workQueueStreamName(stream, "g");
      await waitFor(async () => (await env.jsm.streams.info(stream)).state.last_seq >= 3_000, 20_000, "the burst under way");
      t.diagnostic(`round ${round + 1}: source lag at the call: ${String((await env.jsm.streams.info(wq)).sources?.[0]?.lag)} messages`);
      await repartition(env.js, stream, "g", 8, { pollMs: 100 });
      await burst;
      await waitFor(() => new Set(handled).size >= total, 60_000, "every message handled");
      const report = checkDelivery(published, handled.map((h, i) => ({ key: h.split("/")[0] ?? "", seq: Number(h.split("/")[1]), at: i })));
      assert.deepEqual({ lost: report.lost.length, duplicates: report.duplicates, outOfOrder: report.outOfOrder.length }, { lost: 0, duplicates: 0, outOfOrder: 0 });
      // The old source's copies stored during a switch were deleted (the new source delivered them): they used sequence numbers.
      t.diagnostic(`round ${round + 1}: old copies deleted at the switches: ${(await env.jsm.streams.info(wq)).state.last_seq - total}`);
    } finally {
      await member.stop();
    }
  }
});
