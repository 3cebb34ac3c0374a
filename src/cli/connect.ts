/**
 * Connection settings for `cg` (and `cg demo`): flags, then the `nats` CLI's
 * environment variables, then a `nats` CLI context, then the default
 * `nats://127.0.0.1:4222`. Everything is parsed before anything connects, so
 * `--help` and usage errors never need a server.
 */
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import { homedir } from "node:os";
import { join } from "node:path";
import { Option, type Command } from "commander";
import { jetstream, type JetStreamClient, type JetStreamOptions } from "@nats-io/jetstream";
import { connect, credsAuthenticator, nkeyAuthenticator, type Authenticator, type NatsConnection, type NodeConnectionOptions } from "@nats-io/transport-node";
import { CliError, UsageError } from "./errors.js";
import { parseDuration } from "./parse.js";

/** The server used when nothing else names one. */
export const DEFAULT_SERVER = "nats://127.0.0.1:4222";
/** Connect and JetStream API timeout when none is given, as the nats CLI's. */
export const DEFAULT_TIMEOUT_MS = 5000;

/** The connection flags as commander parsed them (env values included). */
export interface ConnectionFlags {
  server?: string;
  creds?: string;
  user?: string;
  password?: string;
  nkey?: string;
  tlscert?: string;
  tlskey?: string;
  tlsca?: string;
  timeout?: string;
  context?: string;
}

/** The flags, their environment variables (as the nats CLI names them) and help. */
const FLAGS: { flags: string; env: string; help: string }[] = [
  { flags: "-s, --server <url>", env: "NATS_URL", help: `NATS server URL(s), comma separated (default: ${DEFAULT_SERVER})` },
  { flags: "--creds <file>", env: "NATS_CREDS", help: "user credentials file (JWT + nkey seed)" },
  { flags: "--user <user>", env: "NATS_USER", help: "user name (or token, without --password)" },
  { flags: "--password <password>", env: "NATS_PASSWORD", help: "password" },
  { flags: "--nkey <file>", env: "NATS_NKEY", help: "user nkey seed file" },
  { flags: "--tlscert <file>", env: "NATS_CERT", help: "TLS client certificate file" },
  { flags: "--tlskey <file>", env: "NATS_KEY", help: "TLS client private key file" },
  { flags: "--tlsca <file>", env: "NATS_CA", help: "TLS certificate authority file" },
  { flags: "--timeout <duration>", env: "NATS_TIMEOUT", help: "connect and JetStream API timeout, e.g. 5s (default: 5s)" },
  { flags: "--context <name>", env: "NATS_CONTEXT", help: "nats CLI context to use (~/.config/nats/context/<name>.json)" },
];

/**
 * Adds the connection flags to a command (normally the root program, so every
 * subcommand accepts them).
 */
export function addConnectionOptions(cmd: Command): Command {
  for (const f of FLAGS) cmd.addOption(new Option(f.flags, f.help).env(f.env));
  return cmd;
}

/** The connection flags of a command, its parents' included. */
export function connectionFlags(cmd: Command): ConnectionFlags {
  return cmd.optsWithGlobals<ConnectionFlags>();
}

/** What a nats CLI context file holds that we use. */
export interface NatsContext {
  url?: string;
  user?: string;
  password?: string;
  token?: string;
  creds?: string;
  nkey?: string;
  cert?: string;
  key?: string;
  ca?: string;
  jetstream_domain?: string;
  jetstream_api_prefix?: string;
}

/** Fully resolved settings, ready to connect with. */
export interface ConnectionSettings {
  servers: string[];
  user?: string;
  password?: string;
  token?: string;
  creds?: string;
  nkey?: string;
  cert?: string;
  key?: string;
  ca?: string;
  timeoutMs: number;
  jsDomain?: string;
  jsApiPrefix?: string;
  /** The context used, if any. */
  context?: string;
}

/** The nats CLI's config directory: `$XDG_CONFIG_HOME/nats`, else `~/.config/nats`. */
export function natsConfigDir(env: NodeJS.ProcessEnv = process.env): string {
  const xdg = env["XDG_CONFIG_HOME"];
  return join(xdg && xdg !== "" ? xdg : join(env["HOME"] ?? homedir(), ".config"), "nats");
}

