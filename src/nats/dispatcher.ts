/**
 * Ordered concurrency inside one member instance. Messages go into lanes (one lane
 * in `serial` mode, one per partition or per key otherwise). Lanes run in parallel
 * up to `maxInFlight` handlers at once; within a lane, a message starts only after
 * the previous one's handler succeeded and its ack was sent, that is queued on the
 * connection ahead of anything sent later (or it was dead-lettered). A lane is kept
 * in stream-sequence order, so a redelivered message goes back in front of later ones.
 *
 * A message that failed and waits for its next attempt (backoff, or a blocked key)
 * holds its lane but no handler slot: other keys keep flowing.
 *
 * A lane whose head is blocked (failed `maxDeliver` times, nowhere to dead-letter it)
 * is parked: the messages behind it are held without a buffer slot (up to
 * `DispatchPolicy.parking`), so a blocked key with a long backlog does not fill the
 * buffer and stop the other keys. {@link Dispatcher.parkedKeys} lists the parked keys
 * and {@link Dispatcher.release} tries one again at once or dead-letters its head.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { ConsumerGroupError } from "../core/errors.js";
import type { DeliveryNumbers } from "./ack-subject.js";
import { sendToDeadLetter, type DeadLetter } from "./dead-letter.js";
import { emptyLane, enqueueInStreamOrder, laneCanStart, LaneMessage, UNKEYED, type Lane, type PendingRelease } from "./lane.js";
import { type ConsumerGroupMessage, deliveryNumbersOf, partitionOfStoredSubject } from "./message.js";
import { SettledMemory } from "./settled-memory.js";
import { WorkingSweeper } from "./working-sweeper.js";

/** How a member instance runs handlers. */
export type ConcurrencyMode = "serial" | "partition" | "key";

/** What to do when a handler throws. */
export interface RetryPolicy {
  /** Attempts in place before the message is dead-lettered (or its lane blocks). */
  maxDeliver: number;
  /** The wait before attempt `attempt + 1`. */
  backoffMs(attempt: number): number;
  /** Where a message goes after `maxDeliver` failed attempts; absent: its lane blocks. */
  deadLetter?: DeadLetter;
  /**
   * Counts failed attempts where every owner of a message sees them (elastic groups:
   * a rebalance recreates the consumer, and its delivery count starts over). Absent:
   * the server's delivery count and this instance's attempts are the count.
   */
  attempts?: AttemptCounter;
  /**
   * Count each attempt before its handler starts ({@link AttemptCounter.begin}), not
   * when it fails: an attempt cut by a crash counts too, so `maxDeliver` bounds the
   * handler starts exactly, whatever happens to the instance. Costs a shared-count
   * write before every attempt.
   */
  exact?: boolean;
}

/** A shared count of each message's failed attempts (see `RetryPolicy.attempts`). */
export interface AttemptCounter {
  /**
   * Counts one more failed attempt of `msg`.
   *
   * @param localRuns - the attempts known here (the consumer's earlier deliveries plus this instance's attempts, this one included)
   * @returns its failed attempts in all, at least `localRuns`
   */
  failed(msg: ConsumerGroupMessage, localRuns: number): Promise<number>;
  /** `msg` was acked or terminated: its count, if one was kept, is deleted (a promise when there was one to delete). */
  settled(seq: number): Promise<void> | undefined;
  /**
   * The failed attempts counted for `msg` so far (0 when none). Asked before the first
   * attempt here of a redelivered message: its attempts may be used up under an
   * instance that was stalled or cut before it could dead-letter it.
   */
  recorded?(msg: ConsumerGroupMessage): Promise<number>;
  /**
   * Counts the attempt of `msg` about to start (`RetryPolicy.exact`), unless the attempts
   * already counted reach `limit`: then nothing is written and it must not run.
   *
   * @param earlierRuns - the attempts made here before this one (deliveries given back without running do not count)
   * @param limit - the count at which it must not run (`maxDeliver` for its first attempt here; Infinity for a blocked message retried in place)
   * @returns the attempts counted before this one, and whether this one was counted (and so may run)
   */
  begin?(msg: ConsumerGroupMessage, earlierRuns: number, limit: number): Promise<{ counted: number; began: boolean }>;
  /**
   * Takes back the count {@link AttemptCounter.begin} wrote for `msg` when its attempt did
   * not run after all (given back by a drain or a lost pin before it started): the record
   * goes back to `countedBefore` (removed at 0) unless another instance counted it since.
   */
  uncount?(msg: ConsumerGroupMessage, countedBefore: number): Promise<void>;
}

/** The dispatch settings of an instance. */
export interface DispatchPolicy {
  /** How handlers run. */
  mode: ConcurrencyMode;
  /** Handlers running at once. */
  maxInFlight: number;
  /** The lane key of a message in `key` mode. */
  keyOf(msg: ConsumerGroupMessage): string;
  /** Undefined: a failed message is nak'ed for redelivery (Go's behaviour), after {@link DispatchPolicy.nakDelayMs}. */
  retry?: RetryPolicy;
  /** The delay of the nak of a failed message without `retry`, by its delivery count (0: at once, as Go). */
  nakDelayMs?(deliveryCount: number): number;
  /** Send `working()` this often for every message held here (0: never). Half of AckWait. */
  workingIntervalMs: number;
  /**
   * Whether a handler may start now; when false nothing starts and the check is made
   * again shortly. Auto-join fences an instance whose lease may have run out with it.
   */
  mayStart?(): boolean;
  /**
   * How much the lanes of blocked heads may hold without a buffer slot (`partition` and
   * `key` modes). Absent: they keep their slots, and a blocked key with more messages
   * behind it than the buffer holds stops the instance.
   */
  parking?: ParkingLimits;
}

/** What parked lanes may hold in all, beyond the buffer. */
export interface ParkingLimits {
  /** Messages. */
  maxMessages: number;
  /** Bytes of their payloads. */
  maxBytes: number;
}

