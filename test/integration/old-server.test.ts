/**
 * Servers older than the library needs: nats-server 2.10 has no priority groups,
 * so every group operation that relies on them (creating a group, running a member)
 * must fail with SERVER_TOO_OLD naming 2.11 before anything is written; 2.11 has
 * them but not whole-subject partitioning (`{{partition(N)}}` with no wildcard
 * index), which must fail with SERVER_TOO_OLD naming 2.12, while everything else
 * works there.
 *
 * The old binaries come from `node scripts/install-tools.mjs` (entries server-2.10
 * and server-2.11, in .tools/nats-server-2.10 and .tools/nats-server-2.11); among the
 * tests only this file starts them (the `versions` benchmark does too). On 2.11 a
 * member that owns several partitions is also reported SLOW_SERVER_RELEASE.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import {
  addMembers,
  createElastic,
  createStatic,
  describeGroup,
  elasticConsume,
  staticConsume,
  type ConsumerGroupMember,
  type MessageHandler,
  type PartitioningFilter,
} from "../../src/index.js";
import { NatsServer, connectTo, waitFor, type Client } from "../helpers/nats.js";
import { killAllCg, runCg } from "../helpers/cli-run.js";
import { assertTypedError, assertUnchanged, serverState, thrownBy } from "../helpers/security-state.js";

const noop: MessageHandler = () => undefined;

function oldServerBinary(line: "2.10" | "2.11"): string {
  const bin = fileURLToPath(new URL(`../../../.tools/nats-server-${line}/nats-server`, import.meta.url));
  if (!existsSync(bin)) {
    throw new Error(`no nats-server ${line}.x at ${bin}: run "node scripts/install-tools.mjs server-${line}" (npm run tools installs it)`);
  }
  return bin;
}

async function startOld(line: "2.10" | "2.11"): Promise<{ server: NatsServer; client: Client }> {
  const server = await NatsServer.start({ bin: oldServerBinary(line), minVersion: `${line}.0` });
  assert.ok(server.version.startsWith(`${line}.`), `expected a ${line}.x server, got ${server.version}`);
  try {
    return { server, client: await connectTo(server) };
  } catch (err) {
    await server.stop();
    throw err;
  }
}

describe("old server - nats-server 2.10 (no priority groups)", () => {
  let server: NatsServer;
  let c: Client;

  before(async () => {
    ({ server, client: c } = await startOld("2.10"));
    await c.jsm.streams.add({ name: "orders", subjects: ["orders.*"], subject_transform: { src: "orders.*", dest: "{{partition(4,1)}}.orders.{{wildcard(1)}}" } });
    await c.jsm.streams.add({ name: "events", subjects: ["events.>"] });
    await c.js.publish("orders.k1", "x");
    await c.js.publish("events.k1", "y");
  });
  after(async () => {
    await killAllCg();
    await c?.nc.close();
    await server?.stop();
  });

  const tooOld = [/needs nats-server 2\.11\.0 or newer/, /the connected server is 2\.10\.\d+/, /upgrade the server/];

  test("old server - 2.10: createStatic fails with SERVER_TOO_OLD naming 2.11, nothing written", async () => {
    const before = await serverState(c.jsm);
    const err = await thrownBy(() => createStatic(c.js, { stream: "orders", group: "g", maxMembers: 4, members: ["m1", "m2"] }));
    assertTypedError(err, "SERVER_TOO_OLD", ...tooOld, /static consumer groups/);
    await assertUnchanged(c.jsm, before, "createStatic on 2.10");
    assert.ok(!Object.keys(before).some((s) => s.startsWith("KV_")), "no config bucket was ever created");
  });

  test("old server - 2.10: createElastic fails with SERVER_TOO_OLD naming 2.11, nothing written", async () => {
    const before = await serverState(c.jsm);
    const err = await thrownBy(() => createElastic(c.js, { stream: "events", group: "g", maxMembers: 4, partitioningFilters: [{ filter: "events.*", partitioning_wildcards: [1] }] }));
    assertTypedError(err, "SERVER_TOO_OLD", ...tooOld, /elastic consumer groups/);
    await assertUnchanged(c.jsm, before, "createElastic on 2.10");
  });

  test("old server - 2.10: staticConsume fails with SERVER_TOO_OLD naming 2.11, no consumer created", async () => {
    const before = await serverState(c.jsm);
    const err = await thrownBy(() => staticConsume(c.js, { stream: "orders", group: "g", member: "m1", handler: noop }));
    assertTypedError(err, "SERVER_TOO_OLD", ...tooOld);
    await assertUnchanged(c.jsm, before, "staticConsume on 2.10");
  });

  test("old server - 2.10: elasticConsume fails with SERVER_TOO_OLD naming 2.11, no consumer created", async () => {
    const before = await serverState(c.jsm);
    const err = await thrownBy(() => elasticConsume(c.js, { stream: "events", group: "g", member: "m1", handler: noop }));
    assertTypedError(err, "SERVER_TOO_OLD", ...tooOld);
    await assertUnchanged(c.jsm, before, "elasticConsume on 2.10");
  });

  test("old server - 2.10: cg static/elastic create exit 1 with SERVER_TOO_OLD, nothing written", { timeout: 60_000 }, async () => {
    const before = await serverState(c.jsm);
    for (const args of [
      ["static", "create", "balanced", "orders", "g", "4", "m1"],
      ["elastic", "create", "events", "g", "4", "--filter", "events.*", "--wildcards", "1"],
    ]) {
      const r = await runCg(["-s", server.url, "--json", ...args]);
      assert.equal(r.code, 1, r.stderr);
      const doc = JSON.parse(r.stderr.trim()) as { error: { code: string; message: string } };
      assert.equal(doc.error.code, "SERVER_TOO_OLD");
      assert.match(doc.error.message, /2\.11\.0 or newer/);
    }
    await assertUnchanged(c.jsm, before, "cg create on 2.10");
  });
});

describe("old server - nats-server 2.11 (no whole-subject partitioning)", () => {
  let server: NatsServer;
  let c: Client;
  const running: ConsumerGroupMember[] = [];

  before(async () => {
    ({ server, client: c } = await startOld("2.11"));
    await c.jsm.streams.add({ name: "orders", subjects: ["orders.*"], subject_transform: { src: "orders.*", dest: "{{partition(2,1)}}.orders.{{wildcard(1)}}" } });
    await c.jsm.streams.add({ name: "events", subjects: ["events.>"] });
  });
  after(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    await c?.nc.close();
    await server?.stop();
  });

  const wholeSubject: [string, PartitioningFilter[] | null][] = [
    ["no partitioning filters", null],
    ["a filter with no wildcard index", [{ filter: "events.>", partitioning_wildcards: [] }]],
  ];
  for (const [what, partitioningFilters] of wholeSubject) {
    test(`old server - 2.11: createElastic with ${what} (whole-subject) fails with SERVER_TOO_OLD naming 2.12, nothing written`, async () => {
      const before = await serverState(c.jsm);
      const err = await thrownBy(() => createElastic(c.js, { stream: "events", group: "whole", maxMembers: 4, partitioningFilters }));
      assertTypedError(err, "SERVER_TOO_OLD", /whole-subject partitioning/, /needs nats-server 2\.12\.0 or newer/, /the connected server is 2\.11\.\d+/);
      await assertUnchanged(c.jsm, before, `createElastic with ${what} on 2.11`);
    });
  }

  test("old server - 2.11: static and elastic groups with wildcard partitioning work", { timeout: 120_000 }, async () => {
    await createStatic(c.js, { stream: "orders", group: "sg", maxMembers: 2, members: ["m1"] });
    await createElastic(c.js, { stream: "events", group: "eg", maxMembers: 2, partitioningFilters: [{ filter: "events.*", partitioning_wildcards: [1] }] });
    await addMembers(c.js, "events", "eg", ["m1"]);
    const handled: string[] = [];
    const handler: MessageHandler = (m) => void handled.push(m.subject);
    running.push(await staticConsume(c.js, { stream: "orders", group: "sg", member: "m1", handler }));
    running.push(await elasticConsume(c.js, { stream: "events", group: "eg", member: "m1", handler, consumerConfig: { ack_wait: 2_000_000_000 } }));
    await c.js.publish("orders.k1", "x");
    await c.js.publish("events.k1", "y");
    await waitFor(() => handled.includes("orders.k1") && handled.includes("events.k1"), 60_000, "both members to handle their message on 2.11");
    await Promise.all(running.splice(0).map((m) => m.stop()));
  });

  test("old server - 2.11: describeGroup warns SLOW_SERVER_RELEASE, naming the version and the release to run", async () => {
    await createStatic(c.js, { stream: "orders", group: "slow", maxMembers: 2, members: ["m1"] });
    const d = await describeGroup(c.js, "static", "orders", "slow");
    const slow = d.findings.filter((f) => f.code === "SLOW_SERVER_RELEASE");
    assert.equal(slow.length, 1, JSON.stringify(d.findings));
    assert.equal(slow[0]?.severity, "warning");
    assert.match(slow[0]?.message ?? "", /nats-server 2\.11\.\d+ serves a consumer with many filter subjects several times slower/);
    assert.match(slow[0]?.message ?? "", /run nats-server 2\.14\.10 or newer/);
  });
});
