/** The skip check's rule, without a server: a table of consumer states, stored messages and what an instance holds. */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { lowestOf, skipCheckApplies, skippedInFilter, skipVerdict, type FirstStored, type SkipLook, type StoredFrom } from "../../src/nats/skipped-message.js";

const at = (seq: number, subject = `p.${seq}`): FirstStored => ({ seq, subject });

describe("skipped message", () => {
  /** A work queue's stored messages of one filter, by sequence; counts the lookups. */
  const stream = (stored: number[]): { storedFrom: StoredFrom; lookups: () => number } => {
    let lookups = 0;
    return {
      storedFrom: (_filter, fromSeq) => {
        lookups += 1;
        const seq = stored.filter((s) => s >= fromSeq).sort((a, b) => a - b)[0];
        return Promise.resolve(seq === undefined ? undefined : at(seq));
      },
      lookups: () => lookups,
    };
  };
  const cases: { name: string; delivered: number; stored: number[]; here?: number[]; skipped?: number; lookups?: number }[] = [
    { name: "nothing stored: nothing skipped", delivered: 50, stored: [], lookups: 1 },
    { name: "every stored message is newer than what was delivered", delivered: 50, stored: [51, 70], lookups: 1 },
    { name: "the message delivered last, held here (nothing above it to look at)", delivered: 50, stored: [50], here: [50], lookups: 1 },
    { name: "a stored message below the delivered sequence, not here: skipped", delivered: 50, stored: [12, 51], skipped: 12, lookups: 1 },
    { name: "a stored message at the delivered sequence, not here: skipped", delivered: 50, stored: [50], skipped: 50 },
    { name: "a held message hides none above it (review finding): the walk goes past what is here", delivered: 40, stored: [1, 2, 3, 40, 41], here: [1], skipped: 2, lookups: 2 },
    { name: "held, awaited or just settled here: nothing skipped, one lookup per known message and one more", delivered: 90, stored: [7, 40, 91], here: [7, 40], lookups: 3 },
  ];
  for (const c of cases) {
    test(`skipped message - ${c.name}`, async () => {
      const here = new Set(c.here ?? []);
      const { storedFrom, lookups } = stream(c.stored);
      const found = await skippedInFilter("p.>", c.delivered, storedFrom, (seq) => here.has(seq));
      assert.equal(found?.seq, c.skipped);
      if (c.skipped !== undefined) assert.equal(found?.subject, `p.${c.skipped}`);
      if (c.lookups !== undefined) assert.equal(lookups(), c.lookups, "lookups");
    });
  }

  test("skipped message - the lowest of the filters' skipped messages is named", () => {
    assert.equal(lowestOf([at(40), undefined, at(7), at(95)])?.seq, 7);
    assert.equal(lowestOf([undefined, undefined]), undefined);
  });

  test("skipped message - a lookup that fails fails the walk (the caller's verdict is unsure)", async () => {
    await assert.rejects(skippedInFilter("p.>", 10, () => Promise.reject(new Error("no responders")), () => false), /no responders/);
  });

  const verdicts: { name: string; first: SkipLook; second: SkipLook | "not yet"; verdict: string }[] = [
    { name: "nothing skipped at the first look", first: undefined, second: "not yet", verdict: "clean" },
    { name: "a failed first lookup proves nothing (the hold waits: review finding)", first: "failed", second: "not yet", verdict: "unsure" },
    { name: "a suspect is looked at again", first: at(12), second: "not yet", verdict: "look again" },
    { name: "the same message both times: skipped", first: at(12), second: at(12), verdict: "skipped" },
    { name: "gone at the second look (its ack was being applied): clean", first: at(12), second: undefined, verdict: "clean" },
    { name: "another message at the second look: no conclusion yet", first: at(12), second: at(14), verdict: "unsure" },
    { name: "a failed second lookup proves nothing", first: at(12), second: "failed", verdict: "unsure" },
  ];
  for (const v of verdicts) {
    test(`skipped message - verdict: ${v.name}`, () => assert.equal(skipVerdict(v.first, v.second), v.verdict));
  }

  test("skipped message - the check applies only without a max_deliver of the consumer's own (a message whose deliveries ran out looks the same)", () => {
    assert.equal(skipCheckApplies({}), true);
    assert.equal(skipCheckApplies({ max_deliver: -1 }), true);
    assert.equal(skipCheckApplies({ max_deliver: 0 }), true);
    assert.equal(skipCheckApplies({ max_deliver: 5 }), false);
  });
});
