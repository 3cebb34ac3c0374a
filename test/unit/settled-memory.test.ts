/**
 * The memory of settled sequences (src/nats/settled-memory.ts): a late redelivery of
 * a message settled here is recognised for as long as the ring holds it.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { SettledMemory } from "../../src/nats/settled-memory.js";

describe("settled memory", () => {
  test("remembers how each sequence was settled, and nothing else", () => {
    const memory = new SettledMemory(8);
    assert.equal(memory.get(1), undefined, "empty");
    memory.remember(1, "ack");
    memory.remember(5, "term");
    assert.equal(memory.get(1), "ack");
    assert.equal(memory.get(5), "term");
    assert.equal(memory.get(2), undefined);
    assert.equal(memory.get(0), undefined, "0 is no sequence, even in an empty slot");
  });

  test("keeps exactly the last `capacity` settlements once the ring wraps", () => {
    const memory = new SettledMemory(16);
    for (let seq = 1; seq <= 100; seq++) memory.remember(seq, seq % 3 === 0 ? "term" : "ack");
    for (let seq = 1; seq <= 84; seq++) assert.equal(memory.get(seq), undefined, `seq ${seq} fell out`);
    for (let seq = 85; seq <= 100; seq++) assert.equal(memory.get(seq), seq % 3 === 0 ? "term" : "ack", `seq ${seq} is kept`);
  });

  test("the latest settlement of a sequence wins (settled again after a redelivery)", () => {
    const memory = new SettledMemory(4);
    memory.remember(9, "term");
    memory.remember(9, "ack");
    assert.equal(memory.get(9), "ack");
  });

  test("the default remembers 16,384 settlements (as the two generations of 8,192 did at most)", () => {
    const memory = new SettledMemory();
    for (let seq = 1; seq <= 20_000; seq++) memory.remember(seq, "ack");
    assert.equal(memory.get(20_000 - 16_383), "ack");
    assert.equal(memory.get(20_000 - 16_384), undefined);
  });
});
