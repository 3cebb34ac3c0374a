/**
 * Where the CLI writes: results on stdout (human text, one JSON document, or
 * NDJSON), diagnostics and events on stderr. Colour only on a TTY and never when
 * `NO_COLOR` is set.
 */
import type { ErrorReport } from "./errors.js";
import { redact } from "./redact.js";

/** ANSI styling that is a no-op when colour is off. */
export interface Styler {
  readonly enabled: boolean;
  bold(text: string): string;
  dim(text: string): string;
  red(text: string): string;
  green(text: string): string;
  yellow(text: string): string;
  cyan(text: string): string;
}

/** A stream we write to: `process.stdout` or `process.stderr`, or a test double. */
export interface OutStream {
  write(text: string): unknown;
  isTTY?: boolean;
}

/**
 * Whether to colour a stream: only a TTY, and not when `NO_COLOR` is set to a
 * non-empty value (https://no-color.org) or `TERM=dumb`.
 */
export function colourEnabled(stream: OutStream, env: NodeJS.ProcessEnv): boolean {
  if (env["NO_COLOR"] !== undefined && env["NO_COLOR"] !== "") return false;
  if (env["TERM"] === "dumb") return false;
  return stream.isTTY === true;
}

/** A styler, on or off. */
export function styler(enabled: boolean): Styler {
  const wrap =
    (open: number, close: number) =>
    (text: string): string =>
      enabled && text !== "" ? `\u001b[${open}m${text}\u001b[${close}m` : text;
  return { enabled, bold: wrap(1, 22), dim: wrap(2, 22), red: wrap(31, 39), green: wrap(32, 39), yellow: wrap(33, 39), cyan: wrap(36, 39) };
}

/**
 * The CLI's output channel. In JSON mode stdout carries exactly one JSON document
 * per command (NDJSON for streams such as `consume`), and stderr carries JSON lines.
 */
export class Output {
  /** Styling for stdout. */
  readonly out: Styler;
  /** Styling for stderr. */
  readonly err: Styler;

  constructor(
    /** Whether `--json` was given. */
    readonly json: boolean,
    readonly stdout: OutStream,
    readonly stderr: OutStream,
    env: NodeJS.ProcessEnv,
  ) {
    this.out = styler(!json && colourEnabled(stdout, env));
    this.err = styler(!json && colourEnabled(stderr, env));
  }

  /**
   * A command's result: the document itself in JSON mode, else its human rendering.
   *
   * @param doc - the JSON document
   * @param human - renders the document for people; an empty string prints nothing
   */
  result<T>(doc: T, human: (doc: T, s: Styler) => string): void {
    if (this.json) {
      this.stdout.write(`${JSON.stringify(doc, null, 2)}\n`);
      return;
    }
    const text = human(doc, this.out);
    if (text !== "") this.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
  }

  /** One record of a stream of results: an NDJSON line, or a human line. */
  record<T>(doc: T, human: (doc: T, s: Styler) => string): void {
    this.stdout.write(this.json ? `${JSON.stringify(doc)}\n` : `${human(doc, this.out)}\n`);
  }

  /** A diagnostic event on stderr: a JSON line, or a human line. */
  event<T>(doc: T, human: (doc: T, s: Styler) => string): void {
    // events carry server and library messages: masked like errors
    this.stderr.write(redact(this.json ? `${JSON.stringify(doc)}\n` : `${human(doc, this.err)}\n`));
  }

  /** A human-only note on stderr; silent in JSON mode. */
  note(text: string): void {
    if (!this.json) this.stderr.write(`${text}\n`);
  }

  /** A warning on stderr. */
  warn(text: string): void {
    const message = redact(text);
    if (this.json) this.stderr.write(`${JSON.stringify({ warning: message })}\n`);
    else this.stderr.write(`${this.err.yellow("warning:")} ${message}\n`);
  }

  /** An error on stderr: `error: …`, or `{"error":{…}}` in JSON mode. */
  error(report: ErrorReport): void {
    // the last line of defence: no error leaves cg with a password or token in it
    const message = redact(report.message);
    if (this.json) this.stderr.write(`${JSON.stringify({ error: { code: report.code, message, exit_code: report.exitCode } })}\n`);
    else this.stderr.write(`${this.err.red("error:")} ${message}\n`);
  }
}
