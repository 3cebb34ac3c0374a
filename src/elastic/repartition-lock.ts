/**
 * One repartition of a group at a time: a key in the elastic config bucket, created
 * with compare-and-set before the cut and deleted when the repartition is done. Its
 * first token, `pcg/repartition`, is not a valid stream name, so neither Go's group
 * listing nor ours ever shows it, and no member watches it.
 */
import type { KV } from "@nats-io/kv";
import { ConsumerGroupError } from "../core/errors.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../nats/server-errors.js";

/** What the lock records. */
export interface RepartitionLock {
  /** The partition count before. */
  from: number;
  /** The partition count after. */
  to: number;
  /** When it was taken (ISO 8601). */
  started: string;
}

/** The lock's key for a group. */
export function lockKey(stream: string, group: string): string {
  return `pcg/repartition.${stream}.${group}`;
}

/** The lock of a group and its revision, if one is held. */
export async function readLock(kv: KV, stream: string, group: string): Promise<{ lock: RepartitionLock; revision: number } | undefined> {
  let entry;
  try {
    entry = await kv.get(lockKey(stream, group));
  } catch (err) {
    throw wrapServerError(err, `reading the repartition lock of ${stream}.${group}`);
  }
  if (!entry || entry.operation !== "PUT") return undefined;
  try {
    return { lock: entry.json<RepartitionLock>(), revision: entry.revision };
  } catch (err) {
    throw new ConsumerGroupError("CONFIG_DECODE", `the repartition lock of ${stream}.${group} is not JSON: delete the key "${lockKey(stream, group)}" of the elastic bucket if no repartition runs`, { cause: err });
  }
}

/**
 * Takes the lock for a repartition to `lock.to`. A lock held for the same count is
 * shared (a resumed or concurrent run of the same repartition); one that `isStale`
 * calls finished is replaced.
 *
 * @throws ConsumerGroupError `REPARTITION_IN_PROGRESS` when a repartition to another count holds it
 */
export async function takeLock(kv: KV, stream: string, group: string, lock: RepartitionLock, isStale: (held: RepartitionLock) => boolean): Promise<void> {
  const key = lockKey(stream, group);
  for (let attempt = 0; attempt < 10; attempt++) {
    try {
      await kv.create(key, JSON.stringify(lock));
      return;
    } catch (err) {
      const code = apiErrorCode(err);
      if (code !== ApiCode.WrongLastSequence && code !== ApiCode.WrongLastSequenceUnknown && !/exists|wrong last sequence/i.test(String(err))) {
        throw wrapServerError(err, `taking the repartition lock of ${stream}.${group}`);
      }
    }
    const held = await readLock(kv, stream, group);
    if (!held) continue;
    if (held.lock.to === lock.to) return;
    if (!isStale(held.lock)) {
      throw new ConsumerGroupError(
        "REPARTITION_IN_PROGRESS",
        `a repartition of ${stream}.${group} from ${held.lock.from} to ${held.lock.to} partitions (started ${held.lock.started}) is in progress: finish it first by running it again with ${held.lock.to}`,
      );
    }
    try {
      await kv.delete(key, { previousSeq: held.revision });
    } catch {
      // someone else replaced it meanwhile: look again
    }
  }
  throw new ConsumerGroupError("CONFIG_CONFLICT", `couldn't take the repartition lock of ${stream}.${group}: it kept changing; try again`);
}

/** Releases the lock. */
export async function releaseLock(kv: KV, stream: string, group: string): Promise<void> {
  try {
    await kv.purge(lockKey(stream, group));
  } catch (err) {
    throw wrapServerError(err, `releasing the repartition lock of ${stream}.${group}`);
  }
}
