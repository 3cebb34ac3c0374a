/**
 * How long this process's event loop was blocked lately. The server closes a client
 * that does not read its socket fast enough ("Slow Consumer Detected") without telling
 * it why; a disconnect right after a long block of the loop is most likely that.
 * One timer per process, unref'd, started on first use.
 */

/** How often the probe ticks, in ms. */
const TICK_MS = 100;
/** How far back a block still counts, in ms. */
const WINDOW_MS = 5_000;

let lastTick = 0;
/** Recent lateness samples: [when, how late]. */
const samples: [number, number][] = [];
let timer: NodeJS.Timeout | undefined;

/** Starts the probe (idempotent). */
export function watchLoopLag(): void {
  if (timer) return;
  lastTick = performance.now();
  timer = setInterval(() => {
    const now = performance.now();
    const late = now - lastTick - TICK_MS;
    lastTick = now;
    if (late > TICK_MS) samples.push([now, late]);
    while (samples.length > 0 && (samples[0]?.[0] ?? now) < now - WINDOW_MS) samples.shift();
  }, TICK_MS);
  timer.unref();
}

/**
 * The longest block of the event loop in the last few seconds, in ms, counting the one
 * that may be going on right now (the probe's tick that is late as this runs).
 */
export function recentLoopBlockMs(): number {
  const now = performance.now();
  let worst = timer ? Math.max(0, now - lastTick - TICK_MS) : 0;
  for (const [at, late] of samples) if (at >= now - WINDOW_MS && late > worst) worst = late;
  return Math.round(worst);
}
