/**
 * `cg static …` against a real nats-server: every command and alias, human and
 * `--json` output, confirmation, and exit codes of operational errors.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { getStaticConsumerGroupConfig, listStaticConsumerGroups } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { CgProcess, addStaticStream, killAllCg, runCg, runCgJson, type CgOptions } from "../helpers/cli-run.js";

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

interface InfoDoc {
  kind: string;
  config: { max_members: number; filters?: string[]; members?: string[]; member_mappings?: { member: string; partitions: number[] }[] };
  active_members: string[];
  partitions: { partition: number; member: string | null; active: boolean }[];
}

describe("cli static", () => {
  test("cli static - create balanced, ls/list and info, human and --json", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 4);
    const group = uniqueName("g");

    const created = await cg(["static", "create", "balanced", stream, group, "4", "m1", "m2", "--filter", `${stream}.*`]);
    assert.equal(created.code, 0, created.stderr);
    assert.equal(created.stdout.trim(), `created static consumer group ${group} on stream ${stream}: 4 partitions, members [m1 m2]`);
    const stored = await getStaticConsumerGroupConfig(env.js, stream, group);
    assert.deepEqual(stored, { max_members: 4, filters: [`${stream}.*`], members: ["m1", "m2"] });

    for (const ls of ["ls", "list"]) {
      const r = await cg(["static", ls, stream]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, `static consumer groups: [${group}]\n`);
    }
    const { doc: list } = await cgJson<{ kind: string; stream: string; groups: string[] }>(["static", "ls", stream]);
    assert.deepEqual(list, { kind: "static", stream, groups: [group] });

    const info = await cg(["static", "info", stream, group]);
    assert.equal(info.code, 0, info.stderr);
    assert.equal(
      info.stdout,
      [
        `config: max members=4, filters=[${stream}.*]`,
        "members: [m1 m2]",
        "currently active members: []",
        "",
        "PARTITION  MEMBER  ACTIVE",
        "0          m1      no",
        "1          m1      no",
        "2          m2      no",
        "3          m2      no",
        "",
      ].join("\n"),
    );
    const { doc } = await cgJson<InfoDoc>(["static", "info", stream, group]);
    assert.equal(doc.kind, "static");
    assert.deepEqual(doc.config, stored);
    assert.deepEqual(doc.active_members, []);
    assert.deepEqual(
      doc.partitions.map((p) => [p.partition, p.member]),
      [
        [0, "m1"],
        [1, "m1"],
        [2, "m2"],
        [3, "m2"],
      ],
    );

    // the same create again is a no-op, a different one an operational error
    assert.equal((await cg(["static", "create", "balanced", stream, group, "4", "m1", "m2", "--filter", `${stream}.*`])).code, 0);
    const mismatch = await cg(["static", "create", "balanced", stream, group, "4", "m1", "m3"]);
    assert.equal(mismatch.code, 1);
    assert.match(mismatch.stderr, /doesn't match ours/);
  });

  test("cli static - create mapped, with --json, and its partition table", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 6);
    const group = uniqueName("g");
    const { doc } = await cgJson<{ created: boolean; config: InfoDoc["config"]; warnings: string[] }>(["static", "create", "mapped", stream, group, "6", "a:0,1,5", "b:2-4"]);
    assert.equal(doc.created, true);
    assert.deepEqual(doc.warnings, []);
    assert.deepEqual(doc.config.member_mappings, [
      { member: "a", partitions: [0, 1, 5] },
      { member: "b", partitions: [2, 3, 4] },
    ]);
    const info = await cg(["static", "info", stream, group]);
    assert.match(info.stdout, /member mappings: \[a:0,1,5 b:2,3,4\]/);
    assert.match(info.stdout, /\n5 {10}a {7}no\n/);
  });

  test("cli static - create on a stream without a partition transform warns on stderr", async () => {
    const stream = uniqueName("S");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    const r = await cg(["static", "create", "balanced", stream, uniqueName("g"), "2", "m1"]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /^warning: .*has no \{\{partition\(\.\.\.\)\}\} subject transform/);
    const j = await cgJson<{ warnings: string[] }>(["static", "create", "balanced", stream, uniqueName("g"), "2", "m1"]);
    assert.equal(j.doc.warnings.length, 1);
  });

  test("cli static - member-info and its aliases, human and --json", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 4);
    const group = uniqueName("g");
    assert.equal((await cg(["static", "create", "balanced", stream, group, "4", "m1", "m2"])).code, 0);
    for (const alias of ["member-info", "memberinfo", "minfo"]) {
      const r = await cg(["static", alias, stream, group, "m2"]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(
        r.stdout,
        "member m2 is part of the consumer group membership\n***Warning*** member m2 is part of the consumer group membership but has NO active instance\npartitions: [2 3]\n",
      );
    }
    const outsider = await cg(["static", "minfo", stream, group, "zz"]);
    assert.equal(outsider.code, 0);
    assert.equal(outsider.stdout, "member zz is not part of the consumer group membership\n");
    const { doc } = await cgJson(["static", "minfo", stream, group, "m1"]);
    assert.deepEqual(doc, { kind: "static", stream, group, member: "m1", in_membership: true, active: false, partitions: [0, 1] });
  });

  test("cli static - step-down and its aliases unpin a running member", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const group = uniqueName("g");
    assert.equal((await cg(["static", "create", "balanced", stream, group, "2", "m1"])).code, 0);
    const noInstance = await cg(["static", "step-down", stream, group, "m1"]);
    assert.equal(noInstance.code, 1);
    assert.match(noInstance.stderr, /no instance of it is running/);

    const member = new CgProcess(["-s", url, "--json", "static", "consume", stream, group, "m1"]);
    await member.waitForText(/"event":"started"/, 20_000, "stderr");
    await waitFor(async () => (await runCgJson<{ active: boolean }>(["-s", url, "static", "minfo", stream, group, "m1"])).doc.active, 20_000, "m1 to be active");
    const active = await cg(["static", "minfo", stream, group, "m1"]);
    assert.match(active.stdout, /^member m1 is part of the consumer group membership\nmember m1 is active\n/);
    const info = await cgJson<InfoDoc>(["static", "info", stream, group]);
    assert.deepEqual(info.doc.active_members, ["m1"]);
    assert.ok(info.doc.partitions.every((p) => p.active));

    for (const alias of ["step-down", "stepdown", "sd"]) {
      const r = await cg(["static", alias, stream, group, "m1"]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "member m1 step down initiated\n");
    }
    const { doc } = await cgJson(["static", "sd", stream, group, "m1"]);
    assert.deepEqual(doc, { kind: "static", stream, group, member: "m1", stepped_down: true });
    const outsider = await cg(["static", "sd", stream, group, "zz"]);
    assert.equal(outsider.code, 1);
    assert.match(outsider.stderr, /not in the membership/);
    await member.kill();
  });

  test("cli static - delete asks for confirmation; rm and -f/--force", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const [g1, g2, g3] = [uniqueName("g"), uniqueName("g"), uniqueName("g")];
    for (const g of [g1, g2, g3]) assert.equal((await cg(["static", "create", "balanced", stream, g, "2", "m1"])).code, 0);

    const no = await cg(["static", "delete", stream, g1], { input: "n\n" });
    assert.equal(no.code, 1);
    assert.equal(no.stdout, "WARNING: this operation will cause all existing consumer members to terminate consuming are you sure? (y/n): \n");
    assert.equal(no.stderr, "error: operation canceled\n");
    const eof = await cg(["static", "rm", stream, g1]);
    assert.equal(eof.code, 1, "no answer at all cancels too");
    assert.ok((await listStaticConsumerGroups(env.js, stream)).includes(g1));

    const yes = await cg(["static", "delete", stream, g1], { input: "y\n" });
    assert.equal(yes.code, 0, yes.stderr);
    assert.match(yes.stdout, new RegExp(`deleted static consumer group ${g1} on stream ${stream}\n$`));
    assert.equal((await cg(["static", "rm", stream, g2, "-f"])).code, 0);
    const { doc } = await cgJson(["static", "delete", stream, g3, "--force"]);
    assert.deepEqual(doc, { kind: "static", stream, group: g3, deleted: true });
    assert.deepEqual(await listStaticConsumerGroups(env.js, stream), []);

    const again = await cg(["static", "rm", stream, g1, "-f"]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /there is no static group/);
  });

  test("cli static - operational errors exit 1 with the library's message", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 4);
    const missingStream = await cg(["static", "create", "balanced", uniqueName("nostream"), "g", "4", "m1"]);
    assert.equal(missingStream.code, 1);
    assert.match(missingStream.stderr, /^error: .*does not exist; create the stream first/);

    assert.equal((await cg(["static", "create", "balanced", stream, uniqueName("g"), "4", "m1"])).code, 0);
    const missingGroup = await runCg(["-s", url, "--json", "static", "info", stream, "nogroup"]);
    assert.equal(missingGroup.code, 1);
    assert.equal(missingGroup.stdout, "");
    assert.equal((JSON.parse(missingGroup.stderr) as { error: { code: string } }).error.code, "GROUP_NOT_FOUND");

    const badMapping = await cg(["static", "create", "mapped", stream, uniqueName("g"), "4", "m1:0,1"]);
    assert.equal(badMapping.code, 1);
    assert.match(badMapping.stderr, /unmapped partitions: 2, 3/);

    const notMember = await cg(["static", "consume", stream, (await listStaticConsumerGroups(env.js, stream))[0] ?? "", "zz"]);
    assert.equal(notMember.code, 1);
    assert.match(notMember.stderr, /not in the current static consumer group membership/);
  });

  test("cli static - ls of a stream without groups is empty", async () => {
    const { doc } = await cgJson<{ groups: string[] }>(["static", "ls", uniqueName("none")]);
    assert.deepEqual(doc.groups, []);
  });
});
