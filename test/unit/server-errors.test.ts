/**
 * Which server errors are retried as transient (a cluster electing a leader, a node
 * restarting), with the errors nats.js really throws, and never this library's own verdicts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { errors } from "@nats-io/nats-core";
import { ConsumerGroupError } from "../../src/core/errors.js";
import { isMessageGone, isTransientServerError } from "../../src/nats/server-errors.js";

const cases: { name: string; err: unknown; transient: boolean }[] = [
  { name: "a request timeout", err: new errors.TimeoutError(), transient: true },
  { name: "no responders (JetStream has no leader to answer yet)", err: new errors.NoRespondersError("$JS.API.CONSUMER.INFO.s.c"), transient: true },
  { name: "no responders as the cause of a request error", err: new errors.RequestError("request failed", { cause: new errors.NoRespondersError("$JS.API.INFO") }), transient: true },
  { name: "JetStream temporarily unavailable (the server's 10008)", err: new Error("JetStream system temporarily unavailable"), transient: true },
  { name: "jetstream not available", err: new Error("jetstream not available"), transient: true },
  { name: "no suitable peers", err: new Error("insufficient resources: no suitable peers for placement"), transient: true },
  { name: "a leader change", err: new Error("JetStream cluster stream leader not found"), transient: true },
  { name: "SERVER_ERROR wrapping a timeout", err: new ConsumerGroupError("SERVER_ERROR", "error reading: timeout", { cause: new errors.TimeoutError() }), transient: true },
  { name: "a permission violation", err: new errors.PermissionViolationError("Permissions Violation for Publish to \"x\"", "publish", "x"), transient: false },
  { name: "a verdict of this library (not SERVER_ERROR), even about a timeout", err: new ConsumerGroupError("INVALID_ARGUMENT", "timeout must be positive"), transient: false },
  { name: "a plain error", err: new Error("stream not found"), transient: false },
  { name: "not an error", err: undefined, transient: false },
];

for (const c of cases) {
  test(`server errors - ${c.name}: ${c.transient ? "transient" : "not transient"}`, () => {
    assert.equal(isTransientServerError(c.err), c.transient);
  });
}

/** An error shaped as nats.js's JetStreamApiError, with the server's code and text. */
function apiError(code: number, text: string): Error {
  return Object.assign(new Error(text), { code, apiError: () => ({ err_code: code, code: 400, description: text }) });
}

const deletes: { name: string; err: unknown; gone: boolean }[] = [
  { name: "no message found (10037)", err: apiError(10037, "no message found"), gone: true },
  { name: "sequence not found (10043), as the server says for a sequence consumed or replaced since", err: apiError(10043, "sequence 2238 not found"), gone: true },
  { name: "message delete failed (10057) saying no message found", err: apiError(10057, "no message found"), gone: true },
  { name: "message delete failed (10057) for another reason", err: apiError(10057, "stream store EOF"), gone: false },
  { name: "stream not found (10059)", err: apiError(10059, "stream not found"), gone: false },
  { name: "a permission violation", err: new errors.PermissionViolationError("Permissions Violation for Publish to \"x\"", "publish", "x"), gone: false },
  { name: "a plain error with the text but no code", err: new Error("no message found"), gone: false },
];

for (const c of deletes) {
  test(`server errors - a message delete refused with ${c.name}: ${c.gone ? "the message is gone already" : "a failure"}`, () => {
    assert.equal(isMessageGone(c.err), c.gone);
  });
}
