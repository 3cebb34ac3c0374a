/**
 * The consume engine both flavours share: one member instance that joins, pulls
 * from its pinned consumer, follows its group's config, rejoins when its consumer
 * disappears, and stops cleanly (handing its pin to a standby at once).
 */
import type { ConsumerConfig, JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { ConsumerGroupError } from "../core/errors.js";
import { PRIORITY_GROUP, bucketName } from "../core/names.js";
import { pinnedTtlMs, pullExpiryMs, rejoinTickMs } from "../core/timing.js";
import type { GroupKind } from "../core/types.js";
import { watchConfig, type ConfigEvent, type Flavour, type StoredConfig } from "./config-store.js";
import type { MeterProvider } from "@opentelemetry/api";
import type { DispatchPolicy } from "./dispatcher.js";
import { createMemberMetrics, type MemberMetrics } from "./metrics.js";
import { PinnedConsumer, type MessageHandler } from "./pinned-consumer.js";
import { ApiCode, apiErrorCode, isPermissionError, permissionMessage, permissionViolation, wrapServerError, type PermissionViolation } from "./server-errors.js";
import { StatusChannel } from "./status-channel.js";

/** What a member instance reports on {@link ConsumerGroupMember.status}. */
export type MemberStatus =
  /** The instance created or bound its consumer and pulls for these partitions. */
  | { type: "joined"; partitions: number[] }
  /** The member has no partitions under the current config (not in membership, over the cap, or an empty mapping); it idles. */
  | { type: "idle"; reason: string }
  /** The member's partitions changed (elastic membership change). */
  | { type: "partitions_changed"; partitions: number[]; assigned: number[]; revoked: number[] }
  /** The config changed without changing this member's partitions. */
  | { type: "config_changed"; revision: number }
  /** This instance is now the pinned (active) one. */
  | { type: "pinned"; pinId: string }
  /** This instance lost its pin and is a standby. */
  | { type: "unpinned" }
  /** A handler threw or rejected (attempt n); it is retried in place, or nak'ed for redelivery in Go's default serial mode. */
  | { type: "handler_error"; error: unknown; subject: string; partition: number; seq: number; attempt: number }
  /** A message failed `maxDeliver` times and was published to the dead-letter subject, then terminated. */
  | { type: "dead_lettered"; subject: string; partition: number; seq: number; deadLetterSubject: string; error: unknown }
  /** A message failed `maxDeliver` times and there is no dead-letter subject: its key (or partition) waits for it. */
  | { type: "blocked"; lane: string; subject: string; partition: number; seq: number; error: unknown }
  /** The member's consumer disappeared under a running instance; it is being recreated. */
  | { type: "consumer_lost"; reason: string }
  /**
   * Creating or using the consumer failed for now; the instance retries. A missing
   * permission (code `PERMISSION_DENIED`) names the subject and the operation.
   */
  | { type: "consumer_error"; error: ConsumerGroupError; retryInMs: number }
  /** The instance stopped; `error` is set when it stopped because of one. */
  | { type: "stopped"; error?: Error };

/** A running member instance. */
export interface ConsumerGroupMember {
  /** The source stream. */
  readonly stream: string;
  /** The group. */
  readonly group: string;
  /** The member this instance runs as. */
  readonly member: string;
  /** The partitions the member owns under the current config. */
  partitions(): number[];
  /**
   * Stops the instance: no new pulls, waits for the handler in flight (bounded),
   * redelivers what was buffered, and unpins if this instance was pinned so a
   * standby takes over at once. Idempotent.
   */
  stop(): Promise<void>;
  /** Resolves when the instance has stopped: to the error that stopped it, or undefined. Never rejects. */
  closed(): Promise<Error | undefined>;
  /** Events from now on, until the instance stops. */
  status(): AsyncIterable<MemberStatus>;
  /** Same as {@link stop}. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** What differs between the flavours. */
export interface MemberDriver<C> {
  readonly kind: GroupKind;
  readonly flavour: Flavour<C>;
  /** The stream the member's consumer lives on. */
  readonly consumerStream: string;
  /** The member's consumer name. */
  readonly consumerName: string;
  /** The consumer config for `config`, or undefined when the member owns no partitions. */
  consumerConfig(config: C): Partial<ConsumerConfig> | undefined;
  /** The member's partitions under `config`. */
  partitions(config: C): number[];
  /** Whether `next` is the same, a membership change, or a change that must stop members. */
  classify(current: C, next: C): "same" | "membership" | ConsumerGroupError;
  /** Creates the consumer; resolves false when it should be retried soon (e.g. 10100). Throws when it cannot be created. */
  createConsumer(jsm: JetStreamManager, config: Partial<ConsumerConfig>): Promise<boolean>;
  /** Runs when the group's config goes away or becomes unusable (static deletes its durable). */
  cleanup(jsm: JetStreamManager): Promise<void>;
}

/** Callbacks on the partitions and the pin of an instance; each may be async and is awaited. */
export interface MemberLifecycle {
  /** The instance started consuming these partitions (newly gained ones only). */
  onAssigned?: (partitions: number[]) => void | Promise<void>;
  /**
   * The instance is giving these partitions up. Called after their in-flight handlers
   * finished and were acked, and before the partitions are released to their new owner.
   */
  onRevoked?: (partitions: number[]) => void | Promise<void>;
  /** This instance became the active (pinned) one of its member. */
  onPinned?: (pinId: string) => void | Promise<void>;
  /** This instance became a standby. */
  onUnpinned?: () => void | Promise<void>;
  /** Something went wrong: a handler error, a consumer error, or the error that stopped the instance. */
  onError?: (error: unknown) => void | Promise<void>;
}

/** Settings of one instance. */
export interface MemberSettings {
  handler: MessageHandler;
  ackWaitMs: number;
  /** How long stop() and rebalances wait for handlers in flight. */
  drainTimeoutMs: number;
  /** False: on a rebalance, give partitions up without waiting for handlers in flight (Go's behaviour). */
  handoff: boolean;
  /** Messages per pull. */
  pullBatch: number;
  /** How handlers run. */
  dispatch: DispatchPolicy;
  lifecycle: MemberLifecycle;
  /** Where metrics go; default: the global OpenTelemetry MeterProvider (a no-op without an SDK). */
  meterProvider?: MeterProvider;
}

type ConsumerInfoWithPin = { priority_groups?: { group: string; pinned_client_id?: string }[] };

const sameSet = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((x) => b.includes(x));
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * One member instance. Every state change runs through one serial queue, so
 * config events, consumer loss, retries and stop never race each other.
 */
export class Member<C> implements ConsumerGroupMember {
  private runner: PinnedConsumer | undefined;
  private readonly channel = new StatusChannel<MemberStatus>();
  private readonly done: Promise<Error | undefined>;
  private resolveDone!: (e: Error | undefined) => void;
  private queue: Promise<void> = Promise.resolve();
  private stopped = false;
  private stopRequested: Promise<void> | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  private retryAttempt = 0;
  /** The partitions this instance consumes right now (its consumer's filters). */
  private active: number[] = [];
  private readonly metrics: MemberMetrics;
  private watch: { events: AsyncIterable<ConfigEvent<C>>; stop(): void } | undefined;
  /** The connection's status iterator, watched for permission violations. */
  private statusWatch: { stop?: () => void } | undefined;
  /** The permissions already reported missing (each is reported once). */
  private readonly reportedPermissions = new Set<string>();

  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly kv: KV,
    private readonly driver: MemberDriver<C>,
    readonly stream: string,
    readonly group: string,
    readonly member: string,
    private current: StoredConfig<C>,
    private readonly settings: MemberSettings,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    this.metrics = createMemberMetrics(
      { stream, group, member },
      { inFlight: () => this.runner?.inFlight ?? 0, partitionsOwned: () => this.active.length },
      settings.meterProvider,
    );
  }

  /**
   * Opens the config watch and joins. With `failFast`, a failure to create the
   * consumer is thrown (static, as Go); otherwise it is retried (elastic).
   */
  async start(failFast: boolean): Promise<void> {
    this.watch = await watchConfig(this.kv, this.driver.flavour, this.stream, this.group, this.current.revision);
    this.watchPermissions();
    try {
      await this.join(failFast);
    } catch (err) {
      await this.shutdown(err instanceof Error ? err : new Error(String(err)), { unpin: false, cleanup: false });
      throw err;
    }
    void this.followConfig();
  }

  partitions(): number[] {
    return this.driver.partitions(this.current.config);
  }

  /**
   * Pulls, acks and flow-control replies are plain publishes: when the user may not
   * make them, no call fails and nats.js reports the violation only on the
   * connection's status. Those that concern this instance are reported as
   * `consumer_error` events (once per missing permission) that name the subject.
   */
  private watchPermissions(): void {
    const nc = (this.js as unknown as { nc?: { status?: () => AsyncIterable<{ type: string; error?: unknown }> } }).nc;
    if (typeof nc?.status !== "function") return;
    const statuses = nc.status();
    this.statusWatch = statuses as { stop?: () => void };
    const { consumerStream, consumerName } = this.driver;
    const silent = [`$JS.API.CONSUMER.MSG.NEXT.${consumerStream}.${consumerName}`, `$JS.ACK.${consumerStream}.${consumerName}.`, `$JS.FC.KV_${bucketName(this.driver.kind)}.`];
    void (async () => {
      try {
        for await (const s of statuses) {
          if (this.stopped) break;
          const violation = s.type === "error" ? permissionViolation(s.error) : undefined;
          if (violation && silent.some((prefix) => violation.subject.startsWith(prefix))) this.reportPermission(violation);
        }
      } catch {
        // the connection closed
      }
    })();
  }

  private reportPermission(violation: PermissionViolation): void {
    if (this.stopped || this.reportedPermissions.has(violation.grant)) return;
    this.reportedPermissions.add(violation.grant);
    const name = `"${this.driver.consumerName}" (member "${this.member}")`;
    let doing = `pulling messages from ${name}`;
    let retryInMs = pullExpiryMs(this.settings.ackWaitMs);
    if (violation.subject.startsWith("$JS.ACK.")) {
      doing = `acknowledging messages of ${name}, which the server will redeliver`;
      retryInMs = this.settings.ackWaitMs;
    } else if (violation.subject.startsWith("$JS.FC.")) {
      doing = `answering the flow control of the config watch of ${name}`;
    }
    const error = new ConsumerGroupError("PERMISSION_DENIED", permissionMessage(doing, violation));
    this.channel.publish({ type: "consumer_error", error, retryInMs });
    void this.callback("onError", error);
  }

  status(): AsyncIterable<MemberStatus> {
    return this.channel.subscribe();
  }

  closed(): Promise<Error | undefined> {
    return this.done;
  }

  stop(): Promise<void> {
    this.stopRequested ??= this.serial(() => this.shutdown(undefined, { unpin: true, cleanup: false }));
    return this.stopRequested;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private serial(action: () => Promise<void>): Promise<void> {
    const next = this.queue.then(action, action);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async followConfig(): Promise<void> {
    const watch = this.watch;
    if (!watch) return;
    try {
      for await (const event of watch.events) {
        await this.serial(() => this.onConfigEvent(event));
        if (this.stopped) return;
      }
    } catch (err) {
      if (!this.stopped) await this.serial(() => this.shutdown(wrapServerError(err, "watching the group's config", "", "WATCH_CLOSED"), { unpin: false, cleanup: false }));
      return;
    }
    if (!this.stopped) {
      const error = new ConsumerGroupError("WATCH_CLOSED", `the ${this.driver.kind} consumer group config watcher has been closed, stopping (was the connection closed?)`);
      await this.serial(() => this.shutdown(error, { unpin: false, cleanup: false }));
    }
  }

  private async onConfigEvent(event: ConfigEvent<C>): Promise<void> {
    if (this.stopped) return;
    if (event.kind === "deleted") return this.shutdown(undefined, { unpin: false, cleanup: true });
    if (event.kind === "invalid") return this.shutdown(event.error, { unpin: false, cleanup: true });
    const verdict = this.driver.classify(this.current.config, event.config);
    if (verdict instanceof ConsumerGroupError) return this.shutdown(verdict, { unpin: false, cleanup: true });
    const before = this.partitions();
    this.current = { config: event.config, revision: event.revision };
    if (verdict === "same") return;
    const after = this.partitions();
    if (sameSet(before, after) && (this.runner !== undefined || after.length === 0)) {
      this.channel.publish({ type: "config_changed", revision: event.revision });
      return;
    }
    this.metrics.rebalanced();
    this.channel.publish({
      type: "partitions_changed",
      partitions: after,
      assigned: after.filter((p) => !before.includes(p)),
      revoked: before.filter((p) => !after.includes(p)),
    });
    await this.rebalance();
  }

  /**
   * Go's `processMembershipChange`: the pinned instance deletes the consumer, the
   * others give it a head start. Before that, handlers in flight finish and are
   * acked (unless handoff is off), and onRevoked runs for the partitions lost.
   */
  private async rebalance(): Promise<void> {
    const runner = this.runner;
    if (runner) {
      const pinned = await this.isPinned(runner.pinId);
      this.runner = undefined;
      await runner.stop(this.settings.handoff ? this.settings.drainTimeoutMs : 0);
      const kept = this.partitions();
      await this.revoke(this.active.filter((p) => !kept.includes(p)));
      if (pinned) await this.deleteConsumer();
      else await sleep(400 + Math.random() * 100);
    }
    await this.join(false);
  }

  private async revoke(partitions: number[]): Promise<void> {
    this.active = this.active.filter((p) => !partitions.includes(p));
    if (partitions.length > 0) await this.callback("onRevoked", partitions);
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

  private async isPinned(pinId: string | undefined): Promise<boolean> {
    if (!pinId) return false;
    try {
      const info = (await this.jsm.consumers.info(this.driver.consumerStream, this.driver.consumerName)) as unknown as ConsumerInfoWithPin;
      return info.priority_groups?.find((g) => g.group === PRIORITY_GROUP)?.pinned_client_id === pinId;
    } catch {
      return false;
    }
  }

  private async deleteConsumer(): Promise<void> {
    try {
      await this.jsm.consumers.delete(this.driver.consumerStream, this.driver.consumerName);
    } catch (err) {
      if (apiErrorCode(err) !== ApiCode.ConsumerNotFound) {
        this.channel.publish({ type: "consumer_error", error: wrapServerError(err, `deleting the member's consumer "${this.driver.consumerName}"`), retryInMs: 0 });
      }
    }
  }

  private async join(failFast: boolean): Promise<void> {
    if (this.stopped || this.runner) return;
    const config = this.driver.consumerConfig(this.current.config);
    if (!config) {
      this.channel.publish({ type: "idle", reason: `member "${this.member}" owns no partitions under the current config` });
      return;
    }
    let created: boolean;
    try {
      created = await this.driver.createConsumer(this.jsm, config);
    } catch (err) {
      if (failFast) throw err;
      const error = wrapServerError(err, `creating the consumer of member "${this.member}"`);
      this.scheduleRetry(rejoinTickMs(this.settings.ackWaitMs), error);
      return;
    }
    if (!created) {
      // Another member still holds some of our partitions (10100) until it has drained and released
      // them: retry every ~100 ms for a few seconds, then back off to Go's tick.
      const delay = this.retryAttempt < 40 ? 50 + Math.random() * 100 : rejoinTickMs(this.settings.ackWaitMs);
      this.scheduleRetry(delay);
      return;
    }
    this.retryAttempt = 0;
    const runner = new PinnedConsumer(
      this.js,
      this.driver.consumerStream,
      this.driver.consumerName,
      this.settings.handler,
      this.settings.dispatch,
      { expiresMs: pullExpiryMs(this.settings.ackWaitMs), maxMessages: this.settings.pullBatch },
      {
        onHandlerError: (error, msg, attempt) => {
          this.metrics.failed(msg.partition);
          this.channel.publish({ type: "handler_error", error, subject: msg.subject, partition: msg.partition, seq: msg.seq, attempt });
          void this.callback("onError", error);
        },
        onDeadLettered: (msg, error, deadLetterSubject) => {
          this.metrics.deadLettered(msg.partition);
          this.channel.publish({ type: "dead_lettered", subject: msg.subject, partition: msg.partition, seq: msg.seq, deadLetterSubject, error });
        },
        onBlocked: (lane, msg, error) => this.channel.publish({ type: "blocked", lane, subject: msg.subject, partition: msg.partition, seq: msg.seq, error }),
        onHandled: (msg, ms) => this.metrics.handled(msg.partition, ms),
        onReceived: (msg) => {
          if (msg.redelivered) this.metrics.redelivered(msg.partition);
        },
        onPinned: (pinId) => {
          this.metrics.pinChanged("pinned");
          this.channel.publish({ type: "pinned", pinId });
          void this.callback("onPinned", pinId);
        },
        onUnpinned: () => {
          this.metrics.pinChanged("unpinned");
          this.channel.publish({ type: "unpinned" });
          void this.callback("onUnpinned");
        },
        onEnded: (reason) => void this.serial(() => this.onConsumerLost(runner, reason)),
      },
    );
    this.runner = runner;
    try {
      await runner.start();
    } catch (err) {
      this.runner = undefined;
      if (failFast) throw wrapServerError(err, `starting to consume from "${this.driver.consumerName}"`);
      this.scheduleRetry(rejoinTickMs(this.settings.ackWaitMs), wrapServerError(err, `starting to consume from "${this.driver.consumerName}"`));
      return;
    }
    const partitions = this.partitions();
    const gained = partitions.filter((p) => !this.active.includes(p));
    this.active = partitions;
    this.channel.publish({ type: "joined", partitions });
    if (gained.length > 0) await this.callback("onAssigned", gained);
  }

  /** The consumer vanished under us (orbit.go#41): forget it and rejoin, instead of idling as a zombie. */
  private async onConsumerLost(runner: PinnedConsumer, reason: string): Promise<void> {
    if (this.stopped || this.runner !== runner) return;
    this.runner = undefined;
    await runner.stop(this.settings.drainTimeoutMs);
    this.channel.publish({ type: "consumer_lost", reason });
    this.scheduleRetry(100 + Math.random() * 100);
  }

  private scheduleRetry(delayMs: number, error?: ConsumerGroupError): void {
    if (this.stopped) return;
    this.retryAttempt += 1;
    if (error) {
      this.channel.publish({ type: "consumer_error", error, retryInMs: Math.round(delayMs) });
      void this.callback("onError", error);
    }
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => void this.serial(() => this.join(false)), delayMs);
  }

  private async shutdown(error: Error | undefined, opts: { unpin: boolean; cleanup: boolean }): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.watch?.stop();
    this.statusWatch?.stop?.();
    const runner = this.runner;
    this.runner = undefined;
    if (runner) {
      const pinned = opts.unpin && (await this.isPinned(runner.pinId));
      await runner.stop(this.settings.drainTimeoutMs);
      await this.revoke(this.active);
      if (pinned) {
        try {
          await this.jsm.consumers.unpin(this.driver.consumerStream, this.driver.consumerName, PRIORITY_GROUP);
        } catch (err) {
          // The pin times out on its own after PinnedTTL; nothing is lost. A missing permission is worth saying.
          if (isPermissionError(err)) {
            const error = wrapServerError(err, `unpinning "${this.driver.consumerName}" on stop (a standby takes over only when the pin times out)`);
            this.channel.publish({ type: "consumer_error", error, retryInMs: pinnedTtlMs(this.settings.ackWaitMs) });
            await this.callback("onError", error);
          }
        }
      }
    }
    if (opts.cleanup) await this.driver.cleanup(this.jsm);
    if (error) await this.callback("onError", error);
    this.metrics.close();
    this.channel.publish(error ? { type: "stopped", error } : { type: "stopped" });
    this.channel.close();
    this.resolveDone(error);
  }
}
