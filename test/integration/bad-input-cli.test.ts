/**
 * Bad input, `cg` side: a table of cases, one test each, run against the built
 * binary. Usage errors (malformed numbers, mappings, durations, wildcard indexes,
 * unknown commands or options, missing arguments) exit 2; operational errors
 * (invalid names, Go's config rules, missing streams or groups, hand-edited
 * configs) exit 1 with the library's message. Every case runs twice: for people
 * (stdout empty, `error: <message>` on stderr) and with `--json` (one
 * `{"error":{code,message,exit_code}}` on stderr). Nothing may be left on the server.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { killAllCg, runCg } from "../helpers/cli-run.js";
import { CATALOGUE, assertUnchanged, serverState, startCatalogue, type CatalogueEnv } from "../helpers/security-state.js";

const { S4, S3, EV } = CATALOGUE;

interface CliCase {
  what: string;
  args: string[];
  /** 2: usage, 1: operational. */
  exit: 1 | 2;
  /** The error code `--json` reports (`USAGE` for exit 2). */
  code: string;
  message: RegExp;
  /** Text for stdin (the delete confirmation). */
  input?: string;
}

const usage = (what: string, args: string[], message: RegExp): CliCase => ({ what, args, exit: 2, code: "USAGE", message });
const failure = (what: string, args: string[], code: string, message: RegExp, input?: string): CliCase => ({
  what,
  args,
  exit: 1,
  code,
  message,
  ...(input === undefined ? {} : { input }),
});

