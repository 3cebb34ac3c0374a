/**
 * One timer that keeps the server's AckWait clock of every held message from running
 * out: a timer per message costs more than the handlers of a no-op consume.
 */
import type { LaneMessage } from "./lane.js";

/** A message's `working()` is sent once this share of the interval passed since the server last heard of it. */
const BEAT_AFTER_SHARE = 0.75;
/** Rounds per interval. */
const ROUNDS_PER_INTERVAL = 4;

/**
 * Every `intervalMs / 4`, sends `working()` for each unsettled message the visitor
 * names whose last beat (or arrival) is at least `0.75 × intervalMs` old. With
 * `intervalMs` half of AckWait, nothing held in the process is redelivered because
 * it waited there.
 */
export class WorkingSweeper {
  private timer: NodeJS.Timeout | undefined;
  private lastRoundAt = 0;

  /**
   * @param intervalMs - half of AckWait
   * @param eachRound - visits the held messages: calls `beat` with each (and may tidy up after)
   */
  constructor(
    private readonly intervalMs: number,
    private readonly eachRound: (beat: (msg: LaneMessage) => void) => void,
  ) {}

  /** Whether it runs. */
  get running(): boolean {
    return this.timer !== undefined;
  }

  /**
   * The time of the last round (or of the start), on `performance.now()`: a message
   * arriving now arrived no earlier, so it is the arrival time a new message is given.
   */
  get sweptAt(): number {
    return this.lastRoundAt;
  }

  /** Starts the rounds (once). */
  start(): void {
    if (this.timer !== undefined) return;
    this.lastRoundAt = performance.now();
    this.timer = setInterval(() => this.round(), this.intervalMs / ROUNDS_PER_INTERVAL);
    this.timer.unref();
  }

  /** Stops the rounds. */
  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  private round(): void {
    const now = performance.now();
    this.lastRoundAt = now;
    const due = this.intervalMs * BEAT_AFTER_SHARE;
    this.eachRound((msg) => {
      if (msg.settlement === undefined && now - msg.lastBeatAt >= due) {
        // The interval is half of AckWait: twice that without a beat, the server redelivers.
        if (now - msg.lastBeatAt > 2 * this.intervalMs) msg.ackWaitLapsed = true;
        msg.working();
        msg.lastBeatAt = now;
      }
    });
  }
}
