/**
 * The partition of a stored subject as describe's window split reads it: exactly the
 * subjects `<p>.>` selects.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { partitionToken } from "../../src/observe/counts.js";

describe("partition token - the subjects <p>.> selects", () => {
  test("canonical decimal first tokens followed by more tokens", () => {
    assert.equal(partitionToken("0.orders.a"), 0);
    assert.equal(partitionToken("17.x"), 17);
    assert.equal(partitionToken("4095.a.b.c"), 4095);
  });
  test("anything else belongs to no partition", () => {
    for (const subject of ["01.x", "-0.x", "0x1.x", "1e0.x", "+1.x", " 1.x", "1", "1.", ".1.x", "a.1", "", "1a.x"]) {
      assert.equal(partitionToken(subject), undefined, subject);
    }
  });
});
