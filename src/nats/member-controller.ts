/**
 * The lifecycle of one member instance, without a server: it joins, consumes,
 * follows its group's config, drains and rejoins on a membership change, recovers a
 * lost consumer or config watch, and stops, with every NATS call behind a
 * {@link MemberPort}. Every state change runs through one serial queue, so config
 * events, consumer loss, retries and stop never race each other.
 */
import { ConsumerGroupError } from "../core/errors.js";
import type { ConfigEvent, StoredConfig } from "./config-store.js";
import { NOOP_METRICS, type MemberMetrics } from "./metrics.js";
import type { ConsumerGroupMessage } from "./message.js";
import type { ConsumerGroupMember, MemberLifecycle, MemberSettings, MemberStatus, ReleaseOptions, ReleaseOutcome } from "./member-types.js";
import type { ParkedKey, ReleaseAction } from "./dispatcher.js";
import type { ConsumeSession, ConfigWatch, MemberPort, RefreshResult } from "./member-port.js";
import type { PinnedConsumerEvents } from "./pinned-consumer.js";
import { isTransientServerError, wrapServerError } from "./server-errors.js";
import { StatusChannel } from "./status-channel.js";
import { optionsObject, quoted } from "../core/option-checks.js";

/** The keys of {@link ReleaseOptions}. */
const RELEASE_KEYS: readonly string[] = Object.keys({ deadLetterSubject: true } satisfies Record<keyof ReleaseOptions, true>);

/** Why an instance stopped. */
export type StopReason =
  | { kind: "requested" }
  | { kind: "config_deleted" }
  | { kind: "config_unusable"; error: ConsumerGroupError }
  | { kind: "consumer_lost"; error: ConsumerGroupError }
  | { kind: "watch_closed"; error: ConsumerGroupError }
  | { kind: "start_failed"; error: ConsumerGroupError };

/** Where an instance is in its lifecycle. */
export type MemberState =
  /** Opening the config watch and joining for the first time. */
  | { name: "starting" }
  /** The member owns no partitions under the current config. */
  | { name: "idle" }
  /** Creating or binding the consumer; retried on a timer while another owner still holds it. */
  | { name: "joining"; attempt: number }
  /** Pulling and handling. */
  | { name: "consuming"; session: ConsumeSession }
  /** Giving partitions up: handlers finish, buffered messages go back, then the consumer is recreated or released. */
  | { name: "draining"; session: ConsumeSession }
  /** Waiting to rejoin after the consumer was lost or a join failed. */
  | { name: "rejoining"; retryInMs: number }
  /** Done; `reason` says why. */
  | { name: "stopped"; reason: StopReason };

/** Timing of the controller's retries, derived from AckWait (see `core/timing.ts`). */
export interface ControllerTiming {
  /** Go's elastic retry tick: AckWait + 500 ms. */
  rejoinTickMs: number;
  /**
   * How often the config is read to check that the watch still follows it. A KV stream
   * deleted and recreated leaves the nats.js watch silent rather than failed.
   */
  configCheckMs: number;
}

/** How soon a failed `refreshConsumer` is tried again. */
const REFRESH_RETRY_MS = 1000;
/**
 * Failed `refreshConsumer` checks in a row that are not reported while they are transient
 * (a timeout, no responders: the stream electing a leader, which takes seconds): the
 * consume goes on meanwhile, and only a failure that lasts is worth an alert.
 */
const QUIET_TRANSIENT_REFRESH_FAILURES = 10;
const WATCH_BACKOFF_MS = [250, 500, 1000, 2000, 5000, 10_000];
const sameSet = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((x) => b.includes(x));

/**
 * One member instance's lifecycle. Implements the public handle.
 */
export class MemberController<C> implements ConsumerGroupMember {
  private state: MemberState = { name: "starting" };
  private readonly channel = new StatusChannel<MemberStatus>((count) => ({ type: "events_dropped", count }));
  private readonly done: Promise<Error | undefined>;
  private resolveDone!: (e: Error | undefined) => void;
  private queue: Promise<void> = Promise.resolve();
  private stopRequested: Promise<void> | undefined;
  private stopAsked = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private joinAttempts = 0;
  /** Partitions whose onAssigned ran and whose onRevoked has not yet. */
  private assigned: number[] = [];
  private watch: ConfigWatch<C> | undefined;
  /** Aborted when the instance stops: ends backoff waits. */
  private readonly life = new AbortController();
  private checkTimer: NodeJS.Timeout | undefined;
  /** A stored config the watch has not delivered, seen at the last check. */
  private suspectRevision: string | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  /** `refreshConsumer` checks failed in a row. */
  private refreshFailures = 0;