/** A blocked lane: its head failed `maxDeliver` times and has nowhere to go; the messages behind it wait. */
export interface ParkedKey {
  /** The key (`key` mode), the partition number (`partition` mode), or "" (serial mode, or a message whose key function failed). */
  key: string;
  /** The instance's concurrency mode: in `key` mode a non-empty `key` is a key, else the lane is the partition (or the instance). */
  mode: ConcurrencyMode;
  /** The partition of the blocked message. */
  partition: number;
  /** The blocked message's stream sequence (in the stream the member consumes: the work queue, in elastic groups). */
  seq: number;
  /** Its subject. */
  subject: string;
  /** Its failed attempts so far. */
  attempts: number;
  /** Messages of the key behind it, held here. */
  parkedMessages: number;
  /** When it blocked, ISO-8601. */
  since: string;
  /** Its last error. */
  error: string;
}

/** What a release does to a blocked message. */
export type ReleaseAction =
  /** Its next attempt runs now (its downstream was fixed, say); if it fails, it blocks again. */
  | { kind: "retry" }
  /** It is published to `target` and terminated; the key goes on. */
  | { kind: "dead_letter"; target: DeadLetter };

/** How a blocked lane ended. */
export type UnblockOutcome = "handled" | "dead_lettered" | "given_back";

/**
 * What a release did: its retry started (or the attempt running now is it), the message
 * was dead-lettered, or, for a dead-letter release that waited for the attempt running
 * then, that attempt succeeded (handled) or the message was given back with its partition.
 */
export type ReleaseResult = "retrying" | UnblockOutcome;

/** What the dispatcher reports. */
export interface DispatchEvents {
  /** A handler (or the key function) failed on attempt `attempt`. */
  onHandlerError(error: unknown, msg: ConsumerGroupMessage, attempt: number): void;
  /** A message was published to the dead-letter subject and terminated. */
  onDeadLettered(msg: ConsumerGroupMessage, error: unknown, subject: string): void;
  /** A lane waits for a message that failed `maxDeliver` times and has nowhere to go. */
  onBlocked(lane: string, msg: ConsumerGroupMessage, error: unknown): void;
  /** A blocked lane's head was handled, dead-lettered or given back: its key goes on (or moved). */
  onUnblocked?(lane: string, msg: ConsumerGroupMessage, outcome: UnblockOutcome): void;
  /** Parked lanes hold `DispatchPolicy.parking`'s limit: later messages of blocked keys take buffer slots again. Reported once until they fall below it. */
  onParkingFull?(messages: number, bytes: number): void;
  /** The shared attempt count could not be read or written: the attempts known here were used. */
  onAttemptsUnrecorded?(msg: ConsumerGroupMessage, error: unknown): void;
  /** A handler succeeded and its ack was sent (confirmed, while draining). */
  onHandled?(msg: ConsumerGroupMessage, durationMs: number): void;
  /** A message was delivered to this instance. */
  onReceived?(msg: ConsumerGroupMessage): void;
  /** A handler succeeded, but the server did not confirm its ack: it may be redelivered. */
  onAckFailed?(msg: ConsumerGroupMessage, error: unknown): void;
  /** The drain timeout passed with handlers still running; their signal was aborted and they are still awaited. */
  onDrainTimeout?(running: number, waitedMs: number): void;
}

/** A handler. */
export type Handler = (msg: ConsumerGroupMessage) => void | Promise<void>;

/** How the dispatcher's owner takes part in its flow control. */
export interface DispatchHooks {
  /** A message left the dispatcher (room in the local buffer). */
  onRoom?(): void;
  /**
   * Right before a handler's message is acked, so the acks of handlers that finish
   * back to back can leave in one socket write (see `write-batch.ts`).
   */
  beforeAck?(): void;
}

/** True for anything with a then method (an async handler's result, native promise or not). */
function isPromiseLike(value: unknown): value is PromiseLike<void> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === "function";
}

/** How soon a fenced dispatcher looks again whether it may start handlers. */
const FENCE_RECHECK_MS = 100;
/**
 * Idle lanes are kept for their next message (making one per message costs more than
 * the handler of a no-op consume) and dropped by the sweeper; past this many lanes an
 * idle one is dropped at once.
 */
const IDLE_LANES_KEPT = 4096;

/**
 * The lanes of one consume. Not reusable after {@link Dispatcher.drain}.
 */
export class Dispatcher {
  private readonly lanes = new Map<string, Lane>();
  private readonly ready: Lane[] = [];
  /** Lanes whose head's backoff is over: they go before fresh messages. */
  private readonly retries: Lane[] = [];
  private readonly settled = new SettledMemory();
  /** Handlers running now (bounded by maxInFlight). */
  private executing = 0;
  /** Lanes working on a message (running, or waiting for a retry). */
  private heads = 0;
  /** Messages in the lanes' queues, parked ones aside. */
  private queuedCount = 0;
  /** Messages parked behind blocked heads, and their bytes. */
  private parkedCount = 0;
  private parkedByteCount = 0;
  private parkingFullReported = false;
  private stopping = false;
  /** Aborts the handlers' `msg.signal` at the drain timeout, or when the pin is lost (a new one serves later messages). */
  private handlerAbort = new AbortController();
  private idle: (() => void)[] = [];
  /** Deliveries that arrived while draining, given back with the rest once the drain is over. */
  private readonly late: JsMsg[] = [];
  /** Counts ahead being taken back (exactAttempts); a drain waits for them. */
  private readonly uncounting = new Set<Promise<unknown>>();
  private drained = false;
  /** True after the pin was lost: failures go back to the server instead of being retried here. */
  private yielding = false;
  /** Set by {@link Dispatcher.pauseStarts}: nothing starts any more, a drain follows. */
  private startsPaused = false;
  /** Per partition, the sequences of messages whose key could not be computed and that are not done yet. */
  private readonly unkeyed = new Map<number, Set<number>>();
  /** Key lanes whose next message waits for an earlier unkeyed message of its partition. */
  private afterUnkeyed: Lane[] = [];
  /** True while pump() runs: a handler that finishes synchronously must not start a nested pump. */
  private pumping = false;
  /** Set while a fenced instance waits to look again whether it may start handlers. */
  private fenceTimer: NodeJS.Timeout | undefined;
  /** Sends working() for every message held here. */
  private readonly sweeper: WorkingSweeper;

