/**
 * The stream sequences an instance acked or terminated, remembered for a while so a
 * late redelivery of one (it crossed the ack on the wire) is settled again instead
 * of handled again.
 */

/** How a remembered message was settled. */
export type FinalSettlement = "ack" | "term";

const TERM = 1;
const ACK = 2;

/**
 * The last `capacity` settlements, in a ring. Remembering is two array writes (it
 * happens for every message); looking up scans the ring from the newest, which only
 * a redelivery does (rare, and the redelivered message was usually settled lately).
 */
export class SettledMemory {
  private readonly seqs: Float64Array;
  /** 0: empty slot; otherwise {@link ACK} or {@link TERM}. */
  private readonly kinds: Uint8Array;
  private next = 0;

  /** @param capacity - how many settlements are remembered */
  constructor(private readonly capacity = 16384) {
    this.seqs = new Float64Array(capacity);
    this.kinds = new Uint8Array(capacity);
  }

  /** How `seq` was settled here, if it is remembered (the latest settlement of it). */
  get(seq: number): FinalSettlement | undefined {
    for (let i = 1; i <= this.capacity; i++) {
      const at = (this.next - i + this.capacity) % this.capacity;
      const kind = this.kinds[at];
      if (kind === 0) return undefined;
      if (this.seqs[at] === seq) return kind === ACK ? "ack" : "term";
    }
    return undefined;
  }

  /** Remembers that `seq` was settled. */
  remember(seq: number, settlement: FinalSettlement): void {
    this.seqs[this.next] = seq;
    this.kinds[this.next] = settlement === "ack" ? ACK : TERM;
    this.next = (this.next + 1) % this.capacity;
  }
}
