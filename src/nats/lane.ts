/**
 * A lane: the messages of one key (or partition, or of the whole instance in `serial`
 * mode) in stream order, of which one at a time is worked on.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { DeliveryNumbers } from "./ack-subject.js";
import type { DeadLetter } from "./dead-letter.js";
import { ConsumerGroupMessage } from "./message.js";

/** The lane key prefix of messages whose key could not be computed (one such lane per partition). */
export const UNKEYED = "!";

/** A message in a lane, with what the lane needs to know about it. */
export class LaneMessage extends ConsumerGroupMessage {
  /** The delay of its nak, when its handler nak'ed it. */
  nakDelayMs = 0;
  /**
   * When the server last heard of it: the last working(), or at first the dispatcher's
   * clock when it arrived (no later than its delivery, so beats come early, never late).
   */
  lastBeatAt: number;
  /**
   * The server's AckWait passed with no beat from here (the process was stopped or
   * starved meanwhile): the server may have given it to another instance since.
   */
  ackWaitLapsed = false;
  /**
   * A failure decided while the instance was fenced after such a lapse: settled (retried,
   * dead-lettered) once the fence opens again, or left to the server if the pin moved.
   */
  deferredFailure: { error: unknown; runs: number } | undefined = undefined;
  /** Handler attempts made here. */
  attempts = 0;
  /** The error of the key function, when it failed for this message (`key` mode). */
  keyError: unknown = undefined;
  /** The next attempt's timer, while it backs off. */
  retryTimer: NodeJS.Timeout | undefined;
  /** The last failure, while it backs off. */
  lastError: unknown = undefined;
  /** Whether its lane was reported blocked. */
  reportedBlocked = false;
  /** Attempts failed since it blocked (each waits twice as long as the one before). */
  blockedRetries = 0;
  /** Its failed attempts in all, as last counted (the shared count, or the ones known here). */
  runs = 0;
  /** When its lane was reported blocked (epoch ms). */
  blockedSince = 0;
  /** Set by a dead-letter release while its attempt runs: if that attempt fails, it goes there instead of blocking again. */
  pendingRelease: PendingRelease | undefined = undefined;
  /** Set by a retry release while its attempt runs (or is counted): if it fails, the next one starts at once. */
  retryNow = false;
  /** Dead-lettered, but the server did not confirm its terminate: it may come back, so its attempt count is kept. */
  termUnconfirmed = false;
  /**
   * `retry.exactAttempts`: the attempt that runs now was counted before it started, as
   * this many in all; its failure is not counted again. Undefined otherwise.
   */
  countedAtStart: number | undefined = undefined;
  /**
   * `retry.exactAttempts`: its next attempt here was counted already (as this many in all),
   * but did not start: the instance was fenced when the count came back. It starts without
   * being counted again.
   */
  countedAhead: number | undefined = undefined;

  /**
   * @param arrivedBy - a clock reading no earlier than its delivery
   * @param delivery - its stream sequence and delivery count, read from the ack subject once (nats.js's delivery info is parsed only if the handler asks)
   */
  constructor(
    msg: JsMsg,
    partition: number,
    signal: AbortSignal,
    arrivedBy: number,
    private readonly delivery: DeliveryNumbers,
  ) {
    super(msg, partition, signal);
    this.lastBeatAt = arrivedBy;
  }

  override get seq(): number {
    return this.delivery.streamSequence;
  }

  override get redelivered(): boolean {
    return this.delivery.deliveryCount > 1;
  }

  override nak(delayMs?: number): void {
    if (this.settlement === undefined) this.nakDelayMs = delayMs ?? 0;
    super.nak(delayMs);
  }
}

/** A dead-letter release waiting for the outcome of the attempt that runs now. */
export interface PendingRelease {
  /** Where the message goes if the attempt fails. */
  target: DeadLetter;
  /** Settles with what became of the message. */
  promise: Promise<"dead_lettered" | "handled" | "given_back">;
  resolve(result: "dead_lettered" | "handled" | "given_back"): void;
  reject(error: Error): void;
}

/** One lane's state. */
export interface Lane {
  /** Its key in the dispatcher's map. */
  readonly key: string;
  /** In stream order. */
  queue: LaneMessage[];
  /** The message this lane works on: its handler runs, or it waits for its next attempt. */
  head: LaneMessage | undefined;
  /** True while the lane is in the ready list. */
  ready: boolean;
  /**
   * A message of this lane was nak'ed: the lane waits for its redelivery (which sorts
   * in front of the rest) instead of starting the next message, so order holds.
   * The timer gives up waiting if the server never redelivers it (e.g. its max_deliver ran out).
   */
  awaiting: { seq: number; timer: NodeJS.Timeout } | undefined;
  /** Messages of its queue that are parked (held without a buffer slot while its head is blocked). */
  parked: number;
  /** Their bytes. */
  parkedBytes: number;
}

/** A lane with nothing in it. */
export function emptyLane(key: string): Lane {
  return { key, queue: [], head: undefined, ready: false, awaiting: undefined, parked: 0, parkedBytes: 0 };
}

/**
 * Puts `msg` into the lane's queue at its place in stream order. A message already
 * queued (a redelivery) is replaced by its fresher delivery instead.
 *
 * @returns true when it was added, false when it replaced its earlier delivery
 */
export function enqueueInStreamOrder(lane: Lane, msg: LaneMessage): boolean {
  const queue = lane.queue;
  // Only a message at or before the tail can be in the queue already.
  const tail = queue[queue.length - 1];
  if (tail !== undefined && tail.seq >= msg.seq) {
    const known = queue.findIndex((x) => x.seq === msg.seq);
    if (known !== -1) {
      queue[known] = msg;
      return false;
    }
  }
  let at = queue.length;
  while (at > 0 && (queue[at - 1]?.seq ?? 0) > msg.seq) at--;
  if (at === queue.length) queue.push(msg);
  else queue.splice(at, 0, msg);
  return true;
}

/** Whether the lane's next message may start: it has one, works on none, and waits for no redelivery before it. */
export function laneCanStart(lane: Lane): boolean {
  const next = lane.queue[0];
  return lane.head === undefined && next !== undefined && !(lane.awaiting && next.seq > lane.awaiting.seq);
}
