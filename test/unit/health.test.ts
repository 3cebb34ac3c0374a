/**
 * The SLOW_SERVER_RELEASE health finding: which server versions it names, and only
 * when a member consumer carries more than one filter subject.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { healthFindings, type HealthInput } from "../../src/observe/health.js";
import { slowFiltersRelease } from "../../src/observe/server-releases.js";

function input(serverVersion: string | undefined, partitionsOfM1: number[]): HealthInput {
  return {
    now: Date.parse("2026-01-01T00:00:00Z"),
    stallAfterMs: 30_000,
    members: [{ member: "m1", partitions: partitionsOfM1, overCap: false, active: true }],
    partitions: partitionsOfM1.map((p) => ({ partition: p, owner: "m1", pending: 0, lastActivity: undefined })),
    ...(serverVersion !== undefined ? { serverVersion } : {}),
  };
}

const slowFindings = (i: HealthInput) => healthFindings(i).filter((f) => f.code === "SLOW_SERVER_RELEASE");

test("health - slow release: releases before 2.14.10 are named, with the measured slowdown", () => {
  for (const v of ["2.11.17", "2.12.15", "2.14.9", "2.10.27", "2.14.0"]) {
    assert.deepEqual(slowFiltersRelease(v), { version: v, slowdown: "4-9×" }, v);
  }
  assert.deepEqual(slowFiltersRelease("v2.14.0-RC.1"), { version: "2.14.0", slowdown: "4-9×" });
});

test("health - slow release: 2.14.10 and newer, and unreadable versions, are not", () => {
  for (const v of ["2.14.10", "2.14.11", "2.15.0", "2.15.3", "3.0.0", "v2.16.1", "unknown", ""]) {
    assert.equal(slowFiltersRelease(v), undefined, v);
  }
  assert.equal(slowFiltersRelease(undefined), undefined);
});

test("health - slow release: a warning naming the version and what to run when a member owns several partitions", () => {
  const found = slowFindings(input("2.14.9", [0, 1, 2, 3]));
  assert.equal(found.length, 1);
  assert.equal(found[0]?.severity, "warning");
  assert.match(found[0]?.message ?? "", /nats-server 2\.14\.9 serves a consumer with many filter subjects several times slower than one with a single filter \(4-9× measured with 16/);
  assert.match(found[0]?.message ?? "", /up to 4 here/);
  assert.match(found[0]?.message ?? "", /run nats-server 2\.14\.10 or newer \(2\.15\.x recommended\)/);
});

test("health - slow release: nothing when every member consumer has one filter, on a fast release, or with no version", () => {
  assert.deepEqual(slowFindings(input("2.12.15", [0])), []);
  assert.deepEqual(slowFindings(input("2.15.3", [0, 1, 2, 3])), []);
  assert.deepEqual(slowFindings(input("2.14.10", [0, 1])), []);
  assert.deepEqual(slowFindings(input(undefined, [0, 1])), []);
});

test("health - a blocked key is an error finding that names the key, the member, the sequence, what waits, and the release command", () => {
  const found = healthFindings({
    ...input(undefined, [0, 1]),
    parkedKeys: [
      { member: "m1", key: "cust-7", mode: "key", partition: 1, seq: 1042, attempts: 5, parkedMessages: 99, error: "downstream refuses it" },
      { member: "m1", key: "", mode: "key", partition: 0, seq: 17, attempts: 3, parkedMessages: 0, error: "no key" },
      { member: "m2", key: "3", mode: "partition", partition: 3, seq: 20, attempts: 3, parkedMessages: 4, error: "boom" },
    ],
    names: { stream: "orders", group: "shipping" },
  }).filter((f) => f.code === "KEY_BLOCKED");
  assert.equal(found.length, 3);
  assert.deepEqual([found[0]?.severity, found[0]?.member, found[0]?.partition], ["error", "m1", 1]);
  assert.equal(
    found[0]?.message,
    'key "cust-7" of member m1 is blocked on seq 1042 after 5 attempts (downstream refuses it), 99 messages wait behind it: fix what fails and run "cg elastic park release orders shipping 1042", or dead-letter it with --dead-letter <subject>',
  );
  assert.match(found[1]?.message ?? "", /^partition 0 of member m1 is blocked on seq 17/, "a lane without a key is named by its partition");
  assert.match(found[2]?.message ?? "", /^partition 3 of member m2 is blocked on seq 20/, "partition mode names the partition (review F4)");
});
