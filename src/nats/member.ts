/**
 * The consume engine both flavours share: a {@link MemberController} (the
 * lifecycle, server-free) wired to NATS through {@link NatsMemberPort}, which makes
 * every call the controller needs with nats.js.
 */
import type { ConsumerConfig, JetStreamClient, JetStreamManager, JsMsg, MsgRequest } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { ConsumerGroupError } from "../core/errors.js";
import { PRIORITY_GROUP, bucketName } from "../core/names.js";
import { pinnedTtlMs, pullExpiryMs, rejoinTickMs } from "../core/timing.js";
import type { GroupKind } from "../core/types.js";
import { readConfig, watchConfig, type Flavour, type StoredConfig } from "./config-store.js";
import { apiPrefix, checkClientShapes, connectionOf, connectionStatus } from "./client-seam.js";
import { createMemberMetrics } from "./metrics.js";
import { MemberController } from "./member-controller.js";
import type { Classification, ConfigWatch, ConsumeSession, EnsureResult, MemberPort, RefreshResult } from "./member-port.js";
import type { MemberSettings } from "./member-types.js";
import type { ParkedKey, ReleaseAction, ReleaseResult } from "./dispatcher.js";
import { currentPin, PinnedConsumer, type PinnedConsumerEvents } from "./pinned-consumer.js";
import type { FirstStored } from "./skipped-message.js";
import { ApiCode, apiErrorCode, isPermissionError, permissionMessage, permissionViolation, wrapServerError, type PermissionViolation } from "./server-errors.js";

export type { ConsumerGroupMember, MemberLifecycle, MemberSettings, MemberStatus } from "./member-types.js";

/** What differs between the flavours. */
export interface MemberDriver<C> {
  /** Static or elastic. */
  readonly kind: GroupKind;
  /** How the flavour's config is stored. */
  readonly flavour: Flavour<C>;
  /** The stream the member's consumer lives on. */
  readonly consumerStream: string;
  /** The member's consumer name. */
  readonly consumerName: string;
  /** Whether a lost consumer stops the instance instead of being recreated. */
  readonly stopWhenConsumerLost: boolean;
  /** The consumer config for `config`, or undefined when the member owns no partitions. */
  consumerConfig(config: C): Partial<ConsumerConfig> | undefined;
  /** The member's partitions under `config`. */
  partitions(config: C): number[];
  /** Whether `next` is the same, a membership change, or a change that must stop members. */
  classify(current: C, next: C, jsm: JetStreamManager): Classification | Promise<Classification>;
  /** Whether an instance that has not yet acted on `older` may act on `newer` alone (see `MemberPort.supersedes`); always when absent. */
  supersedes?(older: C, newer: C): boolean;
  /** Creates the consumer for `groupConfig`; "busy" when it should be retried soon. Throws when it cannot be created. */
  createConsumer(jsm: JetStreamManager, config: Partial<ConsumerConfig>, groupConfig: C): Promise<EnsureResult>;
  /** Checks the running consumer against the group's stream (see `MemberPort.refreshConsumer`). */
  refresh?(jsm: JetStreamManager, groupConfig: C): Promise<RefreshResult>;
  /** Runs when the group's config goes away or becomes unusable (static deletes its durable). */
  cleanup(jsm: JetStreamManager): Promise<void>;
  /** Whether a delivered message is a copy a repartition's source switch replaced (acked, not handled). */
  replacedCopy?(m: JsMsg): boolean;
  /** This instance deleted the member's consumer (the delete is over): its next create need not wait. */
  consumerDeleted?(): void;
  /** The consumer's stream is a work queue (an ack removes the message): its holds settle only without skipped messages (`skipped-message.ts`). */
  readonly acksRemoveMessages?: boolean;
}

/** How often an instance reads its group's config to check that its watch still follows it. */
const CONFIG_CHECK_MS = 10_000;

