/** The byte budget shared by the instances of one connection, without a server. */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { budgetShare, joinConnectionBudget } from "../../src/nats/connection-budget.js";

const MiB = 1024 * 1024;

describe("connection budget", () => {
  const shares: { budget: number; instances: number; share: number }[] = [
    { budget: 16 * MiB, instances: 1, share: 16 * MiB },
    { budget: 16 * MiB, instances: 4, share: 4 * MiB },
    { budget: 16 * MiB, instances: 3, share: Math.floor((16 * MiB) / 3) },
    { budget: 1024, instances: 2048, share: 1 },
    { budget: 1024, instances: 0, share: 1024 },
  ];
  for (const c of shares) {
    test(`connection budget - ${c.budget} bytes over ${c.instances} instances is ${c.share} each`, () => {
      assert.equal(budgetShare(c.budget, c.instances), c.share);
    });
  }

  test("connection budget - instances of one connection share it, leaving gives the others their part, other connections are apart", () => {
    const nc = {};
    const other = {};
    const a = joinConnectionBudget(nc, {});
    assert.equal(a.shareOf(16 * MiB), 16 * MiB, "alone on its connection");
    const instances = [a, ...Array.from({ length: 3 }, () => joinConnectionBudget(nc, {}))];
    const apart = joinConnectionBudget(other, {});
    assert.deepEqual(
      instances.map((i) => i.shareOf(16 * MiB)),
      [4 * MiB, 4 * MiB, 4 * MiB, 4 * MiB],
      "four on one connection: together no more than one budget",
    );
    assert.equal(apart.shareOf(16 * MiB), 16 * MiB, "another connection has a budget of its own");
    instances[1]?.leave();
    instances[1]?.leave();
    assert.equal(a.shareOf(12 * MiB), 4 * MiB, "three left (leaving twice counts once)");
  });

  test("connection budget - one instance joining twice counts once", () => {
    const nc = {};
    const instance = {};
    joinConnectionBudget(nc, instance);
    const again = joinConnectionBudget(nc, instance);
    assert.equal(again.shareOf(1000), 1000);
  });
});
