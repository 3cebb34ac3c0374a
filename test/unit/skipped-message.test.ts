/** The skip check's rule, without a server: a table of consumer states, stored messages and what an instance holds. */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { skipCheckApplies, skippedMessage, skipVerdict, type FirstStored, type SkipLook } from "../../src/nats/skipped-message.js";

const at = (seq: number, subject = `p.${seq}`): FirstStored => ({ seq, subject });

describe("skipped message", () => {
  const cases: { name: string; delivered: number; first: (FirstStored | undefined)[]; here?: number[]; skipped?: number }[] = [
    { name: "nothing stored: nothing skipped", delivered: 50, first: [undefined, undefined] },
    { name: "every stored message is newer than what was delivered", delivered: 50, first: [at(51), at(70)] },
    { name: "the lowest stored message is the one delivered last and held here", delivered: 50, first: [at(50)], here: [50] },
    { name: "a stored message below the delivered sequence, not here: skipped", delivered: 50, first: [at(51), at(12)], skipped: 12 },
    { name: "a stored message at the delivered sequence, not here: skipped", delivered: 50, first: [at(50)], skipped: 50 },
    { name: "the lowest of several skipped filters is named", delivered: 90, first: [at(40), at(7), at(95)], skipped: 7 },
    { name: "one filter's message is here, another's is not", delivered: 90, first: [at(7), at(40)], here: [7], skipped: 40 },
    { name: "held, awaited or just settled here: nothing skipped", delivered: 90, first: [at(7), at(40), undefined], here: [7, 40] },
  ];
  for (const c of cases) {
    test(`skipped message - ${c.name}`, () => {
      const here = new Set(c.here ?? []);
      const found = skippedMessage(c.delivered, c.first, (seq) => here.has(seq));
      assert.equal(found?.seq, c.skipped);
      if (c.skipped !== undefined) assert.equal(found?.subject, `p.${c.skipped}`);
    });
  }

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
