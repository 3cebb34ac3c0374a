/**
 * Issue 18: growing a live elastic group's partition count (`repartition`) under
 * load, on a real server: nothing lost, per-key order of first handling kept
 * across the cut (a message of a key never starts while an earlier one of that
 * key is unhandled), and duplicates only where a switch of the source delivers a message again.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { getElasticConsumerGroupConfig, repartition, workQueueStreamName, type RepartitionProgress } from "../../src/index.js";
import { startEnv, uniqueName, type Client, type TestEnv } from "../helpers/nats.js";
import { assertClean, dip, runRepartitionScenario, summary } from "../helpers/repartition-run.js";
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

  test("repartition - 4 members with a hot standby each, 4 -> 12 under 20,000 keyed messages over 500 keys: nothing lost, per-key order kept, duplicates only from the switches", async (t) => {
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
      repartition: async (s, g, onProgress) => {
        const result = await repartition(env.js, s, g, 12, {
          onProgress: (p: RepartitionProgress) => {
            if (phases.at(-1) !== p.phase) phases.push(p.phase);
            if (process.env["REPARTITION_DEBUG"]) console.log(JSON.stringify(p));
            onProgress(p);
          },
        });
        assert.equal(result.from, 4);
        assert.equal(result.to, 12);
        assert.equal(result.resumed, false);
      },
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
        // Serial-mode consumers keep Go's exact config (so Go and TypeScript instances can share a member): they cannot be told from Go's, hence force.
        const result = await repartition(env.js, s, g, 6, { onProgress, force: true });
        assert.deepEqual(result.unverifiedMembers.sort(), ["a", "b", "c"]);
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
});
