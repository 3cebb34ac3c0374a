/**
 * The lag signal's arithmetic, without a server: the drain measured from two
 * work-queue samples, the rate per member, and the recommended member count (the
 * rate rule, the floor of 1, holding without a rate, the partition cap, bad input).
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ConsumerGroupError, measureDrain, measuredRatePerMember, recommendMembers, type RecommendationInput } from "../../src/index.js";

describe("scaling - measureDrain", () => {
  test("scaling - drained = Δ last sequence − Δ messages, per second over the window", () => {
    // 600 stored in 2 s, the queue grew by 200: 400 acknowledged.
    const m = measureDrain({ atMs: 10_000, lastSeq: 1000, messages: 300 }, { atMs: 12_000, lastSeq: 1600, messages: 500 });
    assert.deepEqual(m, { windowMs: 2000, stored: 600, drained: 400, drainedPerSecond: 200, inflowPerSecond: 300 });
  });

  test("scaling - a queue that shrinks with nothing arriving: everything that left was drained", () => {
    const m = measureDrain({ atMs: 0, lastSeq: 50, messages: 50 }, { atMs: 500, lastSeq: 50, messages: 10 });
    assert.equal(m?.drained, 40);
    assert.equal(m?.drainedPerSecond, 80);
    assert.equal(m?.inflowPerSecond, 0);
  });

  test("scaling - nothing to measure: no time between the samples, a stream that went back", () => {
    assert.equal(measureDrain({ atMs: 5, lastSeq: 1, messages: 1 }, { atMs: 5, lastSeq: 9, messages: 1 }), undefined, "same instant");
    assert.equal(measureDrain({ atMs: 9, lastSeq: 1, messages: 1 }, { atMs: 5, lastSeq: 9, messages: 1 }), undefined, "samples in the wrong order");
    assert.equal(measureDrain({ atMs: 0, lastSeq: 100, messages: 5 }, { atMs: 1000, lastSeq: 3, messages: 3 }), undefined, "recreated: the last sequence fell");
    assert.equal(measureDrain({ atMs: 0, lastSeq: 10, messages: 0 }, { atMs: 1000, lastSeq: 10, messages: 4 }), undefined, "grew without storing: not a work queue's state");
  });
});

describe("scaling - measuredRatePerMember", () => {
  const m = measureDrain({ atMs: 0, lastSeq: 0, messages: 0 }, { atMs: 1000, lastSeq: 900, messages: 0 });
  test("scaling - the drain per second divided by the active members", () => {
    assert.equal(measuredRatePerMember(m, 3), 300);
    assert.equal(measuredRatePerMember(m, 1), 900);
  });
  test("scaling - no rate without a measurement, an active member, or anything drained", () => {
    assert.equal(measuredRatePerMember(undefined, 2), undefined);
    assert.equal(measuredRatePerMember(m, 0), undefined);
    const idle = measureDrain({ atMs: 0, lastSeq: 5, messages: 5 }, { atMs: 1000, lastSeq: 5, messages: 5 });
    assert.equal(measuredRatePerMember(idle, 2), undefined);
  });
});

describe("scaling - recommendMembers", () => {
  const base: RecommendationInput = { backlog: 0, members: 0, partitionCount: 8, targetDrainMs: 60_000, ratePerMember: undefined };
  const cases: { name: string; input: Partial<RecommendationInput>; expected: ReturnType<typeof recommendMembers> }[] = [
    { name: "nothing waiting, no members: 0 (nothing to run)", input: {}, expected: { recommended: 0, needed: 0, capped: false, basis: "idle" } },
    { name: "nothing waiting, members: 1", input: { members: 5, ratePerMember: 100 }, expected: { recommended: 1, needed: 1, capped: false, basis: "idle" } },
    { name: "rate: ceil(12000 / (50 × 60))", input: { backlog: 12_000, members: 2, ratePerMember: 50 }, expected: { recommended: 4, needed: 4, capped: false, basis: "rate" } },
    { name: "rate: one more message needs one more member", input: { backlog: 12_001, members: 2, ratePerMember: 50 }, expected: { recommended: 5, needed: 5, capped: false, basis: "rate" } },
    { name: "rate: an exact quotient is not rounded up by floating point (49 / 0.049 is 100.00000000000001)", input: { backlog: 49, ratePerMember: 0.7, targetDrainMs: 700, partitionCount: 200 }, expected: { recommended: 100, needed: 100, capped: false, basis: "rate" } },
    { name: "rate: a small backlog still needs 1", input: { backlog: 1, members: 0, ratePerMember: 1000 }, expected: { recommended: 1, needed: 1, capped: false, basis: "rate" } },
    { name: "rate: fewer than now when the backlog allows", input: { backlog: 100, members: 6, ratePerMember: 10, targetDrainMs: 5000 }, expected: { recommended: 2, needed: 2, capped: false, basis: "rate" } },
    { name: "rate: capped at the partition count", input: { backlog: 1_000_000, members: 3, ratePerMember: 100 }, expected: { recommended: 8, needed: 167, capped: true, basis: "rate" } },
    { name: "no rate: the current count is kept", input: { backlog: 500, members: 3 }, expected: { recommended: 3, needed: 3, capped: false, basis: "hold" } },
    { name: "no rate, no members: 1 to start", input: { backlog: 500, members: 0 }, expected: { recommended: 1, needed: 1, capped: false, basis: "hold" } },
    { name: "no rate, more members than partitions: capped", input: { backlog: 500, members: 10 }, expected: { recommended: 8, needed: 10, capped: true, basis: "hold" } },
  ];
  for (const c of cases) {
    test(`scaling - ${c.name}`, () => assert.deepEqual(recommendMembers({ ...base, ...c.input }), c.expected));
  }

  test("scaling - bad input is an INVALID_ARGUMENT error that names the value", () => {
    const bad: [Partial<RecommendationInput>, RegExp][] = [
      [{ backlog: -1 }, /backlog must be an integer >= 0, got -1/],
      [{ backlog: 1.5 }, /backlog must be an integer >= 0, got 1.5/],
      [{ members: -2 }, /member count must be an integer >= 0/],
      [{ partitionCount: 0 }, /partition count must be an integer >= 1, got 0/],
      [{ targetDrainMs: 0 }, /target drain time must be a positive number of ms, got 0/],
      [{ targetDrainMs: Number.POSITIVE_INFINITY }, /target drain time/],
      [{ ratePerMember: 0 }, /rate per member must be a positive number of messages per second, got 0/],
      [{ ratePerMember: Number.NaN }, /rate per member/],
    ];
    for (const [input, message] of bad) {
      assert.throws(() => recommendMembers({ ...base, ...input }), (err: unknown) => err instanceof ConsumerGroupError && err.code === "INVALID_ARGUMENT" && message.test(err.message), JSON.stringify(input));
    }
  });
});
