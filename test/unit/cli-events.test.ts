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

const plain = styler(false);
const err = new ConsumerGroupError("SERVER_ERROR", "no quorum");

const every: MemberStatus[] = [
  { type: "joined", partitions: [0, 1] },
  { type: "idle", reason: "no partitions" },
  { type: "partitions_changed", partitions: [1], assigned: [], revoked: [0] },
  { type: "config_changed", revision: 7 },
  { type: "consumer_refreshed", partitions: [4, 5] },
  { type: "pinned", pinId: "abc" },
  { type: "unpinned" },
  { type: "handler_error", error: new Error("boom"), subject: "orders.k", partition: 1, seq: 9, attempt: 2 },
  { type: "dead_lettered", subject: "orders.k", partition: 1, seq: 9, deadLetterSubject: "dlq", error: new Error("boom") },
  { type: "blocked", lane: "k", subject: "orders.k", partition: 1, seq: 9, error: new Error("boom") },
  { type: "consumer_lost", reason: "deleted" },
  { type: "consumer_error", error: err, retryInMs: 100 },
  { type: "drain_timeout", running: 2, waitedMs: 5000 },
  { type: "watch_error", error: err, retryInMs: 250 },
  { type: "watch_restarted", revision: 12, attempts: 3 },
  { type: "ack_failed", subject: "orders.k", partition: 1, seq: 9, error: new Error("no responders") },
  { type: "events_dropped", count: 42 },
  { type: "stopped", error: err },
];

describe("cli - member events", () => {
  test("cli - every status event renders with its details, for people and as JSON", () => {
    for (const status of every) {
      const doc = memberEvent(status, "m1", new Date(0));
      assert.equal(doc.event, status.type);
      const line = renderEvent(doc, plain);
      assert.notEqual(line.trim(), `00:00:00.000 [m1] ${status.type}`, `${status.type} has a line of its own`);
      const details = Object.keys(doc).filter((k) => !["event", "member", "ts"].includes(k));
      if (status.type !== "unpinned") assert.ok(details.length > 0, `${status.type} carries its details in JSON`);
    }
  });
});
