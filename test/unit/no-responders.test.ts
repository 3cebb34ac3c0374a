/** Telling "no responders" apart through an error's causes, without a server. */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { errors } from "@nats-io/nats-core";
import { isNoResponders, isTransientServerError, wrapServerError } from "../../src/nats/server-errors.js";

describe("no responders", () => {
  test("no responders - found through the causes nats.js and this library wrap it in; a timeout or a plain error is not it", () => {
    const noResponders = new errors.NoRespondersError("$JS.API.DIRECT.GET.KV_static-consumer-groups.$KV.static-consumer-groups.s.g");
    const request = new errors.RequestError(noResponders.message, { cause: noResponders });
    const wrapped = wrapServerError(request, "getting the static consumer group's config");
    assert.equal(isNoResponders(noResponders), true);
    assert.equal(isNoResponders(request), true);
    assert.equal(isNoResponders(wrapped), true);
    assert.equal(isTransientServerError(wrapped), true);
    assert.equal(isNoResponders(new errors.TimeoutError()), false);
    assert.equal(isNoResponders(new Error("stream not found")), false);
    assert.equal(isNoResponders("no responders"), false, "not an Error");
  });
});
