/**
 * The start rules of a pinned consume, without a server: gaps in the consumer
 * sequence, takeovers, the redelivery wait, and the pin's proof on a monotonic clock.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { proofMarginMs, StartGuard, type StartPhase } from "../../src/nats/start-guard.js";

const TTL = 2000;

function guard(): StartGuard {
  return new StartGuard({ pinnedTtlMs: TTL, redeliveryHoldMs: 500 });
}

/** A guard that holds pin "p" with a proof sent at t=0 and every hold settled: it may start at t=1. */
function consuming(): StartGuard {
  const g = guard();
  g.delivered("p", 1, false, 0);
  g.pinAnswered("p", 0, false);
  g.settled(g.stateReadStarted());
  assert.equal(g.mayStart(1), true);
  return g;
}

const kind = (p: StartPhase): string => (p.kind === "holding" ? `holding:${p.reason}` : p.kind);

describe("start guard - consumer sequence gaps", () => {
  const cases: { name: string; seqs: number[]; settle: boolean[] }[] = [
    { name: "consecutive deliveries", seqs: [2, 3, 4], settle: [false, false, false] },
    { name: "a skipped delivery (lost with a cut socket)", seqs: [2, 4], settle: [false, true] },
    { name: "several skipped", seqs: [10], settle: [true] },
    { name: "the sequence going back (a leader change, a recreated consumer)", seqs: [2, 1], settle: [false, true] },
    { name: "the same sequence twice", seqs: [2, 2], settle: [false, true] },
  ];
  for (const c of cases) {
    test(`start guard - ${c.name}: ${c.settle.some(Boolean) ? "holds until settled" : "never holds"}`, () => {
      const g = consuming();
      const settle = c.seqs.map((seq, i) => g.delivered("p", seq, false, 10 + i).settle);
      assert.deepEqual(settle, c.settle);
      assert.equal(kind(g.phase(100)), c.settle.some(Boolean) ? "holding:gap" : "consuming");
    });
  }

  test("start guard - a state read asked for before the gap does not release it; one asked for after does", () => {
    const g = consuming();
    const early = g.stateReadStarted();
    g.delivered("p", 5, false, 10);
    g.settled(early);
    assert.equal(kind(g.phase(20)), "holding:gap", "the early read may predate the lost deliveries");
    g.settled(g.stateReadStarted());
    assert.equal(kind(g.phase(30)), "consuming");
  });

  test("start guard - abandoning the holds (no state to go by) lets it start", () => {
    const g = consuming();
    g.delivered("p", 7, false, 10);
    assert.equal(g.needsSettling, true);
    g.abandonHolds();
    assert.equal(g.needsSettling, false);
    assert.equal(g.mayStart(20), true);
  });
});

describe("start guard - takeover", () => {
  test("start guard - a new pin holds (takeover) and needs a proof: it starts only after both", () => {
    const g = guard();
    const next = g.delivered("p", 40, false, 0);
    assert.deepEqual(next, { prove: true, settle: true });
    assert.equal(kind(g.phase(1)), "holding:takeover");
    g.settled(g.stateReadStarted());
    assert.equal(kind(g.phase(2)), "fenced", "settled, but no proof yet");
    g.pinAnswered("p", 1, false);
    assert.equal(kind(g.phase(3)), "consuming");
  });

  test("start guard - a takeover that begins with a redelivery also waits for the redelivery queue: a fresh delivery, a full max_ack_pending, or the cap ends it", () => {
    for (const end of ["fresh", "full", "cap"] as const) {
      const g = guard();
      g.delivered("p", 1, true, 0);
      g.pinAnswered("p", 0, false);
      g.settled(g.stateReadStarted());
      assert.equal(kind(g.phase(10)), "holding:redeliveries", end);
      if (end === "fresh") g.delivered("p", 2, false, 20);
      if (end === "full") g.ackPendingFull();
      const at = end === "cap" ? 500 : 30;
      assert.equal(kind(g.phase(at)), "consuming", end);
    }
  });

  test("start guard - unpinned: yielded until a delivery brings a new pin", () => {
    const g = consuming();
    g.unpinned();
    assert.equal(g.pinId, undefined);
    assert.equal(kind(g.phase(10)), "yielded");
    g.delivered("q", 90, false, 20);
    assert.equal(g.pinId, "q");
    assert.equal(kind(g.phase(21)), "holding:takeover", "a gap is not asked of the first delivery of a pin");
  });
});

