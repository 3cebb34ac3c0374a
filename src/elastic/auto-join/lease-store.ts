/**
 * The lease bucket of auto-join: one KV bucket, `elastic-consumer-group-leases`, next
 * to Go's config bucket (Go never reads it). Per group `<stream>.<group>`:
 *
 * - `<stream>.<group>.lease.<member>.<instance>`: one per running auto instance, written
 *   with a per-message TTL (the lease TTL) and renewed by compare-and-set; the server
 *   removes it when it is not renewed in time and leaves a delete marker watchers see.
 * - `<stream>.<group>.auto.<member>`: the member joined by itself; no TTL. A member listed
 *   in the config without it was added by hand and is never touched.
 * - `<stream>.<group>.policy`: the group's assignment policy, written by the first auto instance.
 *
 * `<member>` is the member name in unpadded base64url (member names may hold characters
 * KV keys may not).
 */
import { DiscardPolicy, StorageType, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV, type KvEntry } from "@nats-io/kv";
import type { AssignmentPolicy } from "../../core/auto-membership.js";
import { ConsumerGroupError } from "../../core/errors.js";
import { configKey } from "../../core/names.js";
import { msToNanos } from "../../core/timing.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../../nats/server-errors.js";

/** The lease bucket's name. */
export const LEASE_BUCKET = "elastic-consumer-group-leases";
/** How long the server keeps the delete marker of an expired lease (so watchers see it). */
const MARKER_TTL_MS = 5 * 60_000;

/** A member name as a KV key token. */
export function memberToken(member: string): string {
  return Buffer.from(member, "utf8").toString("base64url");
}

/** The member name of a key token. */
export function memberOfToken(token: string): string {
  return Buffer.from(token, "base64url").toString("utf8");
}

/** What a lease says about its instance. */
export interface LeaseValue {
  /** The member the instance runs as. */
  member: string;
  /** The instance's id. */
  instance: string;
  /** Host and process, for people reading the bucket. */
  host: string;
  pid: number;
  /** When the instance started, ISO-8601. */
  started: string;
  /** Set while the instance leaves gracefully: no longer counted as live. */
  leaving?: boolean;
}

/** One thing the group's lease watch saw. */
export type LeaseEvent =
  /** A lease written, or gone: `expired` tells a lease the server removed (TTL) from one deleted by its instance. */
  | { kind: "lease"; member: string; instance: string; value: LeaseValue | undefined; expired: boolean }
  | { kind: "registration"; member: string; present: boolean }
  | { kind: "policy"; policy: AssignmentPolicy | undefined }
  | { kind: "caught_up" };

/** The keys of one group in the lease bucket. */
export class GroupLeaseKeys {
  readonly prefix: string;
  constructor(stream: string, group: string) {
    this.prefix = configKey(stream, group);
  }
  lease(member: string, instance: string): string {
    return `${this.prefix}.lease.${memberToken(member)}.${instance}`;
  }
  /** Every lease of the group (a key filter). */
  get allLeases(): string {
    return `${this.prefix}.lease.*.*`;
  }
  /** Every lease of `member` (a key filter). */
  memberLeases(member: string): string {
    return `${this.prefix}.lease.${memberToken(member)}.*`;
  }
  registration(member: string): string {
    return `${this.prefix}.auto.${memberToken(member)}`;
  }
  get policy(): string {
    return `${this.prefix}.policy`;
  }
  /** What a key of this group is, or undefined for keys of other groups. */
  parse(key: string): { kind: "lease"; member: string; instance: string } | { kind: "registration"; member: string } | { kind: "policy" } | undefined {
    if (!key.startsWith(`${this.prefix}.`)) return undefined;
    const rest = key.slice(this.prefix.length + 1).split(".");
    if (rest[0] === "lease" && rest.length === 3) return { kind: "lease", member: memberOfToken(rest[1] ?? ""), instance: rest[2] ?? "" };
    if (rest[0] === "auto" && rest.length === 2) return { kind: "registration", member: memberOfToken(rest[1] ?? "") };
    if (rest[0] === "policy" && rest.length === 1) return { kind: "policy" };
    return undefined;
  }
}

/**
 * Opens the lease bucket, creating it when missing: history 1, file storage, per-message
 * TTLs with delete markers, and the replicas of the group's config bucket.
 *
 * @throws ConsumerGroupError `SERVER_ERROR` (a bucket that exists without per-message TTLs says how to fix it)
 */
export async function openLeaseBucket(js: JetStreamClient, jsm: JetStreamManager, replicas: number): Promise<KV> {
  const stream = `KV_${LEASE_BUCKET}`;
  try {
    const info = await jsm.streams.info(stream);
    if (!info.config.allow_msg_ttl || !info.config.subject_delete_marker_ttl) {
      throw new ConsumerGroupError(
        "SERVER_ERROR",
        `the lease bucket "${LEASE_BUCKET}" exists without per-message TTLs and delete markers, which auto-join needs: delete it (nats kv del ${LEASE_BUCKET}) and let an auto instance create it again`,
      );
    }
    return await new Kvm(js).open(LEASE_BUCKET);
  } catch (err) {
    if (err instanceof ConsumerGroupError) throw err;
    if (apiErrorCode(err) !== ApiCode.StreamNotFound) throw wrapServerError(err, `looking up the lease bucket "${LEASE_BUCKET}"`);
  }
  try {
    // The stream a KV bucket is, made directly: nats.js's bucket create asks $JS.API.INFO first, which a member need not be allowed.
    await jsm.streams.add({
      name: stream,
      subjects: [`$KV.${LEASE_BUCKET}.>`],
      max_msgs_per_subject: 1,
      discard: DiscardPolicy.New,
      allow_rollup_hdrs: true,
      allow_direct: true,
      allow_msg_ttl: true,
      subject_delete_marker_ttl: msToNanos(MARKER_TTL_MS),
      num_replicas: replicas,
      storage: StorageType.File,
    });
    return await new Kvm(js).open(LEASE_BUCKET);
  } catch (err) {
    // Another instance created it first with the same settings: open that one.
    if (apiErrorCode(err) === ApiCode.StreamNameInUse) return new Kvm(js).open(LEASE_BUCKET);
    throw wrapServerError(err, `creating the lease bucket "${LEASE_BUCKET}"`);
  }
}

