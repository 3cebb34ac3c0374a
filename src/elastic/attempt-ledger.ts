/**
 * The attempts bucket of elastic groups: `elastic-consumer-group-attempts`, one KV key
 * per message that failed, `<stream>.<group>.<work-queue sequence>`, holding how many
 * attempts failed so far in all. A rebalance recreates the members' consumers (their
 * delivery counts start over) and gives back what waits for a retry; the count kept
 * here is what makes `retry.maxDeliver` hold while membership changes.
 *
 * Only failures and the settling of a message that failed here cost a request: a
 * message that never fails is never looked up. Records expire after seven days (a
 * message that failed on one member and succeeded on another leaves one behind until
 * then), and a record names the message it counts, so one left by a deleted group
 * never counts for the recreated group's messages.
 */
import { DiscardPolicy, StorageType, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV, type KvEntry } from "@nats-io/kv";
import { attemptsAfterFailure, attemptsBeforeRun, decodeAttemptRecord, encodeAttemptRecord, sameMessage, type AttemptIdentity, type AttemptRecord } from "../core/attempt-record.js";
import { ConsumerGroupError } from "../core/errors.js";
import { bucketName, configKey } from "../core/names.js";
import { msToNanos } from "../core/timing.js";
import type { AttemptCounter } from "../nats/dispatcher.js";
import type { ConsumerGroupMessage } from "../nats/message.js";
import { ApiCode, apiErrorCode, isMessageGone, wrapServerError } from "../nats/server-errors.js";
import { isCasConflict } from "./auto-join/lease-store.js";

/** The attempts bucket's name. */
export const ATTEMPTS_BUCKET = "elastic-consumer-group-attempts";
/** How long a record is kept (the bucket's max age). */
export const ATTEMPT_RECORD_MAX_AGE_MS = 7 * 24 * 3600 * 1000;
/** Compare-and-set tries of one count before giving up (another instance counting the same message at once). */
const CAS_TRIES = 4;
/** Sequences this instance wrote a record for, remembered to delete it on settling (the oldest are forgotten past this). */
const REMEMBERED = 10_000;

/** The attempts bucket, opened. */
export interface AttemptsBucket {
  /** The bucket. */
  kv: KV;
  /**
   * Whether its stream lets a record be removed outright (`deny_delete` false, as this
   * library creates it): a settled record then leaves no delete marker behind. A bucket
   * made by `nats kv add` (or an earlier release of this library) denies it.
   */
  removesRecords: boolean;
}

/** The attempts bucket's stream. */
const ATTEMPTS_STREAM = `KV_${ATTEMPTS_BUCKET}`;

/**
 * Opens the attempts bucket, creating it on first use with the config bucket's replicas.
 *
 * @throws ConsumerGroupError `SERVER_ERROR` (`PERMISSION_DENIED` names the subject)
 */
export async function openAttemptsBucket(js: JetStreamClient, jsm: JetStreamManager): Promise<AttemptsBucket> {
  try {
    const info = await jsm.streams.info(ATTEMPTS_STREAM);
    return { kv: await new Kvm(js).open(ATTEMPTS_BUCKET), removesRecords: info.config.deny_delete !== true };
  } catch (err) {
    if (apiErrorCode(err) !== ApiCode.StreamNotFound) throw wrapServerError(err, `looking up the attempts bucket "${ATTEMPTS_BUCKET}"`);
  }
  let replicas = 1;
  try {
    replicas = (await jsm.streams.info(`KV_${bucketName("elastic")}`)).config.num_replicas;
  } catch (err) {
    throw wrapServerError(err, `reading the replicas of the config bucket "${bucketName("elastic")}"`);
  }
  try {
    // The stream a KV bucket is, made directly: nats.js's bucket create asks $JS.API.INFO first, which a member need not be allowed.
    await jsm.streams.add({
      name: `KV_${ATTEMPTS_BUCKET}`,
      subjects: [`$KV.${ATTEMPTS_BUCKET}.>`],
      max_msgs_per_subject: 1,
      max_age: msToNanos(ATTEMPT_RECORD_MAX_AGE_MS),
      discard: DiscardPolicy.New,
      allow_rollup_hdrs: true,
      // A settled record is removed outright (no delete marker kept for the max age).
      deny_delete: false,
      allow_direct: true,
      num_replicas: replicas,
      storage: StorageType.File,
    });
    return { kv: await new Kvm(js).open(ATTEMPTS_BUCKET), removesRecords: true };
  } catch (err) {
    // Another instance created it first.
    if (apiErrorCode(err) === ApiCode.StreamNameInUse) return openAttemptsBucket(js, jsm);
    throw wrapServerError(err, `creating the attempts bucket "${ATTEMPTS_BUCKET}"`);
  }
}

