/**
 * How busy this process's event loop was lately. The server closes a client that does
 * not read its socket fast enough ("Slow Consumer Detected") without telling it why; a
 * disconnect right after a long block of the loop, or after seconds in which the loop
 * had no idle time to read the socket, is most likely that. One timer per process,
 * unref'd, started on first use.
 */
import { performance, type EventLoopUtilization } from "node:perf_hooks";

/** How often the probe ticks, in ms. */
const TICK_MS = 100;
/** How far back a block still counts, in ms. */
const WINDOW_MS = 5_000;
/** Utilization is measured over about this long before the question. */
const BUSY_WINDOW_MS = 2_000;

let lastTick = 0;
/** Recent lateness samples: [when, how late]. */
const samples: [number, number][] = [];
/** Utilization snapshots, one per second or so: [when, snapshot]. */
const snapshots: [number, EventLoopUtilization][] = [];
let timer: NodeJS.Timeout | undefined;
let ticks = 0;

/** Starts the probe (idempotent). */
export function watchLoopLag(): void {
  if (timer) return;
  lastTick = performance.now();
  snapshots.push([lastTick, performance.eventLoopUtilization()]);
  timer = setInterval(() => {
    const now = performance.now();
    const late = now - lastTick - TICK_MS;
    lastTick = now;
    if (late > TICK_MS) samples.push([now, late]);
    while (samples.length > 0 && (samples[0]?.[0] ?? now) < now - WINDOW_MS) samples.shift();
    if (++ticks % 5 === 0) {
      snapshots.push([now, performance.eventLoopUtilization()]);
      while (snapshots.length > 2 && (snapshots[1]?.[0] ?? now) <= now - BUSY_WINDOW_MS) snapshots.shift();
    }
  }, TICK_MS);
  timer.unref();
}

/** How the event loop fared right before now. */
export interface LoopPressure {
  /** The longest block in the last few seconds, in ms, counting one going on as this runs. */
  blockedMs: number;
  /** The share of the last ~2 s the loop spent running code rather than waiting for I/O (0 to 1). */
  busyShare: number;
}

/** The nats-server's default `max_pending` (64 MiB): it cuts a client that has more than this queued and unread. */
export const SERVER_DEFAULT_MAX_PENDING = 64 * 1024 * 1024;
/** A block of the event loop this long right before a disconnect is taken as a slow-consumer cut. */
export const SLOW_CONSUMER_BLOCK_MS = 250;
/** A loop this busy (share of the last ~2 s) right before a disconnect is taken as a slow-consumer cut. */
export const SLOW_CONSUMER_BUSY_SHARE = 0.9;

/**
 * Whether a disconnect was most likely the server cutting a slow consumer. The server
 * says nothing before it closes; what the client knows is how it read (a long block,
 * a loop with no idle time) and how much it had asked for: pulls outstanding for at
 * least the server's default `max_pending` let the server queue enough to cut it,
 * however idle the loop looked (a loaded machine's scheduler hides the stall from the
 * loop's own clock).
 *
 * @param askedBytes - the bytes this instance's outstanding pulls could still bring
 */
export function likelySlowConsumerCut(pressure: LoopPressure, askedBytes: number): boolean {
  return pressure.blockedMs >= SLOW_CONSUMER_BLOCK_MS || pressure.busyShare >= SLOW_CONSUMER_BUSY_SHARE || askedBytes >= SERVER_DEFAULT_MAX_PENDING;
}

/** The event loop's recent blocks and busy share (zeros before {@link watchLoopLag}). */
export function loopPressure(): LoopPressure {
  if (!timer) return { blockedMs: 0, busyShare: 0 };
  const now = performance.now();
  let worst = Math.max(0, now - lastTick - TICK_MS);
  for (const [at, late] of samples) if (at >= now - WINDOW_MS && late > worst) worst = late;
  const since = snapshots[0]?.[1];
  const busyShare = since ? performance.eventLoopUtilization(since).utilization : 0;
  return { blockedMs: Math.round(worst), busyShare: Math.round(busyShare * 100) / 100 };
}
