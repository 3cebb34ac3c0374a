/**
 * The write batch (src/nats/write-batch.ts) against a recording stand-in for a
 * connection's writes: acks of one run of promise reactions are held together and
 * written once the microtask queue has drained, or earlier at the batch's limits.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { HeldWrites } from "../../src/nats/client-seam.js";
import { WriteBatch, writeBatchOf } from "../../src/nats/write-batch.js";

/** Records suspends, resumes and the acks queued in between, as a connection would write them. */
class RecordingWrites implements HeldWrites {
  readonly log: string[] = [];
  suspended = false;
  /** The socket writes: acks queued while suspended leave together, others one by one. */
  readonly writes: string[][] = [];
  private queued: string[] = [];

  suspend(): void {
    this.log.push("suspend");
    this.suspended = true;
  }

  resume(): void {
    this.log.push("resume");
    this.suspended = false;
    if (this.queued.length > 0) this.writes.push(this.queued.splice(0));
  }

  send(ack: string): void {
    this.log.push(ack);
    if (this.suspended) this.queued.push(ack);
    else this.writes.push([ack]);
  }
}

/** Waits until the microtask queue has drained and the ticks have run (a macrotask later). */
const nextMacrotask = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Acks `count` messages one promise reaction apart, as a lane of async handlers does. */
async function ackInReactions(batch: WriteBatch, writes: RecordingWrites, count: number): Promise<void> {
  for (let i = 1; i <= count; i++) {
    await Promise.resolve();
    batch.hold();
    writes.send(`ack ${i}`);
  }
}

describe("write batch - acks of a run of handlers share a write (no server)", () => {
  test("write batch - acks one promise reaction apart are written together once the microtask queue drained", async () => {
    const writes = new RecordingWrites();
    // A time limit no loaded machine reaches within five reactions (a GC pause can pass the 1 ms default; the limits have tests of their own).
    const batch = new WriteBatch(writes, { maxAcks: 256, maxMs: 60_000 });
    let heldDuringRun = true;
    const run = ackInReactions(batch, writes, 5).then(() => {
      // still inside the same run of microtasks: nothing written yet
      heldDuringRun = writes.writes.length === 0 && batch.holding;
    });
    await run;
    assert.ok(heldDuringRun, "the acks are held while the run goes on");
    await nextMacrotask();
    assert.deepEqual(writes.writes, [["ack 1", "ack 2", "ack 3", "ack 4", "ack 5"]]);
    assert.deepEqual(writes.log, ["suspend", "ack 1", "ack 2", "ack 3", "ack 4", "ack 5", "resume"]);
    assert.equal(batch.holding, false);
  });

  test("write batch - acks in separate turns are written in separate batches, in order", async () => {
    const writes = new RecordingWrites();
    const batch = new WriteBatch(writes);
    for (let i = 1; i <= 3; i++) {
      batch.hold();
      writes.send(`ack ${i}`);
      await nextMacrotask();
    }
    assert.deepEqual(writes.writes, [["ack 1"], ["ack 2"], ["ack 3"]]);
  });

  test("write batch - a batch that reached maxAcks is written at once, and the run goes on in a new batch", async () => {
    const writes = new RecordingWrites();
    const batch = new WriteBatch(writes, { maxAcks: 3, maxMs: 60_000 });
    await ackInReactions(batch, writes, 7);
    assert.deepEqual(writes.writes, [["ack 1", "ack 2", "ack 3"], ["ack 4", "ack 5", "ack 6"]], "two full batches written during the run");
    await nextMacrotask();
    assert.deepEqual(writes.writes.at(-1), ["ack 7"]);
    assert.equal(writes.log.filter((x) => x === "suspend").length, 3);
    assert.equal(writes.log.filter((x) => x === "resume").length, 3, "every suspend is resumed once (the early batches' ticks do not resume a later one)");
  });

  test("write batch - a batch older than maxMs is written at the next ack: slow synchronous work does not hold acks back", async () => {
    const writes = new RecordingWrites();
    const batch = new WriteBatch(writes, { maxAcks: 1000, maxMs: 5 });
    for (let i = 1; i <= 3; i++) {
      await Promise.resolve();
      const until = performance.now() + 6;
      while (performance.now() < until); // a handler's synchronous work, longer than maxMs
      batch.hold();
      writes.send(`ack ${i}`);
    }
    assert.deepEqual(writes.writes, [["ack 1"], ["ack 2"]]);
    await nextMacrotask();
    assert.deepEqual(writes.writes, [["ack 1"], ["ack 2"], ["ack 3"]]);
  });

  test("write batch - release() writes the held batch now; its pending tick then leaves the next batch alone", async () => {
    const writes = new RecordingWrites();
    const batch = new WriteBatch(writes);
    batch.hold();
    writes.send("ack 1");
    batch.release();
    assert.deepEqual(writes.writes, [["ack 1"]]);
    batch.release(); // nothing held: nothing to do
    batch.hold();
    writes.send("ack 2");
    await nextMacrotask();
    assert.deepEqual(writes.writes, [["ack 1"], ["ack 2"]]);
    assert.deepEqual(writes.log, ["suspend", "ack 1", "resume", "suspend", "ack 2", "resume"]);
  });

  test("write batch - one batch per connection's writes", () => {
    const a = new RecordingWrites();
    const b = new RecordingWrites();
    assert.equal(writeBatchOf(a), writeBatchOf(a));
    assert.notEqual(writeBatchOf(a), writeBatchOf(b));
  });
});
