/**
 * One long-lived pinned `consume({ group: "PCG" })` on a member's consumer, and the
 * dispatch of its messages to the handler (see `dispatcher.ts`).
 *
 * Messages are taken in callback mode and queued here, so pulls carrying the pin id
 * keep going out while a slow handler works: in iterator mode nats.js queues pulls
 * behind buffered messages, and a pinned instance that pulls late loses its pin.
 * The server's `max_ack_pending` bounds the queue.
 */
import type { ConsumerMessages, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import { PRIORITY_GROUP } from "../core/names.js";
import type { ConsumerGroupMessage } from "./message.js";
import { Dispatcher, type DispatchEvents, type DispatchPolicy } from "./dispatcher.js";

/** What the runner tells its owner. */
export interface PinnedConsumerEvents extends DispatchEvents {
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
 * Runs one consume and hands its messages to a {@link Dispatcher}.
 */
export class PinnedConsumer {
  private messages: ConsumerMessages | undefined;
  private readonly dispatcher: Dispatcher;
  private stopping = false;
  private lastPinId: string | undefined;

  constructor(
    private readonly js: JetStreamClient,
    /** The stream the consumer is on. */
    readonly stream: string,
    /** The consumer name. */
    readonly consumer: string,
    handler: MessageHandler,
    policy: DispatchPolicy,
    private readonly settings: PullSettings,
    private readonly events: PinnedConsumerEvents,
  ) {
    this.dispatcher = new Dispatcher(handler, policy, events);
  }

  /** The most recent `Nats-Pin-Id` seen on a message, if any. */
  get pinId(): string | undefined {
    return this.lastPinId;
  }

  /** Messages buffered plus in flight. */
  get buffered(): number {
    return this.dispatcher.size;
  }

  /** Messages whose handler is running. */
  get inFlight(): number {
    return this.dispatcher.running;
  }

  /** Starts pulling. */
  async start(): Promise<void> {
    const consumer = await this.js.consumers.get(this.stream, this.consumer);
    const messages = await consumer.consume({
      group: PRIORITY_GROUP,
      expires: this.settings.expiresMs,
      max_messages: this.settings.maxMessages,
      abort_on_missing_resource: true,
      callback: (m) => this.take(m),
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

  private take(m: JsMsg): void {
    const pin = m.headers?.get("Nats-Pin-Id");
    if (pin) this.lastPinId = pin;
    this.dispatcher.push(m);
  }

  /**
   * Stops pulling, waits (up to `timeoutMs`) for the handlers in flight, and
   * nak's what was delivered but not started, so it is redelivered at once.
   *
   * @returns true when the handlers in flight finished within the timeout
   */
  async stop(timeoutMs: number): Promise<boolean> {
    this.stopping = true;
    this.messages?.stop();
    return this.dispatcher.drain(timeoutMs);
  }
}
