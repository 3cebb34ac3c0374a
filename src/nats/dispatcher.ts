/**
 * Ordered concurrency inside one member instance. Messages go into lanes (one lane
 * in `serial` mode, one per partition or per key otherwise). Lanes run in parallel
 * up to `maxInFlight`; within a lane, a message starts only after the previous one's
 * handler succeeded and its ack was sent (or it was dead-lettered). A lane is kept in
 * stream-sequence order, so a redelivered message goes back in front of later ones.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { headers as createHeaders, type MsgHdrs } from "@nats-io/transport-node";
import { ConsumerGroupMessage, partitionOfStoredSubject } from "./message.js";

/** How a member instance runs handlers. */
export type ConcurrencyMode = "serial" | "partition" | "key";

/** Where messages that keep failing go. */
export interface DeadLetter {
  subject: string;
  /** Stores the dead letter (resolves once it is stored). */
  publish(subject: string, payload: Uint8Array, headers: MsgHdrs): Promise<void>;
}

/** What to do when a handler throws. */
export interface RetryPolicy {
  /** Attempts in place before the message is dead-lettered (or its lane blocks). */
  maxDeliver: number;
  /** The wait before attempt `attempt + 1`. */
  backoffMs(attempt: number): number;
  deadLetter?: DeadLetter;
}

/** The dispatch settings of an instance. */
export interface DispatchPolicy {
  mode: ConcurrencyMode;
  maxInFlight: number;
  /** The lane key of a message in `key` mode. */
  keyOf(msg: ConsumerGroupMessage): string;
  /** Undefined: a failed message is nak'ed at once for redelivery (Go's behaviour). */
  retry?: RetryPolicy;
  /** Send `working()` this often while a message is in flight (0: never). */
  workingIntervalMs: number;
}

/** What the dispatcher reports. */
export interface DispatchEvents {
  onHandlerError(error: unknown, msg: ConsumerGroupMessage, attempt: number): void;
  onDeadLettered(msg: ConsumerGroupMessage, error: unknown, subject: string): void;
  onBlocked(lane: string, msg: ConsumerGroupMessage, error: unknown): void;
  onHandled(msg: ConsumerGroupMessage, durationMs: number): void;
  /** A message was delivered to this instance. */
  onReceived?(msg: ConsumerGroupMessage): void;
}

/** A handler. */
export type Handler = (msg: ConsumerGroupMessage) => void | Promise<void>;

interface Lane {
  key: string;
  queue: LaneMessage[];
  /** Stream sequences in `queue`: a redelivery is recognised without a scan. */
  queued: Set<number>;
  running: LaneMessage | undefined;
  /** True while the lane is in the ready list. */
  ready: boolean;
  /**
   * A message of this lane was nak'ed: the lane waits for its redelivery (which sorts
   * in front of the rest) instead of starting the next message, so order holds.
   * The timer gives up waiting if the server never redelivers it (e.g. its max_deliver ran out).
   */
  awaiting: { seq: number; timer: NodeJS.Timeout } | undefined;
}

/** A message in a lane: remembers the delay of a nak, to know how long its redelivery may take. */
class LaneMessage extends ConsumerGroupMessage {
  nakDelayMs = 0;
  /** When it was delivered: its AckWait runs from then, not from when its handler starts. */
  readonly receivedAt = performance.now();
  /** When the server last heard of it (delivery, or the last working()). */
  lastBeatAt = this.receivedAt;

  override nak(delayMs?: number): void {
    if (this.settlement === undefined) this.nakDelayMs = delayMs ?? 0;
    super.nak(delayMs);
  }
}

/** True for anything with a then method (an async handler's result, native promise or not). */
function isPromiseLike(value: unknown): value is PromiseLike<void> {
  return typeof (value as { then?: unknown } | null | undefined)?.then === "function";
}

/** How many settled stream sequences an instance remembers, to recognise late redeliveries of them. */
const SETTLED_MEMORY = 8192;

/** Header names of a dead letter. */
export const DeadLetterHeaders = {
  OriginStream: "Pcg-Origin-Stream",
  OriginSequence: "Pcg-Origin-Sequence",
  Partition: "Pcg-Partition",
  Key: "Pcg-Key",
  DeliveryCount: "Pcg-Delivery-Count",
  Error: "Pcg-Error",
  Subject: "Pcg-Subject",
} as const;

/**
 * The lanes of one consume. Not reusable after {@link drain}.
 */
