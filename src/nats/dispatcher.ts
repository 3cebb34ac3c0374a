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
  queue: ConsumerGroupMessage[];
  running: ConsumerGroupMessage | undefined;
}

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
  private readonly ready: string[] = [];
  private inFlight = 0;
  private stopping = false;
  private readonly abort = new AbortController();
  private idle: (() => void)[] = [];

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
    if (this.stopping) {
      m.nak();
      return;
    }
    const msg = new ConsumerGroupMessage(m, partitionOfStoredSubject(m.subject));
    this.events.onReceived?.(msg);
    const key = this.laneOf(msg);
    let lane = this.lanes.get(key);
    if (!lane) {
      lane = { key, queue: [], running: undefined };
      this.lanes.set(key, lane);
    }
    if (lane.running?.seq === msg.seq) return; // a redelivery of what is running: the running copy settles it
    const same = lane.queue.findIndex((x) => x.seq === msg.seq);
    if (same >= 0) {
      lane.queue[same] = msg; // keep the freshest delivery
      return;
    }
    let at = lane.queue.length;
    while (at > 0 && (lane.queue[at - 1]?.seq ?? 0) > msg.seq) at--;
    lane.queue.splice(at, 0, msg);
    if (!lane.running && lane.queue.length === 1) this.ready.push(key);
    this.pump();
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
    while (!this.stopping && this.inFlight < this.policy.maxInFlight && this.ready.length > 0) {
      const lane = this.lanes.get(this.ready.shift() ?? "");
      const msg = lane?.queue.shift();
      if (!lane || !msg || lane.running) continue;
      lane.running = msg;
      this.inFlight += 1;
      void this.run(lane, msg);
    }
  }

  private async run(lane: Lane, msg: ConsumerGroupMessage): Promise<void> {
    const working = this.policy.workingIntervalMs > 0 ? setInterval(() => msg.settlement === undefined && msg.working(), this.policy.workingIntervalMs) : undefined;
    try {
      await this.attempt(lane, msg);
    } finally {
      clearInterval(working);
      lane.running = undefined;
      this.inFlight -= 1;
      if (lane.queue.length > 0) this.ready.push(lane.key);
      else this.lanes.delete(lane.key);
      if (this.inFlight === 0) for (const wake of this.idle.splice(0)) wake();
      this.pump();
    }
  }

  private async attempt(lane: Lane, msg: ConsumerGroupMessage): Promise<void> {
    const retry = this.policy.retry;
    let blocked = false;
    for (let attempt = 1; ; attempt++) {
      const started = performance.now();
      try {
        await this.handler(msg);
        if (msg.settlement === undefined) {
          // While draining, the consumer may be deleted right after: wait for the server to
          // confirm the ack, or it could be lost and the message handled again elsewhere.
          if (this.stopping) await msg.ackAck().catch(() => false);
          else msg.ack();
        }
        this.events.onHandled(msg, performance.now() - started);
        return;
      } catch (error) {
        this.events.onHandlerError(error, msg, attempt);
        if (msg.settlement !== undefined) return; // the handler settled it before throwing
        if (!retry || this.stopping) {
          msg.nak();
          return;
        }
        if (attempt >= retry.maxDeliver) {
          if (retry.deadLetter) {
            try {
              await this.deadLetter(retry.deadLetter, lane.key, msg, error);
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
      }
    }
  }

  private async deadLetter(target: DeadLetter, laneKey: string, msg: ConsumerGroupMessage, error: unknown): Promise<void> {
    const h = createHeaders();
    // In elastic groups the origin is in Nats-Stream-Source: "<stream> <seq> …".
    const source = msg.headers?.get("Nats-Stream-Source")?.split(" ");
    h.set(DeadLetterHeaders.OriginStream, source?.[0] ?? msg.info.stream);
    h.set(DeadLetterHeaders.OriginSequence, source?.[1] ?? String(msg.seq));
    h.set(DeadLetterHeaders.Partition, String(msg.partition));
    h.set(DeadLetterHeaders.Key, this.policy.mode === "key" ? laneKey.slice(1) : this.policy.keyOf(msg));
    h.set(DeadLetterHeaders.DeliveryCount, String(msg.info.deliveryCount));
    h.set(DeadLetterHeaders.Subject, msg.subject);
    h.set(DeadLetterHeaders.Error, (error instanceof Error ? error.message : String(error)).replace(/[\r\n]+/g, " ").slice(0, 1024));
    await target.publish(target.subject, msg.data, h);
    msg.term(`dead-lettered to ${target.subject}`);
    this.events.onDeadLettered(msg, error, target.subject);
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.abort.signal.addEventListener("abort", () => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /**
   * Stops starting messages, waits up to `timeoutMs` for the ones running, and
   * nak's everything buffered so that it is redelivered at once.
   *
   * @returns true when nothing was left running
   */
  async drain(timeoutMs: number): Promise<boolean> {
    this.stopping = true;
    this.abort.abort();
    let finished = this.inFlight === 0;
    if (!finished) {
      let timer: NodeJS.Timeout | undefined;
      finished = await Promise.race([
        new Promise<boolean>((resolve) => this.idle.push(() => resolve(true))),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
      ]);
      clearTimeout(timer);
    }
    for (const lane of this.lanes.values()) for (const msg of lane.queue.splice(0)) msg.nak();
    this.ready.length = 0;
    return finished;
  }
}
