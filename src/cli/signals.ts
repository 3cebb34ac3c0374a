/**
 * SIGINT and SIGTERM. By default `cg` exits at once with 130 (SIGINT) or 143
 * (SIGTERM); long-running commands (`consume`, `pub`) install their own handler
 * to stop gracefully first.
 */
import { ExitCode } from "./errors.js";

/** The signals `cg` handles. */
export type StopSignal = "SIGINT" | "SIGTERM";

type Handler = (signal: StopSignal) => void;

const handlers: Handler[] = [];
let installed = false;

/** The exit code after a signal: 130 for SIGINT, 143 for SIGTERM (128 + signal number). */
export function exitCodeFor(signal: StopSignal): number {
  return signal === "SIGINT" ? ExitCode.SIGINT : ExitCode.SIGTERM;
}

/**
 * Installs the process handlers once.
 *
 * @param fallback - what to do when no command handler is installed
 */
export function installSignalHandlers(fallback: Handler): void {
  if (installed) return;
  installed = true;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      const handler = handlers[handlers.length - 1] ?? fallback;
      handler(signal);
    });
  }
}

/**
 * Handles the stop signals until the returned function is called.
 *
 * @returns a function that removes the handler
 */
export function onStopSignal(handler: Handler): () => void {
  handlers.push(handler);
  return () => {
    const i = handlers.lastIndexOf(handler);
    if (i >= 0) handlers.splice(i, 1);
  };
}
