/**
 * Which errors a repartition tries again after, how long it waits, and how a
 * presence answer is read: no server needed.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { errors } from "@nats-io/nats-core";
import { ConsumerGroupError } from "../../src/core/errors.js";
import { isRetryableRepartitionError, retryDelayMs, REPARTITION_ATTEMPTS } from "../../src/elastic/repartition/repartition.js";
import { presenceAnswerOf, presenceRequestBody, presenceRequestOf, presenceSubject } from "../../src/elastic/presence.js";

describe("repartition retries", () => {
  test("the server's file races on a consumer being made or deleted are retried, wrapped or not", () => {
    const race = new Error('error pausing "m1": open /tmp/js/jetstream/$G/streams/o-g/obs/m1/meta.inf.tmp: no such file or directory');
    assert.equal(isRetryableRepartitionError(race), true);
    assert.equal(isRetryableRepartitionError(new ConsumerGroupError("SERVER_ERROR", "error pausing the members", { cause: race })), true);
    assert.equal(isRetryableRepartitionError(new Error("error creating store for consumer: meta.sum.tmp")), true);
  });

  test("a request cut by the connection dropping (a server restart; nats.js reconnects) is retried (review finding: a kill -9 400-800 ms into the call)", () => {
    assert.equal(isRetryableRepartitionError(new errors.RequestError("connection disconnected")), true);
    assert.equal(isRetryableRepartitionError(new ConsumerGroupError("SERVER_ERROR", "error reading the config", { cause: new errors.RequestError("connection disconnected") })), true);
  });

  test("timeouts, no responders and leader elections are retried", () => {
    for (const message of ["timeout", "no responders", "JetStream system temporarily unavailable", "no suitable peers for placement", "stream leader election in progress"]) {
      assert.equal(isRetryableRepartitionError(new ConsumerGroupError("SERVER_ERROR", `error reading the stream: ${message}`)), true, message);
    }
  });

  test("the library's own verdicts and other server errors are not", () => {
    for (const code of ["GO_MEMBERS_PRESENT", "REPARTITION_IN_PROGRESS", "STOPPED", "CONFIG_MISMATCH", "PERMISSION_DENIED"] as const) {
      assert.equal(isRetryableRepartitionError(new ConsumerGroupError(code, "timeout in the text does not matter")), false, code);
    }
    assert.equal(isRetryableRepartitionError(new ConsumerGroupError("SERVER_ERROR", "error updating the stream: subjects overlap with an existing stream")), false);
    assert.equal(isRetryableRepartitionError(undefined), false);
  });

  test("the waits double from 0.5 s up to 8 s, about half a minute over all the attempts", () => {
    const waits = Array.from({ length: REPARTITION_ATTEMPTS - 1 }, (_, i) => retryDelayMs(i + 1));
    assert.deepEqual(waits, [500, 1000, 2000, 4000, 8000, 8000, 8000]);
    assert.equal(retryDelayMs(40), 8000);
  });
});

describe("presence answers", () => {
  test("an answer names the member; anything else is no answer", () => {
    assert.equal(presenceSubject("orders", "shipping"), "$PCG.presence.orders.shipping");
    assert.deepEqual(presenceAnswerOf('{"library":"nats-pcgroups","member":"m.1","mode":"serial"}'), { library: "nats-pcgroups", member: "m.1", mode: "serial" });
    assert.deepEqual(presenceAnswerOf('{"library":"nats-pcgroups","member":"m1"}'), { library: "nats-pcgroups", member: "m1", mode: "serial" });
    for (const garbage of ["", "null", "[]", '{"member":"m1"}', '{"library":"other","member":"m1"}', '{"library":"nats-pcgroups","member":7}', "{"]) {
      assert.equal(presenceAnswerOf(garbage), undefined, garbage);
    }
  });
});

describe("presence requests", () => {
  test("an empty body asks who runs; parked-key requests round-trip; anything else is a presence request", () => {
    assert.deepEqual(presenceRequestOf(""), { kind: "presence" });
    for (const request of [{ kind: "park_list" as const }, { kind: "park_release" as const, seq: 42 }, { kind: "park_release" as const, seq: 7, deadLetterSubject: "ops.dlq" }]) {
      assert.deepEqual(presenceRequestOf(presenceRequestBody(request)), request);
    }
    for (const other of ["{", "null", "[]", '{"pcg":"park_release"}', '{"pcg":"park_release","seq":"7"}', '{"pcg":"drop_everything"}', "hello"]) {
      assert.deepEqual(presenceRequestOf(other), { kind: "presence" }, other);
    }
  });

  test("an answer carries the instance's pin when it holds one", () => {
    assert.deepEqual(presenceAnswerOf('{"library":"nats-pcgroups","member":"m1","mode":"serial","pin":"abc"}'), { library: "nats-pcgroups", member: "m1", mode: "serial", pin: "abc" });
    assert.deepEqual(presenceAnswerOf('{"library":"nats-pcgroups","member":"m1","mode":"serial","pin":""}'), { library: "nats-pcgroups", member: "m1", mode: "serial" });
  });
});
