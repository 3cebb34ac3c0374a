/**
 * `cg` credentials as the nats CLI takes them, against real servers: user and
 * password or a token in the server URL, `--token`, `--jwt`/`--seed`, credentials
 * files; each accepted when right and refused when wrong, with a typed error, and
 * never a password, token, JWT or seed in what `cg` prints (human or `--json`).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NatsServer, freePort } from "../../src/server/launcher.js";
import { killAllCg, runCg, runCgJson, type CgResult } from "../helpers/cli-run.js";
import { createOperatorSetup, type JwtUser } from "../helpers/security-jwt.js";

const PASSWORD = "s3cret-Pw9";
/** Needs percent-encoding in a URL. */
const ODD_PASSWORD = "p@ss:w/rd%9";
const TOKEN = "t0ken-Qx7-secret";

let users: NatsServer;
let tokens: NatsServer;
let operator: NatsServer;
let jwtUser: JwtUser;
let stranger: JwtUser;
let dir: string;
let closedPort: number;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "cg-creds-"));
  const setup = createOperatorSetup();
  jwtUser = setup.user("cg-user");
  stranger = setup.stranger("stranger");
  [users, tokens, operator] = await Promise.all([
    NatsServer.start({ extraConfig: `authorization { users: [ { user: "alice", password: "${PASSWORD}" }, { user: "bob", password: "${ODD_PASSWORD}" } ] }` }),
    NatsServer.start({ extraConfig: `authorization { token: "${TOKEN}" }` }),
    NatsServer.start({ extraConfig: setup.serverConfig }),
  ]);
  closedPort = await freePort();
});

after(async () => {
  await killAllCg();
  await Promise.all([users?.stop(), tokens?.stop(), operator?.stop()]);
  await rm(dir, { recursive: true, force: true });
});

const hostOf = (s: NatsServer): string => `127.0.0.1:${s.port}`;

/** `cg [--json] … static ls orders` succeeds (an empty list). */
async function lists(args: string[], env: NodeJS.ProcessEnv = {}): Promise<CgResult> {
  const { result, doc } = await runCgJson<{ groups: string[] }>([...args, "static", "ls", "orders"], { env });
  assert.deepEqual(doc.groups, []);
  return result;
}

/** Runs `command` (`static ls orders`) in human and in JSON mode; both must fail with `code` and print no secret. */
async function refused(
  args: string[],
  secrets: string[],
  expect: { exit: number; code: string; message: RegExp },
  env: NodeJS.ProcessEnv = {},
  command: string[] = ["static", "ls", "orders"],
): Promise<void> {
  for (const json of [false, true]) {
    const r = await runCg([...(json ? ["--json"] : []), ...args, ...command], { env });
    const all = r.stdout + r.stderr;
    assert.equal(r.code, expect.exit, all);
    for (const s of secrets) assert.ok(!all.includes(s), `the secret ${JSON.stringify(s)} was printed:\n${all}`);
    if (json) {
      const err = (JSON.parse(r.stderr.trim().split("\n").pop() ?? "{}") as { error: { code: string; message: string } }).error;
      assert.equal(err.code, expect.code, r.stderr);
      assert.match(err.message, expect.message);
    } else assert.match(r.stderr, expect.message);
  }
}

const noSecret = (r: CgResult, secret: string): void => assert.ok(!(r.stdout + r.stderr).includes(secret), `${secret} printed:\n${r.stdout}${r.stderr}`);

