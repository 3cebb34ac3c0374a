/**
 * The stream sequences an instance acked or terminated, remembered for a while so a
 * late redelivery of one (it crossed the ack on the wire) is settled again instead
 * of handled again.
 */

/** How a remembered message was settled. */
export type FinalSettlement = "ack" | "term";

/**
 * Two generations of at most `capacity` sequences each; the older one is dropped
 * when the newer fills. Cheaper per message than evicting one by one.
 */
export class SettledMemory {
  private current = new Map<number, FinalSettlement>();
  private previous = new Map<number, FinalSettlement>();

  /** @param capacity - sequences per generation */
  constructor(private readonly capacity = 8192) {}

  /** How `seq` was settled here, if it is remembered. */
  get(seq: number): FinalSettlement | undefined {
    return this.current.get(seq) ?? this.previous.get(seq);
  }

  /** Remembers that `seq` was settled. */
  remember(seq: number, settlement: FinalSettlement): void {
    this.current.set(seq, settlement);
    if (this.current.size >= this.capacity) {
      this.previous = this.current;
      this.current = new Map();
    }
  }
}