  constructor(
    private readonly handler: Handler,
    private readonly policy: DispatchPolicy,
    private readonly events: DispatchEvents,
    private readonly hooks: DispatchHooks = {},
  ) {
    this.sweeper = new WorkingSweeper(policy.workingIntervalMs, (beat) => {
      for (const lane of this.lanes.values()) {
        if (lane.head) beat(lane.head);
        for (const msg of lane.queue) beat(msg);
        this.forgetIfIdle(lane);
      }
    });
  }

  /** Messages held here that take a buffer slot: buffered plus in progress, parked ones aside. */
  get size(): number {
    return this.queuedCount + this.heads;
  }

  /** Messages held here in all: {@link size} plus the parked ones (all delivered and unacked). */
  get held(): number {
    return this.queuedCount + this.heads + this.parkedCount;
  }

  /** Messages parked behind blocked heads. */
  get parked(): number {
    return this.parkedCount;
  }

  /** Messages whose handler is running. */
  get running(): number {
    return this.executing;
  }

  /**
   * Takes a delivered message.
   *
   * @param numbers - its delivery numbers, when the caller read them already
   */
  push(m: JsMsg, numbers: DeliveryNumbers = deliveryNumbersOf(m)): void {
    // A redelivery that crossed our ack (sent before the ack arrived): settle it again, never handle it twice.
    // (A first delivery cannot have been settled here: most messages skip the lookup.)
    const done = numbers.deliveryCount > 1 ? this.settled.get(numbers.streamSequence) : undefined;
    if (this.stopping) {
      if (done === "ack") m.ack();
      else if (done === "term") m.term();
      else if (this.drained) m.nak();
      else this.late.push(m);
      return;
    }
    if (!this.sweeper.running && this.policy.workingIntervalMs > 0) this.sweeper.start();
    const msg = new LaneMessage(m, partitionOfStoredSubject(m.subject), this.handlerAbort.signal, this.sweeper.sweptAt, numbers);
    this.yielding = false; // a delivery means this instance holds the pin (again)
    this.events.onReceived?.(msg);
    if (done === "ack") return m.ack();
    if (done === "term") return m.term();
    const key = this.laneOf(msg);
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = emptyLane(key);
      this.lanes.set(key, lane);
    }
    // A redelivery of what is in progress: the copy in progress settles it (unless that copy was nak'ed: then this is its retry).
    if (lane.head?.seq === msg.seq && lane.head.settlement !== "nak") return;
    if (!enqueueInStreamOrder(lane, msg)) return; // it was queued already: the fresher delivery took its place
    if (!(lane.head?.reportedBlocked === true && this.park(lane, msg))) this.queuedCount += 1;
    this.schedule(lane);
    this.pump();
  }

  /** Starts what may start now: the owner calls it when `mayStart` may have turned true. */
  wake(): void {
    clearTimeout(this.fenceTimer);
    this.fenceTimer = undefined;
    this.pump();
  }

  /** Nothing may start now (see `DispatchPolicy.mayStart`): look again in a moment. */
  private fenceWait(): void {
    if (this.fenceTimer || this.stopping) return;
    this.fenceTimer = setTimeout(() => {
      this.fenceTimer = undefined;
      this.pump();
    }, FENCE_RECHECK_MS);
  }

  /**
   * Starts no more handlers from now on (those running go on): the member is about to
   * give partitions up and must not start their messages while it asks the server
   * whether it is pinned. {@link Dispatcher.drain} follows and gives the rest back.
   */
  pauseStarts(): void {
    this.startsPaused = true;
  }

  /**
   * Messages held here at or below stream sequence `seq`: of the consumer's unacked
   * messages in a state read when it had delivered up to `seq`, those that are here
   * (whatever arrived after that read has a higher sequence, or was counted in it).
   */
  heldUpTo(seq: number): number {
    let n = 0;
    for (const lane of this.lanes.values()) {
      if (lane.head && lane.head.seq <= seq) n += 1;
      for (const msg of lane.queue) if (msg.seq <= seq) n += 1;
    }
    return n;
  }

  /**
   * Whether the message with stream sequence `seq` is here: held, running, awaiting its
   * redelivery after a nak, or settled here lately (its ack may not have reached the
   * server yet). Walks every lane: asked only when a hold settles.
   */
  knows(seq: number): boolean {
    if (this.settled.get(seq) !== undefined) return true;
    for (const lane of this.lanes.values()) {
      if (lane.head?.seq === seq || lane.awaiting?.seq === seq) return true;
      for (const msg of lane.queue) if (msg.seq === seq) return true;
    }
    return false;
  }

  /**
   * The instance lost its pin: nothing more may start here. Gives back (nak, in stream
   * order) every message that has not started, so the newly pinned instance gets them
   * at once; the ones in progress finish (or go back on their next failure).
   */
  giveBackQueued(): void {
    this.yielding = true;
    // The new pinned instance may get a running message again (its AckWait ran out on the server, after
    // a restart say): the handlers still running here are asked to finish early.
    this.handlerAbort.abort(new ConsumerGroupError("STOPPED", "this instance lost its pin: another instance of the member consumes now"));
    this.handlerAbort = new AbortController();
    const back: LaneMessage[] = [];
    for (const lane of [...this.lanes.values()]) {
      // A message waiting for its next attempt goes back too: the new owner handles it, in order.
      const head = lane.head;
      if (head && this.waitingForRetry(lane, head)) {
        clearTimeout(head.retryTimer);
        head.retryTimer = undefined;
        // A failure left undecided while fenced after an AckWait lapse: the new pinned instance has it.
        if (head.deferredFailure === undefined) back.push(head);
        else head.pendingRelease?.reject(new ConsumerGroupError("STOPPED", "this instance lost its pin while the attempt ran: the newly pinned instance handles the message"));
        head.deferredFailure = undefined;
        head.pendingRelease = undefined;
        lane.head = undefined;
        this.heads -= 1;
        if (head.reportedBlocked) this.events.onUnblocked?.(this.publicKey(lane.key), head, "given_back");
      }
      back.push(...lane.queue.splice(0));
      clearTimeout(lane.awaiting?.timer);
      lane.awaiting = undefined;
      lane.ready = false;
      lane.parked = 0;
      lane.parkedBytes = 0;
      this.forgetIfIdle(lane);
    }
    this.queuedCount = 0;
    this.parkedCount = 0;
    this.parkedByteCount = 0;
    this.parkingFullReported = false;
    this.ready.length = 0;
    this.retries.length = 0;
    this.unkeyed.clear();
    this.afterUnkeyed.length = 0;
    back.sort((a, b) => a.seq - b.seq);
    for (const msg of back) msg.nak();
    for (const msg of back) this.uncount(msg);
    if (this.heads === 0 && this.idle.length > 0) for (const wake of this.idle.splice(0)) wake();
    if (back.length > 0) this.hooks.onRoom?.();
  }

  /** Puts a lane in the ready list when its next message may start. */
  private schedule(lane: Lane): void {
    if (lane.ready || !laneCanStart(lane)) return;
    lane.ready = true;
    this.ready.push(lane);
  }

  private laneOf(msg: LaneMessage): string {
    switch (this.policy.mode) {
      case "serial":
        return "";
      case "partition":
        return `p${msg.partition}`;
      case "key":
        try {
          return `k${this.policy.keyOf(msg)}`;
        } catch (error) {
          // Its key is unknown: it waits in its partition's lane of such messages and goes through the
          // failure policy, and until it is done no later message of its partition starts.
          msg.keyError = error;
          const lane = `${UNKEYED}${msg.partition}`;
          // Behind a blocked one it cannot run either: it does not hold the partition then.
          if (this.lanes.get(lane)?.head?.reportedBlocked) return lane;
          let pending = this.unkeyed.get(msg.partition);
          if (!pending) this.unkeyed.set(msg.partition, (pending = new Set()));
          pending.add(msg.seq);
          return lane;
        }
    }
  }

  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (!this.stopping && !this.startsPaused && this.executing < this.policy.maxInFlight) {
        if (this.retries.length === 0 && this.ready.length === 0) break;
        // Asked before every start, not once per pump: a synchronous handler (or the synchronous part of
        // an async one) run by this loop may have taken long enough for the answer to change.
        if (this.policy.mayStart && !this.policy.mayStart()) {
          this.fenceWait();
          break;
        }
        const retry = this.retries.shift();
        if (retry) {
          const msg = retry.head;
          if (msg && msg.retryTimer === undefined && msg.settlement === undefined) this.run(retry, msg);
          continue;
        }
        const lane = this.ready.shift();
        if (!lane) break;
        lane.ready = false;
        const msg = lane.queue[0];
        if (!msg || !laneCanStart(lane)) continue;
        if (this.behindUnkeyed(lane, msg)) {
          this.afterUnkeyed.push(lane);
          continue;
        }
        lane.queue.shift();
        this.queuedCount -= 1;
        if (lane.awaiting) {
          clearTimeout(lane.awaiting.timer);
          lane.awaiting = undefined;
        }
        lane.head = msg;
        this.heads += 1;
        this.run(lane, msg);
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Whether a key lane's message must wait: an earlier message of its partition has an unknown key. */
  private behindUnkeyed(lane: Lane, msg: LaneMessage): boolean {
    if (lane.key.startsWith(UNKEYED)) return false;
    const pending = this.unkeyed.get(msg.partition);
    if (!pending) return false;
    for (const seq of pending) if (seq < msg.seq) return true;
    return false;
  }

  /** An unkeyed message is done (or given back): the lanes it held may go on. */
  private unkeyedDone(msg: LaneMessage): void {
    const pending = this.unkeyed.get(msg.partition);
    if (!pending?.delete(msg.seq)) return;
    if (pending.size === 0) this.unkeyed.delete(msg.partition);
    for (const lane of this.afterUnkeyed.splice(0)) this.schedule(lane);
  }

  /** Runs one attempt of a lane's head. */
  private run(lane: Lane, msg: LaneMessage): void {
    const retry = this.policy.retry;
    const deferred = msg.deferredFailure;
    if (deferred && retry) {
      // The fence opened again with the pin kept: the failure is settled now, as it would have been.
      msg.deferredFailure = undefined;
      return this.afterFailure(lane, msg, deferred.error, retry, deferred.runs);
    }
    this.executing += 1;
    msg.attempts += 1;
    const counter = retry?.attempts;
    msg.countedAtStart = undefined;
    if (retry?.exact && counter?.begin) {
      // Counted already, but fenced when the count came back: it starts now (the fence was just asked).
      if (msg.countedAhead !== undefined) return this.attemptCounted(lane, msg);
      // Counted before it runs: a crash during the attempt cannot leave it uncounted. A message whose
      // attempts were used up elsewhere is not run again here (as for a redelivery below); a blocked
      // one retried in place still runs, and is counted.
      // Every start is counted ahead, so the record is the count: the delivery count is not, since a
      // message given back unstarted (a drain, a lost pin, a rebalance) comes back with it raised
      // (autoscale soak seed 101: two good messages dead-lettered without ever running).
      const earlierRuns = msg.attempts - 1;
      // Only its first attempt here may be refused: once refused it is blocked (or dead-lettered), and a
      // blocked message is retried in place whatever its count (a fix downstream unblocks it).
      const mayRefuse = msg.attempts === 1 && !msg.reportedBlocked;
      void counter.begin(msg, earlierRuns, mayRefuse ? retry.maxDeliver : Infinity).then(
        ({ counted, began }) => {
          if (!began) return this.afterCheck(lane, msg, retry, counted);
          msg.countedAhead = counted + 1;
          this.startAfterCount(lane, msg);
        },
        (error: unknown) => {
          // Not counted ahead: its failure is counted as without exactAttempts.
          this.events.onAttemptsUnrecorded?.(msg, error);
          this.startAfterCount(lane, msg);
        },
      );
      return;
    }
    if (retry && counter?.recorded && msg.attempts === 1 && !msg.reportedBlocked && msg.info.deliveryCount > 1) {
      // A redelivery: another instance may have used its attempts up (and been stalled or cut before it
      // dead-lettered it). Then it is not run again: it goes where its last failure would have sent it.
      void counter.recorded(msg).then(
        (recorded) => this.afterCheck(lane, msg, retry, recorded),
        () => this.afterCheck(lane, msg, retry, 0),
      );
      return;
    }
    this.attempt(lane, msg);
  }

  /**
   * A count was awaited before this attempt (read, or written ahead): the instance may have
   * been fenced meanwhile (a process stopped across the request, its pin or lease run out),
   * so the fence is asked again before the handler starts. Fenced: the attempt is not made,
   * and the message waits as a due retry, for the fence to open or for its give-back.
   */
  private startAfterCount(lane: Lane, msg: LaneMessage): void {
    if (!this.startsPaused && !this.yielding && (!this.policy.mayStart || this.policy.mayStart())) return this.attemptCounted(lane, msg);
    this.executing -= 1;
    msg.attempts -= 1;
    if (this.stopping || this.yielding) {
      // A drain or a give-back began meanwhile and already gave back the heads waiting to start:
      // this one goes back too, and its count ahead is taken back.
      msg.nak();
      this.uncount(msg);
      return this.complete(lane, msg);
    }
    this.retries.unshift(lane);
    this.fenceWait();
  }

  /**
   * A message counted ahead goes back without having run: its count is taken back after
   * its nak (so give-backs stay in stream order), and a drain waits for that. Should the
   * next owner count it first, the record stays one higher (one start fewer, never more).
   */
  private uncount(msg: LaneMessage): void {
    const counted = msg.countedAhead;
    msg.countedAhead = undefined;
    const counter = this.policy.retry?.attempts;
    if (counted === undefined || !counter?.uncount) return;
    const taken = counter.uncount(msg, counted - 1).catch((error: unknown) => this.events.onAttemptsUnrecorded?.(msg, error));
    this.uncounting.add(taken);
    void taken.finally(() => this.uncounting.delete(taken));
  }

  /** Runs an attempt, counted ahead when it was (exactAttempts). */
  private attemptCounted(lane: Lane, msg: LaneMessage): void {
    msg.countedAtStart = msg.countedAhead;
    msg.countedAhead = undefined;
    this.attempt(lane, msg);
  }

  /** The count of a redelivered message was read: run it, or, with its attempts used up, settle it as its last failure would. */
  private afterCheck(lane: Lane, msg: LaneMessage, retry: RetryPolicy, recorded: number): void {
    if (recorded < retry.maxDeliver) return this.startAfterCount(lane, msg);
    this.executing -= 1;
    msg.attempts -= 1;
    const error = new ConsumerGroupError("HANDLER_FAILED", `its ${recorded} failed attempts (maxDeliver ${retry.maxDeliver}) were made by other instances before this redelivery; it is not run again`);
    this.afterFailure(lane, msg, error, retry, recorded);
    this.pump();
  }

  /**
   * The handler of an attempt returned (or threw, or its promise settled): its slot is
   * free before its message is settled, so settling it starts the lane's next message
   * in the same turn. (A synchronous handler finishes inside pump(): the running loop
   * starts the next message, and the acks of a whole batch leave in one socket write.)
   */
  private finished(lane: Lane, msg: LaneMessage, started: number, failure: { error: unknown } | undefined): void {
    this.executing -= 1;
    if (failure) this.failed(lane, msg, failure.error);
    else this.succeeded(lane, msg, started);
    this.pump();
  }

  /** Whether a lane keeps its order when a message fails or is nak'ed: all but Go's serial mode without retries. */
  private get ordered(): boolean {
    return this.policy.mode !== "serial" || this.policy.retry !== undefined;
  }

  /** The lane's head is done with (settled, or given back). */
  private complete(lane: Lane, msg: LaneMessage): void {
    if (lane.head !== msg) return;
    if (msg.keyError !== undefined) this.unkeyedDone(msg);
    if (msg.reportedBlocked) this.unblocked(lane, msg);
    const settlement = msg.settlement;
    const pending = msg.pendingRelease;
    if (pending) {
      // A dead-letter release waited for this attempt, and it did not fail.
      msg.pendingRelease = undefined;
      pending.resolve(settlement === "ack" ? "handled" : settlement === "term" ? "dead_lettered" : "given_back");
    }
    if (settlement === "ack" || settlement === "term") {
      this.settled.remember(msg.seq, settlement);
      // A dead letter whose terminate was not confirmed may come back (its consumer was deleted meanwhile,
      // say): its count stays, so it is dead-lettered on its next failure instead of after maxDeliver more.
      if (!msg.termUnconfirmed) this.policy.retry?.attempts?.settled(msg.seq)?.catch((error: unknown) => this.events.onAttemptsUnrecorded?.(msg, error));
    } else if (settlement === "nak" && !this.stopping && this.ordered) this.awaitRedelivery(lane, msg);
    clearTimeout(msg.retryTimer);
    msg.retryTimer = undefined;
    lane.head = undefined;
    this.heads -= 1;
    this.schedule(lane);
    if (!this.sweeper.running || this.lanes.size > IDLE_LANES_KEPT) this.forgetIfIdle(lane);
    if (this.heads === 0 && this.idle.length > 0) for (const wake of this.idle.splice(0)) wake();
    this.hooks.onRoom?.();
    this.pump();
  }

  /**
   * Holds a lane until its nak'ed message comes back. If it never does (the server
   * stopped redelivering it), the lane moves on after the nak delay plus two AckWaits.
   */
  private awaitRedelivery(lane: Lane, msg: LaneMessage): void {
    const ackWaitMs = this.policy.workingIntervalMs > 0 ? 2 * this.policy.workingIntervalMs : 30_000;
    const timer = setTimeout(() => {
      if (lane.awaiting?.timer !== timer) return;
      lane.awaiting = undefined;
      this.schedule(lane);
      this.forgetIfIdle(lane);
      this.pump();
    }, msg.nakDelayMs + 2 * ackWaitMs + 1000);
    lane.awaiting = { seq: msg.seq, timer };
  }

  private forgetIfIdle(lane: Lane): void {
    if (!lane.head && !lane.awaiting && lane.queue.length === 0 && this.lanes.get(lane.key) === lane) this.lanes.delete(lane.key);
  }

  /** Runs the handler once; {@link finished} takes its outcome, now or when its promise settles. */
  private attempt(lane: Lane, msg: LaneMessage): void {
    const started = this.events.onHandled ? performance.now() : 0;
    if (msg.keyError !== undefined) {
      // The key function failed when it arrived: that is this message's first failed attempt.
      // A retry asks it again; once it answers, the handler runs (in the unkeyed lane, which
      // holds the partition's later messages back: their key may be this one's).
      let keyError: unknown = msg.attempts === 1 ? msg.keyError : undefined;
      if (keyError === undefined) {
        try {
          this.policy.keyOf(msg);
        } catch (error) {
          keyError = error;
        }
      }
      if (keyError !== undefined) return this.finished(lane, msg, started, { error: keyFailure(msg, keyError) });
    }
    let result: void | Promise<void>;
    try {
      result = this.handler(msg);
    } catch (error) {
      return this.finished(lane, msg, started, { error });
    }
    if (!isPromiseLike(result)) return this.finished(lane, msg, started, undefined);
    // One reaction per message: it settles the message and starts the next.
    Promise.resolve(result).then(
      () => this.finished(lane, msg, started, undefined),
      (error: unknown) => this.finished(lane, msg, started, { error }),
    );
  }

  private succeeded(lane: Lane, msg: LaneMessage, started: number): void {
    if (msg.settlement === undefined && this.stopping) {
      // While draining, the consumer may be deleted right after: wait for the server to
      // confirm the ack, or it could be lost and the message handled again elsewhere.
      void msg.ackAck().then(
        () => {
          this.events.onHandled?.(msg, performance.now() - started);
          this.complete(lane, msg);
        },
        (error: unknown) => {
          this.events.onAckFailed?.(msg, error);
          this.complete(lane, msg);
        },
      );
      return;
    }
    if (msg.settlement === undefined) {
      this.hooks.beforeAck?.();
      msg.ack();
    }
    this.events.onHandled?.(msg, performance.now() - started);
    this.complete(lane, msg);
  }

  /** An attempt failed: retry later without holding a slot, dead-letter, block, or nak (Go's serial mode). */
  private failed(lane: Lane, msg: LaneMessage, error: unknown): void {
    const attempt = msg.attempts;
    this.events.onHandlerError(error, msg, attempt);
    if (msg.settlement !== undefined) return this.complete(lane, msg); // the handler settled it before throwing
    const retry = this.policy.retry;
    if (!retry) {
      msg.nak(this.stopping || this.yielding ? undefined : this.policy.nakDelayMs?.(msg.info.deliveryCount));
      return this.complete(lane, msg);
    }
    // Runs in all, the server's earlier deliveries included (give-backs and failovers count, as
    // they do for the consumer's max_deliver): a poison message is dead-lettered before the server
    // could stop delivering it, whichever instances tried it.
    const localRuns = msg.info.deliveryCount - 1 + attempt;
    // Counted when it started (exactAttempts): nothing more to write.
    if (msg.countedAtStart !== undefined) return this.afterFailure(lane, msg, error, retry, msg.countedAtStart);
    const counter = retry.attempts;
    if (!counter) return this.afterFailure(lane, msg, error, retry, localRuns);
    // The count is shared (a rebalance starts the server's over): the head holds its lane, not a
    // handler slot, meanwhile, and a drain waits for it like for a running handler.
    void counter.failed(msg, localRuns).then(
      (runs) => this.afterFailure(lane, msg, error, retry, runs),
      (countError: unknown) => {
        this.events.onAttemptsUnrecorded?.(msg, countError);
        this.afterFailure(lane, msg, error, retry, localRuns);
      },
    );
  }

  /**
   * A failed attempt was counted (`runs` in all): dead-letter it, retry it later, or,
   * while draining or after losing the pin, give it back. A message whose attempts are
   * used up is dead-lettered even then: given back, its next owner (or the newly pinned
   * instance) would run it once more. It is still this instance's on the server until
   * settled (it keeps getting working()), so nobody else runs it meanwhile.
   */
  private afterFailure(lane: Lane, msg: LaneMessage, error: unknown, retry: RetryPolicy, runs: number): void {
    msg.runs = runs;
    msg.lastError = error;
    if (this.ackWaitLapsed(msg)) {
      // Stopped or starved past AckWait during the attempt: the server may have given the message
      // to another instance, which reads the count just written. Settling it here would terminate it
      // under that instance and delete its count (autoscale soak seeds 505 and 13: dead-lettered
      // twice, 5 and 6 attempts). With the pin moved, or while draining (the partition may have
      // another owner already: review finding), it is left to the server's redelivery; while
      // fenced (the pin not yet known), the decision waits for the fence.
      if (this.yielding || this.stopping) return this.leaveToNewOwner(lane, msg);
      if (this.policy.mayStart && !this.policy.mayStart()) {
        msg.deferredFailure = { error, runs };
        this.retries.push(lane);
        return this.fenceWait();
      }
    }
    const pending = msg.pendingRelease;
    msg.pendingRelease = undefined;
    const exhausted = runs >= retry.maxDeliver || pending !== undefined;
    // A release to a dead-letter subject sends its failed attempt there; otherwise the last allowed attempt goes to the configured one.
    const target = pending?.target ?? (exhausted ? retry.deadLetter : undefined);
    if (target) {
      this.deadLetter(
        lane,
        msg,
        error,
        target,
        runs,
        () => pending?.resolve("dead_lettered"),
        (publishError) => {
          pending?.reject(asError(publishError));
          this.backOff(lane, msg, retry.backoffMs(msg.attempts));
        },
      );
      return;
    }
    if (this.stopping || this.yielding) {
      msg.nak();
      return this.complete(lane, msg);
    }
    if (exhausted && msg.reportedBlocked) {
      // Blocked: still retried in place (a fix downstream unblocks the key), but less and less often.
      msg.blockedRetries += 1;
      // A retry release that came while this attempt ran: the next one starts at once.
      const delay = msg.retryNow ? 0 : blockedRetryDelayMs(retry.backoffMs(msg.attempts), msg.blockedRetries);
      msg.retryNow = false;
      return this.backOff(lane, msg, delay);
    }
    if (exhausted) {
      msg.reportedBlocked = true;
      msg.blockedSince = Date.now();
      this.events.onBlocked(this.publicKey(lane.key), msg, error);
      // A key function that keeps failing for a message means it has no key to order by: it
      // stays blocked in the lane of such messages (with those behind it), and its partition's
      // keyed messages go on.
      if (msg.keyError !== undefined) for (const held of [msg, ...lane.queue]) this.unkeyedDone(held);
      this.parkQueue(lane);
    }
    this.backOff(lane, msg, retry.backoffMs(msg.attempts));
  }

  /** A failed message the newly pinned instance, or the partition's next owner, has (see afterFailure): neither settled nor given back here. */
  private leaveToNewOwner(lane: Lane, msg: LaneMessage): void {
    msg.deferredFailure = undefined;
    const pending = msg.pendingRelease;
    msg.pendingRelease = undefined;
    pending?.reject(new ConsumerGroupError("STOPPED", "this instance lost its pin while the attempt ran: the newly pinned instance handles the message"));
    this.complete(lane, msg);
  }

  /** Whether AckWait passed with no beat for `msg` from here, so the server may have redelivered it elsewhere. */
  private ackWaitLapsed(msg: LaneMessage): boolean {
    const interval = this.policy.workingIntervalMs;
    return msg.ackWaitLapsed || (interval > 0 && performance.now() - msg.lastBeatAt > 2 * interval);
  }

  /** Publishes the lane's head to `target` and terminates it; then `stored`, or `failed` when the publish fails. */
  private deadLetter(lane: Lane, msg: LaneMessage, error: unknown, target: DeadLetter, runs: number, stored: () => void, failed: (publishError: unknown) => void): void {
    // The publish holds the lane, not a handler slot.
    void sendToDeadLetter(target, msg, this.keyHeader(lane.key, msg), runs, error).then(
      (confirmed) => {
        msg.termUnconfirmed = confirmed === false;
        this.events.onDeadLettered(msg, error, target.subject);
        this.complete(lane, msg);
        stored();
      },
      (dlqError: unknown) => {
        this.events.onHandlerError(dlqError, msg, msg.attempts);
        failed(dlqError);
      },
    );
  }

  /** The lane's public name: its key, partition or "" (see {@link ParkedKey.key}). */
  private publicKey(laneKey: string): string {
    return laneKey.slice(1);
  }

  /** Counts `msg` (just queued behind a blocked head) as parked, if the parking limits allow: true when it was. */
  private park(lane: Lane, msg: LaneMessage): boolean {
    const limits = this.policy.parking;
    if (!limits || this.policy.mode === "serial") return false;
    const bytes = msg.data.length;
    if (this.parkedCount + 1 > limits.maxMessages || this.parkedByteCount + bytes > limits.maxBytes) {
      if (!this.parkingFullReported) {
        this.parkingFullReported = true;
        this.events.onParkingFull?.(this.parkedCount, this.parkedByteCount);
      }
      return false;
    }
    lane.parked += 1;
    lane.parkedBytes += bytes;
    this.parkedCount += 1;
    this.parkedByteCount += bytes;
    return true;
  }

  /** The lane's head just blocked: what waits behind it is parked (no longer holds buffer slots). */
  private parkQueue(lane: Lane): void {
    const before = lane.parked;
    for (const queued of lane.queue.slice(lane.parked)) {
      if (!this.park(lane, queued)) break;
    }
    this.queuedCount -= lane.parked - before;
    if (lane.parked > before) this.hooks.onRoom?.();
  }

  /**
   * A blocked head is done with: the messages parked behind it take buffer slots again,
   * in order, and the room they leave goes to the other blocked lanes' messages that
   * took buffer slots while parking was full.
   */
  private unblocked(lane: Lane, msg: LaneMessage): void {
    this.queuedCount += lane.parked;
    this.parkedCount -= lane.parked;
    this.parkedByteCount -= lane.parkedBytes;
    lane.parked = 0;
    lane.parkedBytes = 0;
    const limits = this.policy.parking;
    if (limits && this.parkedCount < limits.maxMessages && this.parkedByteCount < limits.maxBytes) {
      this.parkingFullReported = false;
      for (const other of this.lanes.values()) {
        if (other !== lane && other.head?.reportedBlocked && other.parked < other.queue.length) this.parkQueue(other);
      }
    }
    const settlement = msg.settlement;
    this.events.onUnblocked?.(this.publicKey(lane.key), msg, settlement === "ack" ? "handled" : settlement === "term" ? "dead_lettered" : "given_back");
  }

  /** The blocked lanes, in no particular order. */
  parkedKeys(): ParkedKey[] {
    const keys: ParkedKey[] = [];
    for (const lane of this.lanes.values()) {
      const head = lane.head;
      if (!head?.reportedBlocked) continue;
      keys.push({
        key: this.publicKey(lane.key),
        mode: this.policy.mode,
        partition: head.partition,
        seq: head.seq,
        subject: head.subject,
        attempts: head.runs,
        parkedMessages: lane.queue.length,
        since: new Date(head.blockedSince).toISOString(),
        error: head.lastError instanceof Error ? head.lastError.message : String(head.lastError),
      });
    }
    return keys;
  }

  /**
   * Releases the blocked message with stream sequence `seq`: tries it again now, or
   * dead-letters it. An attempt that runs now finishes first (dead-letter: if it fails,
   * it goes to the target instead of blocking again).
   *
   * @returns undefined when no blocked lane's head has that sequence; else what became
   *   of it: `retrying`, or for a dead-letter release `dead_lettered` once stored (an
   *   attempt running then is waited for: `handled` when it succeeded instead)
   * @throws the dead-letter publish's error (the message stays blocked)
   */
  async release(seq: number, action: ReleaseAction): Promise<ReleaseResult | undefined> {
    if (this.stopping || this.yielding) return undefined;
    for (const lane of this.lanes.values()) {
      const head = lane.head;
      if (head?.seq !== seq || !head.reportedBlocked) continue;
      const waiting = this.waitingForRetry(lane, head);
      if (!waiting) {
        // Its attempt runs (or is being counted): its outcome decides.
        if (action.kind === "retry") {
          head.retryNow = true;
          return "retrying";
        }
        head.pendingRelease ??= pendingRelease(action.target);
        return head.pendingRelease.promise;
      }
      clearTimeout(head.retryTimer);
      head.retryTimer = undefined;
      const due = this.retries.indexOf(lane);
      if (due !== -1) this.retries.splice(due, 1);
      if (action.kind === "retry") {
        head.blockedRetries = 0;
        this.retries.push(lane);
        this.pump();
        return "retrying";
      }
      const error = head.lastError ?? new Error("released to a dead-letter subject");
      return new Promise<ReleaseResult>((resolve, reject) => {
        // Meanwhile it counts as in progress: a drain waits for the publish, a give-back leaves it.
        this.deadLetter(
          lane,
          head,
          error,
          action.target,
          head.runs,
          () => resolve("dead_lettered"),
          (publishError) => {
            this.backOff(lane, head, BLOCKED_RETRY_CAP_MS);
            reject(asError(publishError));
          },
        );
      });
    }
    return undefined;
  }

  /** Whether a lane's head waits for its next attempt: backing off, or due and queued for a handler slot. */
  private waitingForRetry(lane: Lane, head: LaneMessage): boolean {
    return head.retryTimer !== undefined || this.retries.includes(lane);
  }

  /** The lane's head tries again after `ms`; meanwhile its slot is free for other lanes. */
  private backOff(lane: Lane, msg: LaneMessage, ms: number): void {
    if (this.stopping) {
      msg.nak();
      return this.complete(lane, msg);
    }
    msg.retryTimer = setTimeout(() => {
      msg.retryTimer = undefined;
      if (lane.head !== msg) return;
      if (this.stopping || this.yielding) {
        msg.nak();
        return this.complete(lane, msg);
      }
      this.retries.push(lane);
      this.pump();
    }, ms);
  }

  /** The key a dead letter records: the lane's in `key` mode, else the key function's ("" when it fails). */
  private keyHeader(laneKey: string, msg: ConsumerGroupMessage): string {
    if (this.policy.mode === "key") return laneKey.startsWith(UNKEYED) ? "" : laneKey.slice(1);
    try {
      return this.policy.keyOf(msg);
    } catch {
      return "";
    }
  }

  /**
   * Stops starting messages and waits for the ones in progress; what waits for a
   * retry is given back at once. If handlers still run after `timeoutMs`, reports it,
   * aborts their `msg.signal`, and keeps waiting for them (their messages keep getting
   * `working()`): a message is never released while its handler runs. `timeoutMs` 0
   * (no handoff, Go's behaviour) does not wait at all. Then nak's everything buffered
   * (and whatever arrived meanwhile), in stream order, so it is redelivered at once.
   *
   * @param giveBackAfter - nothing is nak'ed before it settles (the consume's subscription is gone:
   *   a redelivery the server tried to send to it would go to the back of its queue)
   * @returns true when nothing was left running at `timeoutMs`
   */
  async drain(timeoutMs: number, giveBackAfter?: Promise<unknown>): Promise<boolean> {
    this.stopping = true;
    clearTimeout(this.fenceTimer);
    this.fenceTimer = undefined;
    this.ready.length = 0;
    // Heads waiting for a retry (backing off, or due and queued for a slot) go back now: nothing runs them any more.
    for (const lane of [...this.lanes.values()]) {
      const head = lane.head;
      if (head && this.waitingForRetry(lane, head)) {
        if (head.deferredFailure !== undefined) {
          this.leaveToNewOwner(lane, head);
          continue;
        }
        head.nak();
        this.uncount(head);
        this.complete(lane, head);
      }
    }
    this.retries.length = 0;
    const started = performance.now();
    let finished = this.heads === 0;
    if (!finished && timeoutMs > 0) {
      const idle = new Promise<void>((resolve) => this.idle.push(resolve));
      let timer: NodeJS.Timeout | undefined;
      finished = await Promise.race([idle.then(() => true), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)))]);
      clearTimeout(timer);
      if (!finished) {
        this.events.onDrainTimeout?.(this.executing, Math.round(performance.now() - started));
        this.handlerAbort.abort(new ConsumerGroupError("STOPPED", `the drain timeout (${timeoutMs} ms) passed while the handler still ran`));
        await idle;
      }
    }
    await giveBackAfter?.catch(() => undefined);
    // Give back what was not started in stream order: the server redelivers naks in the
    // order it gets them, and the next owner must get each key's messages in order.
    const back: { seq: number; nak(): void }[] = this.late.splice(0);
    for (const lane of this.lanes.values()) {
      back.push(...lane.queue.splice(0));
      clearTimeout(lane.awaiting?.timer);
      lane.awaiting = undefined;
      lane.parked = 0;
      lane.parkedBytes = 0;
    }
    this.queuedCount = 0;
    this.parkedCount = 0;
    this.parkedByteCount = 0;
    back.sort((a, b) => a.seq - b.seq);
    for (const msg of back) msg.nak();
    await Promise.all([...this.uncounting]);
    this.drained = true;
    this.sweeper.stop();
    return finished;
  }
}

