/**
 * Ordered concurrency under load, elastic groups (key and partition modes): the same
 * scenario as the static one, consumed from the group's work-queue stream by two
 * members. Per key, successful handlings must be exactly the publish order, and the
 * work-queue stream must end empty.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { startEnv, type TestEnv } from "../helpers/nats.js";
import { assertOrderedRun, loadOptions, runOrderedLoad } from "../helpers/load-scenario.js";

describe("concurrency - elastic groups under load", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  test("concurrency - elastic key: keys in parallel, never two of one key, per-key order through failures, slow handlers and naks", async () => {
    const o = loadOptions("elastic", "key", 21);
    const r = await runOrderedLoad(env, o);
    console.log(assertOrderedRun(r, o));
    assert.ok(r.tracker.partitionOverlaps > 0, "key mode runs keys of one partition concurrently");
    assert.equal((await env.jsm.streams.info(r.consumerStream)).state.messages, 0, "the work-queue stream is empty");
  });

  test("concurrency - elastic partition: partitions in parallel, never two of one partition", async () => {
    const o = loadOptions("elastic", "partition", 22, { maxInFlight: 6 });
    const r = await runOrderedLoad(env, o);
    console.log(assertOrderedRun(r, o));
    assert.equal((await env.jsm.streams.info(r.consumerStream)).state.messages, 0, "the work-queue stream is empty");
  });
});
