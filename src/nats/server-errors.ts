/**
 * Turns errors from nats.js into {@link ConsumerGroupError}s that say what went
 * wrong in this library's terms, keeping the original as `cause`.
 */
import { JetStreamApiError } from "@nats-io/jetstream";
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
} as const;

/** The JetStream API error code of an error, if it has one. */
export function apiErrorCode(err: unknown): number | undefined {
  return err instanceof JetStreamApiError ? err.code : undefined;
}

/** True when the error is a "permissions violation" from the server or the client. */
export function isPermissionError(err: unknown): boolean {
  const text = String((err as { message?: unknown } | undefined)?.message ?? err).toLowerCase();
  return text.includes("permission") || text.includes("authorization violation");
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
  if (isPermissionError(err)) {
    return new ConsumerGroupError(
      "PERMISSION_DENIED",
      `permission denied while ${what}: ${detail}. The connection's user needs publish/subscribe permission on the subjects this operation uses (see "Permissions" in the README)`,
      { cause: err, ...(serverCode === undefined ? {} : { serverCode }) },
    );
  }
  const suffix = hint ? `; ${hint}` : "";
  return new ConsumerGroupError(code, `error ${what}: ${detail}${suffix}`, { cause: err, ...(serverCode === undefined ? {} : { serverCode }) });
}