  constructor(
    private readonly port: MemberPort<C>,
    readonly stream: string,
    readonly group: string,
    readonly member: string,
    private current: StoredConfig<C>,
    private readonly settings: MemberSettings,
    private readonly timing: ControllerTiming,
    private readonly metrics: MemberMetrics,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  /** The state now (for tests and diagnostics). */
  get currentState(): MemberState {
    return this.state;
  }

  /** Messages whose handler runs now. */
  get inFlight(): number {
    return this.state.name === "consuming" || this.state.name === "draining" ? this.state.session.inFlight : 0;
  }

  /** Messages this instance holds now, buffered plus in progress (diagnostics and tests). */
  get held(): number {
    return this.state.name === "consuming" || this.state.name === "draining" ? this.state.session.held : 0;
  }

  /** The partitions this instance consumes now. */
  get ownedPartitions(): number {
    return this.assigned.length;
  }

  /**
   * Opens the config watch and joins. With `failFast`, a failure to create the
   * consumer is thrown (static, as Go); otherwise it is retried (elastic).
   */
  async start(failFast: boolean): Promise<void> {
    try {
      this.watch = await this.port.openWatch(this.current.revision);
      await this.serial(() => this.join(failFast));
    } catch (err) {
      const error = asGroupError(err, "starting the member");
      await this.serial(() => this.shutdown({ kind: "start_failed", error }, { unpin: false, cleanup: false }));
      throw error;
    }
    void this.followConfig();
    this.scheduleConfigCheck();
  }

  private scheduleConfigCheck(): void {
    if (this.stopped) return;
    this.checkTimer = setTimeout(() => void this.checkConfig(), this.timing.configCheckMs);
    this.checkTimer.unref?.();
  }

  /**
   * Reads the stored config: when it differs from what the watch delivered on two checks
   * in a row (once could be a change the watch is about to deliver), the watch is stale.
   * Stopping it makes `followConfig` re-read the config and open a new one.
   */
  private async checkConfig(): Promise<void> {
    if (this.stopped) return;
    // Revision and content: a recreated bucket starts its revisions again, and may reuse ours.
    const signature = (c: StoredConfig<C>): string => `${c.revision}:${JSON.stringify(c.config)}`;
    let stored: string | undefined;
    try {
      stored = signature(await this.port.readConfig());
    } catch (err) {
      // Gone: a live watch reports the delete itself; a stale one must be replaced to see it.
      if (err instanceof ConsumerGroupError && err.code === "GROUP_NOT_FOUND") stored = "deleted";
    }
    if (stored === undefined || stored === signature(this.current)) {
      this.suspectRevision = undefined;
    } else if (this.suspectRevision === stored) {
      this.suspectRevision = undefined;
      if (this.watch?.abandon) this.watch.abandon();
      else this.watch?.stop();
    } else {
      this.suspectRevision = stored;
    }
    this.scheduleConfigCheck();
  }

  partitions(): number[] {
    return this.port.partitions(this.current.config);
  }

  /** The pin id this instance consumes under while it holds its member's pin (presence answers, diagnostics). */
  currentPinId(): string | undefined {
    return this.state.name === "consuming" ? this.state.session.pinId : undefined;
  }

  parkedKeys(): ParkedKey[] {
    return this.state.name === "consuming" ? this.state.session.parkedKeys() : [];
  }

  async releaseParkedKey(seq: number, options: ReleaseOptions = {}): Promise<ReleaseOutcome> {
    if (!Number.isSafeInteger(seq) || seq < 1) throw new ConsumerGroupError("INVALID_ARGUMENT", `seq must be a stream sequence (a whole number >= 1), got ${quoted(seq)}`);
    const subject = optionsObject(options, "releaseParkedKey options", RELEASE_KEYS)["deadLetterSubject"] as string | undefined;
    const action: ReleaseAction = subject === undefined ? { kind: "retry" } : { kind: "dead_letter", target: this.settings.deadLetterTo(subject) };
    const result = this.state.name === "consuming" ? await this.state.session.release(seq, action) : undefined;
    return { member: this.member, seq, action: action.kind, released: result !== undefined, ...(result !== undefined ? { result } : {}) };
  }

  status(): AsyncIterable<MemberStatus> {
    return this.channel.subscribe();
  }

  closed(): Promise<Error | undefined> {
    return this.done;
  }

  stop(): Promise<void> {
    // A join in progress sees this and starts nothing more; the stop itself waits its turn.
    this.stopAsked = true;
    this.stopRequested ??= this.serial(() => this.shutdown({ kind: "requested" }, { unpin: true, cleanup: false }));
    return this.stopRequested;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  /** Publishes a status event (also used by the adapter for what it watches itself). */
  publish(event: MemberStatus): void {
    // Until the channel closes: a stop reports what its own clean-up ran into (an unpin refused, say).
    this.channel.publish(event);
  }

  /** Reports an error on status (when given) and to onError. */
  reportError(error: ConsumerGroupError, retryInMs: number): void {
    this.publish({ type: "consumer_error", error, retryInMs });
    void this.callback("onError", error);
  }

  private get stopped(): boolean {
    return this.state.name === "stopped";
  }

  private serial(action: () => Promise<void>): Promise<void> {
    const next = this.queue.then(action, action);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** Follows the config; a watch that fails or ends is re-opened with backoff while the connection is open. */
  private async followConfig(): Promise<void> {
    let failures = 0;
    while (!this.stopped) {
      const watch = this.watch;
      let failure: unknown;
      if (watch) {
        const events = readAhead(watch.events, (older, newer) => this.port.supersedes(older, newer));
        try {
          for (;;) {
            const event = await events.next();
            if (event === undefined) break;
            failures = 0;
            await this.serial(() => this.onConfigEvent(event));
            if (this.stopped) return;
          }
          failure = events.failure;
        } catch (err) {
          // Acting on a change failed (the server did not answer a question about it): the watch is re-opened and the config read again.
          failure = err;
        }
      }
      if (this.stopped) return;
      watch?.stop();
      this.watch = undefined;
      if (this.port.connectionClosed()) {
        const error = asGroupError(failure ?? new Error("the connection is closed"), "watching the group's config", "WATCH_CLOSED");
        await this.serial(() => this.shutdown({ kind: "watch_closed", error }, { unpin: false, cleanup: false }));
        return;
      }
      failures = await this.reopenWatch(failures, failure);
    }
  }

  /** Re-reads the config and re-opens the watch, backing off between attempts; returns the failures so far. */
  private async reopenWatch(failures: number, first: unknown): Promise<number> {
    let failure = first;
    for (;;) {
      const retryInMs = WATCH_BACKOFF_MS[Math.min(failures, WATCH_BACKOFF_MS.length - 1)] ?? 10_000;
      failures += 1;
      const error = asGroupError(failure ?? new Error("the watch ended"), "watching the group's config", "WATCH_CLOSED");
      this.publish({ type: "watch_error", error, retryInMs });
      await this.pause(retryInMs);
      if (this.stopped || this.port.connectionClosed()) return failures;
      try {
        const stored = await this.port.readConfig();
        const watch = await this.port.openWatch(stored.revision);
        if (this.stopped) {
          watch.stop();
          return failures;
        }
        this.watch = watch;
        if (stored.revision !== this.current.revision || JSON.stringify(stored.config) !== JSON.stringify(this.current.config)) {
          await this.serial(() => this.onConfigEvent({ kind: "put", config: stored.config, revision: stored.revision }));
        }
        this.publish({ type: "watch_restarted", revision: stored.revision, attempts: failures });
        return 0;
      } catch (err) {
        if (err instanceof ConsumerGroupError && err.code === "GROUP_NOT_FOUND") {
          await this.serial(() => this.onConfigEvent({ kind: "deleted", revision: this.current.revision }));
          return failures;
        }
        failure = err;
      }
    }
  }

  /** Waits `ms`, or less if the instance stops. */
  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (this.life.signal.aborted) return resolve();
      const done = (): void => {
        clearTimeout(timer);
        this.life.signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.life.signal.addEventListener("abort", done, { once: true });
    });
  }

  private async onConfigEvent(event: ConfigEvent<C>): Promise<void> {
    if (this.stopped) return;
    if (event.kind === "deleted") return this.shutdown({ kind: "config_deleted" }, { unpin: false, cleanup: true });
    if (event.kind === "invalid") return this.shutdown({ kind: "config_unusable", error: event.error }, { unpin: false, cleanup: true });
    const verdict = await this.port.classify(this.current.config, event.config);
    if (this.stopped) return;
    if (verdict instanceof ConsumerGroupError) return this.shutdown({ kind: "config_unusable", error: verdict }, { unpin: false, cleanup: true });
    const before = this.partitions();
    this.current = { config: event.config, revision: event.revision };
    if (verdict === "same") return;
    const after = this.partitions();
    const live = this.state.name === "consuming";
    if (sameSet(before, after) && (live || after.length === 0)) {
      this.publish({ type: "config_changed", revision: event.revision });
      // The same partitions may still need other filters (a repartition's transition layout).
      if (live) this.scheduleRefresh(0);
      return;
    }
    this.metrics.rebalanced();
    this.publish({
      type: "partitions_changed",
      partitions: after,
      assigned: after.filter((p) => !before.includes(p)),
      revoked: before.filter((p) => !after.includes(p)),
    });
    await this.rebalance();
  }

  /**
   * Go's `processMembershipChange`, made safe: the pinned instance drains (handlers
   * finish and are acked unless handoff is off) while keeping its pin, then deletes
   * the consumer it joined; the others give it a head start and wait for the new
   * consumer, never deleting one they did not join. onRevoked runs for the partitions lost.
   */
  private async rebalance(replaceUnusable = false): Promise<void> {
    if (this.state.name === "consuming") {
      const session = this.state.session;
      const pinned = await this.pinnedAcrossStop(session, () => session.stop(this.settings.handoff ? this.settings.drainTimeoutMs : 0));
      this.state = { name: "joining", attempt: 0 };
      const kept = this.partitions();
      await this.revoke(this.assigned.filter((p) => !kept.includes(p)));
      if (pinned || replaceUnusable) await this.port.deleteJoinedConsumer(session, replaceUnusable);
      else await this.pause(400 + Math.random() * 100);
    }
    clearTimeout(this.retryTimer);
    this.joinAttempts = 0;
    await this.join(false);
  }

  /**
   * Whether this instance holds the consumer's pin, asked before `stop` (while the pin
   * is surely still held) and, when the instance learned its pin id only during the
   * drain, once more after it: the server may have pinned this instance with a message
   * still on the wire when it first asked, and a single instance that does not know it
   * is pinned would leave its old consumer to the server's inactive threshold.
   */
  private async pinnedAcrossStop(session: ConsumeSession, stop: () => Promise<unknown>, draining = true): Promise<boolean> {
    // Nothing more starts from here, also not while the server is asked (partitions may be given up).
    session.pauseStarts();
    const knownPin = session.pinId;
    const before = await this.port.isPinned(session);
    if (draining) this.state = { name: "draining", session };
    await stop();
    if (before) return true;
    return session.pinId !== undefined && session.pinId !== knownPin && (await this.port.isPinned(session));
  }

  private async revoke(partitions: number[]): Promise<void> {
    if (partitions.length === 0) return;
    this.assigned = this.assigned.filter((p) => !partitions.includes(p));
    await this.callback("onRevoked", partitions);
  }

  private async callback<K extends keyof MemberLifecycle>(name: K, ...args: Parameters<NonNullable<MemberLifecycle[K]>>): Promise<void> {
    const fn = this.settings.lifecycle[name] as ((...a: unknown[]) => void | Promise<void>) | undefined;
    if (!fn) return;
    try {
      await fn(...args);
    } catch (err) {
      if (name !== "onError") await this.callback("onError", err);
    }
  }

  private async join(failFast: boolean): Promise<void> {
    if (this.stopped || this.state.name === "consuming") return;
    if (!this.port.wantsConsumer(this.current.config)) {
      await this.revoke(this.assigned);
      this.state = { name: "idle" };
      this.publish({ type: "idle", reason: `member "${this.member}" owns no partitions under the current config` });
      return;
    }
    this.state = { name: "joining", attempt: this.joinAttempts };
    let ready: "ready" | "busy";
    try {
      ready = await this.port.ensureConsumer(this.current.config);
    } catch (err) {
      if (failFast) throw err;
      return this.retryJoin(this.timing.rejoinTickMs, asGroupError(err, `creating the consumer of member "${this.member}"`));
    }
    if (this.stopped || this.stopAsked) return;
    if (ready === "busy") {
      // Another owner still holds the consumer or some of our partitions until it has drained and
      // released them: retry every ~100 ms for a few seconds, then back off to Go's tick (and say so).
      const slow = this.joinAttempts >= 40;
      const waiting =
        this.joinAttempts === 40
          ? new ConsumerGroupError(
              "CONSUMER_CONFLICT",
              `member "${this.member}" still cannot create its consumer "${this.port.consumerName}": another member still holds some of its partitions, or an earlier "${this.port.consumerName}" with other partitions is still in use (or not yet removed by the server's inactive_threshold); still retrying`,
            )
          : undefined;
      return this.retryJoin(slow ? this.timing.rejoinTickMs : 50 + Math.random() * 100, waiting);
    }
    // Handlers of newly gained partitions start only after onAssigned resolved.
    const partitions = this.partitions();
    // Partitions assigned for a join that never happened and no longer ours (a second change came meanwhile).
    await this.revoke(this.assigned.filter((p) => !partitions.includes(p)));
    const gained = partitions.filter((p) => !this.assigned.includes(p));
    this.assigned = [...this.assigned, ...gained];
    if (gained.length > 0) await this.callback("onAssigned", gained);
    if (this.stopped || this.stopAsked) return;
    const holder: { session?: ConsumeSession } = {};
    let session: ConsumeSession;
    try {
      session = await this.port.startConsume(this.sessionEvents(holder));
    } catch (err) {
      const error = asGroupError(err, `starting to consume from "${this.port.consumerName}"`);
      if (failFast || error.code === "CLIENT_UNSUPPORTED") throw error;
      await this.revoke(this.assigned);
      return this.retryJoin(this.timing.rejoinTickMs, error);
    }
    if (this.stopped) {
      await session.stop(0);
      return;
    }
    holder.session = session;
    this.joinAttempts = 0;
    this.state = { name: "consuming", session };
    this.publish({ type: "joined", partitions });
    this.scheduleRefresh(0);
  }

  /** Checks, in the serial queue, whether the running consumer must follow its stream (see `MemberPort.refreshConsumer`). */
  private scheduleRefresh(delayMs: number): void {
    clearTimeout(this.refreshTimer);
    if (this.stopped) return;
    this.refreshTimer = setTimeout(() => void this.serial(() => this.refresh()), delayMs);
    this.refreshTimer.unref?.();
  }

  private async refresh(): Promise<void> {
    if (this.state.name !== "consuming" || this.stopAsked) return;
    let result: RefreshResult;
    try {
      result = await this.port.refreshConsumer(this.current.config);
      this.refreshFailures = 0;
    } catch (err) {
      this.refreshFailures += 1;
      if (!isTransientServerError(err) || this.refreshFailures > QUIET_TRANSIENT_REFRESH_FAILURES) {
        this.reportError(asGroupError(err, `following the stream of member "${this.member}"`), REFRESH_RETRY_MS);
      }
      result = { recheckMs: REFRESH_RETRY_MS, rejoin: false };
    }
    if (this.state.name !== "consuming" || this.stopAsked) return;
    if (result.rejoin) {
      this.publish({ type: "consumer_refreshed", partitions: this.partitions() });
      return this.rebalance();
    }
    if (result.recheckMs !== undefined) this.scheduleRefresh(result.recheckMs);
  }

  private retryJoin(delayMs: number, error?: ConsumerGroupError): void {
    if (this.stopped) return;
    this.joinAttempts += 1;
    this.state = { name: "rejoining", retryInMs: Math.round(delayMs) };
    if (error) this.reportError(error, Math.round(delayMs));
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.serial(() => this.join(false)), delayMs);
  }

