/**
 * The timings orbit.go/pcgroups v0.2.x derives from a consumer's AckWait. Shared
 * by every instance of a member, Go or TypeScript, so they must agree.
 */

/** AckWait when the template has none: 5 s, in ms. */
export const DEFAULT_ACK_WAIT_MS = 5000;
const NANOS_PER_MS = 1_000_000;

/**
 * The effective AckWait in ms: the template's (given in nanoseconds), or 5 s when it is <= 0 or absent.
 */
export function effectiveAckWaitMs(ackWaitNanos: number | undefined): number {
  return ackWaitNanos !== undefined && ackWaitNanos > 0 ? ackWaitNanos / NANOS_PER_MS : DEFAULT_ACK_WAIT_MS;
}

/** PinnedTTL (`priority_timeout`) in ms: max(AckWait, 1 s). */
export function pinnedTtlMs(ackWaitMs: number): number {
  return Math.max(ackWaitMs, 1000);
}

/** Pull expiry in ms: max(AckWait / 2, 1 s). */
export function pullExpiryMs(ackWaitMs: number): number {
  return Math.max(ackWaitMs / 2, 1000);
}

/** Elastic rejoin tick in ms: AckWait + 500 ms. */
export function rejoinTickMs(ackWaitMs: number): number {
  return ackWaitMs + 500;
}

/** Milliseconds to nanoseconds, for consumer configs. */
export function msToNanos(ms: number): number {
  return Math.round(ms * NANOS_PER_MS);
}