/** The failed attempts of one elastic group's messages, counted in the attempts bucket. */
export class AttemptLedger implements AttemptCounter {
  private bucket: Promise<AttemptsBucket> | undefined;
  private readonly prefix: string;
  /** Records this instance wrote or read, not yet deleted: stream sequence → the record's revision. */
  private readonly written = new Map<number, number>();

  constructor(
    private readonly js: JetStreamClient,
    private readonly jsm: JetStreamManager,
    stream: string,
    group: string,
  ) {
    this.prefix = configKey(stream, group);
  }

  /** The key of a message's record. */
  keyOf(seq: number): string {
    return `${this.prefix}.${seq}`;
  }

  async failed(msg: ConsumerGroupMessage, localRuns: number): Promise<number> {
    const { kv } = await this.open();
    const key = this.keyOf(msg.seq);
    const identity = identityOf(msg);
    try {
      for (let i = 0; i < CAS_TRIES; i++) {
        const entry = await kv.get(key);
        const record = entry?.operation === "PUT" ? decodeAttemptRecord(entry.string()) : undefined;
        const attempts = attemptsAfterFailure(record, identity, localRuns);
        const revision = await this.write(key, { ...identity, attempts }, entry?.revision ?? 0);
        if (revision === undefined) continue;
        this.remember(msg.seq, revision);
        return attempts;
      }
    } catch (err) {
      throw wrapServerError(err, `counting the failed attempts of stream sequence ${msg.seq} in "${ATTEMPTS_BUCKET}"`);
    }
    throw changingRecord(key);
  }

  async begin(msg: ConsumerGroupMessage, earlierRuns: number, limit: number): Promise<{ counted: number; began: boolean }> {
    const { kv } = await this.open();
    const key = this.keyOf(msg.seq);
    const identity = identityOf(msg);
    try {
      // A first delivery seldom has a record: it is written at once, expecting none (one request);
      // one left by an earlier owner (its consumer was recreated since) makes that fail, and is read.
      let entry: KvEntry | null | undefined = msg.info.deliveryCount === 1 && earlierRuns === 0 ? null : await kv.get(key);
      for (let i = 0; i < CAS_TRIES; i++) {
        const record = entry?.operation === "PUT" ? decodeAttemptRecord(entry.string()) : undefined;
        const counted = attemptsBeforeRun(record, identity, earlierRuns);
        if (counted >= limit) return { counted, began: false };
        const revision = await this.write(key, { ...identity, attempts: counted + 1 }, entry?.revision ?? 0);
        if (revision !== undefined) {
          this.remember(msg.seq, revision);
          return { counted, began: true };
        }
        entry = await kv.get(key);
      }
    } catch (err) {
      throw wrapServerError(err, `counting an attempt of stream sequence ${msg.seq} before it starts in "${ATTEMPTS_BUCKET}"`);
    }
    throw changingRecord(key);
  }

  async uncount(msg: ConsumerGroupMessage, countedBefore: number): Promise<void> {
    const revision = this.written.get(msg.seq);
    if (revision === undefined) return;
    this.written.delete(msg.seq);
    try {
      // Only while the record is still the one written here: another instance that counted it since keeps its count.
      if (countedBefore === 0) await this.remove(revision);
      else await this.write(this.keyOf(msg.seq), { ...identityOf(msg), attempts: countedBefore }, revision);
    } catch (err) {
      throw wrapServerError(err, `taking back the count of stream sequence ${msg.seq}, given back before it ran, in "${ATTEMPTS_BUCKET}"`);
    }
  }