  /** What a consume reports, turned into status events, metrics and callbacks. */
  private sessionEvents(holder: { session?: ConsumeSession }): PinnedConsumerEvents {
    const events: PinnedConsumerEvents = {
      onHandlerError: (error, msg, attempt) => {
        this.metrics.failed(msg.partition);
        this.publish({ type: "handler_error", error, subject: msg.subject, partition: msg.partition, seq: msg.seq, attempt });
        void this.callback("onError", error);
      },
      onDeadLettered: (msg, error, deadLetterSubject) => {
        this.metrics.deadLettered(msg.partition);
        this.publish({ type: "dead_lettered", subject: msg.subject, partition: msg.partition, seq: msg.seq, deadLetterSubject, error });
      },
      onBlocked: (lane, msg, error) => this.publish({ type: "blocked", lane, subject: msg.subject, partition: msg.partition, seq: msg.seq, error }),
      onUnblocked: (lane, msg, outcome) => this.publish({ type: "unblocked", lane, subject: msg.subject, partition: msg.partition, seq: msg.seq, outcome }),
      onParkingFull: (messages, bytes) => this.publish({ type: "parking_full", messages, bytes }),
      onAttemptsUnrecorded: (msg, error) => {
        this.publish({ type: "attempts_unrecorded", subject: msg.subject, partition: msg.partition, seq: msg.seq, error });
        void this.callback("onError", error);
      },
      // Without metrics no handler run is timed at all.
      ...(this.metrics === NOOP_METRICS ? {} : { onHandled: (msg: ConsumerGroupMessage, ms: number) => this.metrics.handled(msg.partition, ms) }),
      onReceived: (msg) => {
        if (msg.redelivered) this.metrics.redelivered(msg.partition);
      },
      onAckFailed: (msg, error) => {
        this.publish({ type: "ack_failed", subject: msg.subject, partition: msg.partition, seq: msg.seq, error });
        void this.callback("onError", error);
      },
      onDrainTimeout: (running, waitedMs) => this.publish({ type: "drain_timeout", running, waitedMs }),
      onPinned: (pinId) => {
        this.metrics.pinChanged("pinned");
        this.publish({ type: "pinned", pinId });
        void this.callback("onPinned", pinId);
      },
      onUnpinned: () => {
        this.metrics.pinChanged("unpinned");
        this.publish({ type: "unpinned" });
        void this.callback("onUnpinned");
      },
      onEnded: (reason) => void this.serial(() => this.onConsumerLost(holder.session, reason)),
      onStartsHeld: (reason, durationMs) => this.publish({ type: "starts_held", reason, durationMs }),
      onSlowConsumer: ({ blockedMs, busyShare }, askedBytes) => this.publish({ type: "slow_consumer", blockedMs, busyShare, askedBytes }),
      onForeignDelivery: (subject, streamSequence) =>
        this.inheritedState(
          holder,
          `the consumer "${this.port.consumerName}" delivered stream sequence ${streamSequence} on "${subject}", outside its filters: the server gave it the state of an earlier consumer of that name; it is not handled here, and the consumer is recreated`,
          false,
        ),
      onSkippedMessage: (skipped, deliveredUpTo) =>
        this.inheritedState(
          holder,
          `the consumer "${this.port.consumerName}" has delivered up to stream sequence ${deliveredUpTo} but never delivered ${skipped.seq} on "${skipped.subject}", which the work queue still holds: the server gave it the state of an earlier consumer of that name; nothing more starts from it, and the consumer is recreated`,
          true,
        ),
      onSkipCheckUnavailable: (reason) =>
        this.reportError(
          new ConsumerGroupError("PERMISSION_DENIED", `the work queue's messages cannot be read (${reason}); a consumer that skipped messages (a create that raced a delete of the same name) is not noticed: allow $JS.API.STREAM.MSG.GET on the work-queue stream`),
          0,
        ),
      onProofUnavailable: (reason) =>
        this.reportError(
          new ConsumerGroupError("PERMISSION_DENIED", `the answers to the pin keep-alive cannot be received (${reason}); starts are not fenced on the pin, so an instance cut off from the server may start messages after its standby took over: allow subscribing to the connection's inbox prefix`),
          0,
        ),
    };
    return events;
  }

