/**
 * What auto-join needs from NATS, as one small interface: `AutoMembership` is tested
 * against a fake of it with mock timers, without a server, and `nats-lease-port.ts`
 * implements it with the lease bucket and the config bucket.
 *
 * Writes that compare-and-set throw the server's error when they lose: `isCasConflict`
 * (in `lease-store.ts`) tells that apart from any other failure. Every other error is
 * the server's too, except where a method says it wraps it.
 */
import type { AssignmentPolicy } from "../../core/auto-membership.js";
import type { ElasticConsumerGroupConfig } from "../../core/types.js";
import type { StoredConfig } from "../../nats/config-store.js";
import type { LeaseEvent, LeaseValue } from "./lease-store.js";

/** A registration of an auto member (the member joined by itself). */
export interface RegistrationValue {
  member: string;
  /** When it registered, ISO-8601. */
  since: string;
}

/** A key's latest entry: its revision, and whether it holds a value (not a delete, a purge, or an expired lease's marker). */
export interface StoredEntry {
  revision: number;
  present: boolean;
}

/** The stored assignment policy of the group. */
export interface StoredPolicy {
  /** Undefined when the entry holds no policy this library knows (or was deleted). */
  policy: AssignmentPolicy | undefined;
  revision: number;
}

/** A watch of every lease-bucket key of the group, from its current values on. */
export interface LeaseWatch {
  /** The events, until the watch fails (throws) or ends (the bucket was replaced). */
  readonly events: AsyncIterable<LeaseEvent>;
  /** True when the group had no key at all: the watch then sends no `caught_up`, and the empty view is up to date. */
  readonly empty: boolean;
  stop(): void;
}

/** The NATS side of one auto instance's group. */
export interface LeasePort {
  /** The revision of the lease key's latest entry, whatever it holds (0: none); wraps read errors. */
  leaseRevision(member: string, instance: string): Promise<number>;
  /**
   * Writes a lease with a per-message TTL, compare-and-set against `previous` (0: the key must not exist).
   *
   * @returns the lease's new revision
   */
  writeLease(member: string, instance: string, value: LeaseValue, ttlMs: number, previous: number): Promise<number>;
  /** Deletes an instance's lease (a stop). */
  deleteLease(member: string, instance: string): Promise<void>;
  /** The member's registration entry, if any; wraps read errors. */
  registration(member: string): Promise<StoredEntry | undefined>;
  /** Creates the member's registration (a conflict: it exists). */
  createRegistration(member: string, value: RegistrationValue): Promise<void>;
  /** Deletes the member's registration; with `previous`, only if it is still that revision. */
  deleteRegistration(member: string, previous?: number): Promise<void>;
  /** The group's policy entry, if any; wraps read errors. */
  readPolicy(): Promise<StoredPolicy | undefined>;
  /** Writes the group's policy: created when `previous` is undefined, else compare-and-set against it. */
  writePolicy(policy: AssignmentPolicy, previous: number | undefined): Promise<void>;
  /**
   * Whether the bucket holds a live lease that is not leaving: of `member`, or of any
   * member of the group when undefined (expired leases' markers are read and skipped).
   * Wraps errors.
   */
  hasLiveLease(member?: string): Promise<boolean>;
  /** Reads the group's config (ConsumerGroupError `GROUP_NOT_FOUND` when it is gone). */
  readConfig(): Promise<StoredConfig<ElasticConsumerGroupConfig>>;
  /**
   * Writes the group's config, compare-and-set against `previous`.
   *
   * @returns the new revision
   */
  writeConfig(config: ElasticConsumerGroupConfig, previous: number): Promise<number>;
  /** Opens a watch of the group's keys; wraps errors. */
  watch(): Promise<LeaseWatch>;
  /** Makes the lease bucket again when it is gone (deleted, or lost with its stream). */
  ensureBucket(): Promise<void>;
}
