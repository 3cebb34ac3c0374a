/**
 * An in-memory lease bucket and config key for auto-join tests without a server: every
 * {@link FakeLeasePort} on one {@link FakeLeaseBucket} sees the others' writes, by
 * compare-and-set and through its watches, as instances on one NATS bucket do. Faults
 * are injected per call.
 */
import { JetStreamApiError } from "@nats-io/jetstream";
import type { AssignmentPolicy } from "../../src/core/auto-membership.js";
import type { ElasticConsumerGroupConfig } from "../../src/core/types.js";
import type { StoredConfig } from "../../src/nats/config-store.js";
import type { LeaseEvent, LeaseValue } from "../../src/elastic/auto-join/lease-store.js";
import type { LeasePort, LeaseWatch, RegistrationValue, StoredEntry, StoredPolicy } from "../../src/elastic/auto-join/lease-port.js";
import { PushQueue } from "./push-queue.js";

/** The server's answer to a compare-and-set that lost (10071, wrong last sequence). */
export function casConflict(): JetStreamApiError {
  return new JetStreamApiError({ code: 400, err_code: 10071, description: "wrong last sequence" });
}

interface Entry {
  revision: number;
  value: LeaseValue | RegistrationValue | AssignmentPolicy | undefined;
  present: boolean;
}

class FakeWatch extends PushQueue<LeaseEvent> implements LeaseWatch {
  readonly events: AsyncIterable<LeaseEvent> = { [Symbol.asyncIterator]: () => this.iterate() };
  constructor(readonly empty: boolean) {
    super();
  }
}

/** One group's keys of the lease bucket, and its config. */
export class FakeLeaseBucket {
  private seq = 0;
  private readonly entries = new Map<string, Entry>();
  private readonly watches = new Set<FakeWatch>();
  config: StoredConfig<ElasticConsumerGroupConfig>;
  /** Every config written, in order. */
  readonly written: ElasticConsumerGroupConfig[] = [];
  /** How many of the next config writes lose to a concurrent writer (which bumps the revision, changing nothing else). */
  configConflicts = 0;

  constructor(config: ElasticConsumerGroupConfig) {
    this.config = { config, revision: 1 };
  }

  private put(key: string, value: Entry["value"], present: boolean): number {
    const revision = ++this.seq;
    this.entries.set(key, { revision, value, present });
    return revision;
  }

  private emit(event: LeaseEvent): void {
    for (const watch of this.watches) watch.push(event);
  }

  /** The entry under `key`, if any (its value, presence and revision). */
  entry(key: string): Entry | undefined {
    return this.entries.get(key);
  }

  revisionOf(key: string): number {
    return this.entries.get(key)?.revision ?? 0;
  }

  writeLease(member: string, instance: string, value: LeaseValue, previous: number): number {
    const key = leaseKey(member, instance);
    if (this.revisionOf(key) !== previous) throw casConflict();
    const revision = this.put(key, value, true);
    this.emit({ kind: "lease", member, instance, value, expired: false });
    return revision;
  }

  deleteLease(member: string, instance: string): void {
    this.put(leaseKey(member, instance), undefined, false);
    this.emit({ kind: "lease", member, instance, value: undefined, expired: false });
  }

  /** The server removes a lease that was not renewed in time (its TTL): a marker, seen as expired. */
  expireLease(member: string, instance: string): void {
    this.put(leaseKey(member, instance), undefined, false);
    this.emit({ kind: "lease", member, instance, value: undefined, expired: true });
  }

  createRegistration(member: string, value: RegistrationValue): void {
    const key = registrationKey(member);
    if (this.entries.get(key)?.present) throw casConflict();
    this.put(key, value, true);
    this.emit({ kind: "registration", member, present: true });
  }

  deleteRegistration(member: string, previous?: number): void {
    const key = registrationKey(member);
    if (previous !== undefined && this.revisionOf(key) !== previous) throw casConflict();
    this.put(key, undefined, false);
    this.emit({ kind: "registration", member, present: false });
  }

  writePolicy(policy: AssignmentPolicy, previous: number | undefined): void {
    const current = this.entries.get(POLICY_KEY);
    if (previous === undefined ? current?.present === true : current?.revision !== previous) throw casConflict();
    this.put(POLICY_KEY, policy, true);
    this.emit({ kind: "policy", policy });
  }

  /** Live leases that are not leaving, per member. */
  liveLeases(member?: string): LeaseValue[] {
    const found: LeaseValue[] = [];
    for (const [key, entry] of this.entries) {
      if (!key.startsWith("lease/") || !entry.present) continue;
      const lease = entry.value as LeaseValue;
      if (!lease.leaving && (member === undefined || lease.member === member)) found.push(lease);
    }
    return found;
  }

