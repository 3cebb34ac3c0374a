/**
 * The lag and least privilege: an elastic member's user with the member list plus
 * the two lag subjects of docs/permissions.md reads the group's lag without a
 * permission violation; with the member list only, groupLag fails with
 * PERMISSION_DENIED naming a subject to grant, and `cg elastic consume
 * --metrics-port` keeps consuming while `/lag` answers 503 with that error.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { addMembers, createElastic, groupLag, workQueueStreamName } from "../../src/index.js";
import { NatsServer, waitFor, type Client } from "../helpers/nats.js";
import { CgProcess, killAllCg } from "../helpers/cli-run.js";
import { rejectsWithCode } from "../helpers/elastic-util.js";
import { lagPermissions, memberPermissions, mergePermissions, userEntry, type Permissions } from "../helpers/security-perms.js";

const E = "events";
const G = "shipping";
const member = (name: string): Permissions => memberPermissions({ kind: "elastic", stream: E, group: G, member: name });
const USERS: Record<string, Permissions | undefined> = {
  root: undefined,
  lagmember: mergePermissions(member("m1"), lagPermissions({ stream: E, group: G })),
  plainmember: member("m2"),
};

describe("lag - permissions", () => {
  let server: NatsServer;
  const clients: Client[] = [];
  const as = async (user: string): Promise<Client> => {
    const nc = await connect({ servers: server.url, user, pass: `${user}-pw` });
    const c: Client = { nc, js: jetstream(nc), jsm: await jetstreamManager(nc, { checkAPI: false }) };
    clients.push(c);
    return c;
  };

  before(async () => {
    const users = Object.entries(USERS).map(([name, perms]) => `      ${userEntry(name, `${name}-pw`, perms)}`);
    server = await NatsServer.start({ extraConfig: ["accounts {", "  MAIN: { jetstream: enabled, users: [", users.join(",\n"), "  ] }", "}"].join("\n") });
    const root = await as("root");
    await root.jsm.streams.add({ name: E, subjects: [`${E}.*`] });
    await createElastic(root.js, { stream: E, group: G, maxMembers: 4, partitioningFilters: [{ filter: `${E}.*`, partitioning_wildcards: [1] }] });
    await addMembers(root.js, E, G, ["m1", "m2"]);
    for (let i = 0; i < 40; i++) await root.js.publish(`${E}.k${i}`, "x");
    await waitFor(async () => (await root.jsm.streams.info(workQueueStreamName(E, G))).state.messages === 40, 10_000, "40 sourced");
  });

  after(async () => {
    await killAllCg();
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await server?.stop();
  });

  test("lag - the member list plus the lag subjects reads the lag, without a violation", async () => {
    const c = await as("lagmember");
    const errors: string[] = [];
    const statuses = c.nc.status();
    void (async () => {
      for await (const s of statuses) if (s.type === "error") errors.push(String((s as { error?: unknown }).error));
    })();
    const lag = await groupLag(c.js, E, G, { sampleMs: 0 });
    assert.equal(lag.pending, 40);
    assert.equal(lag.members.length, 2);
    await c.nc.flush();
    assert.deepEqual(errors, []);
    (statuses as unknown as { stop(): void }).stop();
  });

  test("lag - the member list alone: PERMISSION_DENIED naming the subject; the CLI member consumes and /lag answers 503", async () => {
    const c = await as("plainmember");
    const err = await rejectsWithCode(groupLag(c.js, E, G, { sampleMs: 0 }), "PERMISSION_DENIED");
    assert.match(err.message, new RegExp(`\\$JS\\.API\\.(CONSUMER\\.INFO|DIRECT\\.GET)\\.${E}-${G}`));

    const p = new CgProcess(["-s", server.url, "--user", "plainmember", "--password", "plainmember-pw", "--json", "elastic", "consume", E, G, "m2", "--sleep", "0", "--metrics-port", "0"]);
    await p.waitForText(/"event":"started"/, 30_000, "stderr");
    const lagUrl = p.json<{ event: string; lag_url?: string }>("stderr").find((e) => e.event === "started")?.lag_url ?? "";
    await p.waitFor(() => p.json().length > 0, 30_000, "m2 consuming");
    const res = await fetch(lagUrl);
    assert.equal(res.status, 503);
    const body = (await res.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, "PERMISSION_DENIED");
    assert.match(body.error.message, /grant it publish permission/);
    await p.waitForText(/cannot read the group's lag/, 10_000, "stderr");
    assert.equal(p.stderr.split("\n").filter((l) => l.includes("cannot read the group's lag")).length, 1, "reported once");
    await p.kill();
  });
});
