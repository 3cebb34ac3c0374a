/**
 * The attempts bucket's records, without a server: a failed attempt adds one to the
 * record of the same message, never counts a record of another message (a recreated
 * group reuses sequences), and never falls below what the delivery count knows.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { attemptsAfterFailure, attemptsBeforeRun, decodeAttemptRecord, encodeAttemptRecord, type AttemptIdentity } from "../../src/core/attempt-record.js";

const message: AttemptIdentity = { seq: 12, subject: "3.orders.acme.created", storedNanos: "1764806400123456789" };

describe("attempt records", () => {
  const cases: { name: string; record: Parameters<typeof attemptsAfterFailure>[0]; localRuns: number; expected: number }[] = [
    { name: "no record: the attempts known here", record: undefined, localRuns: 1, expected: 1 },
    { name: "no record, a redelivery: the delivery count's", record: undefined, localRuns: 3, expected: 3 },
    { name: "a record of this message: one more", record: { ...message, attempts: 2 }, localRuns: 1, expected: 3 },
    { name: "a record behind the delivery count (a write failed): the delivery count's", record: { ...message, attempts: 1 }, localRuns: 4, expected: 4 },
    { name: "a record of another message at the same sequence (other store time): ignored", record: { ...message, storedNanos: "1", attempts: 9 }, localRuns: 1, expected: 1 },
    { name: "a record of another subject at the same sequence: ignored", record: { ...message, subject: "0.orders.other", attempts: 9 }, localRuns: 2, expected: 2 },
  ];
  for (const c of cases) {
    test(`attempt records - ${c.name}`, () => {
      assert.equal(attemptsAfterFailure(c.record, message, c.localRuns), c.expected);
    });
  }

  const ahead: { name: string; record: Parameters<typeof attemptsBeforeRun>[0]; earlierRuns: number; expected: number }[] = [
    { name: "before a first attempt, no record: none counted", record: undefined, earlierRuns: 0, expected: 0 },
    { name: "an attempt cut by a crash under an earlier consumer: counted", record: { ...message, attempts: 2 }, earlierRuns: 0, expected: 2 },
    { name: "the delivery count knows more than the record: the delivery count's", record: { ...message, attempts: 1 }, earlierRuns: 3, expected: 3 },
    { name: "a record of another message at the same sequence: ignored", record: { ...message, storedNanos: "7", attempts: 5 }, earlierRuns: 1, expected: 1 },
  ];
  for (const c of ahead) {
    test(`attempt records - counted before a run: ${c.name}`, () => {
      assert.equal(attemptsBeforeRun(c.record, message, c.earlierRuns), c.expected);
    });
  }

  test("attempt records - encode and decode round-trip, store times past 2^53 intact", () => {
    const record = { ...message, attempts: 4 };
    const text = encodeAttemptRecord(record);
    assert.equal(text, '{"seq":12,"subject":"3.orders.acme.created","stored_nanos":"1764806400123456789","attempts":4}');
    assert.deepEqual(decodeAttemptRecord(text), record);
  });

  test("attempt records - anything else decodes to nothing (it is then overwritten)", () => {
    for (const text of ["", "not json", "null", "[]", '{"seq":1}', '{"seq":1,"subject":"s","stored_nanos":"1","attempts":0}', '{"seq":"1","subject":"s","stored_nanos":"1","attempts":1}', '{"seq":1,"subject":"s","stored_nanos":1,"attempts":1}']) {
      assert.equal(decodeAttemptRecord(text), undefined, text);
    }
  });
});
