/**
 * One repartition of a group at a time: a key in the elastic config bucket, created
 * with compare-and-set before the cut and deleted when the repartition is done. Its
 * first token, `pcg/repartition`, is not a valid stream name, so neither Go's group
 * listing nor ours ever shows it, and no member watches it.
 */
import type { KV } from "@nats-io/kv";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { ConsumerGroupError } from "../../core/errors.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../../nats/server-errors.js";
import { inboxPrefixOf } from "../../nats/client-seam.js";

/** What the lock records. */
export interface RepartitionLock {
  /** The partition count before. */
  from: number;
  /** The partition count after. */
  to: number;
  /** When it was taken (ISO 8601). */
  started: string;
  /** The run holding it now, while one runs (a random id per call). */
  owner?: string;
  /** The owner's last sign of life (ISO 8601), refreshed every {@link HEARTBEAT_MS}. */
  heartbeat?: string;
  /**
   * A subject the owner answers on while it runs. A request there that finds no
   * responder says at once that the owner's connection is gone (a kill -9), so a run
   * started right after one takes over without waiting for the heartbeat to go stale.
   */
  inbox?: string;
}

/** How often the run holding the lock refreshes its heartbeat. */
export const HEARTBEAT_MS = 1_000;
/** A heartbeat older than this belongs to a run that died (or is frozen): another run may take over. */
export const LOCK_STALE_MS = 5_000;

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

/** Whether a lock's owner showed a sign of life within {@link LOCK_STALE_MS} of `now`. */
export function ownerAlive(lock: RepartitionLock, now: number): boolean {
  const beat = lock.owner ? Date.parse(lock.heartbeat ?? "") : Number.NaN;
  return Number.isFinite(beat) && now - beat < LOCK_STALE_MS;
}

/**
 * The lock as held by one run: it keeps the heartbeat fresh in the background until
 * {@link LockHandle.stop}, and notices when another run took it over (then every
 * {@link LockHandle.assertHeld} throws, so this run changes nothing more).
 */
export class LockHandle {
  private timer: NodeJS.Timeout | undefined;
  private lost: ConsumerGroupError | undefined;
  private beating: Promise<void> = Promise.resolve();

  constructor(
    private readonly kv: KV,
    private readonly key: string,
    private readonly lock: RepartitionLock,
    private revision: number,
    private readonly presence: Subscription,
  ) {
    this.timer = setInterval(() => {
      this.beating = this.beating.then(() => this.beat());
    }, HEARTBEAT_MS);
    this.timer.unref?.();
  }

  private async beat(): Promise<void> {
    if (this.lost || !this.timer) return;
    try {
      this.revision = await this.kv.update(this.key, JSON.stringify({ ...this.lock, heartbeat: new Date().toISOString() }), this.revision);
    } catch (err) {
      if (isWrongRevision(err)) {
        this.lost = new ConsumerGroupError(
          "REPARTITION_IN_PROGRESS",
          `another run took the repartition of ${this.key.slice("pcg/repartition.".length)} to ${this.lock.to} partitions over (this one gave no sign of life for ${LOCK_STALE_MS / 1000} s): this run stops; the other finishes it`,
        );
      }
      // Anything else (a moment without the server): the next beat tries again.
    }
  }

  /** Throws when another run took the lock over. */
  assertHeld(): void {
    if (this.lost) throw this.lost;
  }

  /**
   * Stops the heartbeat. A run that stops before the end (aborted, or an error) marks
   * the lock ownerless, so the next run takes it over at once.
   */
  async stop(finished: boolean): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.beating;
    this.presence.unsubscribe();
    if (finished || this.lost) return;
    const { owner: _owner, heartbeat: _heartbeat, ...ownerless } = this.lock;
    await this.kv.update(this.key, JSON.stringify(ownerless), this.revision).catch(() => undefined);
  }
}

function isWrongRevision(err: unknown): boolean {
  const code = apiErrorCode(err);
  return code === ApiCode.WrongLastSequence || code === ApiCode.WrongLastSequenceUnknown || /exists|wrong last sequence/i.test(String(err));
}

