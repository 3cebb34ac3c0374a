/**
 * A lane's queue keeps stream order and keeps one delivery per message; the sweeper
 * beats only what the server would soon redeliver. Without a server: messages are
 * plain objects with the JsMsg surface a lane message uses; time is mocked.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { JsMsg } from "@nats-io/jetstream";
import { emptyLane, enqueueInStreamOrder, laneCanStart, LaneMessage } from "../../src/nats/lane.js";
import { WorkingSweeper } from "../../src/nats/working-sweeper.js";

/** A lane message of stream sequence `seq`; `beats` counts its working() calls. */
function laneMessage(seq: number, deliveryCount = 1, arrivedBy = 0): { msg: LaneMessage; beats: () => number } {
  let beats = 0;
  const js = {
    subject: `0.orders.k`,
    seq,
    ack: () => undefined,
    nak: () => undefined,
    term: () => undefined,
    working: () => void (beats += 1),
  } as unknown as JsMsg;
  const msg = new LaneMessage(js, 0, new AbortController().signal, arrivedBy, { streamSequence: seq, deliveryCount, consumerSequence: seq });
  return { msg, beats: () => beats };
}

describe("lane - stream order", () => {
  const cases: { name: string; arrivals: number[]; queued: number[]; added: boolean[] }[] = [
    { name: "in order", arrivals: [1, 2, 3], queued: [1, 2, 3], added: [true, true, true] },
    { name: "a redelivery of an earlier message goes in front", arrivals: [3, 4, 1], queued: [1, 3, 4], added: [true, true, true] },
    { name: "one in the middle", arrivals: [1, 5, 3], queued: [1, 3, 5], added: [true, true, true] },
    { name: "a second delivery of a queued message replaces it", arrivals: [1, 2, 2, 1], queued: [1, 2], added: [true, true, false, false] },
  ];
  for (const c of cases) {
    test(`lane - ${c.name}`, () => {
      const lane = emptyLane("kx");
      const added = c.arrivals.map((seq) => enqueueInStreamOrder(lane, laneMessage(seq).msg));
      assert.deepEqual(lane.queue.map((m) => m.seq), c.queued);
      assert.deepEqual(added, c.added);
    });
  }

  test("lane - the fresher delivery is the one kept", () => {
    const lane = emptyLane("kx");
    enqueueInStreamOrder(lane, laneMessage(7, 1).msg);
    enqueueInStreamOrder(lane, laneMessage(7, 2).msg);
    assert.equal(lane.queue[0]?.redelivered, true);
  });

  test("lane - the next message may start only with no head and nothing awaited before it", () => {
    const lane = emptyLane("kx");
    assert.equal(laneCanStart(lane), false, "empty");
    enqueueInStreamOrder(lane, laneMessage(5).msg);
    assert.equal(laneCanStart(lane), true);
    lane.head = laneMessage(4).msg;
    assert.equal(laneCanStart(lane), false, "a head is worked on");
    lane.head = undefined;
    const timer = setTimeout(() => undefined, 0);
    clearTimeout(timer);
    lane.awaiting = { seq: 3, timer };
    assert.equal(laneCanStart(lane), false, "seq 3 was nak'ed and has not come back");
    lane.awaiting = { seq: 5, timer };
    assert.equal(laneCanStart(lane), true, "the awaited redelivery is the next message");
  });
});

describe("working sweeper", () => {
  test("working sweeper - beats an unsettled message once 3/4 of the interval passed since its last beat, and stops", (t) => {
    t.mock.timers.enable({ apis: ["setInterval", "Date"], now: 0 });
    let clock = 0;
    t.mock.method(performance, "now", () => clock);
    const old = laneMessage(1, 1, 0);
    const settled = laneMessage(2, 1, 0);
    settled.msg.ack();
    const held = [old.msg, settled.msg];
    const sweeper = new WorkingSweeper(1000, (beat) => held.forEach(beat));
    sweeper.start();
    assert.equal(sweeper.running, true);
    const fresh = laneMessage(3, 1, sweeper.sweptAt);
    held.push(fresh.msg);
    const tick = (ms: number): void => {
      clock += ms;
      t.mock.timers.tick(ms);
    };
    tick(250);
    tick(250);
    assert.equal(old.beats(), 0, "500 ms of 1000: not yet");
    tick(250);
    assert.equal(old.beats(), 1, "750 ms: beaten");
    assert.equal(fresh.beats(), 1, "arrived by the start: beaten with it");
    assert.equal(settled.beats(), 0, "a settled message is not the server's to redeliver");
    assert.equal(sweeper.sweptAt, 750);
    tick(250);
    tick(250);
    assert.equal(old.beats(), 1, "250 ms... 500 ms since its beat: not again");
    tick(250);
    assert.equal(old.beats(), 2, "750 ms since its beat");
    sweeper.stop();
    assert.equal(sweeper.running, false);
    tick(5000);
    assert.equal(old.beats(), 2, "no beats after stop");
  });
});