/** Whether an error is a failed compare-and-set (the key moved on, or is gone). */
export function isCasConflict(err: unknown): boolean {
  const code = apiErrorCode(err);
  return code === ApiCode.WrongLastSequence || code === ApiCode.WrongLastSequenceUnknown;
}

/** Whole seconds for the server's per-message TTL, never below 1 s. */
export function ttlHeader(ttlMs: number): string {
  return `${Math.max(1, Math.ceil(ttlMs / 1000))}s`;
}

/**
 * Writes a lease with a TTL, compare-and-set against `previous` (0: the key must not exist).
 *
 * @returns the lease's new revision
 * @throws the server's error; {@link isCasConflict} tells a lost lease apart
 */
export async function writeLease(js: JetStreamClient, key: string, value: LeaseValue, ttlMs: number, previous: number): Promise<number> {
  const ack = await js.publish(`$KV.${LEASE_BUCKET}.${key}`, JSON.stringify(value), { ttl: ttlHeader(ttlMs), expect: { lastSubjectSequence: previous } });
  return ack.seq;
}

/** Decodes a lease entry; undefined for a delete, a purge, an expired lease's marker, or garbage. */
export function leaseOf(entry: KvEntry): LeaseValue | undefined {
  if (entry.operation !== "PUT") return undefined;
  try {
    const value = entry.json<LeaseValue>();
    return typeof value === "object" && value !== null && typeof value.member === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}

/** Decodes a policy entry. */
export function policyOf(entry: KvEntry): AssignmentPolicy | undefined {
  if (entry.operation !== "PUT") return undefined;
  try {
    const value = entry.json<{ assignment?: unknown }>();
    return value.assignment === "sticky" || value.assignment === "balanced" ? value.assignment : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Watches every key of one group, from its current values on.
 */
export async function watchGroupLeases(kv: KV, keys: GroupLeaseKeys): Promise<{ events: AsyncIterable<LeaseEvent>; stop(): void; empty: boolean }> {
  let watcher: Awaited<ReturnType<KV["watch"]>>;
  let empty = true;
  try {
    // With no key at all the watch delivers nothing to say it is up to date: then the empty view is.
    for await (const key of await kv.keys(`${keys.prefix}.>`)) {
      if (key) empty = false;
    }
    watcher = await kv.watch({ key: `${keys.prefix}.>` });
  } catch (err) {
    throw wrapServerError(err, `watching the leases of ${keys.prefix}`);
  }
  const pending: LeaseEvent[] = [];
  async function* events(): AsyncIterable<LeaseEvent> {
    let caughtUp = false;
    for await (const entry of watcher) {
      const parsed = keys.parse(entry.key);
      if (parsed?.kind === "lease") pending.push({ kind: "lease", member: parsed.member, instance: parsed.instance, value: leaseOf(entry), expired: entry.operation === "PURGE" });
      else if (parsed?.kind === "registration") pending.push({ kind: "registration", member: parsed.member, present: entry.operation === "PUT" });
      else if (parsed?.kind === "policy") pending.push({ kind: "policy", policy: policyOf(entry) });
      if (!caughtUp && (entry.isUpdate || entry.delta === 0)) {
        caughtUp = true;
        pending.push({ kind: "caught_up" });
      }
      yield* pending.splice(0);
    }
  }
  return { events: events(), stop: () => watcher.stop(), empty };
}

/**
 * The members of a group that joined by themselves (a registration key): auto-join is
 * this library's, so these are never Go members, whether an instance runs now or its
 * lease is running out. Empty when there is no lease bucket.
 */
export async function registeredAutoMembers(js: JetStreamClient, jsm: JetStreamManager, stream: string, group: string): Promise<Set<string>> {
  const members = new Set<string>();
  try {
    await jsm.streams.info(`KV_${LEASE_BUCKET}`);
  } catch (err) {
    if (apiErrorCode(err) === ApiCode.StreamNotFound) return members;
    throw wrapServerError(err, `looking up the lease bucket "${LEASE_BUCKET}"`);
  }
  const keys = new GroupLeaseKeys(stream, group);
  try {
    const kv = await new Kvm(js).open(LEASE_BUCKET);
    for await (const key of await kv.keys(`${keys.prefix}.auto.*`)) {
      const parsed = keys.parse(key);
      if (parsed?.kind === "registration") members.add(parsed.member);
    }
  } catch (err) {
    throw wrapServerError(err, `listing the auto members of ${keys.prefix}`);
  }
  return members;
}
