/**
 * Decentralized (operator mode) auth for tests: an operator, an account with
 * JetStream enabled and users, as signed JWTs made here with @nats-io/nkeys
 * (what `nsc` would write), plus the server config and a credentials file.
 */
import { createHash } from "node:crypto";
import { nkeys } from "@nats-io/transport-node";

type KeyPair = ReturnType<typeof nkeys.createUser>;

const b64url = (data: Uint8Array | string): string => Buffer.from(data).toString("base64url");

/** Signs claims as a NATS JWT (`ed25519-nkey`) with the issuer's key. */
function sign(issuer: KeyPair, subject: string, name: string, nats: Record<string, unknown>): string {
  const claims: Record<string, unknown> = { jti: "", iat: Math.floor(Date.now() / 1000), iss: issuer.getPublicKey(), name, sub: subject, nats: { ...nats, version: 2 } };
  claims["jti"] = createHash("sha256").update(JSON.stringify(claims)).digest("hex").slice(0, 52).toUpperCase();
  const body = `${b64url(JSON.stringify({ typ: "JWT", alg: "ed25519-nkey" }))}.${b64url(JSON.stringify(claims))}`;
  return `${body}.${b64url(issuer.sign(new TextEncoder().encode(body)))}`;
}

/** A user of the test account: its JWT and seed. */
export interface JwtUser {
  jwt: string;
  seed: string;
  /** The text of a credentials file, as `nsc generate creds` writes it. */
  creds: string;
}

/** An operator with one JetStream-enabled account. */
export interface OperatorSetup {
  /** The server config block (`operator`, memory resolver, the account preloaded). */
  serverConfig: string;
  /** A new user of the account. */
  user(name: string): JwtUser;
  /** A user signed by a different account key the server does not know. */
  stranger(name: string): JwtUser;
}

function userOf(accountKey: KeyPair, name: string): JwtUser {
  const user = nkeys.createUser();
  const jwt = sign(accountKey, user.getPublicKey(), name, { pub: {}, sub: {}, subs: -1, data: -1, payload: -1, type: "user" });
  const seed = new TextDecoder().decode(user.getSeed());
  const creds =
    `-----BEGIN NATS USER JWT-----\n${jwt}\n------END NATS USER JWT------\n\n` +
    "************************* IMPORTANT *************************\nNKEY Seed printed below can be used to sign and prove identity.\n\n" +
    `-----BEGIN USER NKEY SEED-----\n${seed}\n------END USER NKEY SEED------\n`;
  return { jwt, seed, creds };
}

/** Makes an operator, a system account and a JetStream account. */
export function createOperatorSetup(): OperatorSetup {
  const operator = nkeys.createOperator();
  const account = nkeys.createAccount();
  const system = nkeys.createAccount();
  const opJwt = sign(operator, operator.getPublicKey(), "test-operator", { type: "operator" });
  const limits = { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1, mem_storage: -1, disk_storage: -1, streams: -1, consumer: -1 };
  const accJwt = sign(operator, account.getPublicKey(), "test-account", { limits, type: "account" });
  const sysJwt = sign(operator, system.getPublicKey(), "SYS", { limits: { subs: -1, data: -1, payload: -1, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 }, type: "account" });
  const serverConfig = [
    `operator: ${opJwt}`,
    `system_account: ${system.getPublicKey()}`,
    "resolver: MEMORY",
    `resolver_preload: { ${account.getPublicKey()}: ${accJwt}, ${system.getPublicKey()}: ${sysJwt} }`,
  ].join("\n");
  const otherAccount = nkeys.createAccount();
  return { serverConfig, user: (name) => userOf(account, name), stranger: (name) => userOf(otherAccount, name) };
}
