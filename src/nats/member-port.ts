/**
 * What the member controller needs from NATS, as one small interface: the
 * controller is tested against a fake of it, without a server, and
 * `member-adapter.ts` implements it with nats.js.
 */
import type { ConsumerGroupError } from "../core/errors.js";
import type { ConfigEvent, StoredConfig } from "./config-store.js";
import type { PinnedConsumerEvents } from "./pinned-consumer.js";
import type { ParkedKey, ReleaseAction, ReleaseResult } from "./dispatcher.js";

/** A running consume of the member's consumer. */
export interface ConsumeSession {
  /** The pin id this session consumes under, once it has one. */
  readonly pinId: string | undefined;
  /** Messages whose handler runs now. */
  readonly inFlight: number;
  /** Messages held now: buffered plus in progress. */
  readonly held: number;
  /** Starts no more handlers (running ones go on); `stop` follows. */
  pauseStarts(): void;
  /** The blocked keys (see `Dispatcher.parkedKeys`). */
  parkedKeys(): ParkedKey[];
  /** Releases a blocked message (see `Dispatcher.release`). */
  release(seq: number, action: ReleaseAction): Promise<ReleaseResult | undefined>;
  /**
   * Stops pulling and drains (see `PinnedConsumer.stop`).
   *
   * @param timeoutMs - after it, handlers are told to give up (and still awaited); 0: do not wait (no handoff)
   */
  stop(timeoutMs: number): Promise<boolean>;
}

/** A watch of the group's config key. */
export interface ConfigWatch<C> {
  /** The events, until the watch fails (throws) or ends. */
  readonly events: AsyncIterable<ConfigEvent<C>>;
  /** Stops the watch (a watch shared by instances on one connection: leaves it, and the last user stops it). */
  stop(): void;
  /**
   * Stops the watch because it no longer follows the key (a silent watch of a recreated
   * bucket). A shared watch ends for every instance on it, and the next open starts a new one.
   */
  abandon?(): void;
}

/** The result of asking for the member's consumer. */
export type EnsureResult =
  /** The consumer exists with this instance's config. */
  | "ready"
  /** Not now: another owner still holds partitions or the old consumer (10100, or a pinned instance drains); retry soon. */
  | "busy";

/** What a config change means for a member: nothing, new partitions or filters, or a stop (the error says why). */
export type Classification = "same" | "membership" | ConsumerGroupError;

/** What a {@link MemberPort.refreshConsumer} check found. */
export interface RefreshResult {
  /** When to check again (ms), or undefined when nothing needs following. */
  recheckMs: number | undefined;
  /** The consumer needs filters it does not have: drain it and rejoin. */
  rejoin: boolean;
}

/** The NATS side of one member instance. */
export interface MemberPort<C> {
  /** The member's consumer name, for messages. */
  readonly consumerName: string;
  /** Whether a lost consumer stops the instance (static: its durable held the group's position) rather than being recreated. */
  readonly stopWhenConsumerLost: boolean;
  /** The member's partitions under `config`. */
  partitions(config: C): number[];
  /** Whether the member has a consumer under `config` (it owns partitions). */
  wantsConsumer(config: C): boolean;
  /** Whether `next` is the same config, a membership change, or a change that must stop the member. */
  classify(current: C, next: C): Classification | Promise<Classification>;
  /**
   * Whether an instance that has not yet acted on config `older` may skip it and act on
   * `newer` alone (a burst of edits read while a change is handled). Not across a change
   * of the partition count: each repartition is accepted only from the count before it.
   */
  supersedes(older: C, newer: C): boolean;
  /**
   * Creates (or binds to) the member's consumer for `config`.
   *
   * @throws ConsumerGroupError when it cannot be created (a conflict, a permission, the server)
   */
  ensureConsumer(config: C): Promise<EnsureResult>;
  /**
   * Checks the consumer against its stream while it runs (elastic: the filters of a
   * repartition in progress). Filters that are only dropped are updated in place;
   * filters to add need a new consumer (a consumer never goes back for messages
   * stored before a filter was added), so it asks for a rejoin.
   *
   * @throws ConsumerGroupError when the stream cannot be read or the consumer updated (retried)
   */
  refreshConsumer(config: C): Promise<RefreshResult>;
  /** Starts consuming; `events` receive what the consume reports. */
  startConsume(events: PinnedConsumerEvents): Promise<ConsumeSession>;
  /** True when `session` holds the consumer's pin now. */
  isPinned(session: ConsumeSession): Promise<boolean>;
  /**
   * Deletes the member's consumer, only if it is still the one `session` joined, and
   * (unless `unusable`) only while this instance holds its pin or nothing was ever
   * delivered from it. `unusable`: its state is broken (it skipped messages), so it
   * goes whoever holds it.
   */
  deleteJoinedConsumer(session: ConsumeSession, unusable?: boolean): Promise<void>;
  /** Releases the pin so a standby takes over at once. */
  unpin(): Promise<void>;
  /** True when the member's consumer is confirmed gone (not just unreachable). */
  consumerGone(): Promise<boolean>;
  /** Reads the group's config. */
  readConfig(): Promise<StoredConfig<C>>;
  /** Watches the group's config from after `afterRevision`. */
  openWatch(afterRevision: number): Promise<ConfigWatch<C>>;
  /** What to do when the group's config goes away or becomes unusable (static deletes its durable). */
  cleanup(): Promise<void>;
  /** True once the connection is closed for good. */
  connectionClosed(): boolean;
  /** Stops whatever the port watches by itself (the connection's status). */
  close(): void;
}
