/**
 * The CLI's error classes and the one place that turns any error into a message,
 * a machine-readable code and an exit code.
 */
import { CommanderError } from "commander";
import { ConsumerGroupError } from "../index.js";
import { redact } from "./redact.js";

/** Exit codes of `cg`. */
export const ExitCode = {
  OK: 0,
  /** Operational error: the server said no, the group is missing, cannot connect… */
  ERROR: 1,
  /** Usage error: unknown command, missing or malformed argument. */
  USAGE: 2,
  /** Stopped by Ctrl-C (SIGINT), 128 + 2. */
  SIGINT: 130,
  /** Stopped by SIGTERM, 128 + 15. */
  SIGTERM: 143,
} as const;

/** A malformed command line: exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** An operational failure found by the CLI itself (not the library): exit code 1. */
export class CliError extends Error {
  /**
   * @param code - a stable machine-readable code, e.g. `CONNECTION_FAILED`
   * @param message - what is wrong and what to do
   */
  constructor(
    readonly code: string,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "CliError";
  }
}

/** Ends the command with an exit code, after it has reported what happened itself. */
export class ExitRequest extends Error {
  constructor(readonly exitCode: number) {
    super("");
    this.name = "ExitRequest";
  }
}

/** How an error is reported. */
export interface ErrorReport {
  /** A stable code: the library's `ConsumerGroupError.code`, `USAGE`, or a CLI code. */
  code: string;
  /** What is wrong and what to do. */
  message: string;
  /** The process exit code. */
  exitCode: number;
}

/**
 * Classifies any thrown value. The message has URL credentials and the
 * connection's secrets masked (see `redact.ts`).
 *
 * @param err - what was thrown
 */
export function describeError(err: unknown): ErrorReport {
  const report = classify(err);
  return { ...report, message: redact(report.message) };
}

function classify(err: unknown): ErrorReport {
  if (err instanceof CommanderError) {
    const help = err.code === "commander.helpDisplayed" || err.code === "commander.version" || (err.code === "commander.help" && err.exitCode === 0);
    return { code: help ? "HELP" : "USAGE", message: err.message.replace(/^error: /, ""), exitCode: help ? ExitCode.OK : ExitCode.USAGE };
  }
  if (err instanceof ExitRequest) return { code: "EXIT", message: "", exitCode: err.exitCode };
  if (err instanceof UsageError) return { code: "USAGE", message: err.message, exitCode: ExitCode.USAGE };
  if (err instanceof ConsumerGroupError) return { code: err.code, message: err.message, exitCode: ExitCode.ERROR };
  if (err instanceof CliError) return { code: err.code, message: err.message, exitCode: ExitCode.ERROR };
  const message = err instanceof Error ? err.message : String(err);
  return { code: "ERROR", message, exitCode: ExitCode.ERROR };
}