function expandHome(path: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  if (path === undefined || path === "") return undefined;
  return path === "~" || path.startsWith("~/") ? join(env["HOME"] ?? homedir(), path.slice(1)) : path;
}

/**
 * Reads a nats CLI context by name.
 *
 * @throws CliError `CONTEXT_NOT_FOUND` or `CONTEXT_INVALID`
 */
export function readContext(name: string, env: NodeJS.ProcessEnv = process.env): NatsContext {
  if (!/^[\w.-]+$/.test(name) || name.startsWith(".")) throw new UsageError(`invalid context name "${name}"`);
  const file = join(natsConfigDir(env), "context", `${name}.json`);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    throw new CliError("CONTEXT_NOT_FOUND", `the nats context "${name}" does not exist (no ${file}); list contexts with "nats context ls"`, { cause: err });
  }
  try {
    const parsed: unknown = JSON.parse(text);
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("not a JSON object");
    return parsed;
  } catch (err) {
    throw new CliError("CONTEXT_INVALID", `the nats context file ${file} is not valid JSON: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

/** The context selected with `nats context select`, if any. */
function selectedContext(env: NodeJS.ProcessEnv): string | undefined {
  try {
    const name = readFileSync(join(natsConfigDir(env), "context.txt"), "utf8").trim();
    return name === "" ? undefined : name;
  } catch {
    return undefined;
  }
}

/**
 * Resolves the settings: flag, else environment variable, else context, else default.
 * The context is `--context`, else `NATS_CONTEXT`, else the selected one.
 *
 * @throws UsageError for a malformed `--timeout`; CliError for a missing named context
 */
export function resolveConnection(flags: ConnectionFlags, env: NodeJS.ProcessEnv = process.env): ConnectionSettings {
  const pick = (flag: string | undefined, envName: string): string | undefined => {
    if (flag !== undefined && flag !== "") return flag;
    const v = env[envName];
    return v !== undefined && v !== "" ? v : undefined;
  };
  const contextName = pick(flags.context, "NATS_CONTEXT") ?? selectedContext(env);
  const ctx: NatsContext = contextName ? readContext(contextName, env) : {};
  const str = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);
  const server = pick(flags.server, "NATS_URL") ?? str(ctx.url) ?? DEFAULT_SERVER;
  const timeout = pick(flags.timeout, "NATS_TIMEOUT");
  const timeoutMs = timeout === undefined ? DEFAULT_TIMEOUT_MS : parseDuration(timeout, "--timeout");
  if (timeoutMs <= 0) throw new UsageError(`--timeout must be positive, got "${timeout ?? ""}"`);
  const settings: ConnectionSettings = {
    servers: server
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s !== ""),
    timeoutMs,
  };
  const set = <K extends keyof ConnectionSettings>(key: K, value: ConnectionSettings[K] | undefined): void => {
    if (value !== undefined) settings[key] = value;
  };
  set("user", pick(flags.user, "NATS_USER") ?? str(ctx.user));
  set("password", pick(flags.password, "NATS_PASSWORD") ?? str(ctx.password));
  set("token", str(ctx.token));
  set("creds", expandHome(pick(flags.creds, "NATS_CREDS") ?? str(ctx.creds), env));
  set("nkey", expandHome(pick(flags.nkey, "NATS_NKEY") ?? str(ctx.nkey), env));
  set("cert", expandHome(pick(flags.tlscert, "NATS_CERT") ?? str(ctx.cert), env));
  set("key", expandHome(pick(flags.tlskey, "NATS_KEY") ?? str(ctx.key), env));
  set("ca", expandHome(pick(flags.tlsca, "NATS_CA") ?? str(ctx.ca), env));
  set("jsDomain", str(ctx.jetstream_domain));
  set("jsApiPrefix", str(ctx.jetstream_api_prefix));
  set("context", contextName);
  return settings;
}

function readFile(path: string, what: string): Uint8Array {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new CliError("FILE_NOT_READABLE", `cannot read the ${what} file ${path}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

/** The nats.js connection options of some settings (reads the creds and nkey files). */
export function natsConnectionOptions(settings: ConnectionSettings): NodeConnectionOptions {
  const options: NodeConnectionOptions = { servers: settings.servers, timeout: settings.timeoutMs, name: "cg" };
  const authenticators: Authenticator[] = [];
  if (settings.creds) authenticators.push(credsAuthenticator(readFile(settings.creds, "credentials")));
  if (settings.nkey) {
    const seed = new TextDecoder().decode(readFile(settings.nkey, "nkey seed")).trim();
    authenticators.push(nkeyAuthenticator(new TextEncoder().encode(seed)));
  }
  if (authenticators.length > 0) options.authenticator = authenticators;
  // As the nats CLI: a user without a password is a token.
  if (settings.user !== undefined && settings.password === undefined) options.token = settings.user;
  else if (settings.user !== undefined) {
    options.user = settings.user;
    options.pass = settings.password ?? "";
  } else if (settings.token !== undefined) options.token = settings.token;
  if (settings.cert || settings.key || settings.ca) {
    options.tls = {};
    if (settings.cert) options.tls.certFile = settings.cert;
    if (settings.key) options.tls.keyFile = settings.key;
    if (settings.ca) options.tls.caFile = settings.ca;
    // nats.js gives Node no TLS server name for a server given by IP address, so Node checks the
    // certificate against "localhost". Check it against the IP itself, as Go clients (and the nats CLI) do.
    const ip = sameIpHost(settings.servers);
    if (ip) Object.assign(options.tls, { host: ip });
  }
  return options;
}

/** The IP address every server URL names, if they all name the same one. */
function sameIpHost(servers: readonly string[]): string | undefined {
  const hosts = new Set(
    servers.map((s) => {
      try {
        return new URL(s.includes("://") ? s : `nats://${s}`).hostname.replace(/^\[(.*)\]$/, "$1");
      } catch {
        return "";
      }
    }),
  );
  const [host] = hosts;
  return hosts.size === 1 && host !== undefined && isIP(host) !== 0 ? host : undefined;
}

/** A live connection and its JetStream client. */
export interface CliConnection {
  nc: NatsConnection;
  js: JetStreamClient;
  settings: ConnectionSettings;
}

/**
 * Connects with resolved settings.
 *
 * @throws CliError `CONNECTION_FAILED` saying what to check
 */
export async function connectNats(settings: ConnectionSettings): Promise<CliConnection> {
  const options = natsConnectionOptions(settings);
  let nc: NatsConnection;
  try {
    nc = await connect(options);
  } catch (err) {
    const detail = err instanceof Error ? err.message : String(err);
    const auth = /auth|permission/i.test(detail);
    const hint = auth
      ? "check the credentials (--user/--password, --creds, --nkey, or the context)"
      : "is a nats-server running there? Pass --server <url>, set NATS_URL, or select a nats CLI context with --context";
    const where = settings.servers.join(", ");
    throw new CliError("CONNECTION_FAILED", `cannot connect to ${where}${settings.context ? ` (context "${settings.context}")` : ""}: ${detail}; ${hint}`, { cause: err });
  }
  const jsOptions: JetStreamOptions = { timeout: settings.timeoutMs };
  if (settings.jsDomain) jsOptions.domain = settings.jsDomain;
  else if (settings.jsApiPrefix) jsOptions.apiPrefix = settings.jsApiPrefix;
  return { nc, js: jetstream(nc, jsOptions), settings };
}

/**
 * Resolves and connects in one step: what `cg demo` and every command use.
 *
 * @example
 * ```ts
 * const { nc, js } = await connectFromFlags(connectionFlags(cmd));
 * try { ... } finally { await nc.close(); }
 * ```
 */
export async function connectFromFlags(flags: ConnectionFlags, env: NodeJS.ProcessEnv = process.env): Promise<CliConnection> {
  return connectNats(resolveConnection(flags, env));
}
