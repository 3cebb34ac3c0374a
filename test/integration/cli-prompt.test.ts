/**
 * The interactive prompt (`cg static prompt` / `cg elastic prompt`), driven
 * through stdin: one question at a time, mode switching, Go's texts, and the
 * fixed Go prompt bugs (create-mapping applies what was typed; static has no drop).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { getElasticConsumerGroupConfig, getStaticConsumerGroupConfig, listElasticConsumerGroups } from "../../src/index.js";
import { startEnv, uniqueName, type TestEnv } from "../helpers/nats.js";
import { CgProcess, addSourceStream, addStaticStream, killAllCg, runCg } from "../helpers/cli-run.js";

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

/** Answers each question once it is asked: proves the prompt asks one thing at a time. */
async function converse(p: CgProcess, steps: [string, string][]): Promise<void> {
  for (const [question, answer] of steps) {
    const before = p.stdout.length;
    await p.waitFor((out) => out.slice(before).includes(question) || out.endsWith(question), 30_000, `the question "${question}"`);
    p.write(`${answer}\n`);
  }
}

describe("cli prompt", () => {
  test("cli prompt - static prompt: help, ls, info, member-info, describe, unknown command, no static drop, no consume or top", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "2", "m1"])).code, 0);
    const script = ["help", "ls", stream, `info ${stream} ${group}`, `minfo ${stream} ${group} m1`, `describe ${stream} ${group}`, "bogus things", `drop ${stream} ${group} m1`, "consume", "top", "exit", ""].join("\n");
    const p = new CgProcess(["-s", url, "static", "prompt"], { input: script });
    const r = await p.exited(30_000);
    assert.equal(r.code, 0, r.stderr);
    assert.ok(r.stdout.startsWith("[static]> "));
    assert.match(r.stdout, /COMMAND +WHAT IT DOES\nhelp, \? +this help/);
    assert.match(r.stdout, new RegExp(`\\[static\\]> \nstream name: \nstatic consumer groups: \\[${group}\\]\n`));
    assert.match(r.stdout, /config: max members=2, filters=\[\]\nmembers: \[m1\]\ncurrently active members: \[\]\n\nPARTITION {2}MEMBER {2}ACTIVE\n0 {10}m1 {6}no\n1 {10}m1 {6}no\n/);
    assert.match(r.stdout, /member m1 is part of the consumer group membership\n/);
    assert.match(r.stdout, /unknown command: bogus\n/);
    assert.match(r.stdout, /consume is not available in prompt mode: run "cg static consume <stream> <group> <member> \[--sleep 20ms\]" in another terminal/);
    assert.match(r.stdout, /top is not available in prompt mode/);
    assert.match(r.stdout, new RegExp(`static consumer group ${group} on stream ${stream} \\(described at `));
    assert.match(r.stdout, /^describe \[stream name\] +describe a static consumer group/m, "help lists the table's commands");
    assert.match(r.stderr, /error: drop is only available in elastic mode/);
    assert.deepEqual((await getStaticConsumerGroupConfig(env.js, stream, group)).members, ["m1"], "static drop did nothing");
  });

  test("cli prompt - static create asks everything, one question at a time", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 4);
    const group = uniqueName("g");
    const p = new CgProcess(["-s", url, "static", "prompt"]);
    await converse(p, [
      ["[static]> ", "create"],
      ["stream name: ", stream],
      ["consumer group name: ", group],
      ["max members: ", "abc"],
      ["max members: ", "4"], // asked again after the bad answer
      ["space separated set of members (hit return to set member mappings instead): ", ""],
      ["member name (hit return to finish): ", "a"],
      ["comma separated list of partition numbers: ", "0,1"],
      ["member name (hit return to finish): ", "b"],
      ["comma separated list of partition numbers: ", "2-3"],
      ["member name (hit return to finish): ", ""],
      ["filter (empty when done): ", `${stream}.*`],
      ["filter (empty when done): ", ""],
    ]);
    await p.waitForText(`created static consumer group ${group} on stream ${stream}`, 30_000);
    p.write("quit\n");
    const r = await p.exited(30_000);
    assert.equal(r.code, 0);
    assert.match(r.stderr, /max members must be an integer, got "abc"/);
    assert.deepEqual(await getStaticConsumerGroupConfig(env.js, stream, group), {
      max_members: 4,
      filters: [`${stream}.*`],
      member_mappings: [
        { member: "a", partitions: [0, 1] },
        { member: "b", partitions: [2, 3] },
      ],
    });
  });

  test("cli prompt - elastic: create, add, drop, create-mapping with the typed mappings, delete-mapping, step-down, delete", async () => {
    const stream = uniqueName("E");
    await addSourceStream(env.jsm, stream);
    const group = uniqueName("g");
    const p = new CgProcess(["-s", url, "elastic", "prompt"]);
    await converse(p, [
      ["[elastic]> ", "create"],
      ["stream name: ", stream],
      ["consumer group name: ", group],
      ["max members: ", "4"],
      ["filter (empty when done): ", `${stream}.*.*`],
      ["space separated partitioning wildcard indexes (empty for the whole subject): ", "2"],
      ["filter (empty when done): ", ""],
      ["max buffered messages (0 for no limit): ", "100"],
      ["max buffered bytes (0 for no limit): ", ""],
    ]);
    await p.waitForText(`created elastic consumer group ${group} on stream ${stream}`, 30_000);
    assert.deepEqual(await getElasticConsumerGroupConfig(env.js, stream, group), {
      max_members: 4,
      partitioning_filters: [{ filter: `${stream}.*.*`, partitioning_wildcards: [2] }],
      max_buffered_msg: 100,
    });

    await converse(p, [
      ["[elastic]> ", "add"],
      ["stream name: ", stream],
      ["consumer group name: ", group],
      ["space separated member names: ", "m1 m2 m3"],
    ]);
    await p.waitForText("added members: [m1 m2 m3]\n", 30_000);
    p.write(`drop ${stream} ${group} m3\n`);
    await p.waitForText("dropped members: [m3]\nremaining members: [m1 m2]\n", 30_000);

    // Go's prompt ignored the mappings typed here; ours applies them
    await converse(p, [
      ["[elastic]> ", `cm ${stream} ${group}`],
      ["member name (hit return to finish): ", "x"],
      ["comma separated list of partition numbers: ", "0,1,2"],
      ["member name (hit return to finish): ", "y"],
      ["comma separated list of partition numbers: ", "3"],
      ["member name (hit return to finish): ", ""],
    ]);
    await p.waitForText("member mappings: [x:0,1,2 y:3]\n", 30_000);
    const mapped = await getElasticConsumerGroupConfig(env.js, stream, group);
    assert.deepEqual(mapped.member_mappings, [
      { member: "x", partitions: [0, 1, 2] },
      { member: "y", partitions: [3] },
    ]);
    assert.equal(mapped.members, undefined);

    p.write(`createmapping ${stream} ${group} x:0,1 y:2,3\n`);
    await p.waitForText("member mappings: [x:0,1 y:2,3]\n", 30_000);

    await converse(p, [
      ["[elastic]> ", `dm ${stream} ${group}`],
      ["are you sure? (y/n): ", "n"],
    ]);
    await p.waitForText("error: operation canceled", 30_000, "stderr");
    await converse(p, [
      ["[elastic]> ", `delete-mapping ${stream} ${group}`],
      ["are you sure? (y/n): ", "y"],
    ]);
    await p.waitForText("deleted the member mappings of elastic consumer group", 30_000);
    assert.equal((await getElasticConsumerGroupConfig(env.js, stream, group)).member_mappings, undefined);

    p.write(`sd ${stream} ${group} nobody\n`);
    await p.waitForText(/error: member "nobody" is not in the membership/, 30_000, "stderr");

    await converse(p, [
      ["[elastic]> ", "rm"],
      ["stream name: ", stream],
      ["consumer group name: ", group],
      ["are you sure? (y/n): ", "y"],
    ]);
    await p.waitForText(`deleted elastic consumer group ${group} on stream ${stream}`, 30_000);
    assert.deepEqual(await listElasticConsumerGroups(env.js, stream), []);
    p.endInput(); // end of input leaves the prompt
    assert.equal((await p.exited(30_000)).code, 0);
  });

  test("cli prompt - switching modes changes the prompt; an empty answer cancels the command", async () => {
    const p = new CgProcess(["-s", url, "elastic", "prompt"], { input: "static\nelastic\nstatic\ninfo\n\nquit\n" });
    const r = await p.exited(30_000);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, "[elastic]> \n[static]> \n[elastic]> \n[static]> \nstream name: \n[static]> \n");
    assert.equal(r.stderr, "error: operation canceled\n");
  });

  test("cli prompt - --json is a usage error", async () => {
    const r = await runCg(["-s", url, "--json", "static", "prompt"]);
    assert.equal(r.code, 2);
  });
});
