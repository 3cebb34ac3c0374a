/**
 * When a member instance may start a handler: the ordering and fencing rules of one
 * pinned consume, with no NATS import and no timers (the caller passes the monotonic
 * time), so every rule is tested without a server.
 *
 * Two facts decide it:
 * - **Holds.** JetStream does not promise that a partition's messages reach an
 *   instance in order. A delivery lost with a dropped socket (a slow-consumer cut, a
 *   reconnect) or sent during a leader change comes back only after AckWait, behind
 *   newer ones; so does whatever the previous pin holder did not ack. Every delivery
 *   of a consumer takes the next consumer sequence, so a gap in what arrives, or a new
 *   pin, means that a message delivered to someone else may still come back. Nothing
 *   starts until the consumer's state shows that no unacked message is elsewhere
 *   (see {@link StartGuard.settled}).
 * - **The pin's proof.** A pin moves when its holder is silent, whether it is dead,
 *   starved, blocked or cut off. An instance starts a message only while it holds an
 *   answer from the server, to a request sent less than PinnedTTL minus a margin ago
 *   (a pin keep-alive, or a consumer state read sent right after one), that its pin is
 *   current. The server keeps a pin for PinnedTTL after the last pull carrying it, so
 *   the proof runs out before the pin can.
 */

/** Why starts are held. */
export type HoldReason =
  /** This instance just got the pin: the previous holder may have left messages unacked. */
  | "takeover"
  /** The consumer delivered something this instance did not receive (a cut socket, a leader change, a stale pull). */
  | "gap"
  /** A takeover began with a redelivery: the server sends the rest of its redelivery queue first (capped in time). */
  | "redeliveries";

/** What the server last said about this instance's pin. */
export type PinProof =
  /** Nothing yet for the current pin: a keep-alive is on its way. */
  | { kind: "none" }
  /** A keep-alive sent at `sentAt` (monotonic ms) was answered for the current pin. */
  | { kind: "alive"; sentAt: number }
  /** The server answered that the pin is not this instance's (423). */
  | { kind: "lost" }
  /** Proof is not used: the server or the permissions cannot give it (starts are not fenced on the pin). */
  | { kind: "unavailable" };

/** Whether handlers may start, and if not why. */
export type StartPhase =
  | { kind: "consuming" }
  | { kind: "holding"; reason: HoldReason; since: number }
  | { kind: "fenced"; since: number }
  | { kind: "yielded" };

/** What the owner of a {@link StartGuard} must do after a delivery. */
export interface DeliveryAction {
  /** A new pin: send a keep-alive at once (nothing starts before its answer). */
  readonly prove: boolean;
  /** A hold began: read the consumer's state (see {@link StartGuard.settled}). */
  readonly settle: boolean;
}

// One object per answer, shared: a delivery builds none.
const NOTHING_TO_DO: DeliveryAction = Object.freeze({ prove: false, settle: false });
const SETTLE: DeliveryAction = Object.freeze({ prove: false, settle: true });
const PROVE_AND_SETTLE: DeliveryAction = Object.freeze({ prove: true, settle: true });

/** The timings of the rules. */
export interface StartGuardSettings {
  /** The consumer's PinnedTTL in ms. */
  pinnedTtlMs: number;
  /** How long a takeover that began with a redelivery waits at most for the rest of the redelivery queue. */
  redeliveryHoldMs: number;
}

/** A hold, with the number of the state read that may release it. */
interface Hold {
  reason: HoldReason;
  since: number;
  /** Released only by a consumer state read that was asked for after the hold began. */
  epoch: number;
  /** For "redeliveries": when it ends by itself. */
  until?: number;
}

/** How much earlier than the server's PinnedTTL the proof runs out: a tenth of it, at least 100 ms. */
export function proofMarginMs(pinnedTtlMs: number): number {
  return Math.max(100, pinnedTtlMs / 10);
}

/**
 * The start rules of one pinned consume. Its owner reports deliveries, keep-alive
 * answers and consumer state reads; the dispatcher asks {@link StartGuard.mayStart}.
 */
export class StartGuard {
  private proof: PinProof = { kind: "none" };
  private pin: string | undefined;
  private readonly holds: Hold[] = [];
  /** The consumer sequence of the last delivery this instance received, for the current pin. */
  private lastConsumerSeq: number | undefined;
  /** Counts the holds begun: a state read releases only holds begun before it was asked for. */
  private epoch = 0;
  /** When the proof last ran out (for the fenced phase's `since`). */
  private fencedSince: number | undefined;

  constructor(private readonly settings: StartGuardSettings) {}

  /** The current pin id, as the last delivery carried it. */
  get pinId(): string | undefined {
    return this.pin;
  }

  /** What the server last said about the pin. */
  get pinProof(): PinProof {
    return this.proof;
  }

  /** True while a hold waits for a consumer state read (takeover or gap). */
  get needsSettling(): boolean {
    return this.holds.some((h) => h.reason !== "redeliveries");
  }

