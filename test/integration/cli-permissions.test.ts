/**
 * `cg … permissions`: the built binary prints one role's permissions of one group,
 * with no server (it connects to nothing), as text and as one JSON document; bad
 * combinations are usage errors (exit 2).
 */
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { groupPermissions } from "../../src/index.js";
import type { PermissionsDoc } from "../../src/cli/permissions-doc.js";
import { killAllCg, runCg, runCgJson } from "../helpers/cli-run.js";

/** A server address nobody listens on: the command must not need it. */
const closed = ["-s", "nats://127.0.0.1:1"];

describe("cli permissions", () => {
  after(killAllCg);

  test("cli permissions - an elastic member's set as JSON, the library's lists", async () => {
    const { result, doc } = await runCgJson<PermissionsDoc>([...closed, "elastic", "permissions", "orders", "A", "--role", "member", "--member", "m1", "--retries", "--json"]);
    assert.equal(result.code, 0, result.stderr);
    const set = groupPermissions({ kind: "elastic", role: "member", stream: "orders", group: "A", member: "m1", retries: true });
    assert.equal(doc.inbox_prefix, "_INBOX_PCG.orders.A.member.m1");
    assert.deepEqual(doc.publish, set.publish);
    assert.deepEqual(doc.subscribe, set.subscribe);
    assert.equal(doc.allow_responses, true);
    assert.match(doc.server_config, /^authorization \{/);
    assert.match(doc.nsc, /^nsc add user --name 'orders-A-member-m1'/);
    assert.ok(doc.exposures.some((e) => e.includes("attempts")));
  });

  test("cli permissions - a static viewer as text: the server block, the nsc command, the exposures", async () => {
    const r = await runCg([...closed, "static", "permissions", "orders", "billing", "--role", "viewer", "--name", "dash", "--user-name", "dashboard"]);
    assert.equal(r.code, 0, r.stderr);
    for (const text of ["inbox prefix _INBOX_PCG.orders.billing.viewer.dash", 'user: "dashboard"', "nsc add user --name 'dashboard'", "--allow-sub '_INBOX_PCG.orders.billing.viewer.dash.>'", "not narrowed to this group"]) {
      assert.ok(r.stdout.includes(text), `lacks ${text}:\n${r.stdout}`);
    }
    assert.ok(!r.stdout.includes('"$KV.static-consumer-groups.'), "a viewer writes no config");
  });

  test("cli permissions - an elastic admin narrowed to one group", async () => {
    const { result, doc } = await runCgJson<PermissionsDoc>([...closed, "elastic", "permissions", "orders", "A", "--role", "admin", "--json"]);
    assert.equal(result.code, 0, result.stderr);
    assert.ok(doc.publish.includes("$KV.elastic-consumer-groups.orders.A"));
    assert.ok(!doc.publish.some((s) => s.includes("orders-B") || s === "$KV.elastic-consumer-groups.>"));
  });

  test("cli permissions - usage errors exit 2", async () => {
    const cases: [string[], RegExp][] = [
      [["elastic", "permissions", "orders", "A", "--role", "member"], /member name \(--member\)/],
      [["elastic", "permissions", "orders", "A", "--role", "owner"], /--role/],
      [["elastic", "permissions", "orders", "A"], /--role/],
      [["elastic", "permissions", "orders", "A", "--role", "viewer", "--retries"], /elastic members only/],
      [["static", "permissions", "orders", "A.B", "--role", "viewer"], /group name/],
    ];
    for (const [args, message] of cases) {
      const r = await runCg([...closed, ...args]);
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, message, args.join(" "));
    }
  });
});
