/**
 * A small multicast channel: every `subscribe()` gets its own async iterable that
 * receives every event published after it subscribed, until the channel closes.
 *
 * Each subscriber's queue is bounded: an iterator nobody reads must not grow memory
 * without end. Past the cap the oldest events are dropped, and the reader gets one
 * event made by `dropped(count)` in their place, before the events that were kept.
 */
export class StatusChannel<T> {
  private readonly listeners = new Set<{ push: (v: T) => void; end: () => void }>();
  private closed = false;

  /**
   * @param dropped - makes the event that tells a reader how many events it missed
   * @param capacity - events queued per subscriber at most
   */
  constructor(
    private readonly dropped?: (count: number) => T,
    private readonly capacity = 1000,
  ) {}

  /** Sends an event to every current subscriber. */
  publish(event: T): void {
    for (const l of this.listeners) l.push(event);
  }

  /** Ends every subscription; later subscriptions end at once. Idempotent. */
  close(): void {
    this.closed = true;
    for (const l of this.listeners) l.end();
    this.listeners.clear();
  }

  /** A new iterable of events from now on. */
  subscribe(): AsyncIterableIterator<T> {
    const queue: T[] = [];
    let lost = 0;
    let wake: (() => void) | undefined;
    let ended = this.closed;
    const listener = {
      push: (v: T) => {
        queue.push(v);
        if (queue.length > this.capacity) {
          queue.shift();
          lost += 1;
        }
        wake?.();
      },
      end: () => {
        ended = true;
        wake?.();
      },
    };
    if (!ended) this.listeners.add(listener);
    const iterator: AsyncIterableIterator<T> = {
      next: async (): Promise<IteratorResult<T>> => {
        for (;;) {
          if (lost > 0 && this.dropped) {
            const count = lost;
            lost = 0;
            return { value: this.dropped(count), done: false };
          }
          if (queue.length > 0) return { value: queue.shift() as T, done: false };
          if (ended) return { value: undefined, done: true };
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
        }
      },
      return: (): Promise<IteratorResult<T>> => {
        this.listeners.delete(listener);
        ended = true;
        return Promise.resolve({ value: undefined, done: true });
      },
      [Symbol.asyncIterator]: () => iterator,
    };
    return iterator;
  }
}