  async recorded(msg: ConsumerGroupMessage): Promise<number> {
    const { kv } = await this.open();
    const entry = await kv.get(this.keyOf(msg.seq));
    const record = entry?.operation === "PUT" ? decodeAttemptRecord(entry.string()) : undefined;
    if (!entry || !record || !sameMessage(record, identityOf(msg))) return 0;
    this.remember(msg.seq, entry.revision); // its record is deleted once the message is settled here
    return record.attempts;
  }

  settled(seq: number): Promise<void> | undefined {
    const revision = this.written.get(seq);
    if (revision === undefined) return undefined;
    this.written.delete(seq);
    return this.open()
      .then(({ kv, removesRecords }) => (removesRecords ? this.remove(revision) : kv.delete(this.keyOf(seq))))
      .catch((err: unknown) => {
        throw wrapServerError(err, `deleting the attempts record of stream sequence ${seq} in "${ATTEMPTS_BUCKET}"`);
      });
  }

  /**
   * Opens the bucket now and checks that it can remove records (`retry.exactAttempts`
   * writes one for every message: kept as delete markers, they would pile up for the
   * bucket's max age).
   *
   * @throws ConsumerGroupError `ATTEMPTS_BUCKET_KEEPS_RECORDS` for a bucket that denies deletes; `SERVER_ERROR`
   */
  async requireRemovableRecords(): Promise<void> {
    const { removesRecords } = await this.open();
    if (removesRecords) return;
    throw new ConsumerGroupError(
      "ATTEMPTS_BUCKET_KEEPS_RECORDS",
      `retry.exactAttempts needs the attempts bucket "${ATTEMPTS_BUCKET}" to allow message deletes, and its stream "${ATTEMPTS_STREAM}" has deny_delete set ` +
        `(it was made by "nats kv add" or an earlier release): with it every handled message would leave a record for 7 days. ` +
        `Delete it while no member runs ("nats stream rm ${ATTEMPTS_STREAM}"; it holds only the counts of messages that failed or are being handled) and the next member recreates it, or consume without exactAttempts`,
    );
  }

  /** Writes a record if its key is still at `expected`; its revision, or undefined when another instance wrote it first. */
  private async write(key: string, record: AttemptRecord, expected: number): Promise<number | undefined> {
    try {
      const ack = await this.js.publish(`$KV.${ATTEMPTS_BUCKET}.${key}`, encodeAttemptRecord(record), { expect: { lastSubjectSequence: expected } });
      return ack.seq;
    } catch (err) {
      if (isCasConflict(err)) return undefined;
      throw err;
    }
  }

  /** Removes the record at `revision` outright; one already replaced (by another instance counting the message) is gone already. */
  private async remove(revision: number): Promise<void> {
    try {
      await this.jsm.streams.deleteMessage(ATTEMPTS_STREAM, revision, false);
    } catch (err) {
      if (isMessageGone(err)) return;
      throw err;
    }
  }

  private remember(seq: number, revision: number): void {
    this.written.delete(seq);
    this.written.set(seq, revision);
    if (this.written.size > REMEMBERED) {
      const oldest = this.written.keys().next();
      if (!oldest.done) this.written.delete(oldest.value);
    }
  }

  /** The bucket, opened (or created) once; a failure is tried again on the next use. */
  private open(): Promise<AttemptsBucket> {
    this.bucket ??= openAttemptsBucket(this.js, this.jsm).catch((err: unknown) => {
      this.bucket = undefined;
      throw err;
    });
    return this.bucket;
  }
}

/** The message a record of `msg` names. */
function identityOf(msg: ConsumerGroupMessage): AttemptIdentity {
  return { seq: msg.seq, subject: msg.rawSubject, storedNanos: String(msg.info.timestampNanos) };
}

/** Several instances kept writing one record at once. */
function changingRecord(key: string): ConsumerGroupError {
  return new ConsumerGroupError("SERVER_ERROR", `the attempts record "${key}" kept changing while it was counted (${CAS_TRIES} tries): another instance counts the same message`);
}
