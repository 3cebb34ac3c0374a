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
import { connect, type Authenticator, type NatsConnection, type NodeConnectionOptions } from "@nats-io/transport-node";
import { credsFileAuthenticator, nkeyFileAuthenticator, resolveLiteral, splitUrlCredentials, userJwtAuthenticator } from "./credentials.js";
import { CliError, UsageError } from "./errors.js";
import { parseDuration } from "./parse.js";
import { redact, redactUrls, rememberSecret } from "./redact.js";
import { wantsTlsFirst } from "./tls-probe.js";

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
  token?: string;
  nkey?: string;
  jwt?: string;
  seed?: string;
  tlscert?: string;
  tlskey?: string;
  tlsca?: string;
  tlsfirst?: boolean;
  tlsFirst?: boolean;
  timeout?: string;
  jsDomain?: string;
  jsApiPrefix?: string;
  inboxPrefix?: string;
  /** A context name, or `false` after `--no-context`. */
  context?: string | false;
}

/** The flags, their environment variables (as the nats CLI names them) and help. */
const FLAGS: { flags: string; env?: string; help: string; hidden?: boolean }[] = [
  { flags: "-s, --server <url>", env: "NATS_URL", help: `NATS server URL(s), comma separated; may carry user:password@ or token@ (default: ${DEFAULT_SERVER})` },
  { flags: "--user <user>", env: "NATS_USER", help: "user name (or token, without --password)" },
  { flags: "--password <password>", env: "NATS_PASSWORD", help: "password" },
  { flags: "--token <token>", env: "NATS_TOKEN", help: "authentication token" },
  { flags: "--creds <file>", env: "NATS_CREDS", help: "user credentials file (JWT + nkey seed)" },
  { flags: "--nkey <file>", env: "NATS_NKEY", help: "user nkey seed file" },
  { flags: "--jwt <jwt>", env: "NATS_JWT", help: "user JWT: the value, file://<path> or env://<NAME> (with --seed)" },
  { flags: "--seed <seed>", env: "NATS_SEED", help: "user nkey seed of --jwt: the value, file://<path> or env://<NAME>" },
  { flags: "--tlscert <file>", env: "NATS_CERT", help: "TLS client certificate file" },
  { flags: "--tlskey <file>", env: "NATS_KEY", help: "TLS client private key file" },
  { flags: "--tlsca <file>", env: "NATS_CA", help: "TLS certificate authority file" },
  { flags: "--tlsfirst", help: "perform the TLS handshake before expecting the server greeting" },
  { flags: "--tls-first", help: "alias of --tlsfirst", hidden: true },
  { flags: "--timeout <duration>", env: "NATS_TIMEOUT", help: "connect and JetStream API timeout, e.g. 5s (default: 5s)" },
  { flags: "--js-domain <domain>", help: "JetStream domain to access" },
  { flags: "--js-api-prefix <prefix>", help: "subject prefix of the JetStream API (instead of --js-domain)" },
  { flags: "--inbox-prefix <prefix>", help: "custom prefix of reply inboxes (instead of _INBOX)" },
  { flags: "--context <name>", env: "NATS_CONTEXT", help: "nats CLI context to use (~/.config/nats/context/<name>.json)" },
  { flags: "--no-context", help: "use no nats CLI context, not even the selected one or NATS_CONTEXT" },
];

/**
 * Adds the connection flags to a command (normally the root program, so every
 * subcommand accepts them).
 */
export function addConnectionOptions(cmd: Command): Command {
  for (const f of FLAGS) {
    const option = new Option(f.flags, f.help);
    if (f.env) option.env(f.env);
    if (f.hidden) option.hideHelp();
    cmd.addOption(option);
  }
  return cmd;
}

/** The connection flags of a command, its parents' included. */
export function connectionFlags(cmd: Command): ConnectionFlags {
  return cmd.optsWithGlobals<ConnectionFlags>();
}

/** What a nats CLI context file holds that we use (the nats CLI's field names). */
export interface NatsContext {
  url?: string;
  user?: string;
  password?: string;
  token?: string;
  creds?: string;
  nkey?: string;
  user_jwt?: string;
  user_seed?: string;
  cert?: string;
  key?: string;
  ca?: string;
  tls_first?: boolean;
  jetstream_domain?: string;
  jetstream_api_prefix?: string;
  inbox_prefix?: string;
}

/** Where a setting came from: reported in errors, so they point at what to fix. */
export type SettingSource = "flag" | "environment" | "context" | "url" | "default";

