/**
 * The `cg` program: the command table (Go cg's `static` and `elastic` modes,
 * plus `pub`, `demo` and `completion`), the connection flags and `--json`.
 * Building it connects to nothing.
 */
import { readFileSync } from "node:fs";
import { Command } from "commander";
import { addConnectionOptions } from "./connect.js";
import { examples } from "./commands/common.js";
import { registerCommands } from "./commands/table.js";
import { Output } from "./output.js";
import { redact } from "./redact.js";

function packageVersion(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { version?: string };
    return pkg.version ?? "0.0.0";
  } catch {
    return "0.0.0";
  }
}

/** How the program reports usage errors. */
export interface ProgramOptions {
  /** `--json` was on the command line: usage errors are printed as JSON too. */
  json: boolean;
}

/**
 * Builds the program. Usage errors are thrown as commander `CommanderError`s
 * (exit code 2 in `main.ts`), after commander has printed them.
 */
export function buildProgram(options: ProgramOptions = { json: false }): Command {
  const errors = new Output(options.json, process.stdout, process.stderr, process.env);
  const program = new Command("cg")
    .description("Partitioned consumer groups for NATS JetStream (a TypeScript port of orbit.go/pcgroups' cg)")
    .version(packageVersion(), "--version", "show the version")
    .helpOption("-h, --help", "show help")
    .option("--json", "print exactly one JSON document on stdout (NDJSON for consume); errors as JSON on stderr")
    .exitOverride()
    .showHelpAfterError("(add --help for usage and examples)")
    .configureHelp({ showGlobalOptions: true })
    .configureOutput({
      outputError: (text, write) => {
        if (options.json) errors.error({ code: "USAGE", message: text.trim().replace(/^error: /, ""), exitCode: 2 });
        else write(redact(text).replace(/^error:/, errors.err.red("error:")));
      },
    });
  addConnectionOptions(program);
  registerCommands(program);
  examples(program, [
    "cg static create balanced orders billing 4 m1 m2",
    "cg static consume orders billing m1",
    "cg elastic create orders shipping 4 --filter 'orders.*.*' --wildcards 1",
    "cg elastic add orders shipping m1 m2",
    "cg elastic info orders shipping --json",
    "cg pub 'orders.{key}.created' --keys 100 --count 10000",
    "cg -s nats://demo.nats.io:4222 static ls orders",
  ]);
  program.addHelpText(
    "after",
    "\nExit codes: 0 ok, 1 operational error, 2 usage error, 130 after Ctrl-C (143 after SIGTERM).\n" +
      "Connection: flags, else NATS_URL, NATS_USER, NATS_PASSWORD, NATS_TOKEN, NATS_CREDS, NATS_NKEY, NATS_JWT, NATS_SEED,\n" +
      "NATS_CERT, NATS_KEY, NATS_CA, NATS_TIMEOUT, else the nats CLI context (--context, NATS_CONTEXT or the selected one;\n" +
      "--no-context for none), else nats://127.0.0.1:4222. Passwords and tokens are never printed.\n",
  );
  return program;
}
