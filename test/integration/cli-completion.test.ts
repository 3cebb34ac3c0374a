/**
 * `cg completion bash|zsh|fish`, tried in a real bash (`complete -p`, the
 * completion function driven as bash drives it, `compgen`), checked against the
 * command table; the prompt's help from the same table; and `cg … | head`
 * exiting quietly when the reader goes away. No server is needed.
 */
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { CG_BIN, cgEnv, killAllCg, runCg } from "../helpers/cli-run.js";
import { COMMANDS } from "../../src/cli/commands/table.js";
import { promptHelp } from "../../src/cli/commands/prompt.js";
import { flavourCommands } from "../../src/cli/commands/spec.js";

after(async () => {
  await killAllCg();
});

/** Runs a bash script (no rc files) in which the function `CG` runs the built cg; resolves to its output. */
function bash(script: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["--norc", "--noprofile", "-c", `CG() { "$NODE_BIN" "$CG_MAIN" "$@"; }\n${script}`], {
      env: cgEnv({ NODE_BIN: process.execPath, CG_MAIN: CG_BIN }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (c: string) => (stdout += c));
    child.stderr.setEncoding("utf8").on("data", (c: string) => (stderr += c));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`bash did not finish in 30 s: ${stderr}`));
    }, 30_000);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** What the bash completion offers for a command line whose last word is being typed. */
function completeScript(lines: string[]): string {
  const calls = lines.map((line) => {
    const words = line.split(" ");
    return `COMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")}); COMP_CWORD=${words.length - 1}; COMPREPLY=(); _cg_complete; echo "${line}|\${COMPREPLY[*]}"`;
  });
  return [`eval "$(CG completion bash)"`, ...calls].join("\n");
}

async function completions(lines: string[]): Promise<Map<string, string[]>> {
  const r = await bash(completeScript(lines));
  assert.equal(r.code, 0, r.stderr);
  const result = new Map<string, string[]>();
  for (const out of r.stdout.trim().split("\n")) {
    const [line, words] = out.split("|");
    result.set(line ?? "", (words ?? "").split(" ").filter((w) => w !== ""));
  }
  return result;
}