type ConsumerInfoWithPin = { created?: string; delivered?: { consumer_seq?: number }; priority_groups?: { group: string; pinned_client_id?: string }[] };


/**
 * The lowest message of `filter` that `stream` holds from `fromSeq` on, or undefined:
 * read from the stream's leader (a direct get may be answered by a follower that has
 * not yet removed an acked message).
 */
async function storedFrom(jsm: JetStreamManager, stream: string, filter: string, fromSeq: number): Promise<FirstStored | undefined> {
  // nats.js types STREAM.MSG.GET's request without next_by_subj, which the server reads (as for direct gets).
  const request = { seq: fromSeq, next_by_subj: filter } as unknown as MsgRequest;
  const m = await jsm.streams.getMessage(stream, request);
  return m ? { seq: m.seq, subject: m.subject } : undefined;
}

/** A consume session backed by a {@link PinnedConsumer}. */
class PinnedSession implements ConsumeSession {
  constructor(readonly runner: PinnedConsumer) {}
  get pinId(): string | undefined {
    return this.runner.pinId;
  }
  get inFlight(): number {
    return this.runner.inFlight;
  }
  get held(): number {
    return this.runner.buffered;
  }
  pauseStarts(): void {
    this.runner.pauseStarts();
  }
  parkedKeys(): ParkedKey[] {
    return this.runner.parkedKeys();
  }
  release(seq: number, action: ReleaseAction): Promise<ReleaseResult | undefined> {
    return this.runner.release(seq, action);
  }
  stop(timeoutMs: number): Promise<boolean> {
    return this.runner.stop(timeoutMs);
  }
}

