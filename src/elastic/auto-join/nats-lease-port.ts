/**
 * The {@link LeasePort} of auto-join on NATS: the lease bucket (see `lease-store.ts`
 * for its key layout), lease writes with per-message TTLs through JetStream, and the
 * group's config in the elastic config bucket.
 */
import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV, KvEntry } from "@nats-io/kv";
import type { AssignmentPolicy } from "../../core/auto-membership.js";
import { configKey } from "../../core/names.js";
import type { ElasticConsumerGroupConfig } from "../../core/types.js";
import { ELASTIC, readConfig, type StoredConfig } from "../../nats/config-store.js";
import { wrapServerError } from "../../nats/server-errors.js";
import { GroupLeaseKeys, leaseOf, policyOf, watchGroupLeases, writeLease, type LeaseValue } from "./lease-store.js";
import type { LeasePort, LeaseWatch, RegistrationValue, StoredEntry, StoredPolicy } from "./lease-port.js";

/** {@link LeasePort} over nats.js. */
export class NatsLeasePort implements LeasePort {
  private readonly keys: GroupLeaseKeys;

  /**
   * @param ensure - opens the lease bucket, making it when missing (see `openLeaseBucket`)
   */
  constructor(
    private readonly js: JetStreamClient,
    private readonly leaseKv: KV,
    private readonly configKv: KV,
    private readonly stream: string,
    private readonly group: string,
    private readonly ensure: () => Promise<unknown>,
  ) {
    this.keys = new GroupLeaseKeys(stream, group);
  }

  private async get(key: string): Promise<KvEntry | null> {
    try {
      return await this.leaseKv.get(key);
    } catch (err) {
      throw wrapServerError(err, `reading "${key}" in the lease bucket`);
    }
  }

  async leaseRevision(member: string, instance: string): Promise<number> {
    const existing = await this.get(this.keys.lease(member, instance));
    return existing ? existing.revision : 0;
  }

  writeLease(member: string, instance: string, value: LeaseValue, ttlMs: number, previous: number): Promise<number> {
    return writeLease(this.js, this.keys.lease(member, instance), value, ttlMs, previous);
  }

  async deleteLease(member: string, instance: string): Promise<void> {
    await this.leaseKv.delete(this.keys.lease(member, instance));
  }

  async registration(member: string): Promise<StoredEntry | undefined> {
    const entry = await this.get(this.keys.registration(member));
    return entry ? { revision: entry.revision, present: entry.operation === "PUT" } : undefined;
  }

  async createRegistration(member: string, value: RegistrationValue): Promise<void> {
    await this.leaseKv.create(this.keys.registration(member), JSON.stringify(value));
  }

  async deleteRegistration(member: string, previous?: number): Promise<void> {
    await this.leaseKv.delete(this.keys.registration(member), previous === undefined ? undefined : { previousSeq: previous });
  }

  async readPolicy(): Promise<StoredPolicy | undefined> {
    const entry = await this.get(this.keys.policy);
    return entry ? { policy: policyOf(entry), revision: entry.revision } : undefined;
  }

  async writePolicy(policy: AssignmentPolicy, previous: number | undefined): Promise<void> {
    const value = JSON.stringify({ assignment: policy });
    if (previous === undefined) await this.leaseKv.create(this.keys.policy, value);
    else await this.leaseKv.update(this.keys.policy, value, previous);
  }

  hasLiveLease(member?: string): Promise<boolean> {
    return member === undefined ? this.liveLeaseUnder(this.keys.allLeases, `${this.stream}.${this.group}`) : this.liveLeaseUnder(this.keys.memberLeases(member), `member "${member}"`);
  }

  private async liveLeaseUnder(filter: string, whose: string): Promise<boolean> {
    try {
      const keys: string[] = [];
      for await (const key of await this.leaseKv.keys(filter)) keys.push(key);
      for (const key of keys) {
        const entry = await this.leaseKv.get(key);
        const lease = entry ? leaseOf(entry) : undefined;
        if (lease && !lease.leaving) return true;
      }
      return false;
    } catch (err) {
      throw wrapServerError(err, `listing the leases of ${whose}`);
    }
  }

  readConfig(): Promise<StoredConfig<ElasticConsumerGroupConfig>> {
    return readConfig(this.configKv, ELASTIC, this.stream, this.group);
  }

  writeConfig(config: ElasticConsumerGroupConfig, previous: number): Promise<number> {
    return this.configKv.update(configKey(this.stream, this.group), ELASTIC.encode(config), previous);
  }

  watch(): Promise<LeaseWatch> {
    return watchGroupLeases(this.leaseKv, this.keys);
  }

  async ensureBucket(): Promise<void> {
    await this.ensure();
  }
}
