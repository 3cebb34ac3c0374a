/**
 * What one `cg` invocation shares between its parts: the output channel, a lazy
 * connection (made on first use, after parsing), and stdin questions.
 */
import type { Command } from "commander";
import type { JetStreamClient } from "@nats-io/jetstream";
import { ConsumerGroupError } from "../index.js";
import { connectionFlags, connectNats, describeJetStreamTarget, resolveConnection, type CliConnection, type ConnectionSettings } from "./connect.js";
import { CliError } from "./errors.js";
import { LineReader } from "./lines.js";
import { Output } from "./output.js";

/** The global flags every command sees. */
export interface GlobalFlags {
  json?: boolean;
}

/** One invocation's state. Close it when the command is done. */
export class Session {
  readonly out: Output;
  private connection: Promise<CliConnection> | undefined;
  private reader: LineReader | undefined;
  private readonly settings: () => ConnectionSettings;

  constructor(
    json: boolean,
    settings: () => ConnectionSettings,
    readonly env: NodeJS.ProcessEnv = process.env,
  ) {
    this.out = new Output(json, process.stdout, process.stderr, env);
    this.settings = settings;
  }

  /** The session of a commander action: `--json` and the connection flags from the command and its parents. */
  static of(cmd: Command): Session {
    const json = cmd.optsWithGlobals<GlobalFlags>().json === true;
    const flags = connectionFlags(cmd);
    // Resolve now, so a bad --timeout or a missing --context is reported before any work.
    const settings = resolveConnection(flags);
    return new Session(json, () => settings);
  }

  /** The JetStream client, connecting on first use. */
  async js(): Promise<JetStreamClient> {
    return (await this.connect()).js;
  }

  /** The connection, made on first use. */
  connect(): Promise<CliConnection> {
    // A failed attempt is not kept: the prompt may try again once the server is up.
    this.connection ??= connectNats(this.settings()).catch((err: unknown) => {
      this.connection = undefined;
      throw err;
    });
    return this.connection;
  }

  /**
   * An error that says "jetstream is not enabled" because nobody answered at the
   * domain or API prefix given (a typo, or a domain of another server): it says so,
   * keeping its code. Any other error is returned as it is.
   */
  explain(err: unknown): unknown {
    const target = describeJetStreamTarget(this.settings());
    // a publish goes to its subject, not through the API: a domain cannot be why nobody stored it
    const isPublish = err instanceof CliError && err.code === "PUBLISH_FAILED";
    if (target === undefined || !(err instanceof Error) || isPublish || !unanswered(err)) return err;
    const code = err instanceof ConsumerGroupError || err instanceof CliError ? err.code : "SERVER_ERROR";
    return new CliError(code, `${err.message}; nothing answers the JetStream API at ${target}: check the domain or prefix (the server's own is in "nats account info")`, { cause: err });
  }

  /** Questions on stdin. Prompts go to stdout, or to stderr in JSON mode (stdout is for the document). */
  get lines(): LineReader {
    this.reader ??= new LineReader(process.stdin, this.out.json ? process.stderr : process.stdout);
    return this.reader;
  }

  /** Closes stdin reading and the connection (draining nothing: commands finish their work first). Idempotent. */
  async close(): Promise<void> {
    this.reader?.close();
    this.reader = undefined;
    const connection = this.connection;
    this.connection = undefined;
    if (!connection) return;
    try {
      const { nc } = await connection;
      if (!nc.isClosed()) await nc.close();
    } catch {
      // the connection never came up: the error was reported where it was used
    }
  }
}

/**
 * Runs a command body with its session, closing the session afterwards.
 *
 * @param cmd - the commander command (last argument of an action)
 * @param body - the command
 */
export async function withSession(cmd: Command, body: (session: Session) => Promise<void>): Promise<void> {
  const session = Session.of(cmd);
  try {
    await body(session);
  } catch (err) {
    throw session.explain(err);
  } finally {
    await session.close();
  }
}

/** Whether an error, or one of its causes, is a JetStream request nobody answered. */
function unanswered(err: Error): boolean {
  for (let current: unknown = err, depth = 0; depth < 6 && current instanceof Error; depth++, current = current.cause) {
    if (/jetstream is not enabled|no responders/i.test(current.message) || current.name === "NoRespondersError") return true;
  }
  return false;
}