  /**
   * A delivery arrived. Says what its owner must do now: `prove` (a new pin: send a
   * keep-alive at once, nothing starts before its answer) and `settle` (a hold began:
   * read the consumer's state, see {@link StartGuard.settled}).
   *
   * @param pin - its `Nats-Pin-Id` header ("" or undefined when it has none)
   * @param consumerSeq - its consumer (delivery) sequence
   * @param redelivered - its delivery count is above 1
   * @param clock - monotonic ms, or a clock read only when the delivery begins a hold (most deliveries do not: it runs for each)
   */
  delivered(pin: string | undefined, consumerSeq: number, redelivered: boolean, clock: number | (() => number)): DeliveryAction {
    let next = NOTHING_TO_DO;
    if (pin && pin !== this.pin) {
      const now = typeof clock === "number" ? clock : clock();
      this.pin = pin;
      if (this.proof.kind !== "unavailable") this.proof = { kind: "none" };
      this.hold("takeover", now);
      if (redelivered) this.hold("redeliveries", now, now + this.settings.redeliveryHoldMs);
      next = PROVE_AND_SETTLE;
    } else if (this.lastConsumerSeq !== undefined && consumerSeq !== this.lastConsumerSeq + 1) {
      // Skipped deliveries went to someone else (a dropped socket, a stale pull); a lower one means the
      // consumer's delivery state went back (a leader change, a recreated consumer).
      this.hold("gap", typeof clock === "number" ? clock : clock());
      next = SETTLE;
    }
    this.lastConsumerSeq = consumerSeq;
    // The server sends fresh messages only once its redelivery queue is empty.
    if (!redelivered && this.holds.length > 0) this.release("redeliveries");
    return next;
  }

  /** The consumer's `max_ack_pending` is reached with what is held here: nothing else can come, the redelivery wait is over. */
  ackPendingFull(): void {
    this.release("redeliveries");
  }

  /** The number to give {@link StartGuard.settled} for a consumer state read asked for now. */
  stateReadStarted(): number {
    return this.epoch;
  }

  /**
   * A consumer state read, asked for at `epoch`, found no unacked message outside this
   * instance: the holds begun before it are over.
   */
  settled(epoch: number): void {
    for (let i = this.holds.length - 1; i >= 0; i--) {
      const h = this.holds[i];
      if (h && h.reason !== "redeliveries" && h.epoch <= epoch) this.holds.splice(i, 1);
    }
  }

  /** Gives up the holds that wait for a state read (the read keeps failing, or its cap passed). */
  abandonHolds(): void {
    for (let i = this.holds.length - 1; i >= 0; i--) if (this.holds[i]?.reason !== "redeliveries") this.holds.splice(i, 1);
  }

  /**
   * The server answered, about pin `pin`, a request sent at `sentAt`: a keep-alive's
   * 423 or a consumer state naming another pin (`lost`), or a keep-alive's other
   * statuses or a consumer state naming this pin (the pin is alive).
   */
  pinAnswered(pin: string, sentAt: number, lost: boolean): void {
    if (this.proof.kind === "unavailable" || pin !== this.pin) return;
    if (lost) {
      this.proof = { kind: "lost" };
      return;
    }
    if (this.proof.kind === "alive" && this.proof.sentAt >= sentAt) return;
    this.proof = { kind: "alive", sentAt };
  }

  /** The pin moved to another instance (nats.js reported it unpinned): nothing starts until a delivery brings a new pin. */
  unpinned(): void {
    this.pin = undefined;
    this.lastConsumerSeq = undefined;
    if (this.proof.kind !== "unavailable") this.proof = { kind: "lost" };
  }

  /** Starts are no longer fenced on the pin's proof (the keep-alive answers cannot be had). */
  proofUnavailable(): void {
    this.proof = { kind: "unavailable" };
  }

  /** The phase at monotonic time `now`. */
  phase(now: number): StartPhase {
    if (this.proof.kind === "lost") return { kind: "yielded" };
    const hold = this.activeHold(now);
    if (hold) return { kind: "holding", reason: hold.reason, since: hold.since };
    if (this.proof.kind === "unavailable") return { kind: "consuming" };
    const until = this.proof.kind === "alive" ? this.proof.sentAt + this.settings.pinnedTtlMs - proofMarginMs(this.settings.pinnedTtlMs) : undefined;
    if (until !== undefined && now < until) {
      this.fencedSince = undefined;
      return { kind: "consuming" };
    }
    this.fencedSince ??= until ?? now;
    return { kind: "fenced", since: this.fencedSince };
  }

  /**
   * Whether a handler may start at `now`: the same answer as `phase(now).kind ===
   * "consuming"`, without building the phase (it is asked before every start).
   */
  mayStart(now: number): boolean {
    if (this.proof.kind === "lost") return false;
    if (this.holds.length > 0 && this.activeHold(now)) return false;
    if (this.proof.kind === "unavailable") return true;
    if (this.proof.kind === "alive" && now < this.proof.sentAt + this.settings.pinnedTtlMs - proofMarginMs(this.settings.pinnedTtlMs)) {
      this.fencedSince = undefined;
      return true;
    }
    return false;
  }

  private activeHold(now: number): Hold | undefined {
    for (let i = this.holds.length - 1; i >= 0; i--) {
      const h = this.holds[i];
      if (h?.until !== undefined && now >= h.until) this.holds.splice(i, 1);
    }
    return this.holds[0];
  }

  private hold(reason: HoldReason, now: number, until?: number): void {
    this.epoch += 1;
    const known = this.holds.find((h) => h.reason === reason);
    if (known) {
      known.epoch = this.epoch;
      if (until !== undefined) known.until = until;
      return;
    }
    this.holds.push(until === undefined ? { reason, since: now, epoch: this.epoch } : { reason, since: now, epoch: this.epoch, until });
  }

  private release(reason: HoldReason): void {
    const at = this.holds.findIndex((h) => h.reason === reason);
    if (at !== -1) this.holds.splice(at, 1);
  }
}
