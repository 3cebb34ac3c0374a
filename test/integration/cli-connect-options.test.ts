/**
 * `cg` connection options beyond credentials, against real servers: `--tlsfirst`
 * (a server with `handshake_first`), `--js-domain` and `--js-api-prefix` (a server
 * with a JetStream domain), `--inbox-prefix` (a user allowed only its own inboxes),
 * `--no-context`, and the context fields `token`, `inbox_prefix` and `tls_first`.
 * Each works when given and fails with a typed error, never a hang, when missing.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NatsServer, freePort } from "../../src/server/launcher.js";
import { CgProcess, addSourceStream, killAllCg, runCg, runCgJson, type CgResult } from "../helpers/cli-run.js";
import { connectTo, uniqueName, waitFor, type Client } from "../helpers/nats.js";
import { createTestPki, type TestPki } from "../helpers/security-certs.js";

const TOKEN = "ctx-t0ken-Wq4";
const RESTRICTED_PASSWORD = "m1-Pw-7zz";
/** The only inboxes the restricted user may subscribe to. */
const OWN_INBOX = "_INBOX_m1";

let pki: TestPki;
/** TLS with the handshake before the greeting. */
let tlsFirst: NatsServer;
/** JetStream in domain "hub". */
let hub: NatsServer;
let hubClient: Client;
/** User m1 may subscribe only below {@link OWN_INBOX}. */
let restricted: NatsServer;
let tokens: NatsServer;
let dir: string;
let dead: string;

before(async () => {
  pki = await createTestPki();
  dir = await mkdtemp(join(tmpdir(), "cg-options-"));
  const q = JSON.stringify;
  [tlsFirst, hub, restricted, tokens] = await Promise.all([
    NatsServer.start({ extraConfig: `tls { cert_file: ${q(pki.serverCert)}, key_file: ${q(pki.serverKey)}, handshake_first: true }` }),
    NatsServer.start({ jetstreamDomain: "hub" }),
    NatsServer.start({
      extraConfig: `authorization { users: [ { user: "m1", password: "${RESTRICTED_PASSWORD}", permissions: { publish: ["$JS.API.>", "$KV.>"], subscribe: ["${OWN_INBOX}.>"] } } ] }`,
    }),
    NatsServer.start({ extraConfig: `authorization { token: "${TOKEN}" }` }),
  ]);
  hubClient = await connectTo(hub);
  dead = `nats://127.0.0.1:${await freePort()}`;
});

after(async () => {
  await killAllCg();
  await hubClient?.nc.close();
  await Promise.all([tlsFirst?.stop(), hub?.stop(), restricted?.stop(), tokens?.stop()]);
  await rm(dir, { recursive: true, force: true });
  await pki?.remove();
});

/** The `{ error }` document `cg --json` printed on stderr. */
function jsonError(r: CgResult): { code: string; message: string } {
  const line = r.stderr.trim().split("\n").pop() ?? "{}";
  return (JSON.parse(line) as { error: { code: string; message: string } }).error;
}

/** `cg --json … <command>` fails with exit 1 and `code`, its message matching `message`. */
async function failsWith(args: string[], code: string, message: RegExp, env: NodeJS.ProcessEnv = {}): Promise<{ code: string; message: string }> {
  const r = await runCg(["--json", ...args], { env });
  assert.equal(r.code, 1, r.stdout + r.stderr);
  const err = jsonError(r);
  assert.equal(err.code, code, r.stderr);
  assert.match(err.message, message);
  return err;
}

/** `cg --json … elastic ls <stream>`: the groups listed. */
async function elasticGroups(args: string[], stream: string, env: NodeJS.ProcessEnv = {}): Promise<string[]> {
  return (await runCgJson<{ groups: string[] }>([...args, "elastic", "ls", stream], { env })).doc.groups;
}

/** A nats CLI config dir holding the contexts, the first one selected when `select`. */
async function contextDir(contexts: Record<string, Record<string, unknown>>, select?: string): Promise<string> {
  const config = await mkdtemp(join(dir, "xdg-"));
  await mkdir(join(config, "nats", "context"), { recursive: true });
  for (const [name, context] of Object.entries(contexts)) await writeFile(join(config, "nats", "context", `${name}.json`), JSON.stringify(context));
  if (select !== undefined) await writeFile(join(config, "nats", "context.txt"), `${select}\n`);
  return config;
}

