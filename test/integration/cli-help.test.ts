/**
 * `cg` help, usage errors (exit 2) and connection failures (exit 1). None of these
 * needs a server: usage errors must be reported before any connection attempt,
 * which the closed port passed with -s proves.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { freePort } from "../../src/server/launcher.js";
import { killAllCg, runCg } from "../helpers/cli-run.js";
import { COMMANDS } from "../../src/cli/commands/table.js";
import type { CommandSpec } from "../../src/cli/commands/spec.js";

let closed: string;

before(async () => {
  closed = `nats://127.0.0.1:${await freePort()}`;
});

after(async () => {
  await killAllCg();
});

describe("cli help", () => {
  test("cli help - cg --help works with no server and lists the command tree", async () => {
    const r = await runCg(["--help"]);
    assert.equal(r.code, 0, r.stderr);
    for (const text of ["Usage: cg", "static", "elastic", "pub", "demo", "--json", "--server", "--context", "Examples:", "Exit codes"]) {
      assert.ok(r.stdout.includes(text), `help lacks ${text}:\n${r.stdout}`);
    }
  });

  test("cli help - every subcommand's help lists examples", async () => {
    const paths = [
      ["static"],
      ["static", "prompt"],
      ["static", "ls"],
      ["static", "info"],
      ["static", "create"],
      ["static", "create", "balanced"],
      ["static", "create", "mapped"],
      ["static", "delete"],
      ["static", "member-info"],
      ["static", "step-down"],
      ["static", "consume"],
      ["elastic"],
      ["elastic", "prompt"],
      ["elastic", "ls"],
      ["elastic", "info"],
      ["elastic", "create"],
      ["elastic", "delete"],
      ["elastic", "add"],
      ["elastic", "drop"],
      ["elastic", "create-mapping"],
      ["elastic", "delete-mapping"],
      ["elastic", "member-info"],
      ["elastic", "step-down"],
      ["elastic", "consume"],
      ["pub"],
    ];
    for (const path of paths) {
      const r = await runCg(["-s", closed, ...path, "--help"]);
      assert.equal(r.code, 0, `${path.join(" ")}: ${r.stderr}`);
      assert.match(r.stdout, new RegExp(`Usage: cg ${path.join(" ")}`), path.join(" "));
      assert.match(r.stdout, /Examples:\n {2}\$ cg /, `${path.join(" ")} has no examples:\n${r.stdout}`);
    }
  });

  test("cli help - every command of the command table has help with examples, under each of its flavours", async () => {
    const paths: string[][] = [];
    const walk = (spec: CommandSpec, prefix: string[]): void => {
      const path = [...prefix, spec.name];
      paths.push(path);
      for (const sub of spec.subcommands ?? []) walk(sub, path);
    };
    for (const spec of COMMANDS) {
      if (spec.flavours) for (const kind of spec.flavours) walk(spec, [kind]);
      else walk(spec, []);
    }
    assert.ok(paths.length >= 29, `${paths.length} command paths`);
    for (const path of paths) {
      const r = await runCg(["-s", closed, ...path, "--help"]);
      assert.equal(r.code, 0, `${path.join(" ")}: ${r.stderr}`);
      assert.match(r.stdout, new RegExp(`^Usage: cg ${path.join(" ")}`), path.join(" "));
      assert.match(r.stdout, /Examples:\n {2}\$ cg /, `${path.join(" ")} has no examples:\n${r.stdout}`);
    }
  });

  test("cli help - aliases resolve to Go's commands", async () => {
    const aliases: [string[], string][] = [
      [["static", "list"], "static ls"],
      [["static", "rm"], "static delete"],
      [["static", "memberinfo"], "static member-info"],
      [["static", "minfo"], "static member-info"],
      [["static", "stepdown"], "static step-down"],
      [["static", "sd"], "static step-down"],
      [["static", "join"], "static consume"],
      [["elastic", "list"], "elastic ls"],
      [["elastic", "rm"], "elastic delete"],
      [["elastic", "cm"], "elastic create-mapping"],
      [["elastic", "createmapping"], "elastic create-mapping"],
      [["elastic", "dm"], "elastic delete-mapping"],
      [["elastic", "deletemapping"], "elastic delete-mapping"],
      [["elastic", "memberinfo"], "elastic member-info"],
      [["elastic", "minfo"], "elastic member-info"],
      [["elastic", "stepdown"], "elastic step-down"],
      [["elastic", "sd"], "elastic step-down"],
      [["elastic", "join"], "elastic consume"],
    ];
    for (const [path, canonical] of aliases) {
      const r = await runCg([...path, "--help"]);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(r.stdout.startsWith(`Usage: cg ${canonical}`), `${path.join(" ")} → ${r.stdout.split("\n")[0] ?? ""}`);
    }
  });

  test("cli help - --version prints the package version", async () => {
    const r = await runCg(["--version"]);
    assert.equal(r.code, 0);
    assert.match(r.stdout.trim(), /^\d+\.\d+\.\d+/);
  });
});

describe("cli usage errors", () => {
  const usage: [string, string[], RegExp][] = [
    ["no command", [], /Usage: cg/],
    ["unknown command", ["bogus"], /unknown command 'bogus'/],
    ["unknown static subcommand", ["static", "bogus"], /unknown command 'bogus'/],
    ["mode without subcommand", ["elastic"], /Usage: cg elastic/],
    ["unknown option", ["static", "ls", "s", "--bogus"], /unknown option '--bogus'/],
    ["missing argument", ["static", "info", "s"], /missing required argument 'name'/],
    ["missing members", ["static", "create", "balanced", "s", "g", "4"], /missing required argument 'members'/],
    ["too many arguments", ["static", "info", "s", "g", "extra"], /too many arguments/],
    ["max-members not a number", ["static", "create", "balanced", "s", "g", "abc", "m1"], /max-members must be an integer, got "abc"/],
    ["max-members zero", ["elastic", "create", "s", "g", "0"], /max-members must be an integer >= 1/],
    ["mapping without partitions", ["static", "create", "mapped", "s", "g", "4", "m1"], /bad member mapping "m1"/],
    ["mapping with a bad partition", ["elastic", "cm", "s", "g", "m1:0,x"], /"x" is not a partition number/],
    ["bad --sleep", ["static", "consume", "s", "g", "m1", "--sleep", "soon"], /--sleep must be a duration/],
    ["bad --wildcards", ["elastic", "create", "s", "g", "4", "--filter", "s.*", "--wildcards", "first"], /partitioning wildcard indexes are 1-based/],
    ["--wildcards count differs from --filter", ["elastic", "create", "s", "g", "4", "--filter", "s.*.*", "--wildcards", "1", "--wildcards", "2"], /one --wildcards per --filter/],
    ["--wildcards without --filter", ["elastic", "create", "s", "g", "4", "--wildcards", "1"], /--wildcards needs a --filter/],
    ["bad --max-buffered-msgs", ["elastic", "create", "s", "g", "4", "--max-buffered-msgs", "-5"], /must be an integer >= 0/],
    ["bad --timeout", ["--timeout", "never", "static", "ls", "s"], /--timeout must be a duration/],
    ["pub template without {key}", ["pub", "orders.x"], /no \{key\} placeholder/],
    ["pub --count 0", ["pub", "orders.{key}", "--count", "0"], /--count must be an integer >= 1/],
  ];
  for (const [name, args, message] of usage) {
    test(`cli usage - ${name} exits 2 without connecting`, async () => {
      const r = await runCg(["-s", closed, ...args]);
      assert.equal(r.code, 2, `exit ${String(r.code)}\n${r.stderr}`);
      assert.match(r.stderr, message);
      assert.doesNotMatch(r.stderr, /cannot connect/);
      assert.equal(r.stdout, "");
    });
  }

  test("cli usage - with --json usage errors are one JSON object on stderr", async () => {
    const r = await runCg(["-s", closed, "--json", "static", "create", "balanced", "s", "g", "abc", "m1"]);
    assert.equal(r.code, 2);
    assert.equal(r.stdout, "");
    const err = JSON.parse(r.stderr.trim().split("\n")[0] ?? "") as { error: { code: string; message: string; exit_code: number } };
    assert.equal(err.error.code, "USAGE");
    assert.equal(err.error.exit_code, 2);
    assert.match(err.error.message, /max-members/);
  });
});

describe("cli connection errors", () => {
  test("cli connect - no server exits 1 and says what to do", async () => {
    const r = await runCg(["-s", closed, "static", "ls", "orders"]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /^error: cannot connect to nats:\/\/127\.0\.0\.1:\d+/);
    assert.match(r.stderr, /--server|NATS_URL/);
  });

  test("cli connect - with --json the connection error is JSON on stderr", async () => {
    const r = await runCg(["-s", closed, "--json", "elastic", "ls", "orders"]);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, "");
    const err = JSON.parse(r.stderr.trim()) as { error: { code: string; exit_code: number } };
    assert.equal(err.error.code, "CONNECTION_FAILED");
    assert.equal(err.error.exit_code, 1);
  });

  test("cli connect - NATS_URL is used when -s is absent", async () => {
    const r = await runCg(["static", "ls", "orders"], { env: { NATS_URL: closed } });
    assert.equal(r.code, 1);
    assert.ok(r.stderr.includes(`cannot connect to ${closed}`), r.stderr);
  });

  test("cli connect - a missing --context exits 1", async () => {
    const r = await runCg(["--context", "nope", "static", "ls", "orders"]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /the nats context "nope" does not exist/);
  });
});