/** The NATS side of a member instance. */
class NatsMemberPort<C> implements MemberPort<C> {
  private statusWatch: { stop?: () => void } | undefined;
  /** The permissions already reported missing (each is reported once). */
  private readonly reportedPermissions = new Set<string>();
  /** Where the adapter reports what it watches itself. */
  report: ((error: ConsumerGroupError, retryInMs: number) => void) | undefined;
  private closed = false;

  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    private readonly kv: KV,
    private readonly driver: MemberDriver<C>,
    private readonly stream: string,
    private readonly group: string,
    private readonly member: string,
    private readonly settings: MemberSettings,
  ) {}

  get consumerName(): string {
    return this.driver.consumerName;
  }

  get stopWhenConsumerLost(): boolean {
    return this.driver.stopWhenConsumerLost;
  }

  partitions(config: C): number[] {
    return this.driver.partitions(config);
  }

  wantsConsumer(config: C): boolean {
    return this.driver.consumerConfig(config) !== undefined;
  }

  classify(current: C, next: C): Classification | Promise<Classification> {
    return this.driver.classify(current, next, this.jsm);
  }

  supersedes(older: C, newer: C): boolean {
    return this.driver.supersedes?.(older, newer) ?? true;
  }

  async ensureConsumer(config: C): Promise<EnsureResult> {
    const consumerConfig = this.driver.consumerConfig(config);
    if (!consumerConfig) return "ready";
    return this.driver.createConsumer(this.jsm, consumerConfig, config);
  }

  async refreshConsumer(config: C): Promise<RefreshResult> {
    return this.driver.refresh ? this.driver.refresh(this.jsm, config) : { recheckMs: undefined, rejoin: false };
  }

  async startConsume(events: PinnedConsumerEvents): Promise<ConsumeSession> {
    const runner = new PinnedConsumer(
      this.js,
      this.driver.consumerStream,
      this.driver.consumerName,
      this.settings.handler,
      this.settings.dispatch,
      {
        expiresMs: pullExpiryMs(this.settings.ackWaitMs),
        maxMessages: this.settings.pullBatch,
        localBufferCap: this.settings.localBufferCap,
        maxBufferedBytes: this.settings.maxBufferedBytes,
        pinnedTtlMs: pinnedTtlMs(this.settings.ackWaitMs),
        ...(this.driver.replacedCopy ? { replacedCopy: (m: JsMsg) => this.driver.replacedCopy?.(m) ?? false } : {}),
        ...(this.driver.acksRemoveMessages ? { storedFrom: (filter: string, fromSeq: number) => storedFrom(this.jsm, this.driver.consumerStream, filter, fromSeq) } : {}),
      },
      events,
    );
    await runner.start();
    return new PinnedSession(runner);
  }

  private async info(): Promise<ConsumerInfoWithPin | undefined> {
    try {
      return await this.jsm.consumers.info(this.driver.consumerStream, this.driver.consumerName);
    } catch {
      return undefined;
    }
  }

  async isPinned(session: ConsumeSession): Promise<boolean> {
    const info = await this.info();
    if (!info) return false;
    if (session.pinId) return currentPin(info) === session.pinId;
    // The consumer this instance joined never delivered a message: no instance has anything running
    // from it, so this one may act for the member (delete it and rejoin at once rather than wait for
    // the server to expire it). A second instance doing the same finds a newer consumer. A pin does
    // not count here: the server pins the first pull of an idle consumer, and the pin id reaches the
    // instance only with a message, so a pin without a delivery is one nobody knows.
    const joined = session instanceof PinnedSession ? session.runner.joinedCreated : undefined;
    return joined !== undefined && info.created === joined && (info.delivered?.consumer_seq ?? 0) === 0;
  }

  async deleteJoinedConsumer(session: ConsumeSession, unusable = false): Promise<void> {
    const joined = session instanceof PinnedSession ? session.runner.joinedCreated : undefined;
    const info = await this.info();
    // Another instance (a Go standby, say) may have recreated it meanwhile: that one is not ours to delete.
    if (!info || !joined || info.created !== joined) return;
    // Asked again now, after the drain and onRevoked. An instance that judged the consumer unused
    // (it had delivered nothing) must not delete it once it delivered anything: another instance may
    // run those messages, with or without a pull waiting (at its buffer cap, between two pulls, in a
    // drain), and its acks would be lost. A delivery that reached nobody (one to this instance's own
    // pull after its subscription went) costs a wait for the server's inactive threshold instead.
    // A pinned instance must not delete it once its pin moved on (it timed out in a long drain).
    const pin = currentPin(info);
    const stillOurs = session.pinId !== undefined ? pin === undefined || pin === session.pinId : (info.delivered?.consumer_seq ?? 0) === 0;
    if (!stillOurs && !unusable) return;
    try {
      await this.jsm.consumers.delete(this.driver.consumerStream, this.driver.consumerName);
      this.driver.consumerDeleted?.();
    } catch (err) {
      if (apiErrorCode(err) !== ApiCode.ConsumerNotFound) this.report?.(wrapServerError(err, `deleting the member's consumer "${this.driver.consumerName}"`), 0);
    }
  }

  async unpin(): Promise<void> {
    try {
      await this.jsm.consumers.unpin(this.driver.consumerStream, this.driver.consumerName, PRIORITY_GROUP);
    } catch (err) {
      // The pin times out on its own after PinnedTTL; nothing is lost. A missing permission is worth saying.
      if (isPermissionError(err)) {
        const error = wrapServerError(err, `unpinning "${this.driver.consumerName}" on stop (a standby takes over only when the pin times out)`);
        this.report?.(error, pinnedTtlMs(this.settings.ackWaitMs));
      }
    }
  }

  async consumerGone(): Promise<boolean> {
    // Twice, a moment apart: a cluster electing a new consumer leader may answer "not found" for a moment.
    for (let i = 0; i < 2; i++) {
      try {
        await this.jsm.consumers.info(this.driver.consumerStream, this.driver.consumerName);
        return false;
      } catch (err) {
        const code = apiErrorCode(err);
        if (code !== ApiCode.ConsumerNotFound && code !== ApiCode.StreamNotFound) return false;
      }
      if (i === 0) await new Promise((r) => setTimeout(r, 250));
    }
    return true;
  }

  readConfig(): Promise<StoredConfig<C>> {
    return readConfig(this.kv, this.driver.flavour, this.stream, this.group);
  }

  openWatch(afterRevision: number): Promise<ConfigWatch<C>> {
    // Instances on one connection share one watcher of the key.
    const sharing = { connection: connectionOf(this.js), apiPrefix: apiPrefix(this.js) };
    return watchConfig(this.kv, this.driver.flavour, this.stream, this.group, afterRevision, sharing);
  }

  cleanup(): Promise<void> {
    return this.driver.cleanup(this.jsm);
  }

  connectionClosed(): boolean {
    return connectionOf(this.js).isClosed();
  }

  close(): void {
    this.closed = true;
    this.statusWatch?.stop?.();
  }

  /**
   * Pulls, acks and flow-control replies are plain publishes: when the user may not
   * make them, no call fails and nats.js reports the violation only on the
   * connection's status. Those that concern this instance are reported as
   * `consumer_error` events (once per missing permission) that name the subject.
   */
  watchPermissions(): void {
    const statuses = connectionStatus(connectionOf(this.js));
    this.statusWatch = statuses;
    const { consumerStream, consumerName } = this.driver;
    // The server that holds a JetStream domain maps `$JS.<domain>.API` to `$JS.API` before it checks
    // permissions, so its violations name `$JS.API`; a server that forwards the prefix (a leaf) names the prefix.
    const pulls = [...new Set(["$JS.API", apiPrefix(this.js)])].map((prefix) => `${prefix}.CONSUMER.MSG.NEXT.${consumerStream}.${consumerName}`);
    const silent = [...pulls, `$JS.ACK.${consumerStream}.${consumerName}.`, `$JS.FC.KV_${bucketName(this.driver.kind)}.`];
    void (async () => {
      try {
        for await (const s of statuses) {
          if (this.closed) break;
          const violation = s.type === "error" ? permissionViolation(s.error) : undefined;
          if (violation && silent.some((prefix) => violation.subject.startsWith(prefix))) this.reportPermission(violation);
        }
      } catch {
        // the connection closed
      }
    })();
  }

  private reportPermission(violation: PermissionViolation): void {
    if (this.closed || this.reportedPermissions.has(violation.grant)) return;
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
    this.report?.(new ConsumerGroupError("PERMISSION_DENIED", permissionMessage(doing, violation)), retryInMs);
  }
}

