/**
 * The lag reading behind the metrics endpoint of `cg elastic consume`: read on
 * demand (a scrape, a `/lag` request), at most once per `maxAgeMs` however many ask
 * (one reading costs a request per partition), with one reading in flight at a time.
 * Each reading measures the drain rate from the one before it, when that one is recent
 * enough; otherwise the reading samples the work queue itself. No timers: nothing is
 * read while nobody asks.
 */
import type { GroupLag } from "../index.js";

/** Reads the lag; `previous` is the last reading, when it is recent enough to measure the rate from. */
export type LagReadFn = (previous: GroupLag | undefined) => Promise<GroupLag>;

/** How often the cache reads. */
export interface LagCacheOptions {
  /** A reading younger than this is served as it is. Default 5 s. */
  maxAgeMs?: number;
  /** The last reading is used to measure the rate only if it is younger than this. Default 60 s. */
  maxWindowMs?: number;
  /** The clock, in ms (a test seam). */
  now?: () => number;
}

/** The default of {@link LagCacheOptions.maxAgeMs}. */
export const LAG_CACHE_MAX_AGE_MS = 5000;
/** The default of {@link LagCacheOptions.maxWindowMs}. */
export const LAG_CACHE_MAX_WINDOW_MS = 60_000;

/** A cached, single-flight lag reading. */
export class LagCache {
  /** The last good reading, and when it was taken (by {@link LagCacheOptions.now}). */
  private good: { at: number; lag: GroupLag } | undefined;
  /** The last reading's error, when the last reading failed. */
  private failure: { at: number; error: Error } | undefined;
  private inFlight: Promise<GroupLag> | undefined;
  private readonly maxAgeMs: number;
  private readonly maxWindowMs: number;
  private readonly now: () => number;

  constructor(
    private readonly read: LagReadFn,
    options: LagCacheOptions = {},
  ) {
    this.maxAgeMs = options.maxAgeMs ?? LAG_CACHE_MAX_AGE_MS;
    this.maxWindowMs = options.maxWindowMs ?? LAG_CACHE_MAX_WINDOW_MS;
    this.now = options.now ?? Date.now;
  }

  /**
   * The lag: the cached reading while it is younger than `maxAgeMs`, else a new one.
   * A failed reading is cached too (its error is thrown again until it expires), so a
   * missing permission does not turn every scrape into a burst of requests.
   */
  get(): Promise<GroupLag> {
    const now = this.now();
    if (this.failure && now - this.failure.at < this.maxAgeMs) return Promise.reject(this.failure.error);
    if (!this.failure && this.good && now - this.good.at < this.maxAgeMs) return Promise.resolve(this.good.lag);
    this.inFlight ??= this.refresh();
    return this.inFlight;
  }

  /** The last good reading, if any, however old. */
  last(): GroupLag | undefined {
    return this.good?.lag;
  }

  private async refresh(): Promise<GroupLag> {
    const previous = this.good && this.now() - this.good.at <= this.maxWindowMs ? this.good.lag : undefined;
    try {
      const lag = await this.read(previous);
      this.good = { at: this.now(), lag };
      this.failure = undefined;
      return lag;
    } catch (err) {
      this.failure = { at: this.now(), error: err instanceof Error ? err : new Error(String(err)) };
      throw err;
    } finally {
      this.inFlight = undefined;
    }
  }
}
