/**
 * The attempts bucket's records against a real server (`retry.exactAttempts`): a count
 * taken before an attempt that then did not run (given back by a drain or a lost pin) is
 * taken back, and only while no other instance counted the message since.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import { ATTEMPTS_BUCKET, type ConsumerGroupMessage } from "../../src/index.js";
import { AttemptLedger } from "../../src/elastic/attempt-ledger.js";
import { decodeAttemptRecord } from "../../src/core/attempt-record.js";
import { startEnv, uniqueName, type TestEnv } from "../helpers/nats.js";
import { createLoadGroup } from "../helpers/load-scenario.js";

/** What the ledger reads of a delivered message, for stream sequence `seq`. */
function deliveredMessage(seq: number, deliveryCount = 1): ConsumerGroupMessage {
  return { seq, rawSubject: `orders.k${seq}`, info: { deliveryCount, timestampNanos: 1_700_000_000_000_000_000 + seq } } as unknown as ConsumerGroupMessage;
}

describe("attempt ledger - counts taken back (real server)", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
    await createLoadGroup(env, "elastic", uniqueName("cfg"), "g", 2, ["m1"]); // the config bucket the attempts bucket copies its replicas from
  });
  after(async () => {
    await env.close();
  });

  async function storedAttempts(stream: string, seq: number): Promise<number | undefined> {
    const kv = await new Kvm(env.js).open(ATTEMPTS_BUCKET);
    const entry = await kv.get(`${stream}.g.${seq}`);
    if (!entry || entry.operation !== "PUT") return undefined;
    return decodeAttemptRecord(entry.string())?.attempts;
  }

  test("attempt ledger - a first count taken back leaves no record; a later one goes back to the count before it", async () => {
    const stream = uniqueName("ldg");
    const ledger = new AttemptLedger(env.js, env.jsm, stream, "g");
    const first = deliveredMessage(5);
    assert.deepEqual(await ledger.begin(first, 0, 3), { counted: 0, began: true });
    assert.equal(await storedAttempts(stream, 5), 1);
    await ledger.uncount(first, 0);
    assert.equal(await storedAttempts(stream, 5), undefined, "an attempt that never ran is not counted");
    const again = deliveredMessage(6, 2);
    await ledger.begin(again, 0, 3);
    await ledger.begin(again, 1, Infinity);
    assert.equal(await storedAttempts(stream, 6), 2);
    await ledger.uncount(again, 1);
    assert.equal(await storedAttempts(stream, 6), 1, "back to the one attempt that ran");
  });

  test("attempt ledger - a count another instance took since is kept: the one taken back here was superseded", async () => {
    const stream = uniqueName("ldg");
    const here = new AttemptLedger(env.js, env.jsm, stream, "g");
    const nextOwner = new AttemptLedger(env.js, env.jsm, stream, "g");
    const msg = deliveredMessage(7);
    await here.begin(msg, 0, 3);
    assert.deepEqual(await nextOwner.begin(deliveredMessage(7, 2), 0, 3), { counted: 1, began: true });
    await here.uncount(msg, 0);
    assert.equal(await storedAttempts(stream, 7), 2, "the next owner's count stands (one start fewer at most, never more)");
  });
});
