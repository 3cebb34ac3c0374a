/**
 * Issue 18, faults: growing a live elastic group's partition count when things go
 * wrong. The process running `cg elastic repartition` is killed -9 five times, at
 * seeded random points spread over its phases (before the cut, while old-layout
 * messages move, while the transition layout drains), and run again each time; and
 * the main scenario on a 3-node cluster with R3 streams, members on different
 * nodes. Either way: nothing lost, per-key order of first handling kept, no
 * duplicates, and the group ends in Go's layout for the new count.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { getElasticConsumerGroupConfig, repartition, workQueueStreamName, type ConsumerGroupMember, type RepartitionProgress, type RepartitionResult } from "../../src/index.js";
import { checkDelivery } from "../../src/cli/demo/delivery-check.js";
import { readLock } from "../../src/elastic/repartition/repartition-lock.js";
import { CgProcess, killAllCg } from "../helpers/cli-run.js";
import { prng, sleep } from "../helpers/load-harness.js";
import { NatsCluster, connectTo, startEnv, uniqueName, waitFor, type Client, type TestEnv } from "../helpers/nats.js";
import { assertClean, createKeyedElasticGroup, dip, growFromFour, recordingMember, runRepartitionScenario, summary, type HandlerSpan } from "../helpers/repartition-run.js";

const MESSAGES = Number(process.env["REPARTITION_MESSAGES"] ?? 20_000);
const KEYS = 500;
const RATE = 4_000;
/** As in the main test: members handle about 3,200 messages/s together, so a backlog builds and every phase lasts a while. */
const LOAD = { handlerMs: 5, maxInFlight: 4, concurrency: "key" } as const;
const REPARTITION_AT_MS = (0.3 * MESSAGES * 1000) / RATE;

/** The group ends in Go's layout for 12, with the record gone. */
async function assertFinalLayout(client: Client, stream: string): Promise<void> {
  const config = await getElasticConsumerGroupConfig(client.js, stream, "g");
  assert.equal(config.max_members, 12);
  const wq = await client.jsm.streams.info(workQueueStreamName(stream, "g"));
  assert.deepEqual(wq.config.sources?.[0]?.subject_transforms, [{ src: `${stream}.*`, dest: `{{Partition(12,1)}}.${stream}.{{Wildcard(1)}}` }], "Go's layout for 12");
  assert.equal(wq.config.metadata?.["pcg_repartition"], undefined, "the record is gone");
}

/** Where a repartition stands, read from the server: the stream's record, else the config. */
type StoredPhase = "before the cut" | "moving" | "finishing" | "done";

async function storedPhase(client: Client, stream: string): Promise<{ phase: StoredPhase; maxMembers: number }> {
  const wq = await client.jsm.streams.info(workQueueStreamName(stream, "g"));
  const maxMembers = (await getElasticConsumerGroupConfig(client.js, stream, "g")).max_members;
  const raw = wq.config.metadata?.["pcg_repartition"];
  if (raw !== undefined) return { phase: (JSON.parse(raw) as { phase: "moving" | "finishing" }).phase, maxMembers };
  return { phase: maxMembers === 12 ? "done" : "before the cut", maxMembers };
}

/** The ids of the server's open client connections. */
async function openConnections(env: TestEnv): Promise<Set<number>> {
  const connz = await env.server.monitor<{ connections?: { cid: number }[] }>("/connz?limit=4096");
  return new Set((connz.connections ?? []).map((c) => c.cid));
}

/** When a run of the CLI is killed: once `ready` holds for its progress lines so far, after `delayMs` more. */
interface KillPoint {
  what: string;
  ready: (lines: readonly RepartitionProgress[]) => boolean;
  delayMs: number;
}

const count = (lines: readonly RepartitionProgress[], phase: RepartitionProgress["phase"]): number => lines.filter((p) => p.phase === phase).length;

function describeLine(p: RepartitionProgress | undefined): string {
  if (!p) return "none";
  const left = p.phase === "moving" ? `${p.oldLeft.reduce((a, b) => a + b, 0)} old-layout left, held back [${p.heldBack.join(",")}]` : `${p.transitionLeft} transition left`;
  return `${p.phase} (${left}, resumed ${String(p.resumed)})`;
}

