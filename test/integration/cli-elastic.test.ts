/**
 * `cg elastic …` against a real nats-server: every command and alias, the
 * `--filter`/`--wildcards` syntax and Go's stdin question, `--json`, exit codes.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { getElasticConsumerGroupConfig, listElasticConsumerGroups, workQueueStreamName } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { CgProcess, addSourceStream, killAllCg, runCg, runCgJson, type CgOptions } from "../helpers/cli-run.js";

let env: TestEnv;
let url: string;
const cg = (args: string[], options?: CgOptions) => runCg(["-s", url, ...args], options);
const cgJson = <T = Record<string, unknown>>(args: string[], options?: CgOptions) => runCgJson<T>(["-s", url, ...args], options);

before(async () => {
  env = await startEnv();
  url = env.server.url;
});

after(async () => {
  await killAllCg();
  await env.close();
});

async function group(maxMembers = 4, extra: string[] = []): Promise<{ stream: string; group: string }> {
  const stream = uniqueName("E");
  await addSourceStream(env.jsm, stream);
  const name = uniqueName("g");
  const r = await cg(["elastic", "create", stream, name, String(maxMembers), ...extra]);
  assert.equal(r.code, 0, r.stderr);
  return { stream, group: name };
}

describe("cli elastic", () => {
  test("cli elastic - create with --filter/--wildcards pairs them in order", async () => {
    const stream = uniqueName("E");
    await addSourceStream(env.jsm, stream);
    const name = uniqueName("g");
    const r = await cg([
      "elastic", "create", stream, name, "6",
      "--filter", `${stream}.a.*.*`, "--wildcards", "1,2",
      "--filter", `${stream}.b.>`, "--wildcards", "none",
      "--max-buffered-msgs", "1000", "--max-buffered-bytes", "1048576",
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, `created elastic consumer group ${name} on stream ${stream}: 6 partitions, no members yet\n`);
    assert.deepEqual(await getElasticConsumerGroupConfig(env.js, stream, name), {
      max_members: 6,
      partitioning_filters: [
        { filter: `${stream}.a.*.*`, partitioning_wildcards: [1, 2] },
        { filter: `${stream}.b.>`, partitioning_wildcards: [] },
      ],
      max_buffered_msg: 1000,
      max_buffered_bytes: 1048576,
    });
    const info = await cg(["elastic", "info", stream, name]);
    assert.equal(
      info.stdout.split("\n\n")[0],
      [
        "config: max members=6, max buffered msgs=1000, max buffered bytes=1048576",
        `filter=${stream}.a.*.*, partitioning wildcards [1 2]`,
        `filter=${stream}.b.>, partitioning wildcards [] (whole subject used)`,
        "no members or mappings defined",
        "currently active members: []",
      ].join("\n"),
    );
  });

  test("cli elastic - create without filters partitions on the whole subject, --json", async () => {
    const stream = uniqueName("E");
    await addSourceStream(env.jsm, stream);
    const name = uniqueName("g");
    const { doc } = await cgJson<{ created: boolean; config: unknown }>(["elastic", "create", stream, name, "3"]);
    assert.deepEqual(doc, { kind: "elastic", stream, group: name, created: true, config: { max_members: 3, partitioning_filters: null }, warnings: [] });
    const info = await cg(["elastic", "info", stream, name]);
    assert.match(info.stdout, /\nno partitioning filters defined \(whole subject used\)\n/);
  });

  test("cli elastic - create with --filter only asks Go's question on stdin", async () => {
    const stream = uniqueName("E");
    await addSourceStream(env.jsm, stream);
    const name = uniqueName("g");
    const p = new CgProcess(["-s", url, "elastic", "create", stream, name, "4", "--filter", `${stream}.x.*.*`, "--filter", `${stream}.y.*`]);
    await p.waitForText(`space separated partitioning wildcard indexes for filter ${stream}.x.*.*: `, 20_000);
    p.write("2\n");
    await p.waitForText(`space separated partitioning wildcard indexes for filter ${stream}.y.*: `, 20_000);
    p.write("1\n");
    const r = await p.exited(30_000);
    assert.equal(r.code, 0, r.stderr);
    const config = await getElasticConsumerGroupConfig(env.js, stream, name);
    assert.deepEqual(config.partitioning_filters, [
      { filter: `${stream}.x.*.*`, partitioning_wildcards: [2] },
      { filter: `${stream}.y.*`, partitioning_wildcards: [1] },
    ]);

    // with --json the question goes to stderr, keeping stdout one document
    const name2 = uniqueName("g");
    const j = await cg(["--json", "elastic", "create", stream, name2, "4", "--filter", `${stream}.z.*`], { input: "1\n" });
    assert.equal(j.code, 0, j.stderr);
    assert.match(j.stderr, /space separated partitioning wildcard indexes for filter/);
    assert.equal((JSON.parse(j.stdout) as { group: string }).group, name2);

    const bad = await cg(["elastic", "create", stream, uniqueName("g"), "4", "--filter", `${stream}.*.*`], { input: "x\n" });
    assert.equal(bad.code, 2);
  });

  test("cli elastic - add and drop, human and --json", async () => {
    const { stream, group: name } = await group();
    const added = await cg(["elastic", "add", stream, name, "m1", "m2", "m3"]);
    assert.equal(added.code, 0, added.stderr);
    assert.equal(added.stdout, "added members: [m1 m2 m3]\n");
    const { doc: addDoc } = await cgJson(["elastic", "add", stream, name, "m3", "m4"]);
    assert.deepEqual(addDoc, { kind: "elastic", stream, group: name, members: ["m1", "m2", "m3", "m4"], added: ["m4"] });

    const dropped = await cg(["elastic", "drop", stream, name, "m4", "nobody"]);
    assert.equal(dropped.code, 0, dropped.stderr);
    assert.equal(dropped.stdout, "dropped members: [m4]\nremaining members: [m1 m2 m3]\n");
    const { doc: dropDoc } = await cgJson(["elastic", "drop", stream, name, "m3"]);
    assert.deepEqual(dropDoc, { kind: "elastic", stream, group: name, members: ["m1", "m2"], dropped: ["m3"] });

    const { doc: info } = await cgJson<{ partitions: { partition: number; member: string | null }[] }>(["elastic", "info", stream, name]);
    assert.deepEqual(
      info.partitions.map((p) => p.member),
      ["m1", "m1", "m2", "m2"],
    );
  });

  test("cli elastic - create-mapping and delete-mapping with their aliases", async () => {
    const { stream, group: name } = await group();
    for (const alias of ["create-mapping", "cm", "createmapping"]) {
      const r = await cg(["elastic", alias, stream, name, "a:0,1", "b:2-3"]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "member mappings: [a:0,1 b:2,3]\n");
    }
    const { doc } = await cgJson(["elastic", "cm", stream, name, "a:3", "b:0,1,2"]);
    assert.deepEqual(doc, {
      kind: "elastic",
      stream,
      group: name,
      member_mappings: [
        { member: "a", partitions: [3] },
        { member: "b", partitions: [0, 1, 2] },
      ],
    });
    const adding = await cg(["elastic", "add", stream, name, "c"]);
    assert.equal(adding.code, 1);
    assert.match(adding.stderr, /uses member mappings/);

    for (const alias of ["delete-mapping", "dm", "deletemapping"]) {
      const r = await cg(["elastic", alias, stream, name]);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, /^deleted the member mappings of elastic consumer group/);
      assert.equal((await getElasticConsumerGroupConfig(env.js, stream, name)).member_mappings, undefined);
      assert.equal((await cg(["elastic", "cm", stream, name, "a:0,1,2,3"])).code, 0);
    }
    const { doc: deleted } = await cgJson(["elastic", "dm", stream, name]);
    assert.deepEqual(deleted, { kind: "elastic", stream, group: name, member_mappings: [] });

    const uncovered = await cg(["elastic", "cm", stream, name, "a:0"]);
    assert.equal(uncovered.code, 1);
    assert.match(uncovered.stderr, /unmapped partitions: 1, 2, 3/);
  });

  test("cli elastic - ls/list, member-info and step-down aliases with a running member", async () => {
    const { stream, group: name } = await group(2);
    for (const ls of ["ls", "list"]) assert.equal((await cg(["elastic", ls, stream])).stdout, `elastic consumer groups: [${name}]\n`);
    assert.equal((await cg(["elastic", "add", stream, name, "m1"])).code, 0);
    for (const alias of ["member-info", "memberinfo", "minfo"]) {
      const r = await cg(["elastic", alias, stream, name, "m1"]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "member m1 is part of the consumer group membership\n***Warning*** member m1 is part of the consumer group membership but has NO active instance\npartitions: [0 1]\n");
    }
    assert.equal((await cg(["elastic", "minfo", stream, name, "zz"])).stdout, "member zz is not currently part of the consumer group membership\n");

    const member = new CgProcess(["-s", url, "--json", "elastic", "consume", stream, name, "m1"]);
    await member.waitForText(/"event":"started"/, 20_000, "stderr");
    await waitFor(async () => (await runCgJson<{ active: boolean }>(["-s", url, "elastic", "minfo", stream, name, "m1"])).doc.active, 20_000, "m1 to be active");
    assert.equal((await cg(["elastic", "minfo", stream, name, "m1"])).stdout, "member m1 is part of the consumer group membership and is active\npartitions: [0 1]\n");
    for (const alias of ["step-down", "stepdown", "sd"]) {
      const r = await cg(["elastic", alias, stream, name, "m1"]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "member m1 step down initiated\n");
    }
    const { doc } = await cgJson(["elastic", "sd", stream, name, "m1"]);
    assert.deepEqual(doc, { kind: "elastic", stream, group: name, member: "m1", stepped_down: true });
    await member.kill();
  });

  test("cli elastic - delete with confirmation, rm -f, and the work-queue stream goes too", async () => {
    const { stream, group: name } = await group();
    const no = await cg(["elastic", "delete", stream, name], { input: "no\n" });
    assert.equal(no.code, 1);
    assert.match(no.stderr, /operation canceled/);
    const yes = await cg(["elastic", "rm", stream, name], { input: "y\n" });
    assert.equal(yes.code, 0, yes.stderr);
    assert.match(yes.stdout, new RegExp(`deleted elastic consumer group ${name} on stream ${stream}\n$`));
    assert.deepEqual(await listElasticConsumerGroups(env.js, stream), []);
    await assert.rejects(env.jsm.streams.info(workQueueStreamName(stream, name)));

    const { stream: s2, group: g2 } = await group();
    const { doc } = await cgJson(["elastic", "delete", s2, g2, "-f"]);
    assert.deepEqual(doc, { kind: "elastic", stream: s2, group: g2, deleted: true });
    const again = await cg(["elastic", "rm", s2, g2, "--force"]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /there is no elastic group/);
  });

  test("cli elastic - operational errors exit 1", async () => {
    const missingStream = await runCg(["-s", url, "--json", "elastic", "create", uniqueName("nostream"), "g", "4"]);
    assert.equal(missingStream.code, 1);
    assert.equal((JSON.parse(missingStream.stderr) as { error: { code: string } }).error.code, "STREAM_NOT_FOUND");
    const { stream } = await group();
    for (const args of [
      ["info", stream, "nogroup"],
      ["add", stream, "nogroup", "m1"],
      ["drop", stream, "nogroup", "m1"],
      ["cm", stream, "nogroup", "m1:0,1,2,3"],
      ["minfo", stream, "nogroup", "m1"],
    ]) {
      const r = await cg(["elastic", ...args]);
      assert.equal(r.code, 1, `${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, /^error: /);
    }
    const overlapping = await cg(["elastic", "create", stream, uniqueName("g"), "4", "--filter", `${stream}.*`, "--wildcards", "1", "--filter", `${stream}.>`, "--wildcards", "none"]);
    assert.equal(overlapping.code, 1);
    assert.match(overlapping.stderr, /overlap/);
  });
});