describe("cli connect options", () => {
  test("cli connect options - --tlsfirst (with --tlsca) reaches a handshake_first server; without it the error says to pass it", async () => {
    const tls = ["-s", tlsFirst.url, "--tlsca", pki.caFile];
    assert.deepEqual((await runCgJson<{ groups: string[] }>([...tls, "--tlsfirst", "static", "ls", "orders"])).doc.groups, []);
    assert.deepEqual((await runCgJson<{ groups: string[] }>([...tls, "--tls-first", "static", "ls", "orders"])).doc.groups, []);
    const wantsFirst = /cannot connect to nats:\/\/127\.0\.0\.1:\d+: the server wants the TLS handshake first .*pass --tlsfirst/;
    await failsWith([...tls, "--timeout", "3s", "static", "ls", "orders"], "CONNECTION_FAILED", wantsFirst);
    await failsWith(["-s", tlsFirst.url, "--timeout", "3s", "static", "ls", "orders"], "CONNECTION_FAILED", wantsFirst);
    // and the other way round: a server that greets in plain text
    await failsWith(["-s", hub.url, "--tlsfirst", "static", "ls", "orders"], "CONNECTION_FAILED", /did not answer the TLS handshake.*drop --tlsfirst/);
  });

  test("cli connect options - --js-domain and --js-api-prefix route create, ls, info and consume through the domain's API", async () => {
    const stream = uniqueName("D");
    const group = uniqueName("g");
    await addSourceStream(hubClient.jsm, stream);
    const viaDomain = ["-s", hub.url, "--js-domain", "hub"];
    const created = await runCg([...viaDomain, "elastic", "create", stream, group, "2", "--filter", `${stream}.*`, "--wildcards", "1"]);
    assert.equal(created.code, 0, created.stderr);
    assert.equal((await runCg([...viaDomain, "elastic", "add", stream, group, "m1"])).code, 0);
    assert.deepEqual(await elasticGroups(viaDomain, stream), [group]);
    const viaPrefix = ["-s", hub.url, "--js-api-prefix", "$JS.hub.API"];
    assert.deepEqual(await elasticGroups(viaPrefix, stream), [group]);
    const { doc } = await runCgJson<{ config: { members: string[] } }>([...viaPrefix, "elastic", "info", stream, group]);
    assert.deepEqual(doc.config.members, ["m1"]);

    // the domain is really in the subjects: one the server does not have answers nothing
    await failsWith(["-s", hub.url, "--js-domain", "nosuch", "elastic", "ls", stream], "SERVER_ERROR", /nothing answers the JetStream API at "\$JS\.nosuch\.API" \(the JetStream domain "nosuch"\)/);
    await failsWith(["-s", hub.url, "--js-api-prefix", "$JS.nosuch.API", "elastic", "ls", stream], "SERVER_ERROR", /nothing answers the JetStream API at "\$JS\.nosuch\.API" \(the JetStream API prefix\)/);

    // a member pulls through the domain's API too
    const member = new CgProcess([...viaDomain, "--json", "elastic", "consume", stream, group, "m1", "--sleep", "0"]);
    await member.waitForText(/"event":"started"/, 30_000, "stderr");
    const subjects = [`${stream}.a`, `${stream}.b`, `${stream}.c`];
    for (const s of subjects) await hubClient.js.publish(s, s);
    await waitFor(() => member.json<{ subject: string }>().length >= subjects.length, 30_000, "the member to consume every message");
    assert.deepEqual(member.json<{ subject: string }>().map((r) => r.subject).sort(), subjects);
    member.signal("SIGINT");
    assert.equal((await member.exited(30_000)).code, 130);
  });

  test("cli connect options - --inbox-prefix serves a user allowed only its own inboxes; without it PERMISSION_DENIED names the inbox", async () => {
    const m1 = ["-s", restricted.url, "--user", "m1", "--password", RESTRICTED_PASSWORD];
    assert.deepEqual(await elasticGroups([...m1, "--inbox-prefix", OWN_INBOX], "orders"), []);
    const err = await failsWith([...m1, "elastic", "ls", "orders"], "PERMISSION_DENIED", /no permission to subscribe to "_INBOX\./);
    assert.ok(!err.message.includes(RESTRICTED_PASSWORD));
  });

  test("cli connect options - --no-context ignores the selected context and NATS_CONTEXT; -s over a context's url is not blamed on it", async () => {
    const stream = uniqueName("C");
    await addSourceStream(hubClient.jsm, stream);
    // a stale context: a dead url, and a domain that would break even a good -s
    const config = await contextDir({ stale: { url: dead, jetstream_domain: "nosuch" } }, "stale");
    const env = { XDG_CONFIG_HOME: config };
    assert.deepEqual(await elasticGroups(["-s", hub.url, "--no-context"], stream, env), []);
    assert.deepEqual(await elasticGroups(["-s", hub.url, "--no-context"], stream, { ...env, NATS_CONTEXT: "stale" }), []);
    // without --no-context the context is used (its domain)
    await failsWith(["-s", hub.url, "elastic", "ls", stream], "SERVER_ERROR", /JetStream API at "\$JS\.nosuch\.API" \(the JetStream domain "nosuch" \(from context "stale"\)\)/, env);
    // -s names another dead server: the error is the flag's, not the context's
    const otherDead = `nats://127.0.0.1:${await freePort()}`;
    const err = await failsWith(["-s", otherDead, "--timeout", "1s", "elastic", "ls", stream], "CONNECTION_FAILED", /cannot connect to nats:\/\/127\.0\.0\.1:\d+: /, env);
    assert.ok(err.message.includes(otherDead), err.message);
    assert.ok(!err.message.includes("stale") && !err.message.includes(dead), err.message);
    // a selected context that no longer exists is an error, unless --no-context
    const gone = await contextDir({}, "gone");
    await failsWith(["-s", hub.url, "elastic", "ls", stream], "CONTEXT_NOT_FOUND", /"gone" does not exist.*--no-context/, { XDG_CONFIG_HOME: gone });
    assert.deepEqual(await elasticGroups(["-s", hub.url, "--no-context"], stream, { XDG_CONFIG_HOME: gone }), []);
  });

  test("cli connect options - a context's token, inbox_prefix and tls_first are used; a wrong context token is blamed on the context, unprinted", async () => {
    const wrongToken = "ctx-wr0ng-Tk";
    const config = await contextDir({
      tok: { url: tokens.url, token: TOKEN },
      badtok: { url: tokens.url, token: wrongToken },
      inbox: { url: restricted.url, user: "m1", password: RESTRICTED_PASSWORD, inbox_prefix: OWN_INBOX },
      noinbox: { url: restricted.url, user: "m1", password: RESTRICTED_PASSWORD },
      first: { url: tlsFirst.url, ca: pki.caFile, tls_first: true },
    });
    const env = { XDG_CONFIG_HOME: config };
    const ok = await runCgJson<{ groups: string[] }>(["--context", "tok", "static", "ls", "orders"], { env });
    assert.deepEqual(ok.doc.groups, []);
    const refused = await failsWith(["--context", "badtok", "static", "ls", "orders"], "AUTHENTICATION_FAILED", /check the credentials \(from context "badtok"\)/, env);
    assert.ok(!refused.message.includes(wrongToken), refused.message);

    assert.deepEqual(await elasticGroups(["--context", "inbox"], "orders", env), []);
    await failsWith(["--context", "noinbox", "elastic", "ls", "orders"], "PERMISSION_DENIED", /subscribe to "_INBOX\./, env);
    // a flag overrides the context's prefix
    await failsWith(["--context", "inbox", "--inbox-prefix", "_INBOX_other", "elastic", "ls", "orders"], "PERMISSION_DENIED", /subscribe to "_INBOX_other\./, env);

    assert.deepEqual((await runCgJson<{ groups: string[] }>(["--context", "first", "static", "ls", "orders"], { env })).doc.groups, []);
  });
});
