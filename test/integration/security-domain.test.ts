/**
 * A member that reaches JetStream through a domain (`jetstream(nc, { domain })`). Measured
 * on the server that holds the domain: it maps `$JS.<domain>.API` to `$JS.API` before it
 * checks a user's permissions, so the member list is the same as without a domain (its
 * `$JS.API` subjects), a violation names the `$JS.API` subject, and a list rewritten to the
 * domain's prefix is refused (the request then times out: nats.js reports the violation on
 * the connection's status, not on the request).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { ConsumerGroupError, createStatic, staticConsume, type ConsumerGroupMember } from "../../src/index.js";
import { NatsServer, waitFor, type Client } from "../helpers/nats.js";
import { recordStatus } from "../helpers/static-fixtures.js";
import { assertTypedError } from "../helpers/security-state.js";
import { memberPermissions, userEntry, withoutPermission, type Permissions } from "../helpers/security-perms.js";

const DOMAIN = "hub";
const S = "orders";
const G = "billing";
const ACK_WAIT = 2_000_000_000;

/** A member's list with every JetStream API subject under the domain's prefix instead of `$JS.API`. */
function inDomain(perms: Permissions): Permissions {
  const move = (s: string): string => (s.startsWith("$JS.API.") ? `$JS.${DOMAIN}.API.${s.slice("$JS.API.".length)}` : s);
  return { ...perms, publish: perms.publish.map(move) };
}

const member = (name: string): Permissions => memberPermissions({ kind: "static", stream: S, group: G, member: name });
const USERS: Record<string, Permissions | undefined> = {
  root: undefined,
  m1: member("m1"),
  nonext: withoutPermission(member("m2"), (s) => s.startsWith("$JS.API.CONSUMER.MSG.NEXT.")),
  prefixed: inDomain(member("m1")),
};

describe("security - a member in a JetStream domain", () => {
  let server: NatsServer;
  const clients: Client[] = [];
  const running: ConsumerGroupMember[] = [];
  const as = async (user: string): Promise<Client> => {
    const nc = await connect({ servers: server.url, user, pass: `${user}-pw` });
    const c: Client = { nc, js: jetstream(nc, { domain: DOMAIN }), jsm: await jetstreamManager(nc, { domain: DOMAIN, checkAPI: false }) };
    clients.push(c);
    return c;
  };

  before(async () => {
    const users = Object.entries(USERS).map(([name, perms]) => userEntry(name, `${name}-pw`, perms));
    server = await NatsServer.start({ jetstreamDomain: DOMAIN, extraConfig: `authorization { users: [ ${users.join(", ")} ] }` });
    const root = await as("root");
    await root.jsm.streams.add({ name: S, subjects: [`${S}.*`], subject_transform: { src: `${S}.*`, dest: `{{partition(2,1)}}.${S}.{{wildcard(1)}}` } });
    await createStatic(root.js, { stream: S, group: G, maxMembers: 2, members: ["m1", "m2"] });
    for (let i = 0; i < 20; i++) await root.js.publish(`${S}.k${i}`, `${i}`);
  });

  after(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await server?.stop();
  });

  test("security - a member with the member list consumes its partition through the domain", { timeout: 60_000 }, async () => {
    const c = await as("m1");
    let handled = 0;
    const m1 = await staticConsume(c.js, { stream: S, group: G, member: "m1", consumerConfig: { ack_wait: ACK_WAIT }, handler: () => void (handled += 1) });
    running.push(m1);
    const status = recordStatus(m1);
    await waitFor(() => handled > 0, 30_000, "m1 to handle a message through the domain");
    await m1.stop();
    const errors = status.events.filter((e) => e.type === "consumer_error");
    assert.deepEqual(errors, [], "no consumer errors");
  });

  test("security - without MSG.NEXT, through the domain: the member reports the pull subject the server refused", { timeout: 60_000 }, async () => {
    const c = await as("nonext");
    const m2 = await staticConsume(c.js, { stream: S, group: G, member: "m2", consumerConfig: { ack_wait: ACK_WAIT }, handler: () => undefined });
    running.push(m2);
    const status = recordStatus(m2);
    const event = await status.next("consumer_error", 30_000);
    assertTypedError(event.error, "PERMISSION_DENIED", /pulling messages from "billing-m2" \(member "m2"\)/, /no permission to publish to "\$JS\.API\.CONSUMER\.MSG\.NEXT\.orders\.billing-m2"/);
    await m2.stop();
  });

  test("security - a list under the domain's prefix is refused by the server that holds the domain: the violation names $JS.API", { timeout: 60_000 }, async () => {
    const c = await as("prefixed");
    const violations: string[] = [];
    const statuses = c.nc.status();
    void (async () => {
      for await (const s of statuses) if (s.type === "error") violations.push(String((s as { error?: unknown }).error));
    })();
    const err = await staticConsume(c.js, { stream: S, group: G, member: "m1", handler: () => undefined }).then(
      (m) => {
        running.push(m);
        return undefined;
      },
      (e: unknown) => e,
    );
    assert.ok(err instanceof ConsumerGroupError, `staticConsume refused (${String(err)})`);
    await waitFor(() => violations.some((v) => v.includes('"$JS.API.STREAM.INFO.orders"')), 10_000, `a violation naming $JS.API.STREAM.INFO.orders (saw: ${violations.join("; ")})`);
    assert.ok(!violations.some((v) => v.includes("$JS.hub.API")), `no violation names the domain's prefix: ${violations.join("; ")}`);
  });
});
