/**
 * Lets the acks of handlers that finish back to back leave in one socket write.
 *
 * nats.js queues a publish in the connection's outbound buffer and writes that buffer
 * from a microtask queued by the first command after a write. A lane that runs async
 * handlers one after another settles one message per promise reaction, so that write
 * comes between every two acks: one socket write (a system call, and on loopback the
 * server's wake-up) per message, the largest cost of ordered consumption. Holding the
 * connection's flush until the microtask queue has drained (a `process.nextTick`
 * callback runs only then, before any I/O) sends the acks of the whole run at once.
 *
 * What an ack promises does not change: it is queued on the connection, in order,
 * before the next message of its lane starts, and whatever is sent after it (the
 * settle barrier, an `ackAck`, a pull) is written after it. Only the write waits, at
 * most for the rest of the run: {@link WriteLimits} bound that, so a run of handlers
 * that do synchronous work does not keep its first acks back. A process killed before
 * the write loses the run's acks, as it loses whatever nats.js had not written yet:
 * the server redelivers those messages (at least once, as ever), and per-key order of
 * first handling holds, since acks are only ever lost from the end of the sequence.
 */
import type { HeldWrites } from "./client-seam.js";

/** When a held batch is written even though the run goes on. */
export interface WriteLimits {
  /** Acks held at most. */
  maxAcks: number;
  /** Milliseconds the first ack of a batch is held at most (checked at each ack). */
  maxMs: number;
}

/** The default: about 23 kB of acks, or a millisecond. */
export const DEFAULT_WRITE_LIMITS: WriteLimits = { maxAcks: 256, maxMs: 1 };

/**
 * Holds a connection's writes while a run of handlers acks. One per connection (see
 * {@link writeBatchOf}): instances that share a connection share its batch.
 */
export class WriteBatch {
  /** When the held batch began; undefined while nothing is held. */
  private heldSince: number | undefined;
  private heldAcks = 0;
  /** Counts batches, so the tick of one written early leaves the next alone. */
  private batch = 0;

  /**
   * @param writes - suspends and resumes the connection's flush
   * @param limits - when a batch is written before the run ends
   */
  constructor(
    private readonly writes: HeldWrites,
    private readonly limits: WriteLimits = DEFAULT_WRITE_LIMITS,
  ) {}

  /** True while writes are held. */
  get holding(): boolean {
    return this.heldSince !== undefined;
  }

  /**
   * Call right before an ack: it joins the held batch, which is written once the
   * microtask queue has drained (or at once, when the batch reached its limits).
   */
  hold(): void {
    if (this.heldSince !== undefined) {
      this.heldAcks += 1;
      if (this.heldAcks <= this.limits.maxAcks && performance.now() - this.heldSince < this.limits.maxMs) return;
      this.release();
    }
    this.writes.suspend();
    this.heldSince = performance.now();
    this.heldAcks = 1;
    const batch = ++this.batch;
    process.nextTick(() => {
      if (this.batch === batch) this.release();
    });
  }

  /** Writes the held batch now. */
  release(): void {
    if (this.heldSince === undefined) return;
    this.heldSince = undefined;
    this.heldAcks = 0;
    this.batch += 1;
    this.writes.resume();
  }
}

const batches = new WeakMap<HeldWrites, WriteBatch>();

/**
 * The write batch of a connection's writes.
 *
 * @param writes - the connection's {@link HeldWrites} (one per connection)
 */
export function writeBatchOf(writes: HeldWrites): WriteBatch {
  let batch = batches.get(writes);
  if (!batch) batches.set(writes, (batch = new WriteBatch(writes)));
  return batch;
}