  writeConfig(config: ElasticConsumerGroupConfig, previous: number): number {
    if (this.configConflicts > 0) {
      this.configConflicts -= 1;
      this.config = { ...this.config, revision: this.config.revision + 1 };
      throw casConflict();
    }
    if (previous !== this.config.revision) throw casConflict();
    this.config = { config, revision: this.config.revision + 1 };
    this.written.push(config);
    return this.config.revision;
  }

  /** A watch from the current values on, as `watchGroupLeases` opens one. */
  watch(): FakeWatch {
    const watch = new FakeWatch(this.entries.size === 0);
    for (const [key, entry] of this.entries) {
      const [kind, member, instance] = key.split("/");
      if (kind === "lease") watch.push({ kind: "lease", member: member ?? "", instance: instance ?? "", value: entry.present ? (entry.value as LeaseValue) : undefined, expired: false });
      else if (kind === "auto") watch.push({ kind: "registration", member: member ?? "", present: entry.present });
      else watch.push({ kind: "policy", policy: entry.present ? (entry.value as AssignmentPolicy) : undefined });
    }
    if (!watch.empty) watch.push({ kind: "caught_up" });
    this.watches.add(watch);
    const stop = watch.stop.bind(watch);
    watch.stop = () => {
      this.watches.delete(watch);
      stop();
    };
    return watch;
  }
}

const POLICY_KEY = "policy";
export const leaseKey = (member: string, instance: string): string => `lease/${member}/${instance}`;
export const registrationKey = (member: string): string => `auto/${member}`;

/** A fault for the next calls of one port method: an error to throw, or a promise to wait on first. */
export type Fault = Error | Promise<void>;

/** One auto instance's port onto a {@link FakeLeaseBucket}. */
export class FakeLeasePort implements LeasePort {
  /** Every call, by method name, in order. */
  readonly calls: string[] = [];
  /** Faults of the next calls, per method name, used in turn. */
  readonly faults = new Map<string, Fault[]>();

  constructor(readonly bucket: FakeLeaseBucket) {}

  /** Makes the next calls of `method` fail (or wait), in turn. */
  fail(method: keyof LeasePort, ...faults: Fault[]): void {
    this.faults.set(method, [...(this.faults.get(method) ?? []), ...faults]);
  }

  private async call<T>(method: string, action: () => T): Promise<T> {
    this.calls.push(method);
    const fault = this.faults.get(method)?.shift();
    if (fault instanceof Error) throw fault;
    if (fault) await fault;
    return action();
  }

  count(method: keyof LeasePort): number {
    return this.calls.filter((c) => c === method).length;
  }

  leaseRevision(member: string, instance: string): Promise<number> {
    return this.call("leaseRevision", () => this.bucket.revisionOf(leaseKey(member, instance)));
  }
  writeLease(member: string, instance: string, value: LeaseValue, _ttlMs: number, previous: number): Promise<number> {
    return this.call("writeLease", () => this.bucket.writeLease(member, instance, value, previous));
  }
  deleteLease(member: string, instance: string): Promise<void> {
    return this.call("deleteLease", () => this.bucket.deleteLease(member, instance));
  }
  registration(member: string): Promise<StoredEntry | undefined> {
    return this.call("registration", () => {
      const entry = this.bucket.entry(registrationKey(member));
      return entry ? { revision: entry.revision, present: entry.present } : undefined;
    });
  }
  createRegistration(member: string, value: RegistrationValue): Promise<void> {
    return this.call("createRegistration", () => this.bucket.createRegistration(member, value));
  }
  deleteRegistration(member: string, previous?: number): Promise<void> {
    return this.call("deleteRegistration", () => this.bucket.deleteRegistration(member, previous));
  }
  readPolicy(): Promise<StoredPolicy | undefined> {
    return this.call("readPolicy", () => {
      const entry = this.bucket.entry(POLICY_KEY);
      return entry ? { policy: entry.present ? (entry.value as AssignmentPolicy) : undefined, revision: entry.revision } : undefined;
    });
  }
  writePolicy(policy: AssignmentPolicy, previous: number | undefined): Promise<void> {
    return this.call("writePolicy", () => this.bucket.writePolicy(policy, previous));
  }
  hasLiveLease(member?: string): Promise<boolean> {
    return this.call("hasLiveLease", () => this.bucket.liveLeases(member).length > 0);
  }
  readConfig(): Promise<StoredConfig<ElasticConsumerGroupConfig>> {
    return this.call("readConfig", () => this.bucket.config);
  }
  writeConfig(config: ElasticConsumerGroupConfig, previous: number): Promise<number> {
    return this.call("writeConfig", () => this.bucket.writeConfig(config, previous));
  }
  watch(): Promise<LeaseWatch> {
    return this.call("watch", () => this.bucket.watch());
  }
  ensureBucket(): Promise<void> {
    return this.call("ensureBucket", () => undefined);
  }
}