describe("start guard - the pin's proof", () => {
  const margin = proofMarginMs(TTL);
  const cases: { name: string; at: number; phase: string }[] = [
    { name: "just after the keep-alive was sent", at: 1, phase: "consuming" },
    { name: "just before PinnedTTL minus the margin", at: TTL - margin - 1, phase: "consuming" },
    { name: "at PinnedTTL minus the margin (the server may let the pin go a margin later)", at: TTL - margin, phase: "fenced" },
    { name: "long after (a stall, a block, a held link)", at: 10 * TTL, phase: "fenced" },
  ];
  for (const c of cases) {
    test(`start guard - proof sent at 0, asked ${c.name}: ${c.phase}`, () => {
      const g = consuming();
      assert.equal(kind(g.phase(c.at)), c.phase);
    });
  }

  test("start guard - the proof dates from when the keep-alive was sent, not from when its answer was read", () => {
    const g = consuming();
    // Starved: the answer to a keep-alive sent at 100 is read only at 5,000.
    g.pinAnswered("p", 100, false);
    assert.equal(kind(g.phase(5000)), "fenced");
    const fenced = g.phase(5000);
    assert.equal(fenced.kind === "fenced" ? fenced.since : -1, 100 + TTL - margin, "fenced since the proof ran out");
    g.pinAnswered("p", 4990, false);
    assert.equal(kind(g.phase(5000)), "consuming");
  });

  test("start guard - an older answer never replaces a newer proof", () => {
    const g = consuming();
    g.pinAnswered("p", 1000, false);
    g.pinAnswered("p", 500, false);
    assert.equal(g.mayStart(1000 + TTL - margin - 1), true);
  });

  test("start guard - 423 (the pin is another's): yielded; an answer for an old pin changes nothing", () => {
    const g = consuming();
    g.pinAnswered("old", 10, true);
    assert.equal(kind(g.phase(20)), "consuming", "an answer about another pin");
    g.pinAnswered("p", 10, true);
    assert.equal(kind(g.phase(20)), "yielded");
    assert.deepEqual(g.pinProof, { kind: "lost" });
  });

  test("start guard - without proof (answers not allowed) starts are not fenced on the pin, but holds still apply", () => {
    const g = guard();
    g.proofUnavailable();
    g.delivered("p", 1, false, 0);
    assert.equal(kind(g.phase(1)), "holding:takeover");
    g.settled(g.stateReadStarted());
    assert.equal(kind(g.phase(10 * TTL)), "consuming");
    g.delivered("p", 5, false, 10 * TTL);
    assert.equal(kind(g.phase(10 * TTL + 1)), "holding:gap");
  });

  test("start guard - the margin: a tenth of PinnedTTL, at least 100 ms", () => {
    assert.equal(proofMarginMs(1000), 100);
    assert.equal(proofMarginMs(500), 100);
    assert.equal(proofMarginMs(30_000), 3000);
  });
});

describe("start guard - mayStart (asked before every start) answers as the phase does", () => {
  // Every state the rules reach, one step after another; at each step and at several times the fast answer
  // must be the phase's, or a start could slip through a hold or a fence.
  const steps: { name: string; act: (g: StartGuard) => void }[] = [
    { name: "new", act: () => undefined },
    { name: "first delivery (takeover, redelivered)", act: (g) => g.delivered("p", 1, true, 0) },
    { name: "proof", act: (g) => g.pinAnswered("p", 0, false) },
    { name: "settled", act: (g) => g.settled(g.stateReadStarted()) },
    { name: "fresh delivery", act: (g) => g.delivered("p", 2, false, 10) },
    { name: "gap", act: (g) => g.delivered("p", 5, false, 20) },
    { name: "settled again", act: (g) => g.settled(g.stateReadStarted()) },
    { name: "newer proof", act: (g) => g.pinAnswered("p", 1500, false) },
    { name: "unpinned", act: (g) => g.unpinned() },
    { name: "new pin", act: (g) => g.delivered("q", 9, false, 3000) },
    { name: "proof for it", act: (g) => g.pinAnswered("q", 3000, false) },
    { name: "abandoned holds", act: (g) => g.abandonHolds() },
    { name: "423", act: (g) => g.pinAnswered("q", 3100, true) },
    { name: "another pin, proof unavailable", act: (g) => (g.delivered("r", 20, false, 6000), g.proofUnavailable()) },
    { name: "its holds settled", act: (g) => g.settled(g.stateReadStarted()) },
  ];
  test("start guard - at every step and at times around each deadline, mayStart(t) === (phase(t) is consuming)", () => {
    const g = guard();
    const margin = proofMarginMs(TTL);
    const times = [0, 1, 499, 500, 1000, TTL - margin - 1, TTL - margin, 1500 + TTL - margin - 1, 1500 + TTL - margin, 3000 + TTL - margin, 6000, 10 * TTL];
    const seen = new Set<boolean>();
    for (const step of steps) {
      step.act(g);
      for (const t of times) {
        const fast = g.mayStart(t);
        assert.equal(fast, g.phase(t).kind === "consuming", `${step.name}, at ${t}: mayStart ${fast}, phase ${kind(g.phase(t))}`);
        seen.add(fast);
      }
    }
    assert.deepEqual([...seen].sort(), [false, true], "the steps reach both answers");
  });

  test("start guard - a delivery's answer is one shared object per kind (no allocation per message)", () => {
    const g = consuming();
    const a = g.delivered("p", 2, false, 10);
    const b = g.delivered("p", 3, false, 11);
    assert.equal(a, b);
    assert.deepEqual(a, { prove: false, settle: false });
    assert.deepEqual(g.delivered("p", 9, false, 12), { prove: false, settle: true });
    assert.deepEqual(g.delivered("z", 10, false, 13), { prove: true, settle: true });
  });
});

describe("start guard - the clock", () => {
  test("start guard - a delivery in sequence under the same pin reads no clock; a new pin and a gap read it once each", () => {
    const g = new StartGuard({ pinnedTtlMs: 1000, redeliveryHoldMs: 500 });
    let reads = 0;
    const clock = (): number => {
      reads += 1;
      return 100 * reads;
    };
    g.delivered("p", 1, false, clock);
    assert.equal(reads, 1, "a new pin begins a takeover hold");
    for (let seq = 2; seq <= 50; seq++) g.delivered("p", seq, false, clock);
    assert.equal(reads, 1, "deliveries in sequence");
    g.delivered("p", 60, false, clock);
    assert.equal(reads, 2, "a gap begins a hold");
    const phase = g.phase(1000);
    assert.equal(phase.kind, "holding");
    assert.equal(phase.kind === "holding" ? phase.since : undefined, 100, "the takeover hold began when the clock was first read");
  });
});
