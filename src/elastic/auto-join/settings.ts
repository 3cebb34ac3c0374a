/**
 * The `autoJoin` option of `elasticConsume`: its checks and defaults, and the member
 * name an auto instance takes when none is given.
 */
import { hostname } from "node:os";
import type { AssignmentPolicy } from "../../core/auto-membership.js";
import { ConsumerGroupError } from "../../core/errors.js";
import { assertValidName } from "../../core/names.js";
import { optionsObject, quoted } from "../../core/option-checks.js";

/** Auto-join settings of {@link ElasticConsumeOptions.autoJoin}. */
export interface AutoJoinOptions {
  /**
   * How long a lease lives without renewal (ms, whole seconds on the server). When an
   * instance dies, its member leaves the group this long after its last renewal (plus
   * `settleMs`). At least the consumer's AckWait and 1 s. Default: max(10 s, AckWait).
   */
  leaseTtlMs?: number;
  /** Changes that arrive within this long of each other are written as one (ms). Default 3,000. */
  settleMs?: number;
  /**
   * `balanced` (default): Go's contiguous blocks over `members`. `sticky`: `member_mappings`
   * that move as few partitions as possible per change. One policy per group.
   */
  assignment?: AssignmentPolicy;
}

/** Resolved auto-join settings. */
export interface AutoJoinSettings {
  leaseTtlMs: number;
  settleMs: number;
  assignment: AssignmentPolicy;
}

const DEFAULT_LEASE_TTL_MS = 10_000;
/** The longest timer Node runs (2^31 - 1 ms); longer ones fire at once. */
const MAX_TIMER_MS = 2_147_483_647;
/** The longest settle period accepted. */
const MAX_SETTLE_MS = 600_000;
/** The options `autoJoin` takes. */
const AUTO_JOIN_KEYS: readonly string[] = ["leaseTtlMs", "settleMs", "assignment"];
const DEFAULT_SETTLE_MS = 3000;

/**
 * Checks the `autoJoin` option against the consumer's AckWait.
 *
 * @returns undefined when auto-join is off
 * @throws ConsumerGroupError `INVALID_ARGUMENT`
 */
export function resolveAutoJoin(option: unknown, ackWaitMs: number): AutoJoinSettings | undefined {
  if (option === undefined || option === false) return undefined;
  if (option !== true && (typeof option !== "object" || option === null || Array.isArray(option))) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `autoJoin must be true or an object { ${AUTO_JOIN_KEYS.join(", ")} }, got ${quoted(option)}`);
  }
  const given = option === true ? {} : optionsObject(option, "autoJoin", AUTO_JOIN_KEYS);
  const leaseTtlMs = given["leaseTtlMs"] === undefined ? Math.max(DEFAULT_LEASE_TTL_MS, ackWaitMs) : given["leaseTtlMs"];
  if (typeof leaseTtlMs !== "number" || !Number.isFinite(leaseTtlMs) || leaseTtlMs < 1000 || leaseTtlMs > MAX_TIMER_MS) {
    throw new ConsumerGroupError(
      "INVALID_ARGUMENT",
      `autoJoin.leaseTtlMs must be a number of ms from 1,000 (the server's TTLs are whole seconds) to ${MAX_TIMER_MS.toLocaleString("en")} (about 24.8 days, the longest timer), got ${quoted(given["leaseTtlMs"])}`,
    );
  }
  if (leaseTtlMs < ackWaitMs) {
    throw new ConsumerGroupError(
      "INVALID_ARGUMENT",
      `autoJoin.leaseTtlMs (${leaseTtlMs} ms) is below the consumer's AckWait (${ackWaitMs} ms): a member would leave the group while a message it holds is not yet due for redelivery, and its old consumer would still block the new owner; use a lease TTL of at least AckWait`,
    );
  }
  const settleMs = given["settleMs"] === undefined ? DEFAULT_SETTLE_MS : given["settleMs"];
  if (typeof settleMs !== "number" || !Number.isFinite(settleMs) || settleMs < 0 || settleMs > MAX_SETTLE_MS) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `autoJoin.settleMs must be a number of ms from 0 to ${MAX_SETTLE_MS.toLocaleString("en")} (10 minutes), got ${quoted(given["settleMs"])}`);
  }
  const assignment = given["assignment"] === undefined ? "balanced" : given["assignment"];
  if (assignment !== "balanced" && assignment !== "sticky") {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `autoJoin.assignment must be "balanced" or "sticky", got ${quoted(given["assignment"])}`);
  }
  return { leaseTtlMs, settleMs, assignment };
}

/**
 * The member name an auto instance uses when none is given: `HOSTNAME` (the pod name on
 * Kubernetes), else the host name.
 *
 * @throws ConsumerGroupError `INVALID_NAME` when it is not a valid member name
 */
export function defaultMemberName(env: NodeJS.ProcessEnv = process.env): string {
  const name = env["HOSTNAME"] || hostname();
  try {
    assertValidName("member", name);
  } catch (err) {
    throw new ConsumerGroupError("INVALID_NAME", `the default member name "${name}" (from HOSTNAME or the host name) is not a valid member name: pass member explicitly`, { cause: err });
  }
  return name;
}
