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
import { Kvm, type KV } from "@nats-io/kv";
import { attemptsAfterFailure, decodeAttemptRecord, encodeAttemptRecord, sameMessage, type AttemptIdentity } from "../core/attempt-record.js";
import { ConsumerGroupError } from "../core/errors.js";
import { bucketName, configKey } from "../core/names.js";
import { msToNanos } from "../core/timing.js";
import type { AttemptCounter } from "../nats/dispatcher.js";
import type { ConsumerGroupMessage } from "../nats/message.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../nats/server-errors.js";
import { isCasConflict } from "./auto-join/lease-store.js";

/** The attempts bucket's name. */
export const ATTEMPTS_BUCKET = "elastic-consumer-group-attempts";
/** How long a record is kept (the bucket's max age). */
export const ATTEMPT_RECORD_MAX_AGE_MS = 7 * 24 * 3600 * 1000;
/** Compare-and-set tries of one count before giving up (another instance counting the same message at once). */
const CAS_TRIES = 4;
/** Sequences this instance wrote a record for, remembered to delete it on settling (the oldest are forgotten past this). */
const REMEMBERED = 10_000;

/**
 * Opens the attempts bucket, creating it on first use with the config bucket's replicas.
 *
 * @throws ConsumerGroupError `SERVER_ERROR` (`PERMISSION_DENIED` names the subject)
 */
export async function openAttemptsBucket(js: JetStreamClient, jsm: JetStreamManager): Promise<KV> {
  try {
    await jsm.streams.info(`KV_${ATTEMPTS_BUCKET}`);
    return await new Kvm(js).open(ATTEMPTS_BUCKET);
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
      deny_delete: true,
      allow_direct: true,
      num_replicas: replicas,
      storage: StorageType.File,
    });
    return await new Kvm(js).open(ATTEMPTS_BUCKET);
  } catch (err) {
    // Another instance created it first.
    if (apiErrorCode(err) === ApiCode.StreamNameInUse) return new Kvm(js).open(ATTEMPTS_BUCKET);
    throw wrapServerError(err, `creating the attempts bucket "${ATTEMPTS_BUCKET}"`);
  }
}

/** The failed attempts of one elastic group's messages, counted in the attempts bucket. */
export class AttemptLedger implements AttemptCounter {
  private bucket: Promise<KV> | undefined;
  private readonly prefix: string;
  /** Sequences whose record this instance wrote, not yet deleted. */
  private readonly written = new Set<number>();

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
    const kv = await this.open();
    const key = this.keyOf(msg.seq);
    const identity: AttemptIdentity = { seq: msg.seq, subject: msg.rawSubject, storedNanos: String(msg.info.timestampNanos) };
    try {
      for (let i = 0; i < CAS_TRIES; i++) {
        const entry = await kv.get(key);
        const record = entry?.operation === "PUT" ? decodeAttemptRecord(entry.string()) : undefined;
        const attempts = attemptsAfterFailure(record, identity, localRuns);
        try {
          await this.js.publish(`$KV.${ATTEMPTS_BUCKET}.${key}`, encodeAttemptRecord({ ...identity, attempts }), { expect: { lastSubjectSequence: entry?.revision ?? 0 } });
        } catch (err) {
          if (isCasConflict(err)) continue;
          throw err;
        }
        this.remember(msg.seq);
        return attempts;
      }
    } catch (err) {
      throw wrapServerError(err, `counting the failed attempts of stream sequence ${msg.seq} in "${ATTEMPTS_BUCKET}"`);
    }
    throw new ConsumerGroupError("SERVER_ERROR", `the attempts record "${key}" kept changing while it was counted (${CAS_TRIES} tries): another instance counts the same message`);
  }

  async recorded(msg: ConsumerGroupMessage): Promise<number> {
    const kv = await this.open();
    const entry = await kv.get(this.keyOf(msg.seq));
    const record = entry?.operation === "PUT" ? decodeAttemptRecord(entry.string()) : undefined;
    const identity: AttemptIdentity = { seq: msg.seq, subject: msg.rawSubject, storedNanos: String(msg.info.timestampNanos) };
    if (!record || !sameMessage(record, identity)) return 0;
    this.remember(msg.seq); // its record is deleted once the message is settled here
    return record.attempts;
  }

  settled(seq: number): Promise<void> | undefined {
    if (!this.written.delete(seq)) return undefined;
    return this.open()
      .then((kv) => kv.delete(this.keyOf(seq)))
      .catch((err: unknown) => {
        throw wrapServerError(err, `deleting the attempts record of stream sequence ${seq} in "${ATTEMPTS_BUCKET}"`);
      });
  }

  private remember(seq: number): void {
    this.written.delete(seq);
    this.written.add(seq);
    if (this.written.size > REMEMBERED) {
      const oldest = this.written.values().next();
      if (!oldest.done) this.written.delete(oldest.value);
    }
  }

  /** The bucket, opened (or created) once; a failure is tried again on the next use. */
  private open(): Promise<KV> {
    this.bucket ??= openAttemptsBucket(this.js, this.jsm).catch((err: unknown) => {
      this.bucket = undefined;
      throw err;
    });
    return this.bucket;
  }
}