  /**
   * The server gave the member's consumer the state of an earlier consumer of its name
   * (a create that raced a delete): reported, and for elastic drained and recreated (as
   * a membership change does). `unusable` (it skipped messages): it is deleted even when
   * this instance is not pinned to it (an idle consumer that skipped everything pins
   * nobody). A static durable holds the group's position: it is reported, never deleted here.
   */
  private inheritedState(holder: { session?: ConsumeSession }, message: string, unusable: boolean): void {
    this.reportError(new ConsumerGroupError("CONSUMER_STATE_FOREIGN", message), 0);
    if (this.port.stopWhenConsumerLost) return;
    void this.serial(async () => {
      if (this.state.name === "consuming" && this.state.session === holder.session) await this.rebalance(unusable);
    });
  }

  /**
   * The consume ended under us: the consumer vanished (orbit.go#41) or the consume
   * failed. Elastic: forget it and rejoin. Static: a durable that is really gone took
   * the group's position with it; recreating it would replay the stream, so the
   * instance stops with `CONSUMER_LOST` instead.
   */
  private async onConsumerLost(ended: ConsumeSession | undefined, reason: string): Promise<void> {
    // Only the session in use: one that ended during a drain or before a rejoin is already done with.
    if (this.state.name !== "consuming" || this.state.session !== ended) return;
    const session = this.state.session;
    this.state = { name: "draining", session };
    await session.stop(this.settings.drainTimeoutMs);
    this.state = { name: "rejoining", retryInMs: 0 };
    await this.revoke(this.assigned);
    if (this.port.stopWhenConsumerLost && (await this.port.consumerGone())) {
      // Deleting a static group deletes its config, then the members' durables: that is a clean stop.
      const config = await this.port.readConfig().catch((err: unknown) => err);
      if (config instanceof ConsumerGroupError && config.code === "GROUP_NOT_FOUND") {
        return this.shutdown({ kind: "config_deleted" }, { unpin: false, cleanup: true });
      }
      const error = new ConsumerGroupError(
        "CONSUMER_LOST",
        `the durable consumer "${this.port.consumerName}" of member "${this.member}" was deleted while it ran (${reason}); its position in the stream went with it, and a new one would replay the stream from the start, so the instance stopped. Recreate the group's member consumers at the position you want, or restart the member to start over`,
      );
      return this.shutdown({ kind: "consumer_lost", error }, { unpin: false, cleanup: false });
    }
    this.publish({ type: "consumer_lost", reason });
    this.retryJoin(100 + Math.random() * 100);
  }

