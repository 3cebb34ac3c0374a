/**
 * One long-lived pinned `consume({ group: "PCG" })` on a member's consumer, and the
 * dispatch of its messages to the handler (see `dispatcher.ts`).
 *
 * Messages are taken in callback mode and queued here, so pulls carrying the pin id
 * keep going out while a slow handler works: in iterator mode nats.js queues pulls
 * behind buffered messages, and a pinned instance that pulls late loses its pin.
 * A gate in front of the pulls bounds what is held in the process and on its way to
 * it, in messages (the local cap, whatever the consumer's `max_ack_pending`) and in
 * bytes (so the server never has more queued for this client than its slow-consumer
 * limit allows); while the gate is shut, or while the instance drains, a pin
 * keep-alive (a pull that cannot deliver) keeps the pin. The keep-alive's answer is
 * the pin's proof, and every delivery's consumer sequence is checked for gaps: both
 * go to the {@link StartGuard}, which says when a handler may start.
 * The acks of handlers that finish back to back share a socket write (`write-batch.ts`).
 */
import type { Consumer, ConsumerInfo, ConsumerMessages, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import { createInbox, type Msg, type NatsConnection } from "@nats-io/transport-node";
import { PRIORITY_GROUP } from "../core/names.js";
import { deliveryNumbersOf, type ConsumerGroupMessage } from "./message.js";
import { Dispatcher, type DispatchEvents, type DispatchPolicy, type ParkedKey, type ReleaseAction, type ReleaseResult } from "./dispatcher.js";
import { FilterSet } from "../core/filter-set.js";
import { largestPossibleDelivery, pullRoom } from "./pull-room.js";
import {
  apiPrefix,
  checkConsumeShape,
  connectionOf,
  connectionStatus,
  connectionWrites,
  consumeSubscription,
  consumeWithBoundedFirstPull,
  deliverySize,
  gatePulls,
  inboxPrefixOf,
  replySubject,
  type PullAllowance,
  type PullGate,
} from "./client-seam.js";
import { likelySlowConsumerCut, loopPressure, watchLoopLag, type LoopPressure } from "./loop-lag.js";
import { openProofInbox, type ProofInbox } from "./proof-inbox.js";
import { isPermissionError } from "./server-errors.js";
import { joinConnectionBudget, type ConnectionBudget } from "./connection-budget.js";
import { StartGuard, type HoldReason } from "./start-guard.js";
import { lowestOf, skipCheckApplies, skippedInFilter, skipVerdict, type FirstStored, type SkipLook, type StoredFrom } from "./skipped-message.js";
import { writeBatchOf } from "./write-batch.js";

/** How long an instance that takes the pin over waits at most for the redeliveries queued for it. */
const REDELIVERY_HOLD_MS = 500;
/** How long after a first sighting a skipped message is looked for again before it counts. */
const SKIP_CONFIRM_MS = 100;
/** How often a consume looks for skipped messages besides its holds (see `PinnedConsumer.scheduleSkipLook`). */
const SKIP_LOOK_EVERY_MS = 10_000;
/** The skip check's lookups (one per filter) in flight at once. */
const SKIP_LOOKUPS_IN_FLIGHT = 8;
/** A fenced instance asks for the pin's proof at most this often. */
const PROOF_RETRY_MS = 250;
/** Holds and fences shorter than this are not reported (every takeover holds for a round trip). */
const REPORTED_HOLD_MS = 100;

/** The monotonic clock, read by the start guard only when a delivery begins a hold. */
const monotonicNow = (): number => performance.now();

/** The pin id a consumer's state names for this library's priority group, if any. */
export function currentPin(info: unknown): string | undefined {
  const groups = (info as { priority_groups?: { group: string; pinned_client_id?: string }[] }).priority_groups;
  return groups?.find((g) => g.group === PRIORITY_GROUP)?.pinned_client_id || undefined;
}

/** A keep-alive unanswered for this long is taken to wait in the server's queue (the consumer is at its max_ack_pending). */
const KEEP_ALIVE_ANSWER_MS = 100;

/** What the runner tells its owner. */
export interface PinnedConsumerEvents extends DispatchEvents {
  /** This instance became the pinned one. */
  onPinned(pinId: string): void;
  /** This instance lost its pin (a 423 from the server). */
  onUnpinned(): void;
  /** The consume ended on its own: the consumer or stream is gone, or a terminal error. */
  onEnded(reason: string): void;
  /** Starts were held (or fenced: no proof of the pin) for `durationMs` and may go on now. */
  onStartsHeld?(reason: HoldReason | "fenced", durationMs: number): void;
  /** The connection was lost right after the event loop was blocked or saturated, or while the pulls could bring the server's default max_pending: most likely the server cut it as a slow consumer. */
  onSlowConsumer?(pressure: LoopPressure, askedBytes: number): void;
  /** The pin's proof cannot be had (the keep-alive's answers are not allowed): starts are not fenced on it. */
  onProofUnavailable?(reason: string): void;
  /**
   * The consumer delivered a message outside its filters (once per consume): the server
   * gave it another consumer's state (a create that raced a delete of the same name). The
   * message is neither handled nor acked here; its partition's owner has it.
   */
  onForeignDelivery?(subject: string, streamSequence: number): void;
  /**
   * The work-queue consumer passed a stored message it never delivered (see
   * `skipped-message.ts`): the server gave it another consumer's state. Nothing more
   * starts from this consume.
   */
  onSkippedMessage?(skipped: FirstStored, deliveredUpTo: number): void;
  /** The skip check cannot read the work queue's messages (no permission): it is off for this consume. */
  onSkipCheckUnavailable?(reason: string): void;
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
  /** The most bytes held in the process and asked for at once (a single larger message still comes, alone). */
  maxBufferedBytes: number;
  /** The consumer's PinnedTTL in ms: the pin keep-alive goes out three times per TTL. */
  pinnedTtlMs: number;
  /** A message to ack without handling: a copy a repartition's source switch replaced (the new source stores it again). */
  replacedCopy?: (m: JsMsg) => boolean;
  /**
   * On a work queue (acks remove messages): the lowest stored message of a filter from a
   * sequence on. With it, a hold settles only once no stored message at or below the
   * consumer's delivered sequence is missing here (see `skipped-message.ts`).
   */
  storedFrom?: StoredFrom;
}

/**
 * Runs one consume and hands its messages to a {@link Dispatcher}.
 */
export class PinnedConsumer {
  private messages: ConsumerMessages | undefined;
  /** This instance's part of the byte budget of its connection's instances (see `connection-budget.ts`), from start to stop. */
  private budget: ConnectionBudget | undefined;
  private handle: Consumer | undefined;
  private readonly dispatcher: Dispatcher;
  private readonly guard: StartGuard;
  private readonly nc: NatsConnection;
  private stopping = false;
  /** The latest delivery: its ack subject is where the settle barrier is sent (read only then). */
  private lastDelivered: JsMsg | undefined;
  /** The consumer's creation time, as the server reported it when this instance bound to it. */
  private createdAt: string | undefined;
  /** The consumer's filters when this consume began (a refresh only narrows them): a delivery outside them is foreign. */
  private filters: FilterSet | undefined;
  /** The skip check may run (see {@link PullSettings.storedFrom}); off once it cannot read the work queue. */
  private skipCheck = false;
  /** The next periodic look for skipped messages. */
  private skipLookTimer: NodeJS.Timeout | undefined;
  /** True while a skip check runs (from a hold or a periodic look). */
  private skipChecking = false;
  /** A foreign delivery was reported already. */
  private foreignSeen = false;
  private gate: PullGate | undefined;
  /** True while the gate withholds a pull. */
  private gateShut = false;
  private keepAlive: NodeJS.Timeout | undefined;
  /** The consumer's max_ack_pending: the most that can be delivered and unacked at once. */
  private ackPendingLimit = Number.POSITIVE_INFINITY;
  /** The largest delivery seen, in bytes (for the slow-consumer report's estimate of what the pulls could bring). */
  private largestDelivery = 0;
  /** The largest delivery since the dispatcher last held nothing: no held message is larger. */
  private largestHeld = 0;
  /** Deliveries taken, and their count when the last pull went out: a pull that ends before any came may have met a message larger than its byte limit. */
  private deliveries = 0;
  private deliveriesAtPull = 0;
  /**
   * A pull ended before it brought anything (a message larger than its byte limit, or
   * nothing to deliver): the next pull waits until nothing is held or asked for, and
   * asks for one message of any size.
   */
  private pullBroughtNothing = false;
  /** What the pulls outstanding at the last pull could bring, in bytes (an upper bound: the largest delivery seen stands for each). */
  private askedBytes = 0;
  /** The keep-alives whose answers are awaited, by the last token of their reply subject. */
  private readonly keepAlivesSent = new Map<string, { pin: string; sentAt: number }>();
  private keepAliveCount = 0;
  private lastKeepAliveAt = Number.NEGATIVE_INFINITY;
  /** This instance's part of the connection's keep-alive inbox; undefined once it failed (no permission). */
  private proofInbox: ProofInbox | undefined;
  /** True while a consumer state read asked for as a proof of the pin is out. */
  private stateProofOut = false;
  /** True while one loop reads the consumer's state for the guard's holds. */
  private settling = false;
  /** Set when the server said the current pin is not ours: the give-back for that pin is done. */
  private pinLossHandled = false;
  /** When starts were first refused since the last start was allowed, and why. */
  private refused: { since: number; reason: HoldReason | "fenced" } | undefined;
  private connectionWatch: { stop?: () => void } | undefined;

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
    this.guard = new StartGuard({ pinnedTtlMs: settings.pinnedTtlMs, redeliveryHoldMs: REDELIVERY_HOLD_MS });
    const acks = writeBatchOf(connectionWrites(this.nc));
    const leaseAllows = policy.mayStart?.bind(policy);
    this.dispatcher = new Dispatcher(handler, { ...policy, mayStart: () => (leaseAllows?.() ?? true) && this.mayStart() }, events, {
      onRoom: () => this.onRoom(),
      beforeAck: () => acks.hold(),
    });
  }

  /** The pin id of this instance's latest deliveries, while it holds it. */
  get pinId(): string | undefined {
    // Once the server said the pin is another's, it is not this instance's to act on (to delete the consumer
    // "while the pin is still its own", say), even before nats.js notices at its next pull.
    return this.guard.pinProof.kind === "lost" ? undefined : this.guard.pinId;
  }

  /** The `created` time of the consumer this instance joined (ISO text from the server). */
  get joinedCreated(): string | undefined {
    return this.createdAt;
  }

  /** Messages held: buffered, in flight and parked. */
  get buffered(): number {
    return this.dispatcher.held;
  }

  /** The blocked keys of this instance (see `Dispatcher.parkedKeys`). */
  parkedKeys(): ParkedKey[] {
    return this.dispatcher.parkedKeys();
  }

  /** Releases a blocked message (see `Dispatcher.release`). */
  release(seq: number, action: ReleaseAction): Promise<ReleaseResult | undefined> {
    return this.dispatcher.release(seq, action);
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
    this.filters = filterSetOf(info.config);
    this.skipCheck = this.settings.storedFrom !== undefined && skipCheckApplies(info.config);
    const limit = info.config.max_ack_pending;
    if (limit !== undefined && limit > 0) this.ackPendingLimit = limit;
    watchLoopLag();
    // Open before the first delivery: its new pin asks for a proof at once.
    this.openProofInbox();
    this.budget = joinConnectionBudget(this.nc, this);
    let messages: ConsumerMessages | undefined;
    try {
      const pullSubject = `${apiPrefix(this.js)}.CONSUMER.MSG.NEXT.${this.stream}.${this.consumer}`;
      const window = Math.min(this.settings.maxMessages, this.settings.localBufferCap);
      messages = await consumeWithBoundedFirstPull(this.nc, pullSubject, this.byteBudget(), () =>
        consumer.consume({
          group: PRIORITY_GROUP,
          expires: this.settings.expiresMs,
          max_messages: window,
          // nats.js pulls again once a quarter of the window was delivered; with half, a pull asks for
          // twice as many messages, and each byte-limited pull's `409 Batch Completed` comes half as often.
          threshold_messages: Math.max(1, Math.floor(window / 2)),
          abort_on_missing_resource: true,
          callback: (m) => this.take(m),
        }),
      );
      checkConsumeShape(messages);
    } catch (err) {
      messages?.stop();
      this.proofInbox?.close();
      this.budget.leave();
      throw err;
    }
    this.messages = messages;
    this.gate = gatePulls(messages, (outstanding, wanted) => this.allowance(outstanding, wanted));
    this.keepAlive = setInterval(() => this.keepPin(), this.settings.pinnedTtlMs / 3);
    this.keepAlive.unref();
    if (this.skipCheck) this.scheduleSkipLook(Math.min(this.settings.pinnedTtlMs, SKIP_LOOK_EVERY_MS));
    void this.watchStatus(messages);
    void this.watchConnection();
    void messages.closed().then((err) => {
      if (this.stopping) return;
      // Its messages are someone else's now (a member giving the partitions up deleted it, say), and acks
      // to it go nowhere: nothing more starts from it while the owner winds the session down.
      this.dispatcher.pauseStarts();
      this.events.onEnded(err ? err.message : "the consume ended");
    });
  }

  /** Whether a handler may start now (the {@link StartGuard}'s phase), reporting a hold or fence that ends. */
  private mayStart(): boolean {
    const now = performance.now();
    if (this.guard.mayStart(now)) {
      const refused = this.refused;
      if (refused === undefined) return true;
      this.refused = undefined;
      if (now - refused.since >= REPORTED_HOLD_MS) this.events.onStartsHeld?.(refused.reason, Math.round(now - refused.since));
      return true;
    }
    const phase = this.guard.phase(now);
    if (phase.kind !== "yielded") this.refused ??= { since: now, reason: phase.kind === "holding" ? phase.reason : "fenced" };
    if (phase.kind === "fenced" && now - this.lastKeepAliveAt >= PROOF_RETRY_MS) this.keepPin();
    return false;
  }

  private async watchStatus(messages: ConsumerMessages): Promise<void> {
    for await (const s of messages.status()) {
      if (this.stopping) continue;
      if (s.type === "consumer_pinned") this.events.onPinned(s.id);
      else if (s.type === "consumer_unpinned") this.pinLost();
      else if (s.type === "discard") {
        // A pull ended with messages left. Before anything came, it met a message larger than its byte limit,
        // unless it expired (a 408, reported right after as a debug event, which undoes this).
        if (this.deliveries === this.deliveriesAtPull) this.pullBroughtNothing = true;
        this.gate?.refill();
      } else if (s.type === "debug" && s.code === 408 && this.pullBroughtNothing) {
        this.pullBroughtNothing = false;
        this.gate?.refill();
      }
      else if (s.type === "consumer_deleted") {
        this.dispatcher.pauseStarts();
        this.events.onEnded(`the consumer was deleted (${s.code} ${s.description})`);
        messages.stop();
      }
    }
  }

  /** Another instance is pinned now (or nobody): nothing more starts here; what has not started goes back. */
  private pinLost(): void {
    this.guard.unpinned();
    this.yieldPin();
  }

  /**
   * Gives back what has not started, and reports the pin lost once per pin. Given back
   * again each time the server says so: deliveries in transit may have arrived since.
   */
  private yieldPin(): void {
    this.dispatcher.giveBackQueued();
    if (this.pinLossHandled) return;
    this.pinLossHandled = true;
    this.events.onUnpinned();
  }

  /** A disconnect right after a long block of the event loop, or seconds without idle time, is reported as a likely slow-consumer cut. */
  private async watchConnection(): Promise<void> {
    const statuses = connectionStatus(this.nc);
    this.connectionWatch = statuses;
    try {
      for await (const s of statuses) {
        if (this.stopping) break;
        if (s.type !== "disconnect") continue;
        const pressure = loopPressure();
        if (likelySlowConsumerCut(pressure, this.askedBytes)) this.events.onSlowConsumer?.(pressure, this.askedBytes);
      }
    } catch {
      // the connection closed
    }
  }

  private take(m: JsMsg): void {
    const numbers = deliveryNumbersOf(m);
    const pin = m.headers?.get("Nats-Pin-Id") || undefined;
    const next = this.guard.delivered(pin, numbers.consumerSequence, numbers.deliveryCount > 1, monotonicNow);
    if (next.prove) {
      this.pinLossHandled = false;
      this.keepPin();
    }
    if (next.settle) void this.settleHolds();
    this.lastDelivered = m;
    const size = deliverySize(m);
    if (size > this.largestDelivery) this.largestDelivery = size;
    if (size > this.largestHeld) this.largestHeld = size;
    this.deliveries += 1;
    this.pullBroughtNothing = false;
    if (this.settings.replacedCopy?.(m)) {
      m.ack();
      return;
    }
    if (this.filters && !this.filters.matches(m.subject)) {
      if (!this.foreignSeen) this.events.onForeignDelivery?.(m.subject, numbers.streamSequence);
      this.foreignSeen = true;
      return;
    }
    this.dispatcher.push(m, numbers);
    if (this.dispatcher.held >= this.ackPendingLimit) {
      // Nothing else can come: the server is waiting for acks.
      this.guard.ackPendingFull();
      this.dispatcher.wake();
    }
    if (!this.gateShut && this.dispatcher.size >= this.settings.localBufferCap) this.gateShut = true;
  }

  /**
   * While the guard holds starts for a takeover or a gap, reads the consumer's state
   * until its unacked count is down to what this instance holds: everything delivered
   * elsewhere and not acked is back here, or settled. A planned handoff leaves nothing
   * unacked: one info request and it starts. A lost delivery comes back within an
   * AckWait; the gate keeps one pull going for it even when the local buffer is full
   * (the server sends due redeliveries before fresh messages). A read that fails is
   * tried again (a leader change answers nothing for a moment), except for a missing
   * permission.
   */
  private async settleHolds(): Promise<void> {
    if (this.settling) return;
    this.settling = true;
    // A previous owner still alive (a step-down) may run handlers for a while; the cap only guards against a miscount.
    const deadline = performance.now() + Math.max(10 * this.settings.pinnedTtlMs, 30_000);
    const pause = Math.min(250, this.settings.pinnedTtlMs / 4);
    try {
      while (!this.stopping && this.guard.needsSettling) {
        const epoch = this.guard.stateReadStarted();
        const pin = this.guard.pinId;
        const sentAt = this.lastKeepAliveAt;
        let elsewhere = 1;
        let info: ConsumerInfo | undefined;
        try {
          info = await this.handle?.info(false);
          if (!info) break;
          this.stateAnswered(info, pin, sentAt);
          elsewhere = this.unackedElsewhere(info);
        } catch (err) {
          if (isPermissionError(err)) break;
        }
        if (elsewhere <= 0 && info) {
          const skipped = await this.skippedCheck(info);
          if (skipped === "skipped") return;
          if (skipped === "clean") {
            this.guard.settled(epoch);
            continue;
          }
        }
        if (performance.now() > deadline) break;
        this.gate?.resume();
        await new Promise((resolve) => setTimeout(resolve, pause));
      }
      // Nothing better to go by (no state, no permission, or the cap passed).
      if (!this.stopping && this.guard.needsSettling) this.guard.abandonHolds();
    } finally {
      this.settling = false;
      this.dispatcher.wake();
    }
  }

  /** The consumer's unacked messages in `info` minus those here (see {@link Dispatcher.heldUpTo}). */
  private unackedElsewhere(info: ConsumerInfo): number {
    // Deliveries that arrive while the request is out have higher sequences than the state it
    // reads, and must not be subtracted from it.
    return info.num_ack_pending - this.dispatcher.heldUpTo(info.delivered.stream_seq);
  }

  /**
   * The consume looks for skipped messages now and then, not only when a hold settles: a
   * consumer that skipped the stored messages of its partitions and has nothing newer
   * delivers nothing, so no hold begins to notice it, and a look at a hold can fail. It
   * looks whenever every unacked delivery is here (idle, or busy with all of them).
   */
  private scheduleSkipLook(inMs: number): void {
    this.skipLookTimer = setTimeout(() => {
      void this.periodicSkipLook().finally(() => {
        if (!this.stopping && this.skipCheck) this.scheduleSkipLook(SKIP_LOOK_EVERY_MS);
      });
    }, inMs);
    this.skipLookTimer.unref();
  }

  private async periodicSkipLook(): Promise<void> {
    if (this.stopping || this.settling) return;
    const info = await this.handle?.info(false).catch(() => undefined);
    if (!info || this.stopping || this.unackedElsewhere(info) > 0) return;
    await this.skippedCheck(info);
  }

  /**
   * With every unacked delivery here, whether the work-queue consumer skipped a stored
   * message (see `skipped-message.ts`). A suspect is looked at again a moment later,
   * with a fresh state (a clustered work queue removes an acked message shortly after
   * the ack is counted): "unsure" when the second look does not settle it either way.
   * A confirmed skip pauses every start of this consume and is reported; the member
   * replaces the consumer.
   */
  private async skippedCheck(info: ConsumerInfo): Promise<"clean" | "unsure" | "skipped"> {
    if (!this.skipCheck) return "clean";
    if (this.skipChecking) return "unsure";
    this.skipChecking = true;
    try {
      return await this.confirmSkipped(info);
    } finally {
      this.skipChecking = false;
    }
  }

  private async confirmSkipped(info: ConsumerInfo): Promise<"clean" | "unsure" | "skipped"> {
    const suspect = await this.lowestSkipped(info);
    const first = skipVerdict(suspect, "not yet");
    if (first !== "look again") return first;
    await new Promise((resolve) => setTimeout(resolve, SKIP_CONFIRM_MS));
    if (this.stopping) return "unsure";
    const again = await this.handle?.info(false).catch(() => undefined);
    if (!again || this.unackedElsewhere(again) > 0) return "unsure";
    const skipped = await this.lowestSkipped(again);
    const verdict = skipVerdict(suspect, skipped);
    if (verdict !== "skipped") return verdict === "look again" ? "unsure" : verdict;
    if (this.stopping || typeof skipped !== "object") return "unsure";
    this.dispatcher.pauseStarts();
    this.events.onSkippedMessage?.(skipped, again.delivered.stream_seq);
    return "skipped";
  }

  /**
   * The lowest stored message of the consumer's filters in `info` (a refresh may have
   * narrowed them since the consume began) at or below its delivered sequence that is
   * not here; undefined when there is none (or the check is off: no permission), "failed"
   * when a lookup failed otherwise.
   */
  private async lowestSkipped(info: ConsumerInfo): Promise<SkipLook> {
    const storedFrom = this.settings.storedFrom;
    if (!storedFrom || !this.skipCheck) return undefined;
    const deliveredUpTo = info.delivered.stream_seq;
    const known = (seq: number): boolean => this.dispatcher.knows(seq);
    try {
      return lowestOf(await inBatches(filterSubjectsOf(info.config), SKIP_LOOKUPS_IN_FLIGHT, (filter) => skippedInFilter(filter, deliveredUpTo, storedFrom, known)));
    } catch (err) {
      if (!isPermissionError(err)) return "failed";
      this.skipCheck = false;
      this.events.onSkipCheckUnavailable?.(err instanceof Error ? err.message : String(err));
      return undefined;
    }
  }

  /**
   * What the gate lets a pull ask for: room in the local buffer, in messages and in
   * bytes ({@link pullRoom}: each message slot a share of the byte budget, what is held
   * at the size of the largest message that may be among it; no byte limit on a pull
   * that could not pass the budget anyway). One message of any size when nothing is
   * held or outstanding after a pull that brought nothing (a message larger than a
   * pull's byte limit comes alone), or when a hold has waited a PinnedTTL for its
   * redeliveries; none while such a pull waits for the buffer to empty.
   */
  private allowance(outstanding: number, wanted: number): PullAllowance {
    const held = this.dispatcher.size;
    if (held === 0) this.largestHeld = 0;
    const room: PullAllowance = this.pullBroughtNothing
      ? { batch: 0 }
      : pullRoom({
          messageCap: this.settings.localBufferCap,
          byteBudget: this.byteBudget(),
          largestHeld: this.largestHeld,
          largestPossible: largestPossibleDelivery(this.nc.info?.max_payload),
          held,
          outstanding,
          wanted,
        });
    if (room.batch > 0) {
      this.deliveriesAtPull = this.deliveries;
      this.askedBytes = this.largestDelivery > 0 ? this.largestDelivery * (outstanding + room.batch) : (room.maxBytes ?? 0);
      return room;
    }
    this.askedBytes = this.largestDelivery * outstanding;
    if (outstanding > 0) return { batch: 0 };
    const refusedSince = this.refused?.since;
    const waiting = this.guard.needsSettling && refusedSince !== undefined && performance.now() - refusedSince >= this.settings.pinnedTtlMs;
    const batch = (held === 0 && this.pullBroughtNothing) || waiting ? 1 : 0;
    if (batch > 0) this.deliveriesAtPull = this.deliveries;
    this.askedBytes += this.largestDelivery * batch;
    return { batch };
  }

  /** This instance's byte budget now: `maxBufferedBytes` shared with the other instances on its connection. */
  private byteBudget(): number {
    return this.budget?.shareOf(this.settings.maxBufferedBytes) ?? this.settings.maxBufferedBytes;
  }

  /** A message left the dispatcher: reopen the gate once a useful batch fits again. */
  private onRoom(): void {
    if (this.stopping) return;
    // A pull withheld for bytes (large messages held, or one waiting to come alone) goes once there is room.
    if (!this.gateShut) return this.gate?.resume();
    const room = this.settings.localBufferCap - this.dispatcher.size;
    if (room < Math.max(1, Math.floor(Math.min(this.settings.maxMessages, this.settings.localBufferCap) / 4))) return;
    this.gateShut = false;
    this.gate?.resume();
  }

  /** Listens for the answers of the pin keep-alives (see `proof-inbox.ts`). */
  private openProofInbox(): void {
    this.proofInbox = openProofInbox(this.nc, {
      answer: (token, msg) => this.keepAliveAnswered(token, msg),
      failed: (err) => {
        // Not allowed to subscribe there: the pin cannot be proven, so starts are not fenced on it.
        this.proofInbox = undefined;
        this.guard.proofUnavailable();
        this.events.onProofUnavailable?.(err.message);
        this.dispatcher.wake();
      },
    });
  }

  /**
   * A consumer state read proves the pin when it names this instance's pin, and says it
   * is lost when it names another. The proof dates from `sentAt`, the last keep-alive
   * sent before the read: that is what kept the pin (a state read refreshes nothing).
   */
  private stateAnswered(info: unknown, pin: string | undefined, sentAt: number): void {
    if (!pin || this.stopping) return;
    const current = currentPin(info);
    if (current === undefined) return;
    this.answered(pin, sentAt, current !== pin);
  }

  /** The server said whether pin `pin` is alive, in answer to a request sent at `sentAt`. */
  private answered(pin: string, sentAt: number, lost: boolean): void {
    this.guard.pinAnswered(pin, sentAt, lost);
    if (lost && !this.stopping && pin === this.guard.pinId) return this.yieldPin();
    this.dispatcher.wake();
  }

  /**
   * While the consumer is at its `max_ack_pending` the server queues a keep-alive
   * behind the pulls already waiting and answers it only when they expire; the pin's
   * proof then comes from a consumer state read (one at a time), sent right after the
   * keep-alive that keeps the pin.
   */
  private proveByState(): void {
    const pin = this.guard.pinId;
    if (this.stateProofOut || !pin || !this.handle || this.stopping) return;
    this.stateProofOut = true;
    const sentAt = this.lastKeepAliveAt;
    this.handle.info(false).then(
      (info) => {
        this.stateProofOut = false;
        this.stateAnswered(info, pin, sentAt);
      },
      () => {
        // no answer (a leader change, no permission): the keep-alives' answers may still prove it
        this.stateProofOut = false;
      },
    );
  }

  /** An answer to a keep-alive: 423 says the pin is not ours; any other status that the consumer served it. */
  private keepAliveAnswered(token: string, msg: Msg): void {
    const sent = this.keepAlivesSent.get(token);
    if (!sent) return;
    this.keepAlivesSent.delete(token);
    const code = msg.headers?.code ?? 0;
    // 503: no consumer answered (it is gone; the consume ends by itself). 409 "Consumer Deleted" likewise.
    if (code === 503 || (code === 409 && /deleted/i.test(msg.headers?.description ?? ""))) return;
    this.answered(sent.pin, sent.sentAt, code === 423);
  }

  /**
   * Three times per PinnedTTL (and at once when a delivery brings a new pin, or while
   * starts are fenced), a pull carrying the pin id resets the server's pin timer:
   * regular pulls may not go out in time (the gate is shut, the instance drains, or a
   * pull's expiry is as long as the TTL, as with Go's timings at AckWait <= 2 s), and a
   * pin that lapses under a live instance lets a standby take the consumer over. It asks
   * for one message of at most one byte without waiting, so it can deliver nothing; its
   * answer (404 or 409 while the pin is ours, 423 when it is not) is the pin's proof.
   * When the last one is still unanswered, a consumer state read follows this one
   * (see {@link PinnedConsumer.proveByState}).
   */
  private keepPin(): void {
    const id = this.guard.pinId;
    if (!id || this.nc.isClosed()) return;
    const now = performance.now();
    let waiting = false;
    for (const sent of this.keepAlivesSent.values()) if (sent.pin === id && now - sent.sentAt >= KEEP_ALIVE_ANSWER_MS) waiting = true;
    this.lastKeepAliveAt = now;
    const request = { batch: 1, max_bytes: 1, no_wait: true, group: PRIORITY_GROUP, id };
    let reply = createInbox(inboxPrefixOf(this.nc));
    if (this.proofInbox) {
      // Answers never sent (a held link) are forgotten after a PinnedTTL: they could prove nothing by then.
      for (const [token, sent] of this.keepAlivesSent) {
        if (now - sent.sentAt < this.settings.pinnedTtlMs) break;
        this.keepAlivesSent.delete(token);
      }
      const token = String(++this.keepAliveCount);
      this.keepAlivesSent.set(token, { pin: id, sentAt: now });
      reply = this.proofInbox.reply(token);
    }
    try {
      this.nc.publish(`${apiPrefix(this.js)}.CONSUMER.MSG.NEXT.${this.stream}.${this.consumer}`, JSON.stringify(request), { reply });
    } catch {
      // the connection is closing: the pin times out, as it would anyway
      return;
    }
    if (waiting || this.guard.pinProof.kind === "none") this.proveByState();
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
    clearTimeout(this.skipLookTimer);
    this.proofInbox?.close();
    this.connectionWatch?.stop?.();
    this.budget?.leave();
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

/** The filter subjects of a consumer config (none: it takes the whole stream). */
function filterSubjectsOf(config: { filter_subject?: string; filter_subjects?: string[] }): string[] {
  return config.filter_subjects ?? (config.filter_subject ? [config.filter_subject] : []);
}

/** Maps `items` with at most `inFlight` calls of `map` at once, keeping their order. */
async function inBatches<T, R>(items: readonly T[], inFlight: number, map: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  for (let i = 0; i < items.length; i += inFlight) out.push(...(await Promise.all(items.slice(i, i + inFlight).map(map))));
  return out;
}

/** The filters of a consumer config as a {@link FilterSet}, or undefined when they cannot be read (no fence then). */
function filterSetOf(config: { filter_subject?: string; filter_subjects?: string[] }): FilterSet | undefined {
  const filters = filterSubjectsOf(config);
  try {
    return new FilterSet(filters);
  } catch {
    return undefined;
  }
}
