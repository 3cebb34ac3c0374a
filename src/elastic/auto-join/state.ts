/**
 * The lifecycle of one auto instance, as an explicit state union with typed reasons.
 *
 * The lease is its own sub-state because it is orthogonal to the phase: a leaving
 * instance keeps renewing (its handlers drain under it) and may lose its lease while
 * it leaves, and a closed instance keeps the last one it held (handlers still draining
 * after the close may start only while it is surely alive).
 */
import type { ConsumerGroupError } from "../../core/errors.js";

/** Why an instance's lease may have run out. */
export type LeaseLostReason =
  /** A renewal's compare-and-set found the lease gone or replaced: it expired on the server (the process stalled), or the bucket was replaced. */
  | "expired"
  /** Renewals failed (the server unreachable, say) until the lease may have run out. */
  | "renewal_failing";

/** This instance's lease. */
export type LeaseState =
  /** Written at `revision`; surely alive on the server until `validUntil` (the clock of `AutoMembership`, ms). */
  | { status: "held"; revision: number; validUntil: number }
  /** May have run out since `since`: nothing starts until a new lease is written. */
  | { status: "lost"; reason: LeaseLostReason; since: number; error: ConsumerGroupError };

/** Why an instance closed. */
export type CloseReason =
  /** Its handle was stopped (after the leave). */
  | "stopped"
  /** The member instance it runs beside stopped by itself (the group deleted, say). */
  | "member_closed"
  /** The start failed. */
  | "start_failed";

/** Where an auto instance is. */
export type AutoState =
  /** Checking the member and the policy; no lease written yet. */
  | { name: "starting" }
  /** Holds (or lost) its lease, follows the group's leases and reconciles. */
  | { name: "live"; lease: LeaseState }
  /** Marked its lease as leaving and takes its member out when it is the last instance; reconciles no more. */
  | { name: "leaving"; lease: LeaseState }
  /** Renews, follows and writes nothing any more; `afterLeave`: it had begun a leave (its member no longer counts as live here). */
  | { name: "closed"; reason: CloseReason; lease: LeaseState | undefined; afterLeave: boolean };
