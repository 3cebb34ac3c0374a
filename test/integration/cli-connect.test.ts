/**
 * `cg` connection options against a server that requires authentication: flags,
 * the nats CLI's environment variables, nkey seed files and nats CLI contexts,
 * with flag > environment > context precedence.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { nkeys } from "@nats-io/transport-node";
import { NatsServer, freePort } from "../../src/server/launcher.js";
import { killAllCg, runCg, runCgJson } from "../helpers/cli-run.js";

let server: NatsServer;
let dir: string;
let seedFile: string;
let closed: string;

before(async () => {
  const user = nkeys.createUser();
  dir = await mkdtemp(join(tmpdir(), "cg-connect-"));
  seedFile = join(dir, "user.nk");
  await writeFile(seedFile, new TextDecoder().decode(user.getSeed()) + "\n");
  server = await NatsServer.start({
    extraConfig: `authorization { users: [ { user: "alice", password: "s3cret" }, { nkey: "${user.getPublicKey()}" } ] }`,
  });
  closed = `nats://127.0.0.1:${await freePort()}`;
});

after(async () => {
  await killAllCg();
  await server.stop();
  await rm(dir, { recursive: true, force: true });
});

/** A nats CLI config dir holding one context, optionally selected. */
async function contextDir(name: string, context: Record<string, string>, select = false): Promise<string> {
  const config = await mkdtemp(join(dir, "xdg-"));
  await mkdir(join(config, "nats", "context"), { recursive: true });
  await writeFile(join(config, "nats", "context", `${name}.json`), JSON.stringify(context));
  if (select) await writeFile(join(config, "nats", "context.txt"), `${name}\n`);
  return config;
}

const ok = async (args: string[], env: NodeJS.ProcessEnv = {}): Promise<void> => {
  const { doc } = await runCgJson<{ groups: string[] }>([...args, "static", "ls", "orders"], { env });
  assert.deepEqual(doc.groups, []);
};

describe("cli connect", () => {
  test("cli connect - without credentials the server refuses, exit 1 with a hint", async () => {
    const r = await runCg(["-s", server.url, "static", "ls", "orders"]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^error: cannot connect to .*: .*check the credentials/i);
  });

  test("cli connect - --user/--password and NATS_USER/NATS_PASSWORD", async () => {
    await ok(["-s", server.url, "--user", "alice", "--password", "s3cret", "--timeout", "3s"]);
    await ok([], { NATS_URL: server.url, NATS_USER: "alice", NATS_PASSWORD: "s3cret", NATS_TIMEOUT: "4s" });
    const wrong = await runCg(["-s", server.url, "--user", "alice", "--password", "nope", "static", "ls", "orders"]);
    assert.equal(wrong.code, 1);
    // a flag wins over the environment
    await ok(["-s", server.url, "--password", "s3cret"], { NATS_USER: "alice", NATS_PASSWORD: "nope" });
  });

  test("cli connect - --nkey and NATS_NKEY read a seed file", async () => {
    await ok(["-s", server.url, "--nkey", seedFile]);
    await ok(["-s", server.url], { NATS_NKEY: seedFile });
    const missing = await runCg(["-s", server.url, "--nkey", join(dir, "nope.nk"), "static", "ls", "orders"]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /cannot read the nkey seed file/);
  });

  test("cli connect - a nats CLI context: --context, NATS_CONTEXT, the selected one; flags override it", async () => {
    const config = await contextDir("dev", { url: server.url, user: "alice", password: "s3cret" });
    await ok(["--context", "dev"], { XDG_CONFIG_HOME: config });
    await ok([], { XDG_CONFIG_HOME: config, NATS_CONTEXT: "dev" });
    const selected = await contextDir("picked", { url: server.url, nkey: seedFile }, true);
    await ok([], { XDG_CONFIG_HOME: selected });

    const stale = await contextDir("stale", { url: closed, user: "alice", password: "s3cret" });
    await ok(["--context", "stale", "-s", server.url], { XDG_CONFIG_HOME: stale });
    await ok(["--context", "stale"], { XDG_CONFIG_HOME: stale, NATS_URL: server.url });
    const refused = await runCg(["--context", "stale", "static", "ls", "orders"], { env: { XDG_CONFIG_HOME: stale } });
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /\(from context "stale"\)/);
  });
});
