/**
 * A small multicast channel: every `subscribe()` gets its own async iterable that
 * receives every event published after it subscribed, until the channel closes.
 */
export class StatusChannel<T> {
  private readonly listeners = new Set<{ push: (v: T) => void; end: () => void }>();
  private closed = false;

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
    let wake: (() => void) | undefined;
    let ended = this.closed;
    const listener = {
      push: (v: T) => {
        queue.push(v);
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
          const value = queue.shift();
          if (value !== undefined) return { value, done: false };
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
