/** Type and range checks of option values, without a server. */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ConsumerGroupError } from "../../src/core/errors.js";
import { MAX_TIMER_MS, optionalBoolean, optionalTimerMs, quoted } from "../../src/core/option-checks.js";

const refused = (fn: () => unknown, message: RegExp): void =>
  assert.throws(fn, (err: unknown) => err instanceof ConsumerGroupError && err.code === "INVALID_ARGUMENT" && message.test(err.message));

describe("option checks", () => {
  test("option checks - a boolean is true or false; 0, 1, strings and null are refused, quoted", () => {
    assert.equal(optionalBoolean(undefined, "force", false), false);
    assert.equal(optionalBoolean(true, "force", false), true);
    assert.equal(optionalBoolean(false, "handoff", true), false);
    refused(() => optionalBoolean(0, "handoff", true), /handoff must be true or false, got 0/);
    refused(() => optionalBoolean("x", "force", false), /force must be true or false, got "x"/);
    refused(() => optionalBoolean(null, "force", false), /got null/);
  });

  test("option checks - a timer delay is a positive number a Node.js timer holds", () => {
    assert.equal(optionalTimerMs(undefined, "pollMs", 250), 250);
    assert.equal(optionalTimerMs(MAX_TIMER_MS, "pollMs", 250), MAX_TIMER_MS);
    refused(() => optionalTimerMs(MAX_TIMER_MS + 1, "drainTimeoutMs", 1), /drainTimeoutMs must be a positive number of ms up to 2147483647 .*got 2147483648/);
    refused(() => optionalTimerMs(0, "pollMs", 1), /got 0/);
    refused(() => optionalTimerMs(Number.NaN, "pollMs", 1), /got NaN/);
    refused(() => optionalTimerMs("5s", "pollMs", 1), /got "5s"/);
  });

  test("option checks - values are quoted as JSON where they have one", () => {
    assert.equal(quoted("x"), '"x"');
    assert.equal(quoted(undefined), "undefined");
    assert.equal(quoted(() => 1), "a function");
    assert.equal(quoted({ a: 1 }), '{"a":1}');
  });
});