describe("cli credentials", () => {
  test("cli credentials - user:password in the server URL (flag and NATS_URL, percent-encoded too) connects", async () => {
    noSecret(await lists(["-s", `nats://alice:${PASSWORD}@${hostOf(users)}`]), PASSWORD);
    await lists([], { NATS_URL: `nats://alice:${PASSWORD}@${hostOf(users)}` });
    await lists(["-s", `nats://bob:${encodeURIComponent(ODD_PASSWORD)}@${hostOf(users)}`]);
    // credentials in the URL win over --user/--password, as in the nats CLI
    await lists(["-s", `nats://alice:${PASSWORD}@${hostOf(users)}`, "--user", "alice", "--password", "wrong"]);
  });

  test("cli credentials - a wrong password (URL or flag) is AUTHENTICATION_FAILED and the password is never printed", async () => {
    const bad = "n0t-the-Pw";
    const auth = { exit: 1, code: "AUTHENTICATION_FAILED", message: /cannot connect to nats:\/\/127\.0\.0\.1:\d+: .*check the credentials/ };
    await refused(["-s", `nats://alice:${bad}@${hostOf(users)}`], [bad], auth);
    await refused(["-s", users.url, "--user", "alice", "--password", bad], [bad], auth);
    await refused(["-s", users.url], [bad], auth, { NATS_USER: "alice", NATS_PASSWORD: bad });
    // a server that is not there: the URL is shown, its password masked
    const down = { exit: 1, code: "CONNECTION_FAILED", message: /cannot connect to nats:\/\/127\.0\.0\.1:\d+.*is a nats-server running there/ };
    await refused(["--timeout", "1s", "-s", `nats://alice:${PASSWORD}@127.0.0.1:${closedPort}`], [PASSWORD], down);
    // and a malformed one: the usage error masks it too
    await refused(["-s", `nats://alice:${PASSWORD}@a:1,nats://bob:${PASSWORD}x@b:2`], [PASSWORD], { exit: 2, code: "USAGE", message: /different credentials/ });
  });

  test("cli credentials - a token in the URL, --token and NATS_TOKEN; a wrong one is refused unprinted", async () => {
    noSecret(await lists(["-s", `nats://${TOKEN}@${hostOf(tokens)}`]), TOKEN);
    noSecret(await lists(["-s", tokens.url, "--token", TOKEN]), TOKEN);
    await lists(["-s", tokens.url], { NATS_TOKEN: TOKEN });
    const wrong = "t0ken-wrong-Zz";
    const auth = { exit: 1, code: "AUTHENTICATION_FAILED", message: /check the credentials/ };
    await refused(["-s", `nats://${wrong}@${hostOf(tokens)}`], [wrong], auth);
    await refused(["-s", tokens.url, "--token", wrong], [wrong], auth);
    // a user without a password is a token (nats CLI): masked as one
    await refused(["-s", tokens.url, "--user", wrong], [wrong], auth);
  });

  test("cli credentials - --jwt/--seed (values, file://, env://, NATS_JWT/NATS_SEED) and --creds connect in operator mode", async () => {
    const jwtFile = join(dir, "user.jwt");
    const seedFile = join(dir, "user.seed");
    const credsFile = join(dir, "user.creds");
    await writeFile(jwtFile, `${jwtUser.jwt}\n`);
    await writeFile(seedFile, `${jwtUser.seed}\n`, { mode: 0o600 });
    await writeFile(credsFile, jwtUser.creds, { mode: 0o600 });
    const r = await lists(["-s", operator.url, "--jwt", jwtUser.jwt, "--seed", jwtUser.seed]);
    noSecret(r, jwtUser.seed);
    await lists(["-s", operator.url, "--jwt", `file://${jwtFile}`, "--seed", `file://${seedFile}`]);
    await lists(["-s", operator.url, "--jwt", "env://MY_JWT", "--seed", "env://MY_SEED"], { MY_JWT: jwtUser.jwt, MY_SEED: jwtUser.seed });
    await lists(["-s", operator.url], { NATS_JWT: jwtUser.jwt, NATS_SEED: jwtUser.seed });
    await lists(["-s", operator.url, "--creds", credsFile]);
  });

  test("cli credentials - a JWT the server does not trust, or one without its seed, is refused with what to do", async () => {
    const secrets = [stranger.seed, stranger.jwt, jwtUser.seed];
    await refused(["-s", operator.url, "--jwt", stranger.jwt, "--seed", stranger.seed], secrets, { exit: 1, code: "AUTHENTICATION_FAILED", message: /check the credentials/ });
    await refused(["-s", operator.url, "--jwt", jwtUser.jwt], secrets, { exit: 2, code: "USAGE", message: /--jwt needs --seed/ });
    await refused(["-s", operator.url, "--seed", jwtUser.seed], secrets, { exit: 2, code: "USAGE", message: /--seed needs --jwt/ });
    await refused(["-s", operator.url, "--jwt", "not-a-jwt", "--seed", jwtUser.seed], secrets, { exit: 1, code: "JWT_INVALID", message: /--jwt value is not a JWT/ });
    await refused(["-s", operator.url, "--jwt", jwtUser.jwt, "--seed", "SUNOPE"], secrets, { exit: 1, code: "NKEY_INVALID", message: /--seed value is not a user nkey seed/ });
    await refused(["-s", operator.url, "--jwt", "env://NO_SUCH_VAR_CG", "--seed", jwtUser.seed], secrets, { exit: 1, code: "ENV_NOT_SET", message: /NO_SUCH_VAR_CG, which is not set/ });
  });

  test("cli credentials - a command failing after or before connecting prints no secret of any form: URL password or token, --token, --jwt, --seed", async () => {
    const dead = `127.0.0.1:${closedPort}`;
    const encoded = encodeURIComponent(ODD_PASSWORD);
    const forms: { server: NatsServer; args: (host: string) => string[]; secrets: string[]; env?: NodeJS.ProcessEnv }[] = [
      { server: users, args: (h) => ["-s", `nats://alice:${PASSWORD}@${h}`], secrets: [PASSWORD] },
      { server: users, args: (h) => ["-s", `nats://bob:${encoded}@${h}`], secrets: [ODD_PASSWORD, encoded] },
      { server: tokens, args: (h) => ["-s", `nats://${TOKEN}@${h}`], secrets: [TOKEN] },
      { server: tokens, args: (h) => ["-s", h, "--token", TOKEN], secrets: [TOKEN] },
      { server: tokens, args: (h) => ["-s", h], secrets: [TOKEN], env: { NATS_TOKEN: TOKEN } },
      { server: operator, args: (h) => ["-s", h, "--jwt", jwtUser.jwt, "--seed", jwtUser.seed], secrets: [jwtUser.jwt, jwtUser.seed] },
      { server: operator, args: (h) => ["-s", h], secrets: [jwtUser.jwt, jwtUser.seed], env: { NATS_JWT: jwtUser.jwt, NATS_SEED: jwtUser.seed } },
    ];
    const missingGroup = { exit: 1, code: "BUCKET_NOT_FOUND", message: /KV bucket "static-consumer-groups" doesn't exist/ };
    const nothingThere = { exit: 1, code: "CONNECTION_FAILED", message: /cannot connect to (nats:\/\/)?127\.0\.0\.1:\d+: .*is a nats-server running there/ };
    for (const form of forms) {
      await refused(form.args(hostOf(form.server)), form.secrets, missingGroup, form.env, ["static", "info", "orders", "nosuch"]);
      await refused(["--timeout", "1s", ...form.args(dead)], form.secrets, nothingThere, form.env);
    }
    // a --seed that does not match its --jwt: refused by the server, neither printed
    await refused(["-s", operator.url, "--jwt", jwtUser.jwt, "--seed", stranger.seed], [jwtUser.jwt, stranger.seed], {
      exit: 1,
      code: "AUTHENTICATION_FAILED",
      // (the hint names the URL form without a URL, which the masking would garble into user:***@)
      message: /check the credentials, given with user:password@ or token@ in the server URL, --user\/--password/,
    });
  });

  test("cli credentials - a garbage --creds or --nkey file is a typed 'not a credentials file' error, not 'is a nats-server running there?'", async () => {
    const garbage = join(dir, "garbage.creds");
    await writeFile(garbage, "this is not a credentials file\n");
    const halfSeed = join(dir, "half.creds");
    await writeFile(halfSeed, jwtUser.creds.replace(jwtUser.seed, "SUAGARBAGE"));
    const notCreds = { exit: 1, code: "CREDS_INVALID", message: /is not a credentials file: .*nsc generate creds/ };
    for (const file of [garbage, halfSeed]) {
      await refused(["-s", operator.url, "--creds", file], [jwtUser.jwt], notCreds);
      await refused(["-s", operator.url], [jwtUser.jwt], notCreds, { NATS_CREDS: file });
    }
    const r = await runCg(["-s", operator.url, "--creds", garbage, "static", "ls", "orders"]);
    assert.doesNotMatch(r.stderr, /nats-server running there/);
    await refused(["-s", operator.url, "--nkey", garbage], [], { exit: 1, code: "NKEY_INVALID", message: /is not a user nkey seed file/ });
    await refused(["-s", operator.url, "--creds", join(dir, "missing.creds")], [], { exit: 1, code: "FILE_NOT_READABLE", message: /cannot read the credentials file/ });
  });
});