  private async shutdown(reason: StopReason, opts: { unpin: boolean; cleanup: boolean }): Promise<void> {
    if (this.stopped) return;
    const error = "error" in reason ? reason.error : undefined;
    const prior = this.state;
    this.state = { name: "stopped", reason };
    this.life.abort();
    clearTimeout(this.retryTimer);
    clearTimeout(this.checkTimer);
    clearTimeout(this.refreshTimer);
    this.watch?.stop();
    this.port.close();
    if (prior.name === "consuming" || prior.name === "draining") {
      const session = prior.session;
      if (opts.unpin) {
        if (await this.pinnedAcrossStop(session, () => session.stop(this.settings.drainTimeoutMs), false)) await this.port.unpin();
      } else {
        await session.stop(this.settings.drainTimeoutMs);
      }
    }
    await this.revoke(this.assigned);
    if (opts.cleanup) await this.port.cleanup();
    if (error) await this.callback("onError", error);
    this.metrics.close();
    this.channel.publish(error ? { type: "stopped", error } : { type: "stopped" });
    this.channel.close();
    this.resolveDone(error);
  }
}

function asGroupError(err: unknown, what: string, code: ConsumerGroupError["code"] = "SERVER_ERROR"): ConsumerGroupError {
  return wrapServerError(err, what, "", code);
}

