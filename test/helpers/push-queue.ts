/**
 * An async iterable fed by hand, for fakes of watches in tests without a server:
 * `push` an item (or an Error, which the iteration throws), `stop` to end it.
 */
export class PushQueue<T> {
  private queue: (T | Error)[] = [];
  private wake: (() => void) | undefined;
  /** True once {@link PushQueue.stop} was called. */
  stopped = false;

  /** Yields what was pushed, in order, until stopped (and drained) or an Error comes. */
  async *iterate(): AsyncGenerator<T> {
    for (;;) {
      const next = this.queue.shift();
      if (next instanceof Error) throw next;
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (this.stopped) return;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  /** Adds an item (an Error ends the iteration with it). */
  push(item: T | Error): void {
    this.queue.push(item);
    this.wake?.();
  }

  /** Ends the iteration once what was pushed is read. */
  stop(): void {
    this.stopped = true;
    this.wake?.();
  }
}
