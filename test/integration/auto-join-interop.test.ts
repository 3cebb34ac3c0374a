/**
 * Auto-join from the `cg` binary and next to Go: `cg elastic consume --auto` joins
 * under HOSTNAME and leaves on SIGTERM (exit 143), its usage errors; Go's own `cg
 * elastic ls/info` read a group with auto members; and a Go member mapped by hand keeps
 * exactly its partitions, and keeps handling, while a sticky auto fleet scales around it.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import { createElastic, elasticConsume, setMemberMappings, type ConsumerGroupMember, type ElasticConsumerGroupConfig } from "../../src/index.js";
import { CgProcess, killAllCg, runCg } from "../helpers/cli-run.js";
import { GoMember, runCg as runGoCg } from "../helpers/interop-go.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { nanos, sleep } from "../helpers/elastic-util.js";

describe("auto-join - cg --auto and Go", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];
  const go: GoMember[] = [];
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await killAllCg();
    await Promise.allSettled(running.map((m) => m.stop()));
    await Promise.allSettled(go.map((g) => g.kill()));
    await env.close();
  });

  async function group(partitions: number): Promise<string> {
    const stream = uniqueName("aji");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
    await createElastic(env.js, { stream, group: "g", maxMembers: partitions, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    return stream;
  }

  async function config(stream: string): Promise<ElasticConsumerGroupConfig> {
    const e = await (await new Kvm(env.js).open("elastic-consumer-groups")).get(`${stream}.g`);
    assert.ok(e);
    return e.json<ElasticConsumerGroupConfig>();
  }
  const listed = (c: ElasticConsumerGroupConfig): string[] => ((c.members ?? []).length > 0 ? (c.members ?? []) : (c.member_mappings ?? []).map((m) => m.member));

  test("auto-join - cg elastic consume --auto joins as HOSTNAME, Go's cg ls/info read the group, SIGTERM leaves it (exit 143)", async () => {
    const stream = await group(4);
    const url = env.server.url;
    const p = new CgProcess(["-s", url, "--json", "elastic", "consume", stream, "g", "--auto", "--settle", "200ms", "--lease-ttl", "3s", "--sleep", "0"], { env: { HOSTNAME: "pod-a" } });
    await p.waitForText(/"event":"started"/, 30_000, "stderr");
    await waitFor(async () => listed(await config(stream)).join() === "pod-a", 10_000, "pod-a in the membership");
    await env.js.publish(`${stream}.k1`, "x");
    await p.waitFor((out) => out.includes('"member":"pod-a"'), 10_000, "a message handled as pod-a");

    const ls = await runGoCg(url, "elastic", "ls", stream);
    assert.equal(ls.code, 0, ls.stderr);
    assert.match(ls.stdout, /\bg\b/);
    const info = await runGoCg(url, "elastic", "info", stream, "g");
    assert.equal(info.code, 0, info.stderr);
    assert.match(info.stdout, /pod-a/);
    assert.doesNotMatch(`${info.stdout}${info.stderr}`, /lease|error/i);

    p.signal("SIGTERM");
    const r = await p.exited(30_000);
    assert.equal(r.code, 143, r.stderr);
    assert.deepEqual(listed(await config(stream)), [], "the member left the group");
    assert.ok(p.json("stderr").some((e) => e["event"] === "membership_written"), "it reported its membership write");
  });

  test("auto-join - cg usage errors: auto flags without --auto, no member without --auto, --auto on a static group", async () => {
    const url = env.server.url;
    const noAuto = await runCg(["-s", url, "elastic", "consume", "s", "g", "m1", "--settle", "1s"]);
    assert.equal(noAuto.code, 2);
    assert.match(noAuto.stderr, /--settle needs --auto/);
    const noMember = await runCg(["-s", url, "elastic", "consume", "s", "g"]);
    assert.equal(noMember.code, 2);
    assert.match(noMember.stderr, /member name.*--auto/);
    const onStatic = await runCg(["-s", url, "static", "consume", "s", "g", "m1", "--auto"]);
    assert.equal(onStatic.code, 2);
    assert.match(onStatic.stderr, /unknown option '--auto'/);
    const bad = await runCg(["-s", url, "elastic", "consume", "s", "g", "--auto", "--assignment", "rr"]);
    assert.equal(bad.code, 2);
  });

  test("auto-join - a Go member mapped by hand keeps exactly its partitions and keeps handling while a sticky auto fleet scales 1 → 3 → 1", async () => {
    const stream = await group(8);
    const url = env.server.url;
    const start = async (member: string): Promise<ConsumerGroupMember> => {
      const c = await env.connect();
      const m = await elasticConsume(c.js, { stream, group: "g", member, consumerConfig: { ack_wait: nanos(2000) }, autoJoin: { settleMs: 300, leaseTtlMs: 3000, assignment: "sticky" }, handler: () => undefined });
      running.push(m);
      return m;
    };
    const a = await start("a");
    await waitFor(async () => listed(await config(stream)).join() === "a", 10_000, "a mapped");
    // Somebody gives a Go member partitions 0 and 1 by hand.
    const mine = [0, 1];
    await setMemberMappings(env.js, stream, "g", [
      { member: "go1", partitions: mine },
      { member: "a", partitions: [2, 3, 4, 5, 6, 7] },
    ]);
    const gm = new GoMember("go:go1", url, "elastic", stream, "g", "go1", { ackWaitMs: 2000, maxAckPending: 10 });
    go.push(gm);
    await gm.started;
    const goPartitions = async (): Promise<number[]> => (await config(stream)).member_mappings?.find((m) => m.member === "go1")?.partitions ?? [];
    const publishRound = async (round: number): Promise<void> => {
      for (let i = 0; i < 40; i++) await env.js.publish(`${stream}.k${i}`, JSON.stringify({ k: `k${i}`, s: round }));
    };
    const goHandledRound = async (round: number): Promise<void> => {
      await waitFor(() => gm.handled.some((h) => h.s === round), 20_000, `go1 handling round ${round}`);
    };

    await publishRound(1);
    await goHandledRound(1);
    const b = await start("b");
    const c = await start("c");
    await waitFor(async () => listed(await config(stream)).length === 4, 10_000, "b and c mapped");
    assert.deepEqual(await goPartitions(), mine);
    await publishRound(2);
    await goHandledRound(2);
    await b.stop();
    await c.stop();
    await waitFor(async () => listed(await config(stream)).length === 2, 10_000, "b and c gone");
    assert.deepEqual(await goPartitions(), mine);
    await publishRound(3);
    await goHandledRound(3);
    await sleep(500);
    assert.ok(gm.running, "the Go member still runs");
    assert.deepEqual(gm.errors(), [], "the Go member reported no error");
    assert.deepEqual([...new Set(gm.handled.map((h) => h.partition))].sort(), mine, "the Go member handled only its own partitions");
    await a.stop();
    assert.deepEqual(listed(await config(stream)), ["go1", "a"], "the last auto member stays: go1's mapping alone does not cover every partition");
    await gm.stop();
  });
});
