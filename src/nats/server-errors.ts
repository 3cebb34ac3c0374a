/**
 * Turns errors from nats.js into {@link ConsumerGroupError}s that say what went
 * wrong in this library's terms, keeping the original as `cause`.
 */
import { ConsumerGroupError, type ErrorCode } from "../core/errors.js";

/** JetStream API error codes this library reacts to. */
export const ApiCode = {
  ConsumerNotFound: 10014,
  JetStreamNotEnabled: 10039,
  StreamNotFound: 10059,
  StreamNameInUse: 10058,
  WrongLastSequence: 10071,
  WrongLastSequenceUnknown: 10164,
  WorkQueueFilterNotUnique: 10100,
  ConsumerAlreadyExists: 10148,
  ConsumerNameExists: 10013,
  NoMessageFound: 10037,
  MessageDeleteFailed: 10057,
  SequenceNotFound: 10043,
} as const;

/**
 * Whether a message delete failed because the message is gone already (consumed from a
 * work queue, replaced in a one-per-subject stream). The server says so three ways,
 * measured on 2.15.3: "no message found" (10037, or 10057 "message delete failed" with
 * that text) and "sequence N not found" (10043), depending on where its store has the
 * sequence.
 */
export function isMessageGone(err: unknown): boolean {
  const code = apiErrorCode(err);
  if (code === ApiCode.NoMessageFound || code === ApiCode.SequenceNotFound) return true;
  return code === ApiCode.MessageDeleteFailed && /no message found/i.test(err instanceof Error ? err.message : String(err));
}

/**
 * The JetStream API error code of an error, if it has one. Recognised by shape (a
 * numeric `code` next to an `apiError()` method, as nats.js's `JetStreamApiError`
 * has), not `instanceof`: two copies of nats.js in one install must both work.
 */
export function apiErrorCode(err: unknown): number | undefined {
  const e = err as { code?: unknown; apiError?: unknown } | null | undefined;
  return typeof e === "object" && e !== null && typeof e.apiError === "function" && typeof e.code === "number" ? e.code : undefined;
}

/** A permission the server refused: what the client tried and on which subject. */
export interface PermissionViolation {
  /** `publish` or `subscribe`. */
  operation: "publish" | "subscribe";
  /** The exact subject refused, e.g. `$JS.API.CONSUMER.UNPIN.orders.billing-m1`. */
  subject: string;
  /** What to grant: the subject, or the wildcard that covers its family (`$JS.ACK.<stream>.<consumer>.>`, `_INBOX.>`). */
  grant: string;
}

const VIOLATION_TEXT = /Permissions Violation for (Publish|Subscription) to "([^"]+)"/i;

/**
 * The permission to grant for a refused subject: inboxes, acks and flow-control
 * replies vary per message, and the ordered consumers nats.js uses to watch and
 * list KV keys get a new `oc_…` name each time.
 */
function grantFor(subject: string): string {
  const tokens = subject.split(".");
  // A per-principal prefix of `groupPermissions` (`_INBOX_PCG.<stream>.<group>.<role>.<name>`): grant that one, not the root.
  if (tokens[0] === "_INBOX_PCG" && tokens.length > 5) return `${tokens.slice(0, 5).join(".")}.>`;
  if (tokens[0]?.startsWith("_INBOX")) return `${tokens[0]}.>`;
  if (tokens[0] === "$JS" && tokens[1] === "API" && tokens[2] === "CONSUMER" && tokens[5]?.startsWith("oc_")) {
    return [...tokens.slice(0, 5), "*", ...tokens.slice(6)].join(".");
  }
  if (tokens[0] === "$JS" && tokens[1] === "ACK" && tokens.length > 4) return `${tokens.slice(0, 4).join(".")}.>`;
  if (tokens[0] === "$JS" && tokens[1] === "FC" && tokens.length > 3) return `${tokens.slice(0, 3).join(".")}.>`;
  return subject;
}

/**
 * The permission violation behind an error, if there is one: a nats.js
 * `PermissionViolationError` (which has `operation` and `subject`), as the error
 * itself or as one of its causes, or a server `-ERR` text naming it.
 */
