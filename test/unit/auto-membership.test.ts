/**
 * Auto-join planning without a server: which members a config should list for a view
 * of registrations and leases, in balanced and sticky mode, what a leave writes, and
 * the checks of the `autoJoin` option and of the default member name.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { listedMembers, planLeave, planMembership, type AutoView } from "../../src/core/auto-membership.js";
import { minimumMoves, movedPartitions } from "../../src/core/sticky-assignment.js";
import { partitionOwners } from "../../src/core/assignment.js";
import { validateElasticConfig } from "../../src/core/validation.js";
import type { ElasticConsumerGroupConfig } from "../../src/core/types.js";
import { defaultMemberName, resolveAutoJoin } from "../../src/elastic/auto-join/settings.js";
import { ConsumerGroupError } from "../../src/core/errors.js";

const base = (partitions: number, extra: Partial<ElasticConsumerGroupConfig> = {}): ElasticConsumerGroupConfig => ({
  max_members: partitions,
  max_buffered_msg: 0,
  max_buffered_bytes: 0,
  partitioning_filters: [{ filter: "orders.*", partitioning_wildcards: [1] }],
  ...extra,
});
const view = (registered: string[], live: string[], leaving: string[] = []): AutoView => ({ registered: new Set(registered), live: new Set(live), leaving: new Set(leaving) });
const codeOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
  } catch (err) {
    return err instanceof ConsumerGroupError ? err.code : "not typed";
  }
  return undefined;
};

describe("auto-membership - planning (no server)", () => {
  test("auto-membership - balanced: manual members first and kept, live auto members kept in place, new ones appended sorted, expired ones removed", () => {
    const config = base(8, { members: ["go1", "b", "x"] });
    const plan = planMembership(config, view(["b", "x", "a", "c"], ["b", "c", "a"]), "balanced");
    assert.deepEqual(plan.config.members, ["go1", "b", "a", "c"]);
    assert.deepEqual(plan.added, ["a", "c"]);
    assert.deepEqual(plan.removed, ["x"]);
    validateElasticConfig(plan.config);
  });

  test("auto-membership - no change gives back the same object (nothing is written)", () => {
    const config = base(4, { members: ["go1", "a"] });
    const plan = planMembership(config, view(["a"], ["a"]), "balanced");
    assert.equal(plan.config, config);
    const sticky = planMembership(base(4, { member_mappings: [{ member: "a", partitions: [0, 1, 2, 3] }] }), view(["a"], ["a"]), "sticky");
    assert.deepEqual(sticky.added, []);
    const again = planMembership(sticky.config, view(["a"], ["a"]), "sticky");
    assert.equal(again.config, sticky.config);
  });

  test("auto-membership - a live lease makes a member auto even before its registration is seen; a member without either is manual", () => {
    const plan = planMembership(base(4, { members: ["m"] }), view([], ["n"]), "balanced");
    assert.deepEqual(plan.config.members, ["m", "n"]);
    assert.deepEqual(plan.removed, []);
  });

  test("auto-membership - more auto members than partitions: the extra ones are reported idle", () => {
    const balanced = planMembership(base(2), view(["a", "b", "c"], ["a", "b", "c"]), "balanced");
    assert.deepEqual(balanced.idle, ["c"]);
    assert.deepEqual(balanced.config.members, ["a", "b"], "only as many listed as there are partitions");
    // The idle one is the one Go gives no partition: sorted order, not list order.
    const listedLate = planMembership(base(2, { members: ["m1", "m2"] }), view(["m0", "m1", "m2"], ["m0", "m1", "m2"]), "balanced");
    assert.deepEqual(listedLate.config.members, ["m1", "m2"]);
    assert.deepEqual(listedLate.idle, ["m0"]);
    // A manual Go member is never pushed out of the partitions by auto members that sort before it.
    const goMember = planMembership(base(2, { members: ["worker-go"] }), view(["auto-1", "auto-2"], ["auto-1", "auto-2"]), "balanced");
    assert.deepEqual(goMember.config.members, ["worker-go", "auto-1"]);
    assert.deepEqual(partitionOwners(goMember.config).filter((o) => o === "worker-go").length, 1);
    assert.deepEqual(goMember.idle, ["auto-2"]);
    const sticky = planMembership(base(2), view(["a", "b", "c"], ["a", "b", "c"]), "sticky");
    assert.deepEqual(sticky.idle, ["c"]);
    assert.deepEqual(listedMembers(sticky.config), ["a", "b"]);
    validateElasticConfig(sticky.config);
  });

  test("auto-membership - sticky: manual mappings stay exact, auto members share the rest ±1 with the fewest moves", () => {
    const config = base(12, { member_mappings: [{ member: "go1", partitions: [0, 1] }, { member: "a", partitions: [2, 3, 4, 5, 6] }, { member: "b", partitions: [7, 8, 9, 10, 11] }] });
    const plan = planMembership(config, view(["a", "b", "c"], ["a", "b", "c"]), "sticky");
    validateElasticConfig(plan.config);
    assert.deepEqual(plan.config.member_mappings?.find((m) => m.member === "go1")?.partitions, [0, 1]);
    const sizes = (plan.config.member_mappings ?? []).filter((m) => m.member !== "go1").map((m) => m.partitions?.length ?? 0);
    assert.deepEqual(sizes.sort(), [3, 3, 4].sort());
    const before = partitionOwners(config);
    const after = partitionOwners(plan.config);
    assert.equal(movedPartitions(before, after), minimumMoves(before, ["a", "b", "c"], [{ member: "go1", partitions: [0, 1] }]));
  });

  test("auto-membership - a policy that would change manual members' partitions is ASSIGNMENT_CONFLICT", () => {
    assert.equal(codeOf(() => planMembership(base(4, { members: ["go1"] }), view(["a"], ["a"]), "sticky")), "ASSIGNMENT_CONFLICT");
    assert.equal(codeOf(() => planMembership(base(4, { member_mappings: [{ member: "go1", partitions: [0, 1, 2, 3] }] }), view(["a"], ["a"]), "balanced")), "ASSIGNMENT_CONFLICT");
    // All auto: the form may change.
    const converted = planMembership(base(4, { members: ["a"] }), view(["a"], ["a", "b"]), "sticky");
    assert.deepEqual(converted.config.members, undefined);
    assert.equal(converted.config.member_mappings?.length, 2);
  });

  test("auto-membership - a leave adds nobody: the leaver and listed auto members that are not live go, manual members stay", () => {
    const config = base(6, { members: ["go1", "a", "b", "c"] });
    const plan = planLeave(config, view(["a", "b", "c", "d"], ["a", "b", "d"]), "balanced", "a");
    assert.deepEqual(plan.config.members, ["go1", "b"], "d (live, not listed) is not added; c (not live) goes");
    // Two leaves at once: the second, still seeing the first as live, never brings it back.
    const second = planLeave(plan.config, view(["a", "b", "c"], ["a", "b", "c"]), "balanced", "b");
    assert.deepEqual(second.config.members, ["go1"]);
    // The last auto member leaving a sticky group whose manual mappings cover nothing else stays.
    const sticky = base(4, { member_mappings: [{ member: "go1", partitions: [0, 1] }, { member: "a", partitions: [2, 3] }] });
    assert.equal(planLeave(sticky, view(["a"], ["a"]), "sticky", "a").config, sticky);
    // With no manual mapping the group is left with no membership.
    const alone = planLeave(base(4, { member_mappings: [{ member: "a", partitions: [0, 1, 2, 3] }] }), view(["a"], ["a"]), "sticky", "a");
    assert.deepEqual(listedMembers(alone.config), []);
    validateElasticConfig(alone.config);
  });
});

describe("auto-membership - options (no server)", () => {
  test("auto-membership - autoJoin defaults and checks: lease TTL at least AckWait and 1 s, settle non-negative, known policies", () => {
    assert.equal(resolveAutoJoin(undefined, 5000), undefined);
    assert.equal(resolveAutoJoin(false, 5000), undefined);
    assert.deepEqual(resolveAutoJoin(true, 5000), { leaseTtlMs: 10_000, settleMs: 3000, assignment: "balanced" });
    assert.deepEqual(resolveAutoJoin(true, 30_000), { leaseTtlMs: 30_000, settleMs: 3000, assignment: "balanced" });
    assert.deepEqual(resolveAutoJoin({ leaseTtlMs: 5000, settleMs: 0, assignment: "sticky" }, 5000), { leaseTtlMs: 5000, settleMs: 0, assignment: "sticky" });
    assert.match(String((() => { try { resolveAutoJoin({ leaseTtlMs: "5000" }, 1000); } catch (err) { return (err as Error).message; } return ""; })()), /got "5000"/);
    for (const bad of [
      { leaseTtlMs: 4999 },
      { leaseTtlMs: 999 },
      { leaseTtlMs: Number.NaN },
      { leaseTtlMs: 3e9 },
      { leaseTtlMs: 1e308 },
      { leaseTtlMs: "5000" },
      { settleMs: -1 },
      { settleMs: 1e10 },
      { assignment: "rr" },
      { assignment: null },
      { leaseTTL: 5000 },
      "yes",
      1,
      [],
    ]) {
      assert.equal(codeOf(() => resolveAutoJoin(bad, 5000)), "INVALID_ARGUMENT", JSON.stringify(bad));
    }
  });

  test("auto-membership - the default member name is HOSTNAME, and an invalid one is INVALID_NAME naming it", () => {
    assert.equal(defaultMemberName({ HOSTNAME: "shipping-7d9f8-abcde" }), "shipping-7d9f8-abcde");
    assert.equal(codeOf(() => defaultMemberName({ HOSTNAME: "bad name*" })), "INVALID_NAME");
  });
});
