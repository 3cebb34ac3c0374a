/**
 * `cg` under the permission sets `cg … permissions` generates, against a real server:
 * an elastic member of one group consumes with its generated inbox prefix
 * (`--inbox-prefix`), and a viewer reads the group's info with its own; without the
 * prefix each is refused with a typed error naming the subject, instead of hanging.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { addMembers, createElastic, groupPermissions, userConfigEntry, type PermissionSet } from "../../src/index.js";
import { NatsServer, connectTo, type Client } from "../helpers/nats.js";
import { userEntry } from "../helpers/security-perms.js";
import { CgProcess, killAllCg, runCg } from "../helpers/cli-run.js";

const S = "orders";
const G = "A";
const SETS = {
  member: groupPermissions({ kind: "elastic", role: "member", stream: S, group: G, member: "m1" }),
  viewer: groupPermissions({ kind: "elastic", role: "viewer", stream: S, group: G }),
} satisfies Record<string, PermissionSet>;

describe("cli permissions - cg under the generated sets (real server)", () => {
  let server: NatsServer;
  let root: Client;
  const url = (user: keyof typeof SETS): string => server.url.replace("nats://", `nats://${user}:${user}-pw@`);

  before(async () => {
    const users = Object.entries(SETS).map(([user, set]) => userConfigEntry(set, { user, password: `${user}-pw` }));
    server = await NatsServer.start({ extraConfig: ["authorization {", "  users: [", `    ${userEntry("root", "root-pw")}`, ...users, "  ]", "}"].join("\n") });
    root = await connectTo(server, { user: "root", pass: "root-pw" });
    await root.jsm.streams.add({ name: S, subjects: [`${S}.*`] });
    await createElastic(root.js, { stream: S, group: G, maxMembers: 2, partitioningFilters: [{ filter: `${S}.*`, partitioning_wildcards: [1] }] });
    await addMembers(root.js, S, G, ["m1"]);
  });
  after(async () => {
    await killAllCg();
    await root?.nc.close();
    await server?.stop();
  });

  test("cli permissions - an elastic member consumes with its generated inbox prefix; without it cg is refused with PERMISSION_DENIED naming the inbox", { timeout: 120_000 }, async () => {
    const p = new CgProcess(["-s", url("member"), "--inbox-prefix", SETS.member.inboxPrefix, "--json", "elastic", "consume", S, G, "m1", "--sleep", "0"]);
    await p.waitForText(/"event":"started"/, 30_000, "stderr");
    for (const k of ["a", "b", "c"]) await root.js.publish(`${S}.${k}`, k);
    await p.waitFor(() => p.json<Record<string, unknown>>().length === 3, 30_000, "the three messages consumed");
    p.signal("SIGINT");
    assert.equal((await p.exited(30_000)).code, 130);
    const refused = await runCg(["-s", url("member"), "elastic", "consume", S, G, "m1"], { timeoutMs: 60_000 });
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /PERMISSION_DENIED|permission/i, refused.stderr);
    assert.match(refused.stderr, /_INBOX/, refused.stderr);
    assert.doesNotMatch(refused.stderr + refused.stdout, /member-pw/, "no password in the output");
  });

  test("cli permissions - a viewer reads the group's info with its generated inbox prefix, and cannot add a member", { timeout: 120_000 }, async () => {
    const info = await runCg(["-s", url("viewer"), "--inbox-prefix", SETS.viewer.inboxPrefix, "--json", "elastic", "info", S, G]);
    assert.equal(info.code, 0, info.stderr);
    assert.match(info.stdout, /"m1"/);
    const withoutPrefix = await runCg(["-s", url("viewer"), "elastic", "info", S, G], { timeoutMs: 60_000 });
    assert.notEqual(withoutPrefix.code, 0);
    assert.match(withoutPrefix.stderr, /PERMISSION_DENIED|permission/i, withoutPrefix.stderr);
    const add = await runCg(["-s", url("viewer"), "--inbox-prefix", SETS.viewer.inboxPrefix, "elastic", "add", S, G, "m2"], { timeoutMs: 60_000 });
    assert.notEqual(add.code, 0, "a viewer changes nothing");
    assert.match(add.stderr, /PERMISSION_DENIED|permission/i, add.stderr);
  });
});
