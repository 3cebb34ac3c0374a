/**
 * One long-lived pinned `consume({ group: "PCG" })` on a member's consumer, and the
 * dispatch of its messages to the handler (see `dispatcher.ts`).
 *
 * Messages are taken in callback mode and queued here, so pulls carrying the pin id
 * keep going out while a slow handler works: in iterator mode nats.js queues pulls
 * behind buffered messages, and a pinned instance that pulls late loses its pin.
 * A gate in front of the pulls bounds what is held in the process (the local cap),
 * whatever the consumer's `max_ack_pending`; while the gate is shut, or while the
 * instance drains, a pin keep-alive (a pull that cannot deliver) keeps the pin.
 * The acks of handlers that finish back to back share a socket write (`write-batch.ts`).
 */
import type { Consumer, ConsumerMessages, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import { createInbox, type NatsConnection } from "@nats-io/transport-node";
import { PRIORITY_GROUP } from "../core/names.js";
import type { ConsumerGroupMessage } from "./message.js";
import { Dispatcher, type DispatchEvents, type DispatchPolicy } from "./dispatcher.js";
import { apiPrefix, checkConsumeShape, connectionOf, connectionWrites, consumePinId, consumeSubscription, gatePulls, replySubject } from "./client-seam.js";
import { writeBatchOf } from "./write-batch.js";

/** How long an instance that takes the pin over waits at most for the redeliveries queued for it. */
const REDELIVERY_HOLD_MS = 500;

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
  /** The most messages held in the process at once. */
  localBufferCap: number;
  /** The consumer's PinnedTTL in ms: the pin keep-alive goes out three times per TTL. */
  pinnedTtlMs: number;
  /** A message to ack without handling: a copy a repartition's source switch replaced (the new source stores it again). */
  replacedCopy?: (m: JsMsg) => boolean;
}

/**
 * Runs one consume and hands its messages to a {@link Dispatcher}.
 */