const CASES: CliCase[] = [
  // --- usage: exit 2, before anything connects ----------------------------------------------
  usage("static create balanced with max-members 4.5", ["static", "create", "balanced", S4, "g", "4.5", "m1"], /max-members must be an integer, got "4\.5"/),
  usage("static create balanced with no members", ["static", "create", "balanced", S4, "g", "4"], /missing required argument 'members'/),
  usage("static create mapped with a half-open range m1:0-", ["static", "create", "mapped", S4, "g", "4", "m1:0-"], /bad member mapping "m1:0-"/),
  usage("static create mapped with a reversed range m1:3-1", ["static", "create", "mapped", S4, "g", "4", "m1:3-1"], /bad partition range "3-1": write it low-high/),
  usage("static create mapped with no member name :0,1", ["static", "create", "mapped", S4, "g", "4", ":0,1"], /bad member mapping ":0,1": write it as <member>:<partition>/),
  usage("static create mapped with two colons", ["static", "create", "mapped", S4, "g", "4", "m1:0:1"], /bad member mapping "m1:0:1"/),
  usage("static member-info without a member", ["static", "member-info", S4, "sg"], /missing required argument 'member'/),
  usage("static consume with --sleep 5parsecs", ["static", "consume", S4, "sg", "m1", "--sleep", "5parsecs"], /--sleep must be a duration such as 20ms/),
  usage("an unknown static subcommand", ["static", "frobnicate", S4], /unknown command 'frobnicate'/),
  usage("an unknown option", ["static", "ls", S4, "--frobnicate"], /unknown option '--frobnicate'/),
  usage("--timeout 0s", ["--timeout", "0s", "static", "ls", S4], /--timeout must be positive/),
  usage("elastic create with max-members abc", ["elastic", "create", EV, "g", "abc"], /max-members must be an integer, got "abc"/),
  usage("elastic create with --wildcards 0", ["elastic", "create", EV, "g", "4", "--filter", "EV.*", "--wildcards", "0"], /1-based/),
  usage("elastic create with --max-buffered-bytes lots", ["elastic", "create", EV, "g", "4", "--max-buffered-bytes", "lots"], /must be an integer, got "lots"/),
  usage("elastic add with no members", ["elastic", "add", EV, "eg"], /missing required argument 'members'/),
  usage("elastic create-mapping with partition x", ["elastic", "create-mapping", EV, "eg", "m1:0,1", "m2:2,x"], /"x" is not a partition number/),
  usage("elastic drop without a group", ["elastic", "drop", EV], /missing required argument/),

  // --- operational: exit 1 with the library's message ---------------------------------------
  failure("static create on a missing stream", ["static", "create", "balanced", "NOPE", "g", "4", "m1"], "STREAM_NOT_FOUND", /the static consumer group's stream "NOPE" does not exist; create the stream first/),
  failure("static create with a group name with a dot", ["static", "create", "balanced", S4, "g.x", "4", "m1"], "INVALID_NAME", /group name "g\.x" contains "\."/),
  failure("static create with a member name with a wildcard", ["static", "create", "balanced", S4, "g", "4", "m1", "m>"], "INVALID_NAME", /member name "m>" contains ">"/),
  failure("static create mapped with partition 5 of 4", ["static", "create", "mapped", S4, "g", "4", "m1:0,1", "m2:2,5"], "PARTITION_OUT_OF_RANGE", /got 5, max members 4/),
  failure("static create mapped with a partition mapped twice", ["static", "create", "mapped", S4, "g", "4", "m1:0-2", "m2:2,3"], "DUPLICATE_PARTITION", /partition 2 is mapped twice/),
  failure("static create with max-members 4 on a stream partitioned into 3", ["static", "create", "balanced", S3, "g", "4", "m1"], "PARTITION_COUNT_MISMATCH", /use maxMembers 3/),
  failure("static create of an existing group with other members", ["static", "create", "balanced", S4, "sg", "4", "m1", "m3"], "CONFIG_MISMATCH", /already exists with a different config/),
  failure("static info of a missing group", ["static", "info", S4, "nope"], "GROUP_NOT_FOUND", /no group "nope" on stream "S4".*cg static ls S4/),
  failure("static info of a config hand-edited into invalid JSON", ["static", "info", S4, "badjson"], "CONFIG_DECODE", /invalid JSON value for the static consumer group's config/),
  failure('static info of a config hand-edited with "max_members":"x"', ["static", "info", S4, "wrongtype"], "CONFIG_DECODE", /max_members must be a non-negative integer, got "x"/),
  failure("static info of a config purged instead of deleted", ["static", "info", S4, "purged"], "GROUP_NOT_FOUND", /not found/),
  failure("static step-down of a non-member", ["static", "step-down", S4, "sg", "m9"], "NOT_IN_MEMBERSHIP", /member "m9" is not in the membership of static group "sg"/),
  failure("static step-down of a member with no running instance", ["static", "step-down", S4, "sg", "m2"], "GROUP_NOT_FOUND", /no instance of it is running/),
  failure("static consume as a non-member", ["static", "consume", S4, "sg", "m9"], "NOT_IN_MEMBERSHIP", /not in the current static consumer group membership/),
  failure("static consume of a config hand-edited into a JSON array", ["static", "consume", S4, "notobject", "m1"], "CONFIG_DECODE", /must be a JSON object/),
  failure("static delete of a missing group", ["static", "delete", S4, "nope", "-f"], "GROUP_NOT_FOUND", /no static group "nope"/),
  failure("static delete answered with no", ["static", "delete", S4, "sg"], "CANCELED", /operation canceled/, "n\n"),
  failure("elastic create on a missing stream", ["elastic", "create", "NOPE", "g", "4", "--filter", "NOPE.*", "--wildcards", "1"], "STREAM_NOT_FOUND", /source stream "NOPE" does not exist/),
  failure("elastic create with a literal filter", ["elastic", "create", EV, "g", "4", "--filter", "EV.orders", "--wildcards", "none"], "INVALID_PARTITIONING_FILTER", /at least one \* wildcard/),
  failure(
    "elastic create with overlapping filters",
    ["elastic", "create", EV, "g", "4", "--filter", "EV.a.*", "--wildcards", "1", "--filter", "EV.*.b", "--wildcards", "1"],
    "OVERLAPPING_FILTERS",
    /"EV\.a\.\*" and "EV\.\*\.b" overlap/,
  ),
  failure("elastic create with more wildcard indexes than * tokens", ["elastic", "create", EV, "g", "4", "--filter", "EV.*", "--wildcards", "1,2"], "INVALID_PARTITIONING_FILTER", /must not be larger/),
  failure("elastic create of an existing group with another max-members", ["elastic", "create", EV, "eg", "8", "--filter", "EV.*", "--wildcards", "1"], "CONFIG_IMMUTABLE", /can not be updated/),
  failure("elastic add to a group that uses mappings", ["elastic", "add", EV, "egmap", "m3"], "GROUP_USES_MAPPINGS", /can't add members/),
  failure("elastic add with a member name with a space", ["elastic", "add", EV, "eg", "m 3"], "INVALID_NAME", /contains whitespace/),
  failure("elastic drop from a missing group", ["elastic", "drop", EV, "nope", "m1"], "GROUP_NOT_FOUND", /no group "nope"/),
  failure("elastic create-mapping to partition 9 of 4", ["elastic", "create-mapping", EV, "eg", "m1:0,1", "m2:2,9"], "PARTITION_OUT_OF_RANGE", /got 9, max members 4/),
  failure("elastic create-mapping with a member mapped twice", ["elastic", "cm", EV, "eg", "m1:0", "m1:1-3"], "DUPLICATE_MEMBER", /"m1" is mapped twice/),
  failure("elastic create-mapping leaving partitions unmapped", ["elastic", "cm", EV, "eg", "m1:0", "m2:1"], "PARTITION_COVERAGE", /unmapped partitions: 2, 3/),
  failure("elastic delete-mapping of a missing group", ["elastic", "delete-mapping", EV, "nope"], "GROUP_NOT_FOUND", /not found/),
  failure("elastic consume of a missing group", ["elastic", "consume", EV, "nope", "m1"], "STREAM_NOT_FOUND", /"EV-nope" does not exist; create the group first/),
  failure("elastic consume of a config hand-edited into invalid JSON", ["elastic", "consume", EV, "ebadjson", "m1"], "CONFIG_DECODE", /invalid JSON value/),
  failure("elastic step-down of a non-member", ["elastic", "step-down", EV, "eg", "m9"], "NOT_IN_MEMBERSHIP", /"m9" is not in the membership of elastic group "eg"/),
  failure('elastic info of a config hand-edited with "members":"m1"', ["elastic", "info", EV, "ewrongtype"], "CONFIG_DECODE", /members must be an array, got "m1"/),
  failure("elastic member-info of a config hand-edited with max_members 0", ["elastic", "member-info", EV, "ezero", "m1"], "INVALID_MAX_MEMBERS", /invalid elastic consumer group config/),
  failure("elastic delete of a missing group", ["elastic", "rm", EV, "nope", "--force"], "GROUP_NOT_FOUND", /no elastic group "nope"/),
];

describe("bad input - cg", () => {
  let env: CatalogueEnv;

  before(async () => {
    env = await startCatalogue();
  });
  after(async () => {
    await killAllCg();
    await env?.close();
  });

  test("bad input - cg: the catalogue has usage and operational cases for both modes", () => {
    assert.ok(CASES.filter((c) => c.exit === 2).length >= 10);
    assert.ok(CASES.filter((c) => c.exit === 1 && c.args[0] === "static").length >= 10);
    assert.ok(CASES.filter((c) => c.exit === 1 && c.args[0] === "elastic").length >= 10);
  });

  for (const c of CASES) {
    test(`bad input - cg ${c.args.slice(0, 2).join(" ")}: ${c.what} → exit ${c.exit} ${c.code}`, { timeout: 90_000 }, async () => {
      const before = await serverState(env.main.jsm);
      const opts = c.input === undefined ? {} : { input: c.input };

      // A generous API timeout: the machine may be busy (a case's own --timeout comes later and wins).
      const server = ["-s", env.server.url, "--timeout", "20s"];
      const human = await runCg([...server, ...c.args], opts);
      assert.equal(human.code, c.exit, `exit code of cg ${c.args.join(" ")}\n--- stderr:\n${human.stderr}`);
      assert.equal(human.stdout.replace(/^WARNING:.*\(y\/n\): \n?/, ""), "", "nothing on stdout but the question");
      assert.match(human.stderr, /^error: /m);
      assert.match(human.stderr, c.message);
      assert.doesNotMatch(human.stderr, /cannot connect|\n\s+at /, "no connection problem and no stack trace");

      const json = await runCg([...server, "--json", ...c.args], opts);
      assert.equal(json.code, c.exit, `exit code of cg --json ${c.args.join(" ")}\n--- stderr:\n${json.stderr}`);
      assert.equal(json.stdout, "");
      const line = json.stderr
        .trim()
        .split("\n")
        .find((l) => l.startsWith('{"error"'));
      assert.ok(line, `a JSON error on stderr, got:\n${json.stderr}`);
      const doc = JSON.parse(line) as { error: { code: string; message: string; exit_code: number } };
      assert.equal(doc.error.code, c.code, doc.error.message);
      assert.equal(doc.error.exit_code, c.exit);
      assert.match(doc.error.message, c.message);

      await assertUnchanged(env.main.jsm, before, `cg ${c.args.join(" ")}`);
    });
  }
});
