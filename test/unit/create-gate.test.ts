/** The consumer create rule, without a server: a table of what an instance saw and when. */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { coversSettings, CreateGate, type ConsumerSeen } from "../../src/elastic/create-gate.js";

const absent: ConsumerSeen = { kind: "absent" };
const ours: ConsumerSeen = { kind: "present", sameFilters: true, sameConfig: true };
const oursOtherSettings: ConsumerSeen = { kind: "present", sameFilters: true, sameConfig: false };
const older: ConsumerSeen = { kind: "present", sameFilters: false, sameConfig: false };

describe("create gate", () => {
  const cases: { name: string; steps: { at: number; seen: ConsumerSeen | "deleted"; expect?: string }[] }[] = [
    {
      name: "absent: created only once it was seen absent for 300 ms",
      steps: [
        { at: 0, seen: absent, expect: "wait" },
        { at: 150, seen: absent, expect: "wait" },
        { at: 299, seen: absent, expect: "wait" },
        { at: 300, seen: absent, expect: "create" },
      ],
    },
    {
      name: "seen present in between: the absence starts over",
      steps: [
        { at: 0, seen: absent, expect: "wait" },
        { at: 200, seen: older, expect: "wait" },
        { at: 350, seen: absent, expect: "wait" },
        { at: 600, seen: absent, expect: "wait" },
        { at: 650, seen: absent, expect: "create" },
      ],
    },
    {
      name: "the instance that deleted it creates at once, once",
      steps: [
        { at: 0, seen: "deleted" },
        { at: 1, seen: absent, expect: "create" },
        { at: 2, seen: absent, expect: "wait" },
      ],
    },
    {
      name: "present with this instance's config: bound without a create",
      steps: [{ at: 0, seen: ours, expect: "bind" }],
    },
    {
      name: "present with these filters and other settings: created (an update)",
      steps: [{ at: 0, seen: oursOtherSettings, expect: "create" }],
    },
    {
      name: "present with older filters: waits, however long",
      steps: [
        { at: 0, seen: older, expect: "wait" },
        { at: 10_000, seen: older, expect: "wait" },
      ],
    },
    {
      name: "a delete of this instance's own, followed by another's new consumer: bound, and the next absence waits again",
      steps: [
        { at: 0, seen: "deleted" },
        { at: 1, seen: ours, expect: "bind" },
        { at: 500, seen: absent, expect: "wait" },
      ],
    },
  ];
  for (const c of cases) {
    test(`create gate - ${c.name}`, () => {
      const gate = new CreateGate(300);
      for (const step of c.steps) {
        if (step.seen === "deleted") {
          gate.deleted();
          continue;
        }
        assert.equal(gate.decide(step.seen, step.at).kind, step.expect, `at ${step.at} ms`);
      }
    });
  }

  test("create gate - a wait says what it waits for", () => {
    const gate = new CreateGate(300);
    assert.deepEqual(gate.decide(absent, 0), { kind: "wait", why: "absent-too-briefly", lookAgainInMs: 300 });
    assert.deepEqual(gate.decide(absent, 120), { kind: "wait", why: "absent-too-briefly", lookAgainInMs: 180 });
    assert.deepEqual(gate.decide(older, 0), { kind: "wait", why: "other-filters" });
  });
});

describe("create gate - settings", () => {
  const ours = { name: "m1", ack_wait: 1_000_000_000, filter_subjects: ["0.>", "1.>"], priority_groups: ["PCG"], metadata: { "pcg-mode": "key" } };
  const cases: { name: string; theirs: Record<string, unknown>; covers: boolean }[] = [
    { name: "the same", theirs: { ...ours }, covers: true },
    { name: "filters in another order, server defaults and server metadata added", theirs: { ...ours, filter_subjects: ["1.>", "0.>"], deliver_policy: "all", metadata: { "pcg-mode": "key", "_nats.req.level": "0" } }, covers: true },
    { name: "another AckWait", theirs: { ...ours, ack_wait: 2_000_000_000 }, covers: false },
    { name: "a filter fewer", theirs: { ...ours, filter_subjects: ["0.>"] }, covers: false },
    { name: "another mode in the metadata", theirs: { ...ours, metadata: { "pcg-mode": "serial" } }, covers: false },
    { name: "no metadata", theirs: { ...ours, metadata: undefined }, covers: false },
    { name: "a setting left out", theirs: { name: "m1", filter_subjects: ["0.>", "1.>"], priority_groups: ["PCG"], metadata: { "pcg-mode": "key" } }, covers: false },
  ];
  for (const c of cases) {
    test(`create gate - settings: ${c.name}`, () => {
      assert.equal(coversSettings(c.theirs, ours), c.covers);
    });
  }
});
