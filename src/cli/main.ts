#!/usr/bin/env node
/**
 * The `cg` executable: parses, runs one command, and exits with 0 (ok), 1
 * (operational error), 2 (usage error), 130 (Ctrl-C) or 143 (SIGTERM).
 */
import { CommanderError } from "commander";
import { describeError } from "./errors.js";
import { Output } from "./output.js";
import { buildProgram } from "./program.js";
import { exitCodeFor, installSignalHandlers } from "./signals.js";

/**
 * A reader that went away (`cg --help | head -1`) ends cg quietly with exit code 0,
 * instead of an unhandled EPIPE: the reader has what it wanted.
 */
function exitQuietlyWhenTheReaderLeaves(stream: NodeJS.WriteStream): void {
  stream.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EPIPE") process.exit(0);
    throw err;
  });
}

function flush(stream: NodeJS.WriteStream): Promise<void> {
  return new Promise((resolve) => stream.write("", () => resolve()));
}

async function main(argv: string[]): Promise<number> {
  const end = argv.indexOf("--");
  const json = (end === -1 ? argv : argv.slice(0, end)).includes("--json");
  // Until a command installs its own (consume, pub), a signal ends cg at once.
  installSignalHandlers((signal) => process.exit(exitCodeFor(signal)));
  try {
    await buildProgram({ json }).parseAsync(argv);
    // a command may report failure without throwing (e.g. the demo's verification)
    return Number(process.exitCode ?? 0);
  } catch (err) {
    const report = describeError(err);
    // commander has printed its own usage errors already
    if (!(err instanceof CommanderError) && report.message !== "") new Output(json, process.stdout, process.stderr, process.env).error(report);
    return report.exitCode;
  }
}

exitQuietlyWhenTheReaderLeaves(process.stdout);
exitQuietlyWhenTheReaderLeaves(process.stderr);
const code = await main(process.argv);
await Promise.all([flush(process.stdout), flush(process.stderr)]);
process.exit(code);
