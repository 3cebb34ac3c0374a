/**
 * The credentials `cg` connects with, read and checked before connecting, so a
 * bad file is reported as such (and not as "cannot connect"): URL user info,
 * credentials files, nkey seeds, a user JWT with its seed.
 */
import { readFileSync } from "node:fs";
import { jwtAuthenticator, nkeyAuthenticator, nkeys, type Authenticator } from "@nats-io/transport-node";
import { CliError, UsageError } from "./errors.js";
import { redactUrls, rememberSecret } from "./redact.js";

/** Credentials carried by a server URL (`nats://user:pass@host`, `nats://token@host`). */
export interface UrlCredentials {
  user?: string;
  password?: string;
  token?: string;
}

/** Server URLs without their user info, and the credentials they carried. */
export interface SplitServers {
  servers: string[];
  credentials?: UrlCredentials;
}

function decode(part: string, url: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new UsageError(`the server URL ${redactUrls(url)} has malformed percent-encoding in its credentials`);
  }
}

/**
 * Takes the user info out of server URLs, as the nats CLI reads it: `user:pass@`
 * is a user and password, `token@` (no colon) is a token. One set of credentials
 * is used for every server, so different ones are a usage error.
 *
 * @throws UsageError when URLs carry different credentials, or malformed ones
 */
export function splitUrlCredentials(servers: readonly string[]): SplitServers {
  let found: UrlCredentials | undefined;
  let foundKey: string | undefined;
  const plain = servers.map((url) => {
    const m = /^([a-z][a-z0-9+.-]*:\/\/)?([^/?#]*)@(.*)$/i.exec(url);
    if (!m) return url;
    const [, scheme = "", info = "", rest = ""] = m;
    const colon = info.indexOf(":");
    const creds: UrlCredentials =
      colon === -1 ? { token: decode(info, url) } : { user: decode(info.slice(0, colon), url), password: decode(info.slice(colon + 1), url) };
    rememberSecret(creds.password);
    rememberSecret(creds.token);
    if (foundKey !== undefined && foundKey !== info) {
      throw new UsageError("the server URLs carry different credentials; give them once, with --user/--password or --token, and list the servers without them");
    }
    found = creds;
    foundKey = info;
    return `${scheme}${rest}`;
  });
  return found ? { servers: plain, credentials: found } : { servers: plain };
}

function readText(path: string, what: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new CliError("FILE_NOT_READABLE", `cannot read the ${what} file ${path}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
}

/** Checks a user seed (`SU…`) and returns it encoded, or says what it is not. */
function checkSeed(seed: string, where: string, code: string): Uint8Array {
  try {
    const kp = nkeys.fromSeed(new TextEncoder().encode(seed));
    const pub = kp.getPublicKey();
    if (!pub.startsWith("U")) throw new Error(`it is the seed of a ${pub.startsWith("A") ? "account" : pub.startsWith("O") ? "operator" : "non-user"} key, not a user`);
  } catch (err) {
    throw new CliError(code, `${where} (${err instanceof Error ? err.message : String(err)})`, { cause: err });
  }
  return new TextEncoder().encode(seed);
}

/** A JWT is three base64url parts; its text is never quoted back (it is a credential). */
function checkJwt(jwt: string, where: string, code: string): void {
  const parts = jwt.split(".");
  if (parts.length !== 3 || parts.some((p) => !/^[A-Za-z0-9_-]+$/.test(p))) {
    throw new CliError(code, `${where} is not a JWT (three base64url parts separated by dots)`);
  }
}

/** The blocks of a credentials file: `-----BEGIN …-----` / `------END …------`. */
const CREDS_BLOCK = /-{3,}[^\n]*BEGIN[^\n]*-{3,}\r?\n([\s\S]*?)\r?\n\s*-{3,}[^\n]*END[^\n]*-{3,}/g;

/**
 * Reads and checks a credentials file (a user JWT and its nkey seed, as
 * `nsc generate creds` writes it).
 *
 * @throws CliError `FILE_NOT_READABLE`, or `CREDS_INVALID` saying what the file lacks
 */
export function credsFileAuthenticator(path: string): Authenticator {
  const text = readText(path, "credentials");
  const blocks = [...text.matchAll(CREDS_BLOCK)].map((m) => (m[1] ?? "").trim());
  const fix = 'write it with "nsc generate creds" or pass the right file with --creds';
  const where = `${path} is not a credentials file`;
  if (blocks.length < 2) {
    throw new CliError("CREDS_INVALID", `${where}: it needs a "BEGIN NATS USER JWT" block followed by a "BEGIN USER NKEY SEED" block, found ${blocks.length} block(s); ${fix}`);
  }
  const [jwt = "", seed = ""] = blocks;
  let seedBytes: Uint8Array;
  try {
    checkJwt(jwt, `${where}: its user JWT block`, "CREDS_INVALID");
    seedBytes = checkSeed(seed, `${where}: its seed block`, "CREDS_INVALID");
  } catch (err) {
    throw new CliError("CREDS_INVALID", `${err instanceof Error ? err.message : String(err)}; ${fix}`, { cause: err });
  }
  rememberSecret(jwt);
  rememberSecret(seed);
  return jwtAuthenticator(jwt, seedBytes);
}

/**
 * Reads and checks an nkey seed file.
 *
 * @throws CliError `FILE_NOT_READABLE`, or `NKEY_INVALID`
 */
export function nkeyFileAuthenticator(path: string): Authenticator {
  const seed = readText(path, "nkey seed").trim();
  const bytes = checkSeed(seed, `${path} is not a user nkey seed file; it must hold one user seed (SU…), as "nk -gen user" writes it`, "NKEY_INVALID");
  rememberSecret(seed);
  return nkeyAuthenticator(bytes);
}

/**
 * A `--jwt`/`--seed` value as the nats CLI takes it: the value itself,
 * `file://<path>` (the file's content) or `env://<NAME>` (an environment variable).
 *
 * @throws CliError `FILE_NOT_READABLE` or `ENV_NOT_SET`
 */
export function resolveLiteral(value: string, what: string, env: NodeJS.ProcessEnv): string {
  if (/^file:\/\//i.test(value)) {
    const text = readText(value.slice("file://".length), what).trim();
    rememberSecret(text);
    return text;
  }
  if (/^env:\/\//i.test(value)) {
    const name = value.slice("env://".length);
    const v = env[name];
    if (v === undefined || v === "") throw new CliError("ENV_NOT_SET", `the ${what} refers to the environment variable ${name}, which is not set`);
    rememberSecret(v.trim());
    return v.trim();
  }
  return value;
}

/**
 * A user JWT and its seed (`--jwt`, `--seed`, already read from their references).
 *
 * @throws CliError `JWT_INVALID` or `NKEY_INVALID`
 */
export function userJwtAuthenticator(jwt: string, seed: string): Authenticator {
  checkJwt(jwt, "the --jwt value", "JWT_INVALID");
  return jwtAuthenticator(jwt, checkSeed(seed, "the --seed value is not a user nkey seed; pass the user's seed (SU…), as a value, file://<path> or env://<NAME>", "NKEY_INVALID"));
}