/**
 * Takes the lock for a repartition to `lock.to`. A lock held for the same count by a
 * run that is alive (a fresh heartbeat) is refused; one whose run died (no heartbeat
 * for {@link LOCK_STALE_MS}: this waits that long at most) or stopped is taken over,
 * which is how a run resumes. A lock for another count that `isStale` calls finished
 * is replaced.
 *
 * @throws ConsumerGroupError `REPARTITION_IN_PROGRESS` when a repartition to another count holds it, or a live run of the same one
 */
export async function takeLock(kv: KV, nc: NatsConnection, stream: string, group: string, lock: RepartitionLock, isStale: (held: RepartitionLock) => boolean): Promise<LockHandle> {
  const key = lockKey(stream, group);
  const owner = Math.random().toString(36).slice(2, 12) + Date.now().toString(36);
  // Under the connection's inbox prefix: a principal limited to its own prefix can subscribe there.
  const inbox = `${inboxPrefixOf(nc) ?? "_INBOX"}.pcg-repartition.${owner}`;
  const presence = nc.subscribe(inbox, { callback: (_err, msg) => void msg.respond("alive") });
  const mine = (base: RepartitionLock): RepartitionLock => ({ from: base.from, to: base.to, started: base.started, owner, heartbeat: new Date().toISOString(), inbox });
  const handle = async (taken: RepartitionLock, revision: Promise<number>): Promise<LockHandle> => new LockHandle(kv, key, taken, await revision, presence);
  const deadline = Date.now() + LOCK_STALE_MS + 2 * HEARTBEAT_MS;
  try {
    await nc.flush();
    for (let attempt = 0; attempt < 100; attempt++) {
      try {
        const fresh = mine(lock);
        return await handle(fresh, kv.create(key, JSON.stringify(fresh)));
      } catch (err) {
        if (!isWrongRevision(err)) throw wrapServerError(err, `taking the repartition lock of ${stream}.${group}`);
      }
      const held = await readLock(kv, stream, group);
      if (!held) continue;
      if (held.lock.to === lock.to) {
        if (!ownerAlive(held.lock, Date.now()) || (await ownerGone(nc, held.lock))) {
          const taken = mine(held.lock);
          try {
            return await handle(taken, kv.update(key, JSON.stringify(taken), held.revision));
          } catch (err) {
            if (!isWrongRevision(err)) throw wrapServerError(err, `taking over the repartition lock of ${stream}.${group}`);
            continue;
          }
        }
        if (Date.now() >= deadline) {
          const seen = Math.round((Date.now() - Date.parse(held.lock.heartbeat ?? "")) / 100) / 10;
          throw new ConsumerGroupError(
            "REPARTITION_IN_PROGRESS",
            `another run of this repartition of ${stream}.${group} to ${held.lock.to} partitions is running right now (its last sign of life ${seen} s ago): let it finish, or stop it and run this again`,
          );
        }
        // Its run may have just died: its heartbeat goes stale within LOCK_STALE_MS.
        await new Promise((resolve) => setTimeout(resolve, HEARTBEAT_MS / 2));
        continue;
      }
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
  } catch (err) {
    presence.unsubscribe();
    throw err;
  }
}

/**
 * True when the owner's presence subject has no responder: its connection is gone. A
 * reply, a timeout or any other failure (no permission for the request) says nothing,
 * and the heartbeat decides.
 */
async function ownerGone(nc: NatsConnection, lock: RepartitionLock): Promise<boolean> {
  if (!lock.inbox) return false;
  try {
    await nc.request(lock.inbox, "", { timeout: 1000 });
    return false;
  } catch (err) {
    return (err as { isNoResponders?: () => boolean }).isNoResponders?.() === true;
  }
}

/** Releases the lock. */
export async function releaseLock(kv: KV, stream: string, group: string): Promise<void> {
  try {
    await kv.purge(lockKey(stream, group));
  } catch (err) {
    throw wrapServerError(err, `releasing the repartition lock of ${stream}.${group}`);
  }
}