export class Dispatcher {
  private readonly lanes = new Map<string, Lane>();
  private readonly ready: Lane[] = [];
  /**
   * Sequences acked or terminated here, in two generations of at most SETTLED_MEMORY
   * each (the older one is dropped when the newer fills): a late redelivery of one is
   * settled again, not handled again. Cheaper per message than evicting one by one.
   */
  private settled = new Map<number, "ack" | "term">();
  private settledBefore = new Map<number, "ack" | "term">();
  private inFlight = 0;
  private stopping = false;
  private readonly abort = new AbortController();
  private idle: (() => void)[] = [];
  /** Deliveries that arrived while draining, given back with the rest once the drain is over. */
  private readonly late: JsMsg[] = [];
  private drained = false;
  /** Set while nothing may start: the server is still delivering what it had queued for redelivery. */
  private holdTimer: NodeJS.Timeout | undefined;
  /** The consumer's max_ack_pending: the most that can be delivered and unacked at once. */
  ackPendingLimit = Number.POSITIVE_INFINITY;
  /** True while pump() runs: a handler that finishes synchronously must not start a nested pump. */
  private pumping = false;
  /** One timer sends working() for every running message (a timer per message costs more than the handlers). */
  private sweeper: NodeJS.Timeout | undefined;

  constructor(
    private readonly handler: Handler,
    private readonly policy: DispatchPolicy,
    private readonly events: DispatchEvents,
  ) {}

  /** Messages buffered plus in flight. */
  get size(): number {
    let n = 0;
    for (const lane of this.lanes.values()) n += lane.queue.length + (lane.running ? 1 : 0);
    return n;
  }

  /** Messages whose handler is running. */
  get running(): number {
    return this.inFlight;
  }

