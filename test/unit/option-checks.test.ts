/** Type and range checks of option values, without a server. */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ConsumerGroupError } from "../../src/core/errors.js";
import { MAX_TIMER_MS, optionalBoolean, optionalFunction, optionalInteger, optionalTimerMs, optionsObject, quoted, refuseUnknownKeys } from "../../src/core/option-checks.js";

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

  test("option checks - quoted never throws: BigInts keep their n, also nested; a circular object shows [Circular]", () => {
    assert.equal(quoted(5n), "5n");
    assert.equal(quoted({ max: 2n ** 64n }), '{"max":18446744073709551616n}');
    assert.equal(quoted([1n, "a"]), '[1n,"a"]');
    const loop: Record<string, unknown> = { a: 1 };
    loop["self"] = loop;
    assert.equal(quoted(loop), '{"a":1,"self":[Circular]}');
    const list: unknown[] = [1];
    list.push(list);
    assert.equal(quoted(list), "[1,[Circular]]");
    // The same object twice, not inside itself, is no cycle.
    const shared = { x: 1 };
    assert.equal(quoted({ a: shared, b: shared }), '{"a":{"x":1},"b":{"x":1}}');
  });

  test("option checks - quoted shows what JSON cannot: NaN, Infinity, -0, symbols, throwing getters and toJSON, deep and long values", () => {
    assert.equal(quoted(Number.NaN), "NaN");
    assert.equal(quoted(-Infinity), "-Infinity");
    assert.equal(quoted(-0), "-0");
    assert.equal(quoted(Symbol("s")), "Symbol(s)");
    assert.equal(quoted(null), "null");
    assert.equal(quoted(new Date(0)), '"1970-01-01T00:00:00.000Z"');
    const getter = Object.defineProperty({}, "boom", { enumerable: true, get: () => { throw new Error("no"); } });
    assert.equal(quoted(getter), "an object that cannot be shown");
    assert.equal(quoted({ toJSON: () => { throw new Error("no"); } }), "an object that cannot be shown");
    assert.equal(quoted({ a: { b: { c: { d: { e: 1 } } } } }), '{"a":{"b":{"c":{"d":{…}}}}}');
    const long = quoted("x".repeat(1000));
    assert.equal(long.length, 200);
    assert.ok(long.endsWith("…"));
    // As JSON: object keys without a JSON value are left out.
    assert.equal(quoted({ a: undefined, f: () => 1, b: 2 }), '{"b":2}');
  });

  test("option checks - optionsObject refuses unknown keys, naming them and the accepted ones, with the likely meant key", () => {
    const keys = ["maxDeliver", "backoffMs", "exactAttempts"];
    const given = { maxDeliver: 3 };
    assert.equal(optionsObject(given, "retry", keys), given);
    assert.deepEqual(optionsObject({}, "retry", keys), {});
    // Objects without a prototype, and instances of the caller's own classes, are options objects.
    assert.equal(optionsObject(Object.assign(Object.create(null) as object, { maxDeliver: 1 }), "retry", keys)["maxDeliver"], 1);
    class Retry {
      maxDeliver = 2;
    }
    assert.equal(optionsObject(new Retry(), "retry", keys)["maxDeliver"], 2);
    // A known key left undefined means "the default".
    assert.deepEqual(optionsObject({ backoffMs: undefined }, "retry", keys), { backoffMs: undefined });
    refused(() => optionsObject({ maxDelivers: 3 }, "retry", keys), /^retry has unknown option "maxDelivers": it takes maxDeliver, backoffMs, exactAttempts \(did you mean "maxDelivers" → "maxDeliver"\?\)$/);
    refused(() => optionsObject({ MAXDELIVER: 3, zzz: 1 }, "retry", keys), /unknown options "MAXDELIVER", "zzz": it takes maxDeliver, backoffMs, exactAttempts \(did you mean "MAXDELIVER" → "maxDeliver"\?\)$/);
    // An unknown key is refused even when undefined: it is a misspelt option all the same.
    refused(() => optionsObject({ retyr: undefined }, "consume options", ["retry"]), /unknown option "retyr"/);
    refused(() => refuseUnknownKeys({ a: 1 }, "x", []), /it takes no options/);
  });

  test("option checks - optionsObject refuses what is not an options object: null, arrays, numbers, strings, functions", () => {
    for (const bad of [null, [], [1], 5, "x", 1n, () => 1, true, new Date(0), new Map(), new AbortController().signal, Object(5)]) {
      refused(() => optionsObject(bad, "createElastic options", ["stream", "group"]), /^createElastic options must be an object, got .*: it takes stream, group$/s);
    }
  });

  test("option checks - whole numbers and functions: null, fractions, BigInts and strings are refused, quoted", () => {
    assert.equal(optionalInteger(undefined, "maxInFlight", 16, 1), 16);
    assert.equal(optionalInteger(3, "maxInFlight", 16, 1), 3);
    refused(() => optionalInteger(0.5, "maxInFlight", 16, 1), /maxInFlight must be a whole number >= 1, got 0.5/);
    refused(() => optionalInteger(null, "maxInFlight", 16, 1), /got null/);
    refused(() => optionalInteger(4n, "maxInFlight", 16, 1), /got 4n/);
    refused(() => optionalInteger(2 ** 53, "maxInFlight", 16, 1), /got 9007199254740992/);
    refused(() => optionalInteger(11, "n", 1, 0, 10, "items"), /n must be a whole number of items from 0 to 10, got 11/);
    const fn = (): void => undefined;
    assert.equal(optionalFunction(fn, "onWarning"), fn);
    assert.equal(optionalFunction(undefined, "onWarning"), undefined);
    refused(() => optionalFunction(null, "onWarning"), /onWarning must be a function, got null/);
    refused(() => optionalFunction("log" as unknown as () => void, "onWarning", "a function (message) => void"), /onWarning must be a function \(message\) => void, got "log"/);
  });
});