/** Fully resolved settings, ready to connect with. */
export interface ConnectionSettings {
  /** Server URLs, without user info (see {@link ConnectionSettings.urlCredentials}). */
  servers: string[];
  user?: string;
  password?: string;
  token?: string;
  creds?: string;
  nkey?: string;
  /** A user JWT and its seed (`file://` and `env://` references already read). */
  jwt?: string;
  seed?: string;
  cert?: string;
  key?: string;
  ca?: string;
  tlsFirst?: boolean;
  timeoutMs: number;
  jsDomain?: string;
  jsApiPrefix?: string;
  inboxPrefix?: string;
  /** The context used, if any. */
  context?: string;
  /** Where the server URLs came from. */
  serverSource: SettingSource;
  /** Where the credentials came from, if there are any. */
  authSource?: SettingSource;
  /** Where the JetStream domain or API prefix came from, if one was given. */
  jsSource?: SettingSource;
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
    throw new CliError("CONTEXT_NOT_FOUND", `the nats context "${name}" does not exist (no ${file}); list contexts with "nats context ls", or pass --no-context`, { cause: err });
  }
  try {
    const parsed: unknown = JSON.parse(text);
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new Error("not a JSON object");
    return parsed;
  } catch (err) {
    // the parser quotes the text it choked on, which may be a password: say where, not what
    const where = err instanceof SyntaxError ? (/position \d+/.exec(err.message)?.[0] ?? "") : "not a JSON object";
    throw new CliError("CONTEXT_INVALID", `the nats context file ${file} is not valid JSON${where ? ` (${where})` : ""}; fix it with "nats context edit ${name}", or pass --no-context`, { cause: err });
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

/** The flags whose values are credentials: any one of them makes the credentials the flags'. */
const AUTH_KEYS = ["user", "password", "token", "creds", "nkey", "jwt", "seed"] as const;

/**
 * Resolves the settings: flag, else environment variable, else context, else default,
 * field by field as the nats CLI does. The context is `--context`, else `NATS_CONTEXT`,
 * else the selected one; `--no-context` uses none. Credentials in a server URL win
 * over every other source of a user, password or token.
 *
 * @throws UsageError for a malformed `--timeout` or contradictory flags; CliError for a missing named context
 */
export function resolveConnection(flags: ConnectionFlags, env: NodeJS.ProcessEnv = process.env): ConnectionSettings {
  const fromEnv = (name: string | undefined): string | undefined => {
    const v = name === undefined ? undefined : env[name];
    return v !== undefined && v !== "" ? v : undefined;
  };
  const str = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);
  // flag, else its environment variable (commander has usually folded it in already)
  const pick = (flag: string | undefined, envName: string): string | undefined => str(flag) ?? fromEnv(envName);
  const contextName = flags.context === false ? undefined : (str(flags.context) ?? fromEnv("NATS_CONTEXT") ?? selectedContext(env));
  const ctx: NatsContext = contextName ? readContext(contextName, env) : {};
  // Commander folds an environment variable into the flag's value; tell them apart for the messages.
  const sourceOf = (flag: string | undefined, envName: string): SettingSource => (str(flag) === undefined || flag === env[envName] ? "environment" : "flag");
  const serverFlag = pick(flags.server, "NATS_URL");
  const server = serverFlag ?? str(ctx.url) ?? DEFAULT_SERVER;
  const serverSource: SettingSource = serverFlag ? sourceOf(flags.server, "NATS_URL") : str(ctx.url) ? "context" : "default";
  const timeout = pick(flags.timeout, "NATS_TIMEOUT");
  const timeoutMs = timeout === undefined ? DEFAULT_TIMEOUT_MS : parseDuration(timeout, "--timeout");
  if (timeoutMs <= 0) throw new UsageError(`--timeout must be positive, got "${timeout ?? ""}"`);
  const split = splitUrlCredentials(
    server
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s !== ""),
  );
  const settings: ConnectionSettings = { servers: split.servers, timeoutMs, serverSource };
  const set = <K extends keyof ConnectionSettings>(key: K, value: ConnectionSettings[K] | undefined): void => {
    if (value !== undefined) settings[key] = value;
  };
  const flagValue = (k: (typeof AUTH_KEYS)[number]): string | undefined => pick(flags[k], `NATS_${k.toUpperCase()}`);
  const flagAuth = AUTH_KEYS.some((k) => flagValue(k) !== undefined);
  const ctxAuth = [ctx.user, ctx.password, ctx.token, ctx.creds, ctx.nkey, ctx.user_jwt, ctx.user_seed].some((v) => str(v) !== undefined);
  if (split.credentials) {
    set("user", split.credentials.user);
    set("password", split.credentials.password);
    set("token", split.credentials.token);
    settings.authSource = "url";
  } else {
    set("user", flagValue("user") ?? str(ctx.user));
    set("password", flagValue("password") ?? str(ctx.password));
    set("token", flagValue("token") ?? str(ctx.token));
  }
  set("creds", expandHome(flagValue("creds") ?? str(ctx.creds), env));
  set("nkey", expandHome(flagValue("nkey") ?? str(ctx.nkey), env));
  const jwt = flagValue("jwt") ?? str(ctx.user_jwt);
  const seed = flagValue("seed") ?? str(ctx.user_seed);
  if (jwt !== undefined && seed === undefined) throw new UsageError("--jwt needs --seed (or NATS_SEED, or user_seed in the context): the user's nkey seed signs the server's challenge");
  if (seed !== undefined && jwt === undefined) throw new UsageError("--seed needs --jwt (or NATS_JWT, or user_jwt in the context); for a plain nkey pass the seed file with --nkey");
  set("jwt", jwt === undefined ? undefined : resolveLiteral(jwt, "user JWT", env));
  set("seed", seed === undefined ? undefined : resolveLiteral(seed, "user seed", env));
  set("cert", expandHome(pick(flags.tlscert, "NATS_CERT") ?? str(ctx.cert), env));
  set("key", expandHome(pick(flags.tlskey, "NATS_KEY") ?? str(ctx.key), env));
  set("ca", expandHome(pick(flags.tlsca, "NATS_CA") ?? str(ctx.ca), env));
  if (flags.tlsfirst === true || flags.tlsFirst === true || ctx.tls_first === true) settings.tlsFirst = true;
  set("jsDomain", str(flags.jsDomain) ?? (str(flags.jsApiPrefix) ? undefined : str(ctx.jetstream_domain)));
  set("jsApiPrefix", str(flags.jsApiPrefix) ?? str(ctx.jetstream_api_prefix));
  set("inboxPrefix", str(flags.inboxPrefix) ?? str(ctx.inbox_prefix));
  if (settings.jsDomain && str(flags.jsApiPrefix)) throw new UsageError("--js-domain and --js-api-prefix both name the JetStream API: give one");
  if (settings.jsDomain || settings.jsApiPrefix) settings.jsSource = str(flags.jsDomain) || str(flags.jsApiPrefix) ? "flag" : "context";
  if (!settings.authSource && (flagAuth || ctxAuth)) {
    const envOnly = AUTH_KEYS.every((k) => flagValue(k) === undefined || sourceOf(flags[k], `NATS_${k.toUpperCase()}`) === "environment");
    settings.authSource = flagAuth ? (envOnly ? "environment" : "flag") : "context";
  }
  set("context", contextName);
  for (const secret of [settings.password, settings.token, settings.jwt, settings.seed]) rememberSecret(secret);
  // a user without a password is a token: the user is then a secret too
  if (settings.password === undefined) rememberSecret(settings.user);
  return settings;
}