describe("repartition faults - kill -9 of the repartition process, and a 3-node cluster (issue 18)", () => {
  describe("single server", () => {
    let env: TestEnv;
    let clients: Client[];
    before(async () => {
      env = await startEnv();
      clients = [env, await env.connect(), await env.connect(), await env.connect()];
    });
    after(async () => {
      await killAllCg();
      await env.close();
    });

    test("kill -9 of the process running the repartition, 5 times, each followed by a resume: nothing lost, per-key order kept, no duplicates", async (t) => {
      const seed = Number(process.env["REPARTITION_SEED"] ?? Math.floor(Math.random() * 2 ** 31));
      t.diagnostic(`seed ${seed} (REPARTITION_SEED=${seed} replays the kill points)`);
      const random = prng(seed);
      const between = (lo: number, hi: number): number => lo + Math.floor(random() * (hi - lo + 1));
      // Five kill points, one run each, spread over the phases; a sixth run finishes.
      const kMoving = between(1, 3);
      const kFinishing = between(1, 2);
      const plan: KillPoint[] = [
        // Node takes longer than this to load the CLI and connect: the cut is not made yet.
        { what: "shortly after spawn", ready: () => true, delayMs: between(50, 150) },
        // Around the cut: connecting, reading the group, cutting, growing the config, or the first check.
        { what: "around the cut", ready: () => true, delayMs: between(200, 900) },
        { what: `after progress line ${kMoving} in moving`, ready: (lines) => count(lines, "moving") >= kMoving, delayMs: between(0, 250) },
        { what: "after the first line in finishing", ready: (lines) => count(lines, "finishing") >= 1, delayMs: between(0, 250) },
        { what: `after progress line ${kFinishing} in finishing`, ready: (lines) => count(lines, "finishing") >= kFinishing, delayMs: between(0, 250) },
      ];

      const stream = uniqueName("rpk");
      const kills: { what: string; phase: StoredPhase; maxMembers: number; last: RepartitionProgress | undefined }[] = [];
      let result: RepartitionResult | undefined;
      const r = await runRepartitionScenario({
        clients,
        stream,
        from: 4,
        members: ["m1", "m2", "m3", "m4"],
        messages: MESSAGES,
        keys: KEYS,
        rate: RATE,
        ...LOAD,
        repartitionAtMs: REPARTITION_AT_MS,
        repartition: async (s, g, onProgress) => {
          for (let run = 0; run <= plan.length; run++) {
            const point = plan[run];
            const before = await storedPhase(env, s);
            const known = await openConnections(env);
            const cg = new CgProcess(["elastic", "repartition", s, g, "12", "--server", env.server.url, "--json"]);
            // Progress lines as they come (stderr, one JSON line each), passed on to the scenario.
            const lines: RepartitionProgress[] = [];
            let parsed = 0;
            cg.child.stderr?.on("data", () => {
              for (let end = cg.stderr.indexOf("\n", parsed); end !== -1; end = cg.stderr.indexOf("\n", parsed)) {
                const line = cg.stderr.slice(parsed, end);
                parsed = end + 1;
                const doc = line.startsWith("{") ? (JSON.parse(line) as { progress?: RepartitionProgress }) : {};
                if (doc.progress) {
                  lines.push(doc.progress);
                  onProgress(doc.progress);
                }
              }
            });
            // A run resumes the one before it when that one left a record, or left its lock for the same count
            // (killed after taking the lock, before the record's write): it carries on that run.
            const lockLeft = (await readLock(await new Kvm(env.js).open("elastic-consumer-groups"), s, g))?.lock.to === 12;
            const resumes = before.phase !== "before the cut" || lockLeft;
            if (!point) {
              const done = await cg.exited(90_000);
              assert.equal(done.code, 0, `the last run finishes\n${done.stderr}`);
              result = JSON.parse(done.stdout) as RepartitionResult;
            } else {
              await cg.waitFor(() => point.ready(lines), 30_000, `kill point ${run + 1}: ${point.what}`);
              await sleep(point.delayMs);
              await cg.kill();
              const killed = await cg.exited(5_000);
              assert.equal(killed.signal, "SIGKILL", `run ${run + 1} was killed, not finished (it exited ${String(killed.code)}): the plan needs a later phase to still be under way\n${killed.stderr}`);
              // A request the process wrote just before it died (the record's stream update, say) may still be in the
              // server's hands: once the server has closed its connection, it has read everything the process sent,
              // and what this test asks next is answered after it. (CI saw the next run resume from a record that the
              // read right after the kill had not seen yet.)
              await waitFor(async () => [...(await openConnections(env))].every((cid) => known.has(cid)), 10_000, `the server to close run ${run + 1}'s connection`);
              // Read right after the kill: the phase the killed process left behind (the next run's "resumed" cross-checks it).
              kills.push({ what: `${point.what} +${point.delayMs} ms`, ...(await storedPhase(env, s)), last: lines.at(-1) });
            }
            for (const p of lines) assert.equal(p.resumed, resumes, `run ${run + 1} resumes exactly when a record or a lock for 12 was there before it (${before.phase}, lock ${lockLeft ? "left" : "none"})`);
          }
        },
      });

      kills.forEach((k, i) => t.diagnostic(`kill ${i + 1} (${k.what}): hit "${k.phase}" (config max_members ${k.maxMembers}); last progress line: ${describeLine(k.last)}`));
      t.diagnostic(`last run: ${JSON.stringify(result)}`);
      t.diagnostic(summary("repartition 4 -> 12 with 5 kills", r));
      t.diagnostic(`duplicates: ${r.delivery.duplicates} (handled ${r.delivery.handled}, unique ${r.delivery.unique})`);
      assertClean(r);

      assert.equal(kills.length, 5, "five kills");
      const hit = new Set(kills.map((k) => k.phase));
      assert.ok(hit.has("before the cut"), `a kill before the cut (hit: ${[...hit].join(", ")})`);
      assert.ok(hit.has("moving"), `a kill in moving (hit: ${[...hit].join(", ")})`);
      assert.ok(hit.has("finishing"), `a kill in finishing (hit: ${[...hit].join(", ")})`);
      assert.ok(!hit.has("done"), "no kill after the end");
      assert.ok(result, "the last run reported its result");
      assert.equal(result.from, 4);
      assert.equal(result.to, 12);
      assert.equal(result.resumed, true, "the last run resumed the repartition the killed ones had started");
      assert.ok(r.spans.some((s) => s.transition), "some messages were handled in the transition layout");
      await assertFinalLayout(env, stream);
    });
  });

  describe("3-node cluster", () => {
    let cluster: NatsCluster;
    const clients: Client[] = [];
    before(async () => {
      cluster = await NatsCluster.start(3);
      // One connection per node, plus a second to the first: member i uses clients[i].
      for (const node of [...cluster.nodes, cluster.nodes[0]]) if (node) clients.push(await connectTo(node.url));
    });
    after(async () => {
      await Promise.allSettled(clients.map((c) => c.nc.close()));
      await cluster.stop();
    });

    test("a 3-node cluster run of the main scenario: R3 streams, members on different nodes, 4 -> 12 with repartition()", async (t) => {
      const [admin] = clients;
      assert.ok(admin);
      const nodes = clients.map((c) => c.nc.info?.server_name ?? "?");
      assert.equal(new Set(nodes).size, 3, "the members' connections are spread over the three nodes");
      t.diagnostic(`members m1..m4 on ${nodes.join(", ")}`);
      const members = ["m1", "m2", "m3", "m4"];

      const baseline = await runRepartitionScenario({ clients, stream: uniqueName("rpcb"), from: 4, members, messages: MESSAGES, keys: KEYS, rate: RATE, replicas: 3, ...LOAD });
      t.diagnostic(summary("cluster baseline (no repartition)", baseline));
      assertClean(baseline);

      const stream = uniqueName("rpc");
      const phases: string[] = [];
      const r = await runRepartitionScenario({
        clients,
        stream,
        from: 4,
        members,
        messages: MESSAGES,
        keys: KEYS,
        rate: RATE,
        replicas: 3,
        ...LOAD,
        repartitionAtMs: REPARTITION_AT_MS,
        repartition: growFromFour(admin.js, 12, phases),
      });
      t.diagnostic(summary("cluster repartition 4 -> 12", r));
      t.diagnostic(dip(r, baseline));
      if (process.env["REPARTITION_DEBUG"]) t.diagnostic(`handled/s per 500 ms: baseline [${baseline.ratePerBucket.join(" ")}]; repartition [${r.ratePerBucket.join(" ")}], window ${JSON.stringify(r.repartitionWindow)}`);
      assertClean(r);
      assert.deepEqual(phases, ["moving", "finishing", "done"]);
      assert.ok(r.spans.some((s) => s.transition), "some messages were handled in the transition layout");
      const wq = await admin.jsm.streams.info(workQueueStreamName(stream, "g"));
      assert.equal(wq.config.num_replicas, 3, "the work-queue stream is R3");
      await assertFinalLayout(admin, stream);
    });

    // In a cluster of its own: it kills and restarts a node, and R1 placement is freest on idle nodes.
    test("a switch while the source is stalled (the origin stream's node down for 8 s, the source backing off): nothing lost, nothing repeated", async (t) => {
      const own = await NatsCluster.start(3);
      const client = await connectTo(own.urls, { maxReconnectAttempts: -1, reconnectTimeWait: 200 });
      const members: ConsumerGroupMember[] = [];
      try {
        const js = jetstream(client.nc, { timeout: 10_000 });
        const jsm = await jetstreamManager(client.nc, { timeout: 10_000 });
        // The origin (R1) and the work queue (R1) on different nodes, so the origin's node can go alone.
        let stream = "";
        let originNode: string | undefined;
        for (let attempt = 0; attempt < 10 && !originNode; attempt++) {
          stream = uniqueName("rps");
          await createKeyedElasticGroup({ ...client, js, jsm }, stream, "g", 4, ["m1", "m2"]);
          const [origin, workQueue] = await waitFor(
            async () => {
              const leaders = [(await jsm.streams.info(stream)).cluster?.leader, (await jsm.streams.info(workQueueStreamName(stream, "g"))).cluster?.leader];
              return leaders.every((l) => l !== undefined && l !== "") ? leaders : undefined;
            },
            10_000,
            "both streams to have a leader",
          );
          if (origin !== workQueue) originNode = origin;
        }
        const node = own.nodes.find((n) => n.name === originNode);
        assert.ok(node, `the origin's node (${originNode}) is one of ours`);
        const spans: HandlerSpan[] = [];
        for (const name of ["m1", "m2"]) members.push(await recordingMember(js, stream, name, spans));
        const published = new Map<string, number>();
        const publish = async (count: number): Promise<void> => {
          for (let i = 0; i < count; i++) {
            const key = `k${i % 50}`;
            const seq = (published.get(key) ?? 0) + 1;
            for (let attempt = 0; ; attempt++) {
              try {
                await js.publish(`${stream}.${key}`, JSON.stringify({ key, seq }), { msgID: `${stream}-${key}-${seq}`, timeout: 2000 });
                break;
              } catch (err) {
                if (attempt > 100) throw err;
                await new Promise((r) => setTimeout(r, 100));
              }
            }
            published.set(key, seq);
          }
        };
        await publish(100);
        await waitFor(() => spans.length >= 100, 20_000, "the first 100 handled");
        await node.kill();
        await new Promise((r) => setTimeout(r, 8000));
        await node.restart(false);
        await node.waitReady(true);
        // Published while the source still waits for its next retry: the work queue is empty, the source far behind.
        await publish(200);
        const wq = await jsm.streams.info(workQueueStreamName(stream, "g"));
        t.diagnostic(`at the repartition: work queue last ${wq.state.last_seq}, ${wq.state.messages} stored; source ${JSON.stringify(wq.sources?.map((x) => ({ seq: (x as { seq?: number }).seq, active: x.active })))}; origin last ${(await jsm.streams.info(stream)).state.last_seq}`);
        await repartition(js, stream, "g", 8, { pollMs: 100 });
        await publish(100);
        const total = [...published.values()].reduce((a, b) => a + b, 0);
        await waitFor(() => new Set(spans.map((x) => `${x.key}/${x.seq}`)).size >= total, 60_000, `all ${total} messages handled`);
        await new Promise((r) => setTimeout(r, 1000));
        const report = checkDelivery(
          published,
          spans.map((x) => ({ key: x.key, seq: x.seq, at: x.start })),
        );
        assert.deepEqual({ lost: report.lost.length, duplicates: report.duplicates, outOfOrder: report.outOfOrder.length }, { lost: 0, duplicates: 0, outOfOrder: 0 });
      } finally {
        await Promise.allSettled(members.map((m) => m.stop()));
        await client.nc.close();
        await own.stop();
      }
    });
  });
});
