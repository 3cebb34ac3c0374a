/**
 * The library and `cg` against servers that require TLS, mutual TLS, a user and
 * password, a token or an nkey. For each: the library creates a group and a member
 * consumes a message; `cg` creates a second group, and `cg static ls` / `info`
 * show both (the running member active); then a client with wrong or missing
 * credentials is refused (exit 1, "cannot connect").
 *
 * Certificates come from `openssl` at test time (test/helpers/security-certs.ts),
 * the nkey from @nats-io/nkeys.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { connect, nkeyAuthenticator, nkeys, type ConnectionOptions } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { createStatic, staticConsume, type ConsumerGroupMember } from "../../src/index.js";
import { NatsServer, waitFor } from "../helpers/nats.js";
import { killAllCg, runCg, runCgJson } from "../helpers/cli-run.js";
import { createTestPki, serverTlsConfig, type TestPki } from "../helpers/security-certs.js";

interface Files {
  pki: TestPki;
  seed: Uint8Array;
  seedFile: string;
  otherSeedFile: string;
  publicKey: string;
}

interface Scenario {
  name: string;
  server(f: Files): string;
  /** nats.js options of the library's connection. */
  lib(f: Files): ConnectionOptions;
  /** `cg` connection flags. */
  cg(f: Files): string[];
  /** `cg` flags the server must refuse, and why. */
  refused: { what: string; flags(f: Files): string[] }[];
}

/**
 * nats.js gives Node no TLS server name for a server reached by IP address, so Node
 * checks the certificate against "localhost" unless told the host (cg does this itself).
 */
const BY_IP = { host: "127.0.0.1" } as Record<string, string>;

const SCENARIOS: Scenario[] = [
  {
    name: "TLS (server certificate for 127.0.0.1, client trusts the test CA)",
    server: (f) => serverTlsConfig(f.pki),
    lib: (f) => ({ tls: { caFile: f.pki.caFile, ...BY_IP } }),
    cg: (f) => ["--tlsca", f.pki.caFile],
    refused: [
      { what: "no --tlsca (the test CA is not trusted)", flags: () => [] },
      { what: "--tlsca of another CA", flags: (f) => ["--tlsca", f.pki.otherCaFile] },
    ],
  },
  {
    name: "mutual TLS (client certificate required)",
    server: (f) => serverTlsConfig(f.pki, true),
    lib: (f) => ({ tls: { caFile: f.pki.caFile, certFile: f.pki.clientCert, keyFile: f.pki.clientKey, ...BY_IP } }),
    cg: (f) => ["--tlsca", f.pki.caFile, "--tlscert", f.pki.clientCert, "--tlskey", f.pki.clientKey],
    refused: [{ what: "no client certificate", flags: (f) => ["--tlsca", f.pki.caFile] }],
  },
  {
    name: "user and password",
    server: () => 'authorization { user: "alice", password: "s3cret-pw" }',
    lib: () => ({ user: "alice", pass: "s3cret-pw" }),
    cg: () => ["--user", "alice", "--password", "s3cret-pw"],
    refused: [
      { what: "a wrong password", flags: () => ["--user", "alice", "--password", "nope"] },
      { what: "no credentials", flags: () => [] },
    ],
  },
  {
    name: "token",
    server: () => 'authorization { token: "t0ken-abc-123" }',
    lib: () => ({ token: "t0ken-abc-123" }),
    // as with the nats CLI, a user without a password is a token
    cg: () => ["--user", "t0ken-abc-123"],
    refused: [{ what: "a wrong token", flags: () => ["--user", "t0ken-wrong"] }],
  },
  {
    name: "nkey",
    server: (f) => `authorization { users: [ { nkey: "${f.publicKey}" } ] }`,
    lib: (f) => ({ authenticator: nkeyAuthenticator(f.seed) }),
    cg: (f) => ["--nkey", f.seedFile],
    refused: [{ what: "another nkey", flags: (f) => ["--nkey", f.otherSeedFile] }],
  },
];

describe("security - clients over TLS and with authentication", () => {
  let files: Files;
  const servers: NatsServer[] = [];
  const members: ConsumerGroupMember[] = [];

  before(async () => {
    const pki = await createTestPki();
    const user = nkeys.createUser();
    const other = nkeys.createUser();
    const seedFile = join(pki.dir, "user.nk");
    const otherSeedFile = join(pki.dir, "other.nk");
    await writeFile(seedFile, `${new TextDecoder().decode(user.getSeed())}\n`, { mode: 0o600 });
    await writeFile(otherSeedFile, `${new TextDecoder().decode(other.getSeed())}\n`, { mode: 0o600 });
    files = { pki, seed: user.getSeed(), seedFile, otherSeedFile, publicKey: user.getPublicKey() };
  });

  after(async () => {
    await killAllCg();
    await Promise.allSettled(members.splice(0).map((m) => m.stop()));
    await Promise.allSettled(servers.map((s) => s.stop()));
    await files?.pki.remove();
  });

  for (const s of SCENARIOS) {
    test(`security - ${s.name}: the library creates a group and consumes; cg creates, lists and shows groups; bad credentials are refused`, { timeout: 120_000 }, async () => {
      const server = await NatsServer.start({ extraConfig: s.server(files) });
      servers.push(server);
      const nc = await connect({ servers: server.url, ...s.lib(files) });
      try {
        const js = jetstream(nc);
        const jsm = await jetstreamManager(nc);
        await jsm.streams.add({ name: "orders", subjects: ["orders.*"], subject_transform: { src: "orders.*", dest: "{{partition(2,1)}}.orders.{{wildcard(1)}}" } });

        // The library: create a group, consume a message.
        await createStatic(js, { stream: "orders", group: "billing", maxMembers: 2, members: ["m1"] });
        const handled: string[] = [];
        const member = await staticConsume(js, { stream: "orders", group: "billing", member: "m1", handler: (m) => void handled.push(m.subject) });
        members.push(member);
        await js.publish("orders.k1", "hello");
        await waitFor(() => handled.includes("orders.k1"), 60_000, "the member to handle the message");

        // cg: create, ls, info.
        const flags = ["-s", server.url, ...s.cg(files)];
        const created = await runCg([...flags, "static", "create", "balanced", "orders", "audit", "2", "a1"]);
        assert.equal(created.code, 0, created.stderr);
        const { doc: ls } = await runCgJson<{ groups: string[] }>([...flags, "static", "ls", "orders"]);
        assert.deepEqual(ls.groups, ["audit", "billing"]);
        const { doc: info } = await runCgJson<{ config: { max_members: number; members: string[] }; active_members: string[] }>([...flags, "static", "info", "orders", "billing"]);
        assert.deepEqual(info.config, { max_members: 2, members: ["m1"] });
        assert.deepEqual(info.active_members, ["m1"]);
        const human = await runCg([...flags, "static", "info", "orders", "billing"]);
        assert.equal(human.code, 0, human.stderr);
        assert.match(human.stdout, /currently active members: \[m1\]/);

        await member.stop();

        // Wrong or missing credentials: refused before any command runs.
        for (const r of s.refused) {
          const refused = await runCg(["-s", server.url, ...r.flags(files), "static", "ls", "orders"]);
          assert.equal(refused.code, 1, `${r.what}: exit ${String(refused.code)}\n${refused.stderr}`);
          assert.match(refused.stderr, /^error: cannot connect to /, r.what);
          assert.equal(refused.stdout, "", r.what);
        }
      } finally {
        await nc.close();
        await server.stop();
      }
    });
  }
});