/** The nats.js connection options of some settings (reads and checks the creds, nkey and JWT). */
export function natsConnectionOptions(settings: ConnectionSettings): NodeConnectionOptions {
  const options: NodeConnectionOptions = { servers: settings.servers, timeout: settings.timeoutMs, name: "cg" };
  const authenticators: Authenticator[] = [];
  if (settings.creds) authenticators.push(credsFileAuthenticator(settings.creds));
  if (settings.nkey) authenticators.push(nkeyFileAuthenticator(settings.nkey));
  if (settings.jwt && settings.seed) authenticators.push(userJwtAuthenticator(settings.jwt, settings.seed));
  if (authenticators.length > 0) options.authenticator = authenticators;
  // As the nats CLI: a user without a password is a token.
  if (settings.user !== undefined && settings.password === undefined) options.token = settings.user;
  else if (settings.user !== undefined) {
    options.user = settings.user;
    options.pass = settings.password ?? "";
  }
  if (settings.token !== undefined) options.token = settings.token;
  if (settings.inboxPrefix) options.inboxPrefix = settings.inboxPrefix;
  if (settings.cert || settings.key || settings.ca || settings.tlsFirst) {
    options.tls = {};
    if (settings.cert) options.tls.certFile = settings.cert;
    if (settings.key) options.tls.keyFile = settings.key;
    if (settings.ca) options.tls.caFile = settings.ca;
    if (settings.tlsFirst) options.tls.handshakeFirst = true;
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

/** `(from context "x")` when the context gave the setting, so the message points at what to fix. */
function origin(settings: ConnectionSettings, source: SettingSource | undefined): string {
  if (source === "context" && settings.context) return ` (from context "${settings.context}")`;
  if (source === "environment") return " (from the environment)";
  if (source === "url") return " (from the server URL)";
  return "";
}

/** How a connect failed, as far as the error text tells. */
function failureKind(detail: string): "auth" | "tls" | "other" {
  if (/auth|permission|user|credential|jwt|nkey|signature/i.test(detail)) return "auth";
  return /tls|ssl|certificate|handshake/i.test(detail) ? "tls" : "other";
}

/**
 * The error of a failed connect: what failed, where the failing setting came from
 * (a context only when it supplied it), what to do, with every secret masked.
 *
 * @param tlsFirstWanted - the server turned out to want the TLS handshake first (see {@link wantsTlsFirst})
 */
function connectionError(settings: ConnectionSettings, err: unknown, tlsFirstWanted = false): CliError {
  const detail = redact(err instanceof Error ? err.message : String(err));
  const kind = failureKind(detail);
  const where = `cannot connect to ${redactUrls(settings.servers.join(", "))}${origin(settings, settings.serverSource)}`;
  if (kind === "auth") {
    const what = settings.authSource ? `the credentials${origin(settings, settings.authSource)}` : "the credentials: none were given";
    return new CliError("AUTHENTICATION_FAILED", `${where}: ${detail}; check ${what}, given with user:password@ or token@ in the server URL, --user/--password, --token, --creds, --nkey, --jwt/--seed or a context`, { cause: err });
  }
  if (tlsFirstWanted) {
    // nats.js only saw silence ("timeout", or an undefined socket error when the server gave up first)
    return new CliError("CONNECTION_FAILED", `${where}: the server wants the TLS handshake first (handshake_first) and sent no greeting; pass --tlsfirst (or set tls_first in the context), with --tlsca when its certificate is not publicly trusted`, {
      cause: err,
    });
  }
  if (settings.tlsFirst && /wrong version number/i.test(detail)) {
    return new CliError("CONNECTION_FAILED", `${where}: the server did not answer the TLS handshake, it greets first in plain text: drop --tlsfirst (and tls_first from the context)`, { cause: err });
  }
  const hint =
    kind === "tls"
      ? "check the TLS settings (--tlsca, --tlscert/--tlskey, --tlsfirst when the server wants the TLS handshake first)"
      : "is a nats-server running there? Pass --server <url>, set NATS_URL, or select a nats CLI context with --context";
  return new CliError("CONNECTION_FAILED", `${where}: ${detail}; ${hint}`, { cause: err });
}

/** How long the TLS-first probe of a failed connect may take: it runs only after a failure, and briefly. */
const TLS_FIRST_PROBE_MS = 2000;

/**
 * The JetStream API that a domain or API prefix points at, described for an error
 * (`"$JS.hub.API" (the JetStream domain "hub")`), or undefined for the default API.
 */
export function describeJetStreamTarget(settings: ConnectionSettings): string | undefined {
  const from = origin(settings, settings.jsSource);
  // the domain wins over a prefix, as in connectNats
  if (settings.jsDomain) return `"$JS.${settings.jsDomain}.API" (the JetStream domain "${settings.jsDomain}"${from})`;
  if (settings.jsApiPrefix) return `"${settings.jsApiPrefix}" (the JetStream API prefix${from})`;
  return undefined;
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
 * @throws CliError `CONNECTION_FAILED` or `AUTHENTICATION_FAILED` saying what to check; `CREDS_INVALID`,
 *   `NKEY_INVALID`, `JWT_INVALID` or `FILE_NOT_READABLE` for credentials that cannot be used
 */
export async function connectNats(settings: ConnectionSettings): Promise<CliConnection> {
  const options = natsConnectionOptions(settings);
  let nc: NatsConnection;
  try {
    nc = await connect(options);
  } catch (err) {
    // A server that wants TLS first looks like one that never answers: ask it for a handshake to tell which.
    const silent = !settings.tlsFirst && failureKind(err instanceof Error ? err.message : String(err)) === "other";
    throw connectionError(settings, err, silent && (await wantsTlsFirst(settings.servers, Math.min(settings.timeoutMs, TLS_FIRST_PROBE_MS))));
  }
  const jsOptions: JetStreamOptions = { timeout: settings.timeoutMs };
  if (settings.jsDomain) jsOptions.domain = settings.jsDomain;
  // (a domain and a prefix from different sources: the domain wins, as in the nats CLI)
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
