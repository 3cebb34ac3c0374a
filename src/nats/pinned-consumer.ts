/**
 * One long-lived pinned `consume({ group: "PCG" })` on a member's consumer, and the
 * serial dispatch of its messages to the handler.
 *
 * Messages are taken in callback mode and queued here, so pulls carrying the pin id
 * keep going out while a slow handler works: in iterator mode nats.js queues pulls
 * behind buffered messages, and a pinned instance that pulls late loses its pin.
 * The server's `max_ack_pending` bounds the queue.
 */
import type { ConsumerMessages, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import { PRIORITY_GROUP } from "../core/names.js";
import { ConsumerGroupMessage, partitionOfStoredSubject } from "./message.js";

/** What the runner tells its owner. */
export interface PinnedConsumerEvents {
  /** A handler threw or rejected; the message was nak'ed for redelivery. */
  onHandlerError(error: unknown, msg: ConsumerGroupMessage): void;
  /** This instance became the pinned one. */
  onPinned(pinId: string): void;
  /** This instance lost its pin (a 423 from the server). */
  onUnpinned(): void;
  /** The consume ended on its own: the consumer or stream is gone, or a terminal error. */
  onEnded(reason: string): void;
}

/** A message handler. It may be async; it is awaited. */
export type MessageHandler = (msg: ConsumerGroupMessage) => void | Promise<void>;

/** Timing and batching of the pulls. */
export interface PullSettings {
  /** Pull expiry in ms (Go: max(AckWait/2, 1 s)). */
  expiresMs: number;
  /** Messages per pull. */
  maxMessages: number;
}

/**
 * Runs one consume and handles its messages one at a time, in delivery order.
 */
export class PinnedConsumer {
  private messages: ConsumerMessages | undefined;
  private readonly queue: JsMsg[] = [];
  private processing: Promise<void> | undefined;
  private stopping = false;
  private lastPinId: string | undefined;

  constructor(
    private readonly js: JetStreamClient,
    /** The stream the consumer is on. */
    readonly stream: string,
    /** The consumer name. */
    readonly consumer: string,
    private readonly handler: MessageHandler,
    private readonly settings: PullSettings,
    private readonly events: PinnedConsumerEvents,
  ) {}

  /** The most recent `Nats-Pin-Id` seen on a message, if any. */
  get pinId(): string | undefined {
    return this.lastPinId;
  }

  /** Starts pulling. */
  async start(): Promise<void> {
    const consumer = await this.js.consumers.get(this.stream, this.consumer);
    const messages = await consumer.consume({
      group: PRIORITY_GROUP,
      expires: this.settings.expiresMs,
      max_messages: this.settings.maxMessages,
      abort_on_missing_resource: true,
      callback: (m) => this.enqueue(m),
    });
    this.messages = messages;
    void this.watchStatus(messages);
    void messages.closed().then((err) => {
      if (!this.stopping) this.events.onEnded(err ? err.message : "the consume ended");
    });
  }

  private async watchStatus(messages: ConsumerMessages): Promise<void> {
    for await (const s of messages.status()) {
      if (this.stopping) continue;
      if (s.type === "consumer_pinned") this.events.onPinned(s.id);
      else if (s.type === "consumer_unpinned") this.events.onUnpinned();
      else if (s.type === "consumer_deleted") {
        this.events.onEnded(`the consumer was deleted (${s.code} ${s.description})`);
        messages.stop();
      }
    }
  }

  private enqueue(m: JsMsg): void {
    if (this.stopping) {
      m.nak();
      return;
    }
    const pin = m.headers?.get("Nats-Pin-Id");
    if (pin) this.lastPinId = pin;
    this.queue.push(m);
    this.processing ??= this.drain();
  }

  private async drain(): Promise<void> {
    try {
      for (let m = this.queue.shift(); m !== undefined && !this.stopping; m = this.queue.shift()) {
        await this.handle(m);
      }
    } finally {
      this.processing = undefined;
      if (!this.stopping && this.queue.length > 0) this.processing = this.drain();
    }
  }

  private async handle(m: JsMsg): Promise<void> {
    const msg = new ConsumerGroupMessage(m, partitionOfStoredSubject(m.subject));
    try {
      await this.handler(msg);
      if (msg.settlement === undefined) msg.ack();
    } catch (error) {
      if (msg.settlement === undefined) msg.nak();
      this.events.onHandlerError(error, msg);
    }
  }

  /**
   * Stops pulling, waits (up to `timeoutMs`) for the handler in flight, and
   * nak's what was delivered but not started, so it is redelivered at once.
   *
   * @returns true when the in-flight handler finished within the timeout
   */
  async stop(timeoutMs: number): Promise<boolean> {
    this.stopping = true;
    this.messages?.stop();
    let finished = true;
    if (this.processing) {
      let timer: NodeJS.Timeout | undefined;
      finished = await Promise.race([
        this.processing.then(() => true),
        new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs))),
      ]);
      clearTimeout(timer);
    }
    for (let m = this.queue.shift(); m !== undefined; m = this.queue.shift()) m.nak();
    return finished;
  }
}
