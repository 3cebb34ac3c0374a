/**
 * One watch shared by every user of the same key on the same owner (a connection):
 * instances on one connection open one KV watcher of their group's config instead of
 * one each. Reference counted: the last user to stop closes it. A failure or an end
 * of the shared watch reaches every user, as their own watch's would. Server-free
 * (the watch is opened through a function), so it is unit tested with a fake.
 */

/** What a shared watch delivers: anything with a revision that only grows. */
export interface Revisioned {
  readonly revision: number;
}

/** An opened watch: its entries, and how to stop it (which ends the iteration). */
export interface RawWatch<E> extends AsyncIterable<E> {
  stop(): void;
}

/** One user's view of a shared watch. */
export interface WatchLease<E> {
  /** The entries after the user's revision, until the shared watch fails (throws) or ends. */
  readonly entries: AsyncIterable<E>;
  /** Leaves the watch (idempotent); the last user leaving stops it. */
  stop(): void;
  /**
   * Stops the shared watch for every user because it no longer follows its key
   * (a bucket deleted and recreated leaves a watch silent): each user sees it end,
   * and the next open starts a new one.
   */
  abandon(): void;
}

/** The entries of one user, queued until it reads them. */
class Subscriber<E> {
  private readonly queue: E[] = [];
  private wake: (() => void) | undefined;
  private ended = false;
  private failure: { error: unknown } | undefined;

  constructor(readonly afterRevision: number) {}

  push(entry: E): void {
    if (this.ended) return;
    this.queue.push(entry);
    this.wake?.();
  }

  end(failure?: { error: unknown }): void {
    if (this.ended) return;
    this.ended = true;
    this.failure = failure;
    this.wake?.();
  }

  async *iterate(): AsyncGenerator<E> {
    for (;;) {
      const next = this.queue.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (this.ended) {
        if (this.failure) throw this.failure.error;
        return;
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = undefined;
    }
  }
}

/** One underlying watch and its users. */
class SharedWatch<E extends Revisioned> {
  readonly subscribers = new Set<Subscriber<E>>();
  /** The revision of the last entry handed out (before any: the revision the watch started after). */
  lastRevision: number;
  /** Set once the watch has failed, ended, or been stopped: no user may join any more. */
  finished = false;
  private watcher: RawWatch<E> | undefined;
  readonly opened: Promise<void>;

  constructor(
    afterRevision: number,
    open: (afterRevision: number) => Promise<RawWatch<E>>,
    private readonly onFinish: () => void,
  ) {
    this.lastRevision = afterRevision;
    this.opened = open(afterRevision).then(
      (watcher) => {
        this.watcher = watcher;
        if (this.finished) watcher.stop();
        else void this.pump(watcher);
      },
      (error: unknown) => {
        this.finish({ error });
        throw error;
      },
    );
    // Every joiner awaits `opened` and sees the error; this keeps it from being reported as unhandled.
    this.opened.catch(() => undefined);
  }

  private async pump(watcher: RawWatch<E>): Promise<void> {
    let failure: { error: unknown } | undefined;
    try {
      for await (const entry of watcher) {
        this.lastRevision = entry.revision;
        for (const subscriber of this.subscribers) {
          if (entry.revision > subscriber.afterRevision) subscriber.push(entry);
        }
      }
    } catch (error) {
      failure = { error };
    }
    this.finish(failure);
  }

  /** Ends every user's entries (with the failure, if any) and leaves the registry. */
  finish(failure?: { error: unknown }): void {
    if (this.finished) return;
    this.finished = true;
    this.onFinish();
    this.watcher?.stop();
    for (const subscriber of this.subscribers) subscriber.end(failure);
    this.subscribers.clear();
  }

  /** Adds a user who has seen everything up to `afterRevision`. */
  join(afterRevision: number): WatchLease<E> {
    const subscriber = new Subscriber<E>(afterRevision);
    this.subscribers.add(subscriber);
    const iterable: AsyncIterable<E> = { [Symbol.asyncIterator]: () => subscriber.iterate() };
    return {
      entries: iterable,
      stop: () => {
        if (!this.subscribers.delete(subscriber)) return;
        subscriber.end();
        if (this.subscribers.size === 0) this.finish();
      },
      abandon: () => {
        subscriber.end();
        this.finish();
      },
    };
  }
}

/**
 * The shared watches of many owners (connections), each keyed by a string that
 * names what is watched (the API prefix, the bucket and the key).
 */
export class SharedWatches<E extends Revisioned> {
  private readonly byOwner = new WeakMap<object, Map<string, SharedWatch<E>>>();

  /**
   * Joins the watch of `key` on `owner`, or opens it. A user who has seen up to
   * `afterRevision` gets every entry after it: it joins the running watch only when
   * that watch has handed out nothing after `afterRevision` (otherwise it would miss
   * those entries) and opens a watch of its own when it has.
   *
   * @param open - opens a watch of the key that delivers every entry after the revision it is given
   * @throws whatever `open` threw
   */
  async join(owner: object, key: string, afterRevision: number, open: (afterRevision: number) => Promise<RawWatch<E>>): Promise<WatchLease<E>> {
    let watches = this.byOwner.get(owner);
    if (!watches) {
      watches = new Map();
      this.byOwner.set(owner, watches);
    }
    const running = watches.get(key);
    let shared: SharedWatch<E>;
    if (running && !running.finished && running.lastRevision <= afterRevision) {
      shared = running;
    } else {
      const map = watches;
      const created: SharedWatch<E> = new SharedWatch(afterRevision, open, () => {
        if (map.get(key) === created) map.delete(key);
      });
      // A user behind the running watch gets its own, unregistered; otherwise it becomes the shared one.
      if (!running || running.finished) map.set(key, created);
      shared = created;
    }
    const lease = shared.join(afterRevision);
    try {
      await shared.opened;
    } catch (err) {
      lease.stop();
      throw err;
    }
    return lease;
  }

  /** How many watches are open for `owner` (diagnostics and tests). */
  openCount(owner: object): number {
    return this.byOwner.get(owner)?.size ?? 0;
  }

  /** How many users the watch of `key` on `owner` has (diagnostics and tests). */
  users(owner: object, key: string): number {
    return this.byOwner.get(owner)?.get(key)?.subscribers.size ?? 0;
  }
}
