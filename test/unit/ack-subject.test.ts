/**
 * Reading a delivery's stream sequence and delivery count from its ack subject
 * (src/nats/ack-subject.ts), in both forms servers send, and refusing anything else.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { deliveryNumbers } from "../../src/nats/ack-subject.js";

describe("ack subject", () => {
  test("the short form: $JS.ACK.<stream>.<consumer>.<count>.<stream seq>.<consumer seq>.<ts>.<pending>", () => {
    assert.deepEqual(deliveryNumbers("$JS.ACK.orders.m1.1.4711.12.1764540000000000000.3"), { deliveryCount: 1, streamSequence: 4711, consumerSequence: 12 });
    assert.deepEqual(deliveryNumbers("$JS.ACK.orders-g.g-m1.3.9007199254740991.2.1.0"), { deliveryCount: 3, streamSequence: 9007199254740991, consumerSequence: 2 });
  });

  test("the long form, with domain and account hash (and the random token after pending)", () => {
    assert.deepEqual(deliveryNumbers("$JS.ACK._.ACCHASH.orders.m1.2.17.5.1764540000000000000.0.rAnD0m"), { deliveryCount: 2, streamSequence: 17, consumerSequence: 5 });
    assert.deepEqual(deliveryNumbers("$JS.ACK.hub.ACCHASH.orders.m1.1.99.1.1764540000000000000.7"), { deliveryCount: 1, streamSequence: 99, consumerSequence: 1 });
  });

  test("anything else is left to nats.js (undefined)", () => {
    for (const bad of ["", "_INBOX.abc", "$JS.ACK", "$JS.ACK.orders.m1.1.2.3.4", "$JS.ACK.orders.m1.x.2.3.4.5", "$JS.ACK.orders.m1.1..3.4.5", "$JS.ACK.orders.m1.1.2.x.4.5", "$JS.ACK.orders.m1.1.2..4.5", "$JS.ACK.a.b.c.d.-1.2.3.4.5.6", "$JS.API.orders.m1.1.2.3.4.5", "$JS.ACK.orders.m1.1.2.3.4.5.6"]) {
      assert.equal(deliveryNumbers(bad), undefined, bad);
    }
  });
});