/**
 * Reads a config watch ahead of its handling: what arrives while a change is handled
 * waits here, and of several puts waiting in a row only the newest is handed out (a
 * member that lags behind a burst of edits rebalances once, to the latest config, not
 * through every revision in between). Deletions and unusable configs are never skipped,
 * nor a put that `supersedes` says the next one does not replace (a repartition step).
 */
function readAhead<C>(
  source: AsyncIterable<ConfigEvent<C>>,
  supersedes: (older: C, newer: C) => boolean,
): { next(): Promise<ConfigEvent<C> | undefined>; readonly failure: unknown } {
  const waiting: ConfigEvent<C>[] = [];
  let wake: (() => void) | undefined;
  let ended: { failure: unknown } | undefined;
  void (async () => {
    try {
      for await (const event of source) {
        waiting.push(event);
        wake?.();
      }
      ended = { failure: undefined };
    } catch (err) {
      ended = { failure: err };
    }
    wake?.();
  })();
  return {
    async next() {
      for (;;) {
        let event = waiting.shift();
        if (event !== undefined) {
          for (let newer = waiting[0]; event.kind === "put" && newer?.kind === "put" && supersedes(event.config, newer.config); newer = waiting[0]) {
            event = waiting.shift() ?? newer;
          }
          return event;
        }
        if (ended) return undefined;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
      }
    },
    get failure() {
      return ended?.failure;
    },
  };
}