  /** Takes a delivered message. */
  push(m: JsMsg): void {
    // A redelivery that crossed our ack (sent before the ack arrived): settle it again, never handle it twice.
    const done = this.settled.get(m.seq) ?? this.settledBefore.get(m.seq);
    if (this.stopping) {
      if (done === "ack") m.ack();
      else if (done === "term") m.term();
      else if (this.drained) m.nak();
      else this.late.push(m);
      return;
    }
    const msg = new LaneMessage(m, partitionOfStoredSubject(m.subject));
    this.events.onReceived?.(msg);
    if (done === "ack") return m.ack();
    if (done === "term") return m.term();
    const key = this.laneOf(msg);
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { key, queue: [], queued: new Set(), running: undefined, ready: false, awaiting: undefined };
      this.lanes.set(key, lane);
    }
    // A redelivery of what is running: the running copy settles it (unless that copy was nak'ed: then this is its retry).
    if (lane.running?.seq === msg.seq && lane.running.settlement !== "nak") return;
    if (lane.queued.has(msg.seq)) {
      lane.queue[lane.queue.findIndex((x) => x.seq === msg.seq)] = msg; // keep the freshest delivery
      return;
    }
    lane.queued.add(msg.seq);
    let at = lane.queue.length;
    while (at > 0 && (lane.queue[at - 1]?.seq ?? 0) > msg.seq) at--;
    if (at === lane.queue.length) lane.queue.push(msg);
    else lane.queue.splice(at, 0, msg);
    this.schedule(lane);
    // The server sends fresh messages only once its redelivery queue is empty.
    // (or when the consumer's max_ack_pending is reached: then nothing else can come).
    if (this.holdTimer && (msg.info.deliveryCount === 1 || this.size >= this.ackPendingLimit)) this.release();
    this.pump();
  }

  /**
   * Starts nothing until the server has delivered everything it had queued for
   * redelivery (the first fresh message comes after all of them), or `maxMs` passed.
   * For an instance that just took the pin over: the server may have moved some of
   * what the previous instance gave back behind the rest of its redelivery queue
   * while that instance was still pinned, and the lanes put them back in order only
   * if they are all there before anything starts.
   */
  holdForRedeliveries(maxMs: number): void {
    if (this.stopping) return;
    clearTimeout(this.holdTimer);
    this.holdTimer = setTimeout(() => this.release(), maxMs);
  }

  private release(): void {
    clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
    this.pump();
  }

  /** Puts a lane in the ready list when its next message may start. */
  private schedule(lane: Lane): void {
    if (lane.ready || lane.running) return;
    const next = lane.queue[0];
    if (!next || (lane.awaiting && next.seq > lane.awaiting.seq)) return;
    lane.ready = true;
    this.ready.push(lane);
  }

  private laneOf(msg: ConsumerGroupMessage): string {
    switch (this.policy.mode) {
      case "serial":
        return "";
      case "partition":
        return `p${msg.partition}`;
      case "key":
        return `k${this.policy.keyOf(msg)}`;
    }
  }

  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (!this.stopping && !this.holdTimer && this.inFlight < this.policy.maxInFlight && this.ready.length > 0) {
        const lane = this.ready.shift();
        if (!lane) continue;
        lane.ready = false;
        const msg = lane.queue[0];
        if (lane.running || !msg || (lane.awaiting && msg.seq > lane.awaiting.seq)) continue;
        lane.queue.shift();
        lane.queued.delete(msg.seq);
        if (lane.awaiting) {
          clearTimeout(lane.awaiting.timer);
          lane.awaiting = undefined;
        }
        lane.running = msg;
        this.inFlight += 1;
        this.sweeper ??= this.startSweeper();
        // A handler that returns synchronously completes here, in the same tick as its
        // delivery, so the acks of a whole batch leave in one socket write.
        const pending = this.attempt(lane, msg);
        if (pending) void pending.finally(() => this.finish(lane, msg));
        else this.finish(lane, msg);
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Whether a lane keeps its order when a message fails or is nak'ed: all but Go's serial mode without retries. */
  private get ordered(): boolean {
    return this.policy.mode !== "serial" || this.policy.retry !== undefined;
  }

  private finish(lane: Lane, msg: LaneMessage): void {
    const settlement = msg.settlement;
    if (settlement === "ack" || settlement === "term") this.remember(msg.seq, settlement);
    else if (settlement === "nak" && !this.stopping && this.ordered) this.awaitRedelivery(lane, msg);
    lane.running = undefined;
    this.inFlight -= 1;
    this.schedule(lane);
    this.forgetIfIdle(lane);
    if (this.inFlight === 0 && this.idle.length > 0) for (const wake of this.idle.splice(0)) wake();
    // Inside pump() (a synchronous handler) the running loop starts the next message itself.
    this.pump();
  }

  /**
   * Every AckWait/4, sends working() for each running, unsettled message whose
   * server-side AckWait clock (from its delivery or its last working()) is at half:
   * a message that waited in its lane must not reach AckWait before the first beat.
   */
  private startSweeper(): NodeJS.Timeout | undefined {
    const every = this.policy.workingIntervalMs;
    if (every <= 0) return undefined;
    const timer = setInterval(() => {
      const now = performance.now();
      for (const lane of this.lanes.values()) {
        const msg = lane.running;
        if (msg && msg.settlement === undefined && now - msg.lastBeatAt >= every * 0.75) {
          msg.working();
          msg.lastBeatAt = now;
        }
      }
    }, every / 4);
    timer.unref();
    return timer;
  }

  private remember(seq: number, settlement: "ack" | "term"): void {
    this.settled.set(seq, settlement);
    if (this.settled.size >= SETTLED_MEMORY) {
      this.settledBefore = this.settled;
      this.settled = new Map();
    }
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
    if (!lane.running && !lane.awaiting && lane.queue.length === 0 && this.lanes.get(lane.key) === lane) this.lanes.delete(lane.key);
  }

  /**
   * Runs the handler once. Returns undefined when everything finished synchronously
   * (the common case for synchronous handlers), else a promise of the rest.
   */
  private attempt(lane: Lane, msg: LaneMessage): Promise<void> | undefined {
    const started = performance.now();
    let result: void | Promise<void>;
    try {
      result = this.handler(msg);
    } catch (error) {
      return this.recover(lane, msg, error);
    }
    if (isPromiseLike(result)) {
      return Promise.resolve(result).then(
        () => this.succeeded(msg, started),
        (error: unknown) => this.recover(lane, msg, error),
      );
    }
    return this.succeeded(msg, started);
  }

  private succeeded(msg: LaneMessage, started: number): Promise<void> | undefined {
    if (msg.settlement === undefined && this.stopping) {
      // While draining, the consumer may be deleted right after: wait for the server to
      // confirm the ack, or it could be lost and the message handled again elsewhere.
      return msg.ackAck().then(
        () => this.events.onHandled(msg, performance.now() - started),
        () => this.events.onHandled(msg, performance.now() - started),
      );
    }
    if (msg.settlement === undefined) msg.ack();
    this.events.onHandled(msg, performance.now() - started);
    return undefined;
  }

  /** The first attempt failed: retry in place (or nak, in Go's serial mode). */
  private async recover(lane: Lane, msg: LaneMessage, firstError: unknown): Promise<void> {
    const retry = this.policy.retry;
    let blocked = false;
    let error = firstError;
    for (let attempt = 1; ; attempt++) {
      this.events.onHandlerError(error, msg, attempt);
      if (msg.settlement !== undefined) return; // the handler settled it before throwing
      if (!retry || this.stopping) {
        msg.nak();
        return;
      }
      if (attempt >= retry.maxDeliver) {
        if (retry.deadLetter) {
          try {
            await this.deadLetter(retry.deadLetter, lane.key, msg, error, attempt);
            return;
          } catch (dlqError) {
            this.events.onHandlerError(dlqError, msg, attempt);
          }
        } else if (!blocked) {
          blocked = true;
          this.events.onBlocked(lane.key.slice(1), msg, error);
        }
      }
      await this.sleep(retry.backoffMs(attempt));
      if (this.stopping) {
        msg.nak();
        return;
      }
      const started = performance.now();
      try {
        await this.handler(msg);
        await this.succeeded(msg, started);
        return;
      } catch (next) {
        error = next;
      }
    }
  }

  private async deadLetter(target: DeadLetter, laneKey: string, msg: ConsumerGroupMessage, error: unknown, attempts: number): Promise<void> {
    const h = createHeaders();
    // In elastic groups the origin is in Nats-Stream-Source: "<stream> <seq> …".
    // (get() returns "" for a missing header, and pinned deliveries always have headers.)
    const source = msg.headers?.get("Nats-Stream-Source")?.split(" ").filter((t) => t !== "");
    h.set(DeadLetterHeaders.OriginStream, source?.[0] ?? msg.info.stream);
    h.set(DeadLetterHeaders.OriginSequence, source?.[1] ?? String(msg.seq));
    h.set(DeadLetterHeaders.Partition, String(msg.partition));
    h.set(DeadLetterHeaders.Key, this.policy.mode === "key" ? laneKey.slice(1) : this.policy.keyOf(msg));
    // Handler runs in all: the server's earlier deliveries plus the attempts made in place.
    h.set(DeadLetterHeaders.DeliveryCount, String(msg.info.deliveryCount - 1 + attempts));
    h.set(DeadLetterHeaders.Subject, msg.subject);
    h.set(DeadLetterHeaders.Error, (error instanceof Error ? error.message : String(error)).replace(/[\r\n]+/g, " ").slice(0, 1024));
    await target.publish(target.subject, msg.data, h);
    msg.term(`dead-lettered to ${target.subject}`);
    this.events.onDeadLettered(msg, error, target.subject);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (this.abort.signal.aborted) return resolve();
      // The listener goes when the timer fires: one per backoff would pile up on a long-lived instance.
      const onAbort = (): void => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.abort.signal.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      this.abort.signal.addEventListener("abort", onAbort, { once: true });
    });
  }

  /**
   * Stops starting messages, waits up to `timeoutMs` for the ones running, and
   * nak's everything buffered (and whatever arrived meanwhile), in stream order, so
   * that it is redelivered at once.
   *
   * @param giveBackAfter - nothing is nak'ed before it settles (the consume's subscription is gone:
   *   a redelivery the server tried to send to it would go to the back of its queue)
   * @returns true when nothing was left running
   */
  async drain(timeoutMs: number, giveBackAfter?: Promise<unknown>): Promise<boolean> {
    this.stopping = true;
    this.abort.abort();
    clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
    let finished = this.inFlight === 0;
    if (!finished) {
      let timer: NodeJS.Timeout | undefined;
      finished = await Promise.race([
        new Promise<boolean>((resolve) => this.idle.push(() => resolve(true))),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
      ]);
      clearTimeout(timer);
    }
    await giveBackAfter?.catch(() => undefined);
    // Give back what was not started in stream order: the server redelivers naks in the
    // order it gets them, and the next owner must get each key's messages in order.
    const back: { seq: number; nak(): void }[] = this.late.splice(0);
    for (const lane of this.lanes.values()) {
      back.push(...lane.queue.splice(0));
      lane.queued.clear();
      clearTimeout(lane.awaiting?.timer);
      lane.awaiting = undefined;
    }
    back.sort((a, b) => a.seq - b.seq);
    for (const msg of back) msg.nak();
    this.drained = true;
    this.ready.length = 0;
    clearInterval(this.sweeper);
    return finished;
  }
}
