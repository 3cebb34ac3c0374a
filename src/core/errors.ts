/**
 * Typed errors. Every error this library throws is a {@link ConsumerGroupError}
 * with a stable `code` that programs can switch on, a message that says what is
 * wrong and what to do, and, where it wraps something, a `cause`.
 *
 * Where Go's orbit.go/pcgroups has an error message for the same condition,
 * the message starts with Go's text so that logs read the same in both languages.
 */

/** Every error code this library uses. */
export type ErrorCode =
  // bad arguments and names
  | "INVALID_ARGUMENT"
  /** A name we refuse for a new group or member, or a stored member whose name the server refuses as a consumer name (`.`, `*`, `>`, whitespace, path separators). */
  | "INVALID_NAME"
  | "INVALID_SUBJECT"
  | "INVALID_HANDLER"
  // config validation (Go's rules)
  | "INVALID_CONFIG"
  | "INVALID_MAX_MEMBERS"
  | "MEMBERS_AND_MAPPINGS"
  | "MAPPING_COUNT"
  | "DUPLICATE_MEMBER"
  | "DUPLICATE_PARTITION"
  | "PARTITION_OUT_OF_RANGE"
  | "PARTITION_COVERAGE"
  | "INVALID_PARTITIONING_FILTER"
  | "OVERLAPPING_FILTERS"
  | "INVALID_CONSUMER_TEMPLATE"
  // stored state
  | "CONFIG_DECODE"
  /**
   * A config that disagrees with another: the stored one with the one asked for, or an elastic
   * config with its work-queue stream's source transforms (partition count, partitioning filters or
   * wildcards, e.g. edited by hand): members refuse to start and membership edits write nothing.
   */
  | "CONFIG_MISMATCH"
  | "CONFIG_IMMUTABLE"
  | "CONFIG_CONFLICT"
  | "GROUP_USES_MAPPINGS"
  | "NOT_IN_MEMBERSHIP"
  | "STREAM_NOT_FOUND"
  | "BUCKET_NOT_FOUND"
  | "GROUP_NOT_FOUND"
  /** A static group's `max_members` is not the N of its stream's `{{partition(N,…)}}` transform (at creation, or in a stored config a member reads). */
  | "PARTITION_COUNT_MISMATCH"
  // server and connection
  | "SERVER_TOO_OLD"
  | "PERMISSION_DENIED"
  | "SERVER_ERROR"
  | "CONSUMER_CONFLICT"
  | "CONSUMER_LOST"
  /** The member's consumer delivered a message outside its filters, or skipped a stored one: its server state is not its own (it is recreated). */
  | "CONSUMER_STATE_FOREIGN"
  | "CLIENT_UNSUPPORTED"
  // lifecycle
  | "CONFIG_CHANGED"
  | "CONFIG_DELETED"
  | "WATCH_CLOSED"
  | "HANDLER_FAILED"
  /** `retry.exactAttempts` on an attempts bucket whose stream denies message deletes (made by `nats kv add`, or an earlier release). */
  | "ATTEMPTS_BUCKET_KEEPS_RECORDS"
  | "ACK_FAILED"
  | "KEY_FAILED"
  | "STOPPED"
  // repartitioning
  | "REPARTITION_IN_PROGRESS"
  | "GO_MEMBERS_PRESENT"
  | "STATIC_GROUP"
  // auto-join
  | "ASSIGNMENT_CONFLICT"
  | "AUTO_POLICY_CONFLICT"
  | "MEMBER_NOT_AUTO"
  | "LEASE_LOST"
  // parked keys
  | "NOT_PARKED";

/** Options accepted by {@link ConsumerGroupError}. */
export interface ConsumerGroupErrorOptions {
  /** The underlying error, if this one wraps another. */
  cause?: unknown;
  /** The JetStream API error code (`err_code`), when the server answered with one. */
  serverCode?: number;
}

/**
 * The one error class of this library. Check `code` rather than `instanceof`
 * a subclass: codes are stable across versions.
 *
 * @example
 * ```ts
 * try { await createStatic(js, { ... }); }
 * catch (err) {
 *   if (err instanceof ConsumerGroupError && err.code === "CONFIG_MISMATCH") { ... }
 * }
 * ```
 */
export class ConsumerGroupError extends Error {
  /** Stable, machine-readable error code. */
  readonly code: ErrorCode;
  /** The JetStream API `err_code`, when the error came from the server. */
  readonly serverCode: number | undefined;

  /**
   * @param code - the stable error code
   * @param message - what is wrong and what to do
   * @param options - an optional cause and server error code
   */
  constructor(code: ErrorCode, message: string, options: ConsumerGroupErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "ConsumerGroupError";
    this.code = code;
    this.serverCode = options.serverCode;
  }
}

/**
 * True when `err` is a {@link ConsumerGroupError}, optionally with one of the given codes.
 *
 * @param err - any thrown value
 * @param codes - codes to match; any code matches when none are given
 */
export function isConsumerGroupError(err: unknown, ...codes: ErrorCode[]): err is ConsumerGroupError {
  return err instanceof ConsumerGroupError && (codes.length === 0 || codes.includes(err.code));
}