/** The longest wait between the attempts of a blocked message (unless its configured backoff is longer). */
export const BLOCKED_RETRY_CAP_MS = 30_000;

/**
 * The wait before the next attempt of a blocked message (failed `maxDeliver` times, no
 * dead-letter subject): its backoff doubled for each attempt since it blocked, up to
 * {@link BLOCKED_RETRY_CAP_MS} (or its backoff, when that is longer).
 *
 * @param backoffMs - its configured backoff for the attempt just made
 * @param blockedRetries - attempts failed since it blocked, from 1
 */
export function blockedRetryDelayMs(backoffMs: number, blockedRetries: number): number {
  const cap = Math.max(backoffMs, BLOCKED_RETRY_CAP_MS);
  return Math.min(cap, Math.max(1, backoffMs) * 2 ** Math.min(blockedRetries, 30));
}

/** A dead-letter release that waits for the attempt running now. */
function pendingRelease(target: DeadLetter): PendingRelease {
  let resolve: PendingRelease["resolve"] = () => undefined;
  let reject: PendingRelease["reject"] = () => undefined;
  const promise = new Promise<"dead_lettered" | "handled" | "given_back">((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // Its caller may have stopped waiting (a release request that timed out): the outcome is in the status events then.
  promise.catch(() => undefined);
  return { target, promise, resolve, reject };
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

function keyFailure(msg: ConsumerGroupMessage, error: unknown): ConsumerGroupError {
  const detail = error instanceof Error ? error.message : String(error);
  return new ConsumerGroupError("KEY_FAILED", `keyOf threw for the message on "${msg.subject}" (seq ${msg.seq}): ${detail}; it goes through the failure policy`, { cause: error });
}