export function permissionViolation(err: unknown): PermissionViolation | undefined {
  let current: unknown = err;
  for (let depth = 0; depth < 6 && current !== undefined && current !== null; depth++) {
    const e = current as { name?: unknown; operation?: unknown; subject?: unknown; message?: unknown; cause?: unknown };
    if (e.name === "PermissionViolationError" && typeof e.subject === "string" && e.subject !== "") {
      const operation = e.operation === "subscription" || e.operation === "subscribe" ? "subscribe" : "publish";
      return { operation, subject: e.subject, grant: grantFor(e.subject) };
    }
    const text = VIOLATION_TEXT.exec(typeof e.message === "string" ? e.message : typeof current === "string" ? current : "");
    if (text?.[1] && text[2]) {
      return { operation: text[1].toLowerCase() === "publish" ? "publish" : "subscribe", subject: text[2], grant: grantFor(text[2]) };
    }
    current = e.cause;
  }
  return undefined;
}

/** True when the error is a "permissions violation" from the server or the client. */
export function isPermissionError(err: unknown): boolean {
  if (permissionViolation(err)) return true;
  const text = String((err as { message?: unknown } | undefined)?.message ?? err).toLowerCase();
  return text.includes("permission") || text.includes("authorization violation");
}

/** Where the subjects a member or an admin needs are listed. */
export const PERMISSIONS_DOC = "docs/permissions.md lists the subjects members and admins need";

/**
 * The message of a permission error: which operation on which subject was refused,
 * and what to grant.
 *
 * @param what - what we were doing
 */
export function permissionMessage(what: string, violation: PermissionViolation): string {
  const verb = violation.operation;
  const grant = violation.grant === violation.subject ? "that subject" : `"${violation.grant}"`;
  return `permission denied while ${what}: the connection's user has no permission to ${verb} to "${violation.subject}"; grant it ${verb} permission on ${grant} (${PERMISSIONS_DOC})`;
}

/**
 * Wraps a server or client error with context.
 *
 * @param err - what nats.js threw
 * @param what - what we were doing, e.g. `creating the member's consumer "g-m1"`
 * @param hint - what to do, appended to the message
 * @param code - the code to use when no better one applies
 */
export function wrapServerError(err: unknown, what: string, hint = "", code: ErrorCode = "SERVER_ERROR"): ConsumerGroupError {
  if (err instanceof ConsumerGroupError) return err;
  const detail = err instanceof Error ? err.message : String(err);
  const serverCode = apiErrorCode(err);
  const violation = permissionViolation(err);
  if (violation) {
    return new ConsumerGroupError("PERMISSION_DENIED", permissionMessage(what, violation), { cause: err, ...(serverCode === undefined ? {} : { serverCode }) });
  }
  if (isPermissionError(err)) {
    return new ConsumerGroupError(
      "PERMISSION_DENIED",
      `permission denied while ${what}: ${detail}. The connection's user needs publish/subscribe permission on the subjects this operation uses (${PERMISSIONS_DOC})`,
      { cause: err, ...(serverCode === undefined ? {} : { serverCode }) },
    );
  }
  const suffix = hint ? `; ${hint}` : "";
  return new ConsumerGroupError(code, `error ${what}: ${detail}${suffix}`, { cause: err, ...(serverCode === undefined ? {} : { serverCode }) });
}

/**
 * Whether a request found nobody to answer it (a stream's replicas not yet serving
 * direct gets right after it was made on a cluster, a node restarting), looking
 * through its causes.
 */
export function isNoResponders(err: unknown): boolean {
  for (let current: unknown = err, depth = 0; depth < 6 && current instanceof Error; depth++, current = current.cause) {
    if (current.name === "NoResponders" || /no responders/i.test(current.message)) return true;
  }
  return false;
}

/**
 * Whether an error is one a cluster shows while it elects a leader or a node restarts:
 * a request timeout, no responders, or JetStream temporarily unavailable. Never true for
 * this library's own verdicts (codes other than `SERVER_ERROR`).
 */
export function isTransientServerError(err: unknown): boolean {
  if (err instanceof ConsumerGroupError && err.code !== "SERVER_ERROR") return false;
  let current: unknown = err;
  for (let depth = 0; depth < 6 && current !== undefined && current !== null; depth++) {
    const e = current as { name?: unknown; message?: unknown; cause?: unknown; code?: unknown };
    const text = `${typeof e.name === "string" ? e.name : ""} ${typeof e.message === "string" ? e.message : typeof current === "string" ? current : ""}`;
    if (/timeout|no responders|jetstream (system )?(temporarily )?(not available|unavailable)|no suitable peers|leader/i.test(text)) return true;
    current = e.cause;
  }
  return false;
}