/**
 * Starts one member instance: checks the client, opens the config watch and joins.
 * With `failFast`, a failure to create the consumer is thrown (static, as Go);
 * otherwise it is retried (elastic).
 *
 * @throws ConsumerGroupError `CLIENT_UNSUPPORTED`, and with `failFast` whatever creating the consumer threw
 */
export async function startMember<C>(
  js: JetStreamClient,
  jsm: JetStreamManager,
  kv: KV,
  driver: MemberDriver<C>,
  names: { stream: string; group: string; member: string },
  current: StoredConfig<C>,
  settings: MemberSettings,
  failFast: boolean,
): Promise<MemberController<C>> {
  checkClientShapes(js);
  const { stream, group, member } = names;
  const port = new NatsMemberPort(js, jsm, kv, driver, stream, group, member, settings);
  const gauges = { inFlight: () => controller.inFlight, partitionsOwned: () => controller.ownedPartitions };
  const metrics = createMemberMetrics(names, gauges, settings.meterProvider);
  const controller: MemberController<C> = new MemberController(
    port,
    stream,
    group,
    member,
    current,
    settings,
    { rejoinTickMs: rejoinTickMs(settings.ackWaitMs), configCheckMs: CONFIG_CHECK_MS },
    metrics,
  );
  port.report = (error, retryInMs) => controller.reportError(error, retryInMs);
  port.watchPermissions();
  await controller.start(failFast);
  return controller;
}
