/**
 * Every member status event has its own `cg … consume` line and JSON document: none
 * falls through to the bare event name, so what an instance reports reaches the user.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ConsumerGroupError } from "../../src/core/errors.js";
import { memberEvent, renderEvent } from "../../src/cli/render.js";
import { styler } from "../../src/cli/output.js";
import type { MemberStatus } from "../../src/nats/member-types.js";
import type { MemberEventDoc, MemberEventName } from "../../src/cli/model.js";

const plain = styler(false);
const err = new ConsumerGroupError("SERVER_ERROR", "no quorum");

/** One of each event: a record over every type, so a new event type does not compile until it is here. */
const examples: { [K in MemberStatus["type"]]: Extract<MemberStatus, { type: K }> } = {
  joined: { type: "joined", partitions: [0, 1] },
  idle: { type: "idle", reason: "no partitions" },
  partitions_changed: { type: "partitions_changed", partitions: [1], assigned: [], revoked: [0] },
  config_changed: { type: "config_changed", revision: 7 },
  consumer_refreshed: { type: "consumer_refreshed", partitions: [4, 5] },
  pinned: { type: "pinned", pinId: "abc" },
  unpinned: { type: "unpinned" },
  handler_error: { type: "handler_error", error: new Error("boom"), subject: "orders.k", partition: 1, seq: 9, attempt: 2 },
  dead_lettered: { type: "dead_lettered", subject: "orders.k", partition: 1, seq: 9, deadLetterSubject: "dlq", error: new Error("boom") },
  blocked: { type: "blocked", lane: "k", subject: "orders.k", partition: 1, seq: 9, error: new Error("boom") },
  unblocked: { type: "unblocked", lane: "k", subject: "orders.k", partition: 1, seq: 9, outcome: "handled" },
  parking_full: { type: "parking_full", messages: 1024, bytes: 65536 },
  consumer_lost: { type: "consumer_lost", reason: "deleted" },
  consumer_error: { type: "consumer_error", error: err, retryInMs: 100 },
  drain_timeout: { type: "drain_timeout", running: 2, waitedMs: 5000 },
  watch_error: { type: "watch_error", error: err, retryInMs: 250 },
  watch_restarted: { type: "watch_restarted", revision: 12, attempts: 3 },
  attempts_unrecorded: { type: "attempts_unrecorded", subject: "orders.k", partition: 1, seq: 9, error: new Error("permission denied") },
  ack_failed: { type: "ack_failed", subject: "orders.k", partition: 1, seq: 9, error: new Error("no responders") },
  events_dropped: { type: "events_dropped", count: 42 },
  stopped: { type: "stopped", error: err },
  membership_written: { type: "membership_written", revision: 4, added: ["m3"], removed: [] },
  lease_lost: { type: "lease_lost", error: err },
  lease_restored: { type: "lease_restored" },
  starts_held: { type: "starts_held", reason: "gap", durationMs: 5021 },
  slow_consumer: { type: "slow_consumer", blockedMs: 40, busyShare: 0.97, askedBytes: 2 * 1024 * 1024 },
};
const every: MemberStatus[] = Object.values(examples);

/** The events `consume` adds itself, one of each: a record again, so a new one needs its example. */
const commandEvents: { [K in Exclude<MemberEventName, MemberStatus["type"]>]: MemberEventDoc } = {
  started: { event: "started", member: "m1", ts: new Date(0).toISOString(), kind: "elastic", stream: "orders", group: "billing", partitions: [0, 1], sleep_ms: 0 },
  stopping: { event: "stopping", member: "m1", ts: new Date(0).toISOString(), signal: "SIGTERM" },
};

describe("cli - member events", () => {
  test("cli - every status event renders with its details, for people and as JSON", () => {
    for (const status of every) {
      const doc = memberEvent(status, "m1", new Date(0));
      assert.equal(doc.event, status.type);
      const line = renderEvent(doc, plain);
      assert.notEqual(line.trim(), `00:00:00.000 [m1] ${status.type}`, `${status.type} has a line of its own`);
      const details = Object.keys(doc).filter((k) => !["event", "member", "ts"].includes(k));
      if (status.type !== "unpinned" && status.type !== "lease_restored") assert.ok(details.length > 0, `${status.type} carries its details in JSON`);
    }
  });

  test("cli - the events consume adds itself (started, stopping) render with their details", () => {
    for (const [name, doc] of Object.entries(commandEvents)) {
      assert.equal(doc.event, name);
      const line = renderEvent(doc, plain);
      assert.notEqual(line.trim(), `00:00:00.000 [m1] ${name}`, `${name} has a line of its own`);
    }
  });
});

describe("cli - slow consumer wording", () => {
  const cases: { name: string; blockedMs: number; busyShare: number; askedBytes: number; says: RegExp }[] = [
    { name: "a long block", blockedMs: 900, busyShare: 0.2, askedBytes: 0, says: /blocked for/ },
    { name: "a busy loop", blockedMs: 40, busyShare: 0.97, askedBytes: 0, says: /busy 97 %/ },
    { name: "pulls that could bring more than the server queues", blockedMs: 40, busyShare: 0.5, askedBytes: 256 * 1024 * 1024, says: /could bring 256 MiB/ },
  ];
  for (const c of cases) {
    test(`cli - slow_consumer after ${c.name} says why`, () => {
      const line = renderEvent(memberEvent({ type: "slow_consumer", blockedMs: c.blockedMs, busyShare: c.busyShare, askedBytes: c.askedBytes }, "m1", new Date(0)), plain);
      assert.match(line, c.says);
    });
  }
});
