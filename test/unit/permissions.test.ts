/**
 * The permission sets of one group's member, viewer and admin: narrowed to that
 * group's subjects, each with its own inbox prefix, and rendered as a nats-server
 * user entry and an nsc command.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { permissionViolation } from "../../src/nats/server-errors.js";
import { ConsumerGroupError, groupPermissions, inboxPrefixFor, nscCommand, serverConfigBlock, type PermissionRequest } from "../../src/index.js";

const elasticMember = (extra: Partial<PermissionRequest> = {}) =>
  groupPermissions({ kind: "elastic", role: "member", stream: "orders", group: "A", member: "m1", ...extra });

/** A subject pattern grants `subject` (nats-server's token rules: `*` one token, `>` the rest). */
function grants(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length || (p[i] !== "*" && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}
const allows = (list: readonly string[], subject: string): boolean => list.some((p) => grants(p, subject));

describe("permissions - inbox prefixes", () => {
  test("permissions - every principal gets its own multi-token prefix", () => {
    assert.equal(inboxPrefixFor("member", "orders", "A", "m1"), "_INBOX_PCG.orders.A.member.m1");
    assert.equal(elasticMember().inboxPrefix, "_INBOX_PCG.orders.A.member.m1");
    assert.equal(groupPermissions({ kind: "elastic", role: "viewer", stream: "orders", group: "A" }).inboxPrefix, "_INBOX_PCG.orders.A.viewer.default");
    assert.equal(groupPermissions({ kind: "static", role: "admin", stream: "orders", group: "A", name: "ops" }).inboxPrefix, "_INBOX_PCG.orders.A.admin.ops");
  });

  test("permissions - names with underscores never share a prefix", () => {
    const a = inboxPrefixFor("member", "a_b", "c", "m");
    const b = inboxPrefixFor("member", "a", "b_c", "m");
    assert.notEqual(a, b);
    assert.equal(allows([`${a}.>`], `${b}.x`), false);
  });

  test("permissions - a member subscribes to its own prefix only", () => {
    const set = elasticMember();
    assert.deepEqual(set.subscribe, ["_INBOX_PCG.orders.A.member.m1.>", "$PCG.presence.orders.A"]);
    assert.equal(allows(set.subscribe, "_INBOX.abc"), false);
    assert.equal(allows(set.subscribe, "_INBOX_PCG.orders.B.member.m1.x"), false);
    assert.equal(allows(set.subscribe, "_INBOX_PCG.orders.A.member.m2.x"), false);
    assert.equal(set.allowResponses, true);
  });
});

describe("permissions - a refused inbox names the principal's prefix to grant", () => {
  test("permissions - a refused subscription under a generated prefix suggests that prefix, not the root", () => {
    const refused = (subject: string) => permissionViolation(new Error(`Permissions Violation for Subscription to "${subject}"`))?.grant;
    assert.equal(refused("_INBOX_PCG.orders.A.member.m1.Xy12"), "_INBOX_PCG.orders.A.member.m1.>");
    assert.equal(refused("_INBOX_PCG.orders.A.admin.default.pcg-repartition.abc"), "_INBOX_PCG.orders.A.admin.default.>");
    assert.equal(refused("_INBOX.Xy12"), "_INBOX.>");
  });
});

describe("permissions - a member reaches nothing of another group", () => {
  const set = elasticMember({ retries: true, lag: true });
  const B = "$KV.elastic-consumer-groups.orders.B";
  const denied: [string, string][] = [
    ["B's config by direct get", `$JS.API.DIRECT.GET.KV_elastic-consumer-groups.${B}`],
    ["any config by message get", "$JS.API.STREAM.MSG.GET.KV_elastic-consumer-groups"],
    ["B's config watch consumer", "$JS.API.CONSUMER.DELETE.KV_elastic-consumer-groups.oc_abc"],
    ["a watch on B's key", `$JS.API.CONSUMER.CREATE.KV_elastic-consumer-groups.oc_x.${B}`],
    ["writing its own config", "$KV.elastic-consumer-groups.orders.A"],
    ["writing B's config", B],
    ["B's member consumer", "$JS.API.CONSUMER.DELETE.orders-B.m1"],
    ["another member's consumer of A", "$JS.API.CONSUMER.DELETE.orders-A.m2"],
    ["pulls from B", "$JS.API.CONSUMER.MSG.NEXT.orders-B.m1"],
    ["acks of B", "$JS.ACK.orders-B.m1.1.1.1.1.1"],
    ["B's work queue", "$JS.API.DIRECT.GET.orders-B"],
    ["B's work-queue stream", "$JS.API.STREAM.DELETE.orders-B"],
    ["B's attempt records by direct get", "$JS.API.DIRECT.GET.KV_elastic-consumer-group-attempts.$KV.elastic-consumer-group-attempts.orders.B.x"],
    ["B's presence", "$PCG.presence.orders.B"],
    ["stream creation", "$JS.API.STREAM.CREATE.orders-A"],
  ];
  for (const [what, subject] of denied) {
    test(`permissions - a member of A may not publish to ${what}`, () => assert.equal(allows(set.publish, subject), false, subject));
  }
  const needed: [string, string][] = [
    ["its config by direct get", "$JS.API.DIRECT.GET.KV_elastic-consumer-groups.$KV.elastic-consumer-groups.orders.A"],
    ["its config watch", "$JS.API.CONSUMER.CREATE.KV_elastic-consumer-groups.oc_1.$KV.elastic-consumer-groups.orders.A"],
    ["its consumer", "$JS.API.CONSUMER.CREATE.orders-A"],
    ["its pulls", "$JS.API.CONSUMER.MSG.NEXT.orders-A.m1"],
    ["its acks", "$JS.ACK.orders-A.m1.1.2.3.4.5"],
    ["its unpin", "$JS.API.CONSUMER.UNPIN.orders-A.m1"],
    ["its consumer's delete", "$JS.API.CONSUMER.DELETE.orders-A.m1"],
    ["its attempt records", "$KV.elastic-consumer-group-attempts.orders.A.k"],
    ["its group's lag", "$JS.API.CONSUMER.INFO.orders-A.m2"],
  ];
  for (const [what, subject] of needed) {
    test(`permissions - a member of A may publish to ${what}`, () => assert.equal(allows(set.publish, subject), true, subject));
  }
  test("permissions - the attempts bucket's keyless subjects are reported as an exposure", () => {
    assert.ok(set.exposures.some((e) => e.includes("STREAM.MSG.DELETE.KV_elastic-consumer-group-attempts")));
    assert.ok(!elasticMember().publish.some((s) => s.includes("attempts")), "no attempts subjects without retries");
  });
  test("permissions - a static member uses its durable and the source stream", () => {
    const s = groupPermissions({ kind: "static", role: "member", stream: "orders", group: "A", member: "m1" });
    assert.ok(s.publish.includes("$JS.API.CONSUMER.DURABLE.CREATE.orders.A-m1"));
    assert.ok(allows(s.publish, "$JS.ACK.orders.A-m1.1.1.1.1.1"));
    assert.equal(allows(s.publish, "$JS.API.CONSUMER.DELETE.orders.B-m1"), false);
    assert.equal(allows(s.publish, "$JS.API.STREAM.MSG.GET.KV_static-consumer-groups"), false);
    assert.deepEqual(s.subscribe, ["_INBOX_PCG.orders.A.member.m1.>"]);
    assert.equal(s.allowResponses, false);
  });
  test("permissions - an auto member writes its own group's config only", () => {
    const auto = elasticMember({ autoJoin: true });
    assert.equal(allows(auto.publish, "$KV.elastic-consumer-groups.orders.A"), true);
    assert.equal(allows(auto.publish, "$KV.elastic-consumer-groups.orders.B"), false);
  });
});

describe("permissions - a viewer changes nothing", () => {
  for (const kind of ["static", "elastic"] as const) {
    const set = groupPermissions({ kind, role: "viewer", stream: "orders", group: "A" });
    const bucket = `${kind}-consumer-groups`;
    test(`permissions - a ${kind} viewer reads its group's config and no other`, () => {
      assert.equal(allows(set.publish, `$JS.API.DIRECT.GET.KV_${bucket}.$KV.${bucket}.orders.A`), true);
      assert.equal(allows(set.publish, `$JS.API.DIRECT.GET.KV_${bucket}.$KV.${bucket}.orders.B`), false);
      assert.equal(allows(set.publish, `$JS.API.STREAM.MSG.GET.KV_${bucket}`), false);
    });
    test(`permissions - a ${kind} viewer has no write, delete, create, pull, ack or presence subject`, () => {
      const writes = /^(\$KV\.|\$JS\.ACK\.|\$PCG\.)|\.(CREATE|DELETE|UPDATE|PURGE|UNPIN|PAUSE|MSG\.NEXT|MSG\.DELETE|LEADER)\b|^\$JS\.API\.STREAM\.MSG\.GET/;
      assert.deepEqual(set.publish.filter((s) => writes.test(s)), []);
      assert.equal(set.allowResponses, false);
      assert.deepEqual(set.subscribe, [`_INBOX_PCG.orders.A.viewer.default.>`]);
    });
  }
  test("permissions - an elastic viewer reads its group's work queue and consumers", () => {
    const set = groupPermissions({ kind: "elastic", role: "viewer", stream: "orders", group: "A" });
    for (const s of ["$JS.API.CONSUMER.LIST.orders-A", "$JS.API.CONSUMER.INFO.orders-A.m1", "$JS.API.DIRECT.GET.orders-A", "$JS.API.STREAM.INFO.orders-A"]) assert.equal(allows(set.publish, s), true, s);
    for (const s of ["$JS.API.CONSUMER.INFO.orders-B.m1", "$JS.API.DIRECT.GET.orders-B"]) assert.equal(allows(set.publish, s), false, s);
  });
});

describe("permissions - an admin manages one group", () => {
  const set = groupPermissions({ kind: "elastic", role: "admin", stream: "orders", group: "A" });
  test("permissions - an elastic admin writes its group and its work queue", () => {
    for (const s of ["$KV.elastic-consumer-groups.orders.A", "$JS.API.STREAM.CREATE.orders-A", "$JS.API.STREAM.DELETE.orders-A", "$JS.API.CONSUMER.UNPIN.orders-A.m1", "$JS.API.CONSUMER.DELETE.orders-A.m1", "$PCG.presence.orders.A"]) {
      assert.equal(allows(set.publish, s), true, s);
    }
  });
  test("permissions - an elastic admin reaches nothing of another group", () => {
    for (const s of ["$KV.elastic-consumer-groups.orders.B", "$JS.API.STREAM.DELETE.orders-B", "$JS.API.CONSUMER.DELETE.orders-B.m1", "$JS.API.CONSUMER.DELETE.KV_elastic-consumer-groups.oc_1", "$JS.API.STREAM.MSG.GET.KV_elastic-consumer-groups", "$JS.API.DIRECT.GET.KV_elastic-consumer-groups.$KV.elastic-consumer-groups.orders.B", "$PCG.presence.orders.B"]) {
      assert.equal(allows(set.publish, s), false, s);
    }
  });
  test("permissions - a repartitioning admin asks other admins of its group only", () => {
    const r = groupPermissions({ kind: "elastic", role: "admin", stream: "orders", group: "A", repartition: true, name: "ops1" });
    assert.equal(allows(r.publish, "_INBOX_PCG.orders.A.admin.ops2.pcg-repartition.x1"), true);
    assert.equal(allows(r.publish, "_INBOX_PCG.orders.B.admin.ops2.pcg-repartition.x1"), false);
  });
  test("permissions - a static admin narrowed to its members' durables", () => {
    const s = groupPermissions({ kind: "static", role: "admin", stream: "orders", group: "A", members: ["m1", "m2"] });
    assert.equal(allows(s.publish, "$JS.API.CONSUMER.DELETE.orders.A-m2"), true);
    assert.equal(allows(s.publish, "$JS.API.CONSUMER.DELETE.orders.B-m1"), false);
    const wide = groupPermissions({ kind: "static", role: "admin", stream: "orders", group: "A" });
    assert.ok(wide.exposures.some((e) => e.includes("other static groups' durables")));
  });
});

describe("permissions - requests it refuses", () => {
  const cases: [string, PermissionRequest, string][] = [
    ["a member without a member name", { kind: "elastic", role: "member", stream: "s", group: "g" }, "INVALID_ARGUMENT"],
    ["a viewer with a member name", { kind: "elastic", role: "viewer", stream: "s", group: "g", member: "m" }, "INVALID_ARGUMENT"],
    ["retries for a static member", { kind: "static", role: "member", stream: "s", group: "g", member: "m", retries: true }, "INVALID_ARGUMENT"],
    ["auto for an admin", { kind: "elastic", role: "admin", stream: "s", group: "g", autoJoin: true }, "INVALID_ARGUMENT"],
    ["repartition for a static admin", { kind: "static", role: "admin", stream: "s", group: "g", repartition: true }, "INVALID_ARGUMENT"],
    ["a dotted group", { kind: "elastic", role: "viewer", stream: "s", group: "g.h" }, "INVALID_NAME"],
    ["a wildcard member", { kind: "elastic", role: "member", stream: "s", group: "g", member: "*" }, "INVALID_NAME"],
    ["an unknown role", { kind: "elastic", role: "owner" as "admin", stream: "s", group: "g" }, "INVALID_ARGUMENT"],
  ];
  for (const [what, request, code] of cases) {
    test(`permissions - refuses ${what}`, () => {
      assert.throws(() => groupPermissions(request), (err: unknown) => err instanceof ConsumerGroupError && err.code === code);
    });
  }
});

describe("permissions - text", () => {
  const set = elasticMember();
  test("permissions - the server block lists every subject and allow_responses", () => {
    const text = serverConfigBlock(set, { user: "a-m1" });
    assert.match(text, /^authorization \{/);
    assert.match(text, /user: "a-m1", password: "<password>"/);
    for (const s of [...set.publish, ...set.subscribe]) assert.ok(text.includes(JSON.stringify(s)), s);
    assert.match(text, /allow_responses: true/);
    assert.match(text, /inboxPrefix "_INBOX_PCG\.orders\.A\.member\.m1"/);
  });
  test("permissions - the nsc command has one flag per subject", () => {
    const text = nscCommand(set);
    assert.match(text, /^nsc add user --name 'orders-A-member-m1'/);
    assert.equal(text.match(/--allow-pub '/g)?.length, set.publish.length);
    assert.equal(text.match(/--allow-sub '/g)?.length, set.subscribe.length);
    assert.match(text, /'\$JS\.ACK\.orders-A\.m1\.>'/);
    assert.match(text, /--allow-pub-response 1/);
  });
});