describe("cli completion", () => {
  test("cli completion - the bash script registers with complete, and completes commands, aliases and flags", async () => {
    const registered = await bash(`eval "$(CG completion bash)"; complete -p cg; type -t _cg_complete; compgen -W "$(_cg_commands 'elastic')" -- de`);
    assert.equal(registered.code, 0, registered.stderr);
    assert.deepEqual(registered.stdout.trim().split("\n"), ["complete -o default -F _cg_complete cg", "function", "delete", "delete-mapping", "deletemapping", "describe"]);

    const c = await completions([
      "cg ",
      "cg el",
      "cg static create ",
      "cg elastic c",
      "cg -s nats://127.0.0.1:4222 --json elastic cm ",
      "cg elastic consume --metrics-",
      "cg static join orders billing m1 --sl",
      "cg --js",
      "cg completion ",
      "cg static nosuch ",
    ]);
    assert.deepEqual(c.get("cg "), ["static", "elastic", "pub", "demo", "completion"]);
    assert.deepEqual(c.get("cg el"), ["elastic"]);
    assert.deepEqual(c.get("cg static create "), ["balanced", "mapped"]);
    assert.deepEqual(c.get("cg elastic c"), ["create", "create-mapping", "cm", "createmapping", "consume"]);
    assert.deepEqual(c.get("cg -s nats://127.0.0.1:4222 --json elastic cm "), [], "a leaf command offers no more commands (files, by -o default)");
    assert.deepEqual(c.get("cg elastic consume --metrics-"), ["--metrics-port", "--metrics-host"]);
    assert.deepEqual(c.get("cg static join orders billing m1 --sl"), ["--sleep"], "an alias gets its command's flags, and the flavour's");
    assert.deepEqual(c.get("cg --js"), ["--json", "--js-domain", "--js-api-prefix"]);
    assert.deepEqual(c.get("cg completion "), ["bash", "zsh", "fish"]);
    assert.deepEqual(c.get("cg static nosuch "), ["prompt", "ls", "list", "info", "create", "delete", "rm", "member-info", "memberinfo", "minfo", "step-down", "stepdown", "sd", "consume", "join", "repartition", "describe", "top", "permissions"], "an unknown word does not move the path");
  });

  test("cli completion - every command of the table, with its aliases, is completed under each flavour", async () => {
    const c = await completions(["cg static ", "cg elastic "]);
    for (const kind of ["static", "elastic"] as const) {
      const expected = flavourCommands(COMMANDS, kind).flatMap((spec) => [spec.name, ...(spec.aliases ?? [])]);
      assert.deepEqual(c.get(`cg ${kind} `), expected, kind);
    }
    const top = COMMANDS.filter((spec) => spec.flavours === undefined).map((spec) => spec.name);
    assert.deepEqual((await completions(["cg "])).get("cg "), ["static", "elastic", ...top]);
  });

  test("cli completion - zsh and fish scripts carry the same command tree; an unknown shell is a usage error", async () => {
    const zsh = await runCg(["completion", "zsh"]);
    assert.equal(zsh.code, 0, zsh.stderr);
    assert.match(zsh.stdout, /^#compdef cg\n/);
    assert.match(zsh.stdout, /bashcompinit/);
    assert.match(zsh.stdout, /^ {4}'elastic cm'\) echo '' ;;$/m);
    assert.match(zsh.stdout, /^complete -o default -F _cg_complete cg$/m);

    const fish = await runCg(["completion", "fish"]);
    assert.equal(fish.code, 0, fish.stderr);
    assert.match(fish.stdout, /^complete -c cg -f -n "__cg_at ''" -a 'static elastic pub demo completion'$/m);
    assert.match(fish.stdout, /^complete -c cg -f -n "__cg_at 'static create'" -a 'balanced mapped'$/m);
    assert.match(fish.stdout, /^complete -c cg -n "__cg_at 'elastic join'" -l metrics-port$/m);
    for (const spec of flavourCommands(COMMANDS, "elastic")) {
      for (const name of [spec.name, ...(spec.aliases ?? [])]) assert.ok(fish.stdout.includes(`'elastic ${name}'`), `fish knows elastic ${name}`);
    }

    const bad = await runCg(["completion", "tcsh"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /Allowed choices are bash, zsh, fish/);
  });

  test("cli completion - the prompt's help lists the table's commands and aliases for its flavour", () => {
    const elastic = promptHelp(COMMANDS, "elastic").map(([names]) => names);
    assert.ok(elastic.includes("create-mapping, cm, createmapping [stream name mappings...]"), elastic.join("\n"));
    assert.ok(elastic.includes("describe [stream name]"));
    assert.ok(elastic.some((n) => n.startsWith("consume, join")));
    const staticNames = promptHelp(COMMANDS, "static").map(([names]) => names);
    assert.ok(!staticNames.some((n) => n.startsWith("add")), "no add in static mode");
    assert.ok(staticNames.includes("create [stream group max-members]"));
  });
});

describe("cli pipes", () => {
  test("cli pipes - cg … | head exits quietly when the reader goes away (exit 0, no EPIPE)", async () => {
    // pipefail: the exit code is cg's; a long help and a script, each cut after one line
    for (const args of ["--help", "static --help", "completion bash", "completion fish"]) {
      const r = await bash(`set -o pipefail; CG ${args} | head -1 >/dev/null; echo "exit=$?"`);
      assert.equal(r.stdout.trim(), "exit=0", `cg ${args}: ${r.stderr}`);
      assert.doesNotMatch(r.stderr, /EPIPE|Unhandled|node:events/, `cg ${args} printed no error`);
    }
  });
});