export class PinnedConsumer {
  private messages: ConsumerMessages | undefined;
  private handle: Consumer | undefined;
  private readonly dispatcher: Dispatcher;
  private readonly nc: NatsConnection;
  private stopping = false;
  private lastPinId: string | undefined;
  /** The latest delivery: its ack subject is where the settle barrier is sent (read only then). */
  private lastDelivered: JsMsg | undefined;
  /** The consumer's creation time, as the server reported it when this instance bound to it. */
  private createdAt: string | undefined;
  private gate: { resume(): void } | undefined;
  /** True while the gate withholds a pull. */
  private gateShut = false;
  private keepAlive: NodeJS.Timeout | undefined;
  /** When the current takeover began, while it waits for the previous owner's messages. */
  private takeoverSince: number | undefined;

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
    this.nc = connectionOf(js);
    this.dispatcher = new Dispatcher(handler, policy, events);
    this.dispatcher.onRoom = () => this.onRoom();
    const acks = writeBatchOf(connectionWrites(this.nc));
    this.dispatcher.beforeAck = () => acks.hold();
  }

  /** The most recent `Nats-Pin-Id` seen on a message, if any. */
  get pinId(): string | undefined {
    return this.lastPinId;
  }

  /** The `created` time of the consumer this instance joined (ISO text from the server). */
  get joinedCreated(): string | undefined {
    return this.createdAt;
  }

  /** Messages buffered plus in flight. */
  get buffered(): number {
    return this.dispatcher.size;
  }

  /** Messages whose handler is running. */
  get inFlight(): number {
    return this.dispatcher.running;
  }

  /**
   * Starts pulling.
   *
   * @throws ConsumerGroupError `CLIENT_UNSUPPORTED` when the installed nats.js lacks what the handoff needs
   */
  async start(): Promise<void> {
    const consumer = await this.js.consumers.get(this.stream, this.consumer);
    this.handle = consumer;
    const info = await consumer.info(true);
    this.createdAt = info.created;
    const limit = info.config.max_ack_pending;
    if (limit !== undefined && limit > 0) this.dispatcher.ackPendingLimit = limit;
    const messages = await consumer.consume({
      group: PRIORITY_GROUP,
      expires: this.settings.expiresMs,
      max_messages: Math.min(this.settings.maxMessages, this.settings.localBufferCap),
      abort_on_missing_resource: true,
      callback: (m) => this.take(m),
    });
    this.messages = messages;
    try {
      checkConsumeShape(messages);
    } catch (err) {
      messages.stop();
      throw err;
    }
    this.gate = gatePulls(messages, (outstanding) => this.allowance(outstanding));
    this.keepAlive = setInterval(() => this.keepPin(), this.settings.pinnedTtlMs / 3);
    this.keepAlive.unref();
    void this.watchStatus(messages);
    void messages.closed().then((err) => {
      if (!this.stopping) this.events.onEnded(err ? err.message : "the consume ended");
    });
  }

  private async watchStatus(messages: ConsumerMessages): Promise<void> {
    for await (const s of messages.status()) {
      if (this.stopping) continue;
      if (s.type === "consumer_pinned") this.events.onPinned(s.id);
      else if (s.type === "consumer_unpinned") {
        // Another instance is pinned now: nothing more starts here; what has not started goes back to it.
        this.lastPinId = undefined;
        this.dispatcher.giveBackQueued();
        this.events.onUnpinned();
      } else if (s.type === "consumer_deleted") {
        this.events.onEnded(`the consumer was deleted (${s.code} ${s.description})`);
        messages.stop();
      }
    }
  }

  private take(m: JsMsg): void {
    const pin = m.headers?.get("Nats-Pin-Id");
    if (pin && pin !== this.lastPinId) {
      // Taking the pin over with a redelivery: let the server deliver all of them before starting any.
      if (m.info.deliveryCount > 1) this.dispatcher.holdForRedeliveries(REDELIVERY_HOLD_MS);
      // And start nothing before knowing whether the previous owner left messages unacked.
      this.dispatcher.beginTakeover();
      void this.checkTakeover();
    }
    if (pin) this.lastPinId = pin;
    this.lastDelivered = m;
    if (this.settings.replacedCopy?.(m)) {
      m.ack();
      return;
    }
    this.dispatcher.push(m);
    if (!this.gateShut && this.dispatcher.size >= this.settings.localBufferCap) this.gateShut = true;
  }

  /**
   * After a takeover, until the consumer's unacked count is down to what this instance
   * holds, nothing starts (see `Dispatcher.beginTakeover`). A planned handoff leaves
   * nothing unacked: one info request and it starts. After a crash the previous owner's
   * messages come back within an AckWait; the gate keeps one pull going for them even
   * when the local buffer is full (the server sends due redeliveries before fresh messages).
   */
  private async checkTakeover(): Promise<void> {
    const started = performance.now();
    this.takeoverSince = started;
    // A previous owner still alive (a step-down) may run handlers for a while; the cap only guards against a miscount.
    const deadline = started + Math.max(10 * this.settings.pinnedTtlMs, 30_000);
    try {
      while (!this.stopping && this.dispatcher.holdingForTakeover) {
        const info = await this.handle?.info(false);
        if (!info) break;
        // Unacked, minus what is here: deliveries that arrive while the request is out have
        // higher sequences than the state it reads, and must not be subtracted from it.
        const elsewhere = info.num_ack_pending - this.dispatcher.heldUpTo(info.delivered.stream_seq);
        if (elsewhere <= 0 || performance.now() > deadline) break;
        this.gate?.resume();
        await new Promise((resolve) => setTimeout(resolve, Math.min(250, this.settings.pinnedTtlMs / 4)));
      }
    } catch {
      // no consumer info (gone, or no permission): nothing better to go by
    }
    this.takeoverSince = undefined;
    this.dispatcher.endTakeover();
  }

  /** What the gate lets a pull ask for: room in the local buffer, or one message for a takeover that waits for redeliveries. */
  private allowance(outstanding: number): number {
    const room = this.settings.localBufferCap - this.dispatcher.size - outstanding;
    if (room > 0) return room;
    const since = this.takeoverSince;
    return since !== undefined && outstanding === 0 && performance.now() - since >= this.settings.pinnedTtlMs ? 1 : 0;
  }

  /** A message left the dispatcher: reopen the gate once a useful batch fits again. */
  private onRoom(): void {
    if (!this.gateShut || this.stopping) return;
    const room = this.settings.localBufferCap - this.dispatcher.size;
    if (room < Math.max(1, Math.floor(Math.min(this.settings.maxMessages, this.settings.localBufferCap) / 4))) return;
    this.gateShut = false;
    this.gate?.resume();
  }

  /**
   * Three times per PinnedTTL, a pull carrying the pin id resets the server's pin timer:
   * regular pulls may not go out in time (the gate is shut, the instance drains, or a
   * pull's expiry is as long as the TTL, as with Go's timings at AckWait <= 2 s), and a
   * pin that lapses under a live instance lets a standby take the consumer over. It asks
   * for one message of at most one byte without waiting, so it can deliver nothing, and
   * its answer goes to an inbox nobody listens on.
   */
  private keepPin(): void {
    const id = this.messages ? consumePinId(this.messages) || this.lastPinId : this.lastPinId;
    if (!id || this.nc.isClosed()) return;
    const request = { batch: 1, max_bytes: 1, no_wait: true, group: PRIORITY_GROUP, id };
    try {
      this.nc.publish(`${apiPrefix(this.js)}.CONSUMER.MSG.NEXT.${this.stream}.${this.consumer}`, JSON.stringify(request), { reply: createInbox() });
    } catch {
      // the connection is closing: the pin times out, as it would anyway
    }
  }

  /** Starts no more handlers (running ones go on): a {@link PinnedConsumer.stop} follows. */
  pauseStarts(): void {
    this.dispatcher.pauseStarts();
  }

  /**
   * Stops pulling, waits for the handlers in flight (past `timeoutMs` their signal is
   * aborted and they are still awaited), and nak's what was delivered but not started,
   * so it is redelivered at once. Unless `timeoutMs` is 0 (no handoff, Go's behaviour),
   * it also makes sure that deliveries already on their way are nak'ed rather than
   * dropped, and that the server has applied every ack and nak sent before it returns.
   * The pin is kept alive meanwhile, so a standby does not take the consumer over.
   *
   * @returns true when the handlers in flight finished within the timeout
   */
  async stop(timeoutMs: number): Promise<boolean> {
    this.stopping = true;
    const handoff = timeoutMs > 0;
    if (handoff) this.keepPin();
    const delivered = handoff ? this.drainDeliveries(Math.min(timeoutMs, 2000)).then(() => this.forgetPulls()) : undefined;
    // From here on the dispatcher starts nothing and holds whatever still arrives; it
    // gives everything back (nak) once the subscription is gone and the handlers are done.
    const drained = this.dispatcher.drain(timeoutMs, delivered);
    await delivered;
    this.messages?.stop();
    const finished = await drained;
    if (handoff) await this.settleBarrier(Math.min(timeoutMs, 2000));
    clearInterval(this.keepAlive);
    return finished;
  }

  /**
   * nats.js stops a consume by unsubscribing at once, dropping deliveries already
   * sent: they would stay pending until AckWait, and whoever consumes next would get
   * later messages of their keys first. Draining the consume's subscription (UNSUB,
   * then a round trip) hands them to the dispatcher instead, which nak's them. Once it
   * resolves the server knows nobody listens: it no longer tries our pulls (a redelivery
   * it failed to send there would go to the back of its queue, after later messages).
   */
  private async drainDeliveries(timeoutMs: number): Promise<void> {
    const sub = this.messages ? consumeSubscription(this.messages) : undefined;
    if (!sub) return;
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([sub.drain(), new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    } catch {
      // the connection is closing: nothing more arrives anyway
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Our pull requests stay in the consumer's waiting list after the unsubscribe. The
   * server moves a redelivery it picked for one of them, found without interest, to the
   * back of its redelivery queue: each of them would put a message we give back behind
   * later ones. Asking for the consumer's info makes the server drop them first.
   */
  private async forgetPulls(): Promise<void> {
    try {
      await this.handle?.info(false);
    } catch {
      // the consumer is gone: nothing is redelivered from it
    }
  }

  /**
   * The server applies acks and naks asynchronously, in order, and drops the ones
   * still queued when the consumer is deleted: an ack lost that way means the message
   * is handled again by the next owner, a nak not yet applied that a standby gets
   * later messages first. A request on the consumer's ack subject is answered once
   * everything sent before it is applied (`+WPI` changes nothing on a settled message).
   */
  private async settleBarrier(timeoutMs: number): Promise<void> {
    const reply = this.lastDelivered && replySubject(this.lastDelivered);
    if (!reply || this.nc.isClosed()) return;
    try {
      await this.nc.request(reply, "+WPI", { timeout: timeoutMs });
    } catch {
      // no consumer any more (no responders), or no answer in time: nothing to wait for
    }
  }
}
