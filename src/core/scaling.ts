/**
 * The arithmetic of the lag signal for autoscalers: the drain rate of a work-queue
 * stream from two samples of its state, and the member count that drains a backlog
 * within a target time. Pure: no NATS import.
 */
import { ConsumerGroupError } from "./errors.js";

/** A work-queue stream's state at one moment: what the drain rate is measured from. */
export interface QueueSample {
  /** When the state was read, in ms since the epoch. */
  atMs: number;
  /** The stream's last sequence: it grows by one for every message stored. */
  lastSeq: number;
  /** Messages stored now. */
  messages: number;
}

/** What went through a work-queue stream between two samples. */
export interface DrainMeasurement {
  /** Time between the samples, in ms. */
  windowMs: number;
  /** Messages stored in the window (sourced into the work queue). */
  stored: number;
  /** Messages removed in the window: acknowledged by members (or deleted). */
  drained: number;
  /** `drained` per second. */
  drainedPerSecond: number;
  /** `stored` per second: the rate work arrives at. */
  inflowPerSecond: number;
}

/**
 * What went through a work-queue stream between two samples. A work queue removes a
 * message when it is acknowledged, and a group's work queue never drops one for its
 * limits (discard new), so what left it is what was stored (Δ last sequence) minus
 * what it grew by (Δ messages).
 *
 * @param from - the earlier sample
 * @param to - the later sample
 * @returns undefined when nothing can be measured: no time between the samples, or a
 *   stream that went back (recreated: its last sequence fell)
 */
export function measureDrain(from: QueueSample, to: QueueSample): DrainMeasurement | undefined {
  const windowMs = to.atMs - from.atMs;
  const stored = to.lastSeq - from.lastSeq;
  if (!(windowMs > 0) || stored < 0) return undefined;
  const drained = stored - (to.messages - from.messages);
  if (drained < 0) return undefined;
  return { windowMs, stored, drained, drainedPerSecond: (drained * 1000) / windowMs, inflowPerSecond: (stored * 1000) / windowMs };
}

/**
 * The measured drain rate of one member: what all members drained per second,
 * divided by the members that were consuming.
 *
 * @param measurement - the drain between two samples, if there is one
 * @param activeMembers - the members with a running instance
 * @returns undefined when there is no rate to speak of: no measurement, no active
 *   member, or nothing drained (the members were idle, starting or stuck)
 */
export function measuredRatePerMember(measurement: DrainMeasurement | undefined, activeMembers: number): number | undefined {
  if (!measurement || activeMembers < 1 || measurement.drained <= 0) return undefined;
  return measurement.drainedPerSecond / activeMembers;
}

/** What {@link recommendMembers} is computed from. */
export interface RecommendationInput {
  /** Messages waiting: pending in the work queue plus the source lag. */
  backlog: number;
  /** The members the group has now. */
  members: number;
  /** The group's partition count: more members than partitions would idle. */
  partitionCount: number;
  /** Drain the backlog within this long, in ms. */
  targetDrainMs: number;
  /** Messages per second one member handles; undefined when there is no rate. */
  ratePerMember: number | undefined;
}

/** How {@link recommendMembers} decided. */
export type RecommendationBasis =
  /** From the rate: enough members to drain the backlog within the target time. */
  | "rate"
  /** No rate and a backlog: the current member count (at least 1) is kept. */
  | "hold"
  /** Nothing to drain: 1 while the group has members, 0 when it has none. */
  | "idle";

/** The member count {@link recommendMembers} recommends. */
export interface Recommendation {
  /** The recommended member count: `needed`, capped at the partition count. */
  recommended: number;
  /** What the rate asks for, before the cap. */
  needed: number;
  /** Whether the partition count capped it (`needed` > partition count). */
  capped: boolean;
  /** How it was decided. */
  basis: RecommendationBasis;
}

// A quotient such as 3000 / (100 × 10) can come out as 3.0000000000000004.
const EPSILON = 1e-9;

function assertCount(value: number, name: string, min: number): void {
  if (!Number.isSafeInteger(value) || value < min) throw new ConsumerGroupError("INVALID_ARGUMENT", `${name} must be an integer >= ${min}, got ${String(value)}`);
}

/**
 * The member count that drains `backlog` within `targetDrainMs` at `ratePerMember`:
 * `ceil(backlog / (ratePerMember × targetDrainMs / 1000))`, at least 1 when anything
 * is pending or the group has any member, and at most the partition count (a group
 * cannot use more members than partitions).
 *
 * Without a rate (nothing was drained while the rate was measured, and none was
 * given), a backlog keeps the current member count, at least 1: there is no
 * evidence that more members would drain faster (they may be starting, or stuck on
 * a message), and at least one must run to find out. With no backlog it is 1 while
 * the group has members, 0 when it has none.
 *
 * At a steady load, a group scaled this way settles where its backlog takes about
 * `targetDrainMs` to drain: read the target as the delay you accept.
 *
 * @param input - the backlog, the current member count, the partition count, the target and the rate
 * @throws ConsumerGroupError `INVALID_ARGUMENT` for a negative or fractional count, a
 *   target that is not a positive number, or a rate that is not a positive number
 *
 * @example
 * ```ts
 * recommendMembers({ backlog: 12_000, members: 2, partitionCount: 8, targetDrainMs: 60_000, ratePerMember: 50 });
 * // { recommended: 4, needed: 4, capped: false, basis: "rate" }
 * ```
 */
export function recommendMembers(input: RecommendationInput): Recommendation {
  const { backlog, members, partitionCount, targetDrainMs, ratePerMember } = input;
  assertCount(backlog, "the backlog", 0);
  assertCount(members, "the member count", 0);
  assertCount(partitionCount, "the partition count", 1);
  if (typeof targetDrainMs !== "number" || !Number.isFinite(targetDrainMs) || targetDrainMs <= 0) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `the target drain time must be a positive number of ms, got ${String(targetDrainMs)}`);
  }
  if (ratePerMember !== undefined && (typeof ratePerMember !== "number" || !Number.isFinite(ratePerMember) || ratePerMember <= 0)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `the rate per member must be a positive number of messages per second, got ${String(ratePerMember)}`);
  }
  const floor = backlog > 0 || members > 0 ? 1 : 0;
  let needed: number;
  let basis: RecommendationBasis;
  if (backlog === 0) {
    needed = floor;
    basis = "idle";
  } else if (ratePerMember === undefined) {
    needed = Math.max(1, members);
    basis = "hold";
  } else {
    needed = Math.max(floor, Math.ceil(backlog / ((ratePerMember * targetDrainMs) / 1000) - EPSILON));
    basis = "rate";
  }
  return { recommended: Math.min(needed, partitionCount), needed, capped: needed > partitionCount, basis };
}
