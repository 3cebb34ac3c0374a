/**
 * Small helpers every public operation starts with: the manager of a client, the
 * server version gate, and stream lookups with errors that say what to do.
 */
import type { JetStreamClient, JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { ConsumerGroupError } from "../core/errors.js";
import { ApiCode, apiErrorCode, wrapServerError } from "./server-errors.js";
import { serverVersion } from "./client-seam.js";

/** Checks that `js` looks like a nats.js JetStream client. */
export function assertJetStreamClient(js: unknown): asserts js is JetStreamClient {
  const candidate = js as Partial<JetStreamClient> | null | undefined;
  if (!candidate || typeof candidate.jetstreamManager !== "function" || typeof candidate.consumers !== "object") {
    throw new ConsumerGroupError("INVALID_ARGUMENT", "the first argument must be a JetStream client: pass jetstream(nc) from @nats-io/jetstream");
  }
}

/** The JetStream manager of a client. */
export async function managerOf(js: JetStreamClient): Promise<JetStreamManager> {
  assertJetStreamClient(js);
  try {
    return await js.jetstreamManager(false);
  } catch (err) {
    throw wrapServerError(err, "getting the JetStream manager");
  }
}

/** The version of the server the client is connected to, when known. */
export function serverVersionOf(js: JetStreamClient): string | undefined {
  return serverVersion(js);
}

function atLeast(version: string, min: string): boolean {
  const a = version.split(/[.-]/).map((x) => Number.parseInt(x, 10) || 0);
  const b = min.split(".").map(Number);
  for (let i = 0; i < 3; i++) {
    if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  }
  return true;
}

/**
 * Fails when the connected server is older than `min`.
 *
 * @param feature - what needs it, for the message
 * @throws ConsumerGroupError `SERVER_TOO_OLD`
 */
export function requireServer(js: JetStreamClient, min: string, feature: string): void {
  const version = serverVersionOf(js);
  if (version !== undefined && !atLeast(version, min)) {
    throw new ConsumerGroupError("SERVER_TOO_OLD", `${feature} needs nats-server ${min} or newer, but the connected server is ${version}; upgrade the server`);
  }
}

/** Minimum server for priority groups with `pinned_client` (every member consumer). */
export const MIN_SERVER = "2.11.0";
/** Minimum server for whole-subject partitioning (`{{Partition(N)}}`). */
export const MIN_SERVER_WHOLE_SUBJECT = "2.12.0";

/**
 * A stream's info.
 *
 * @param what - how to name the stream in the error, e.g. `the static consumer group's stream`
 * @throws ConsumerGroupError `STREAM_NOT_FOUND`
 */
export async function streamInfo(jsm: JetStreamManager, stream: string, what: string, hint: string): Promise<StreamInfo> {
  try {
    return await jsm.streams.info(stream);
  } catch (err) {
    if (apiErrorCode(err) === ApiCode.StreamNotFound) {
      throw new ConsumerGroupError("STREAM_NOT_FOUND", `${what} "${stream}" does not exist; ${hint}`, { cause: err, serverCode: ApiCode.StreamNotFound });
    }
    throw wrapServerError(err, `looking up the stream "${stream}"`);
  }
}

/** Whether a stream exists. */
export async function streamExists(jsm: JetStreamManager, stream: string): Promise<boolean> {
  try {
    await jsm.streams.info(stream);
    return true;
  } catch (err) {
    if (apiErrorCode(err) === ApiCode.StreamNotFound) return false;
    throw wrapServerError(err, `looking up the stream "${stream}"`);
  }
}

/** The names of the consumers on a stream. */
export async function consumerNames(jsm: JetStreamManager, stream: string): Promise<Map<string, { num_waiting: number }>> {
  const found = new Map<string, { num_waiting: number }>();
  try {
    for await (const ci of jsm.consumers.list(stream)) found.set(ci.name, { num_waiting: ci.num_waiting });
  } catch (err) {
    if (apiErrorCode(err) === ApiCode.StreamNotFound) {
      throw new ConsumerGroupError("STREAM_NOT_FOUND", `the stream "${stream}" does not exist`, { cause: err });
    }
    throw wrapServerError(err, `listing the consumers of "${stream}"`);
  }
  return found;
}

/**
 * Unpins a member's consumer so the server pins another instance.
 *
 * @throws ConsumerGroupError `NOT_IN_MEMBERSHIP`-style `GROUP_NOT_FOUND` when the consumer does not exist
 */
export async function unpinMember(jsm: JetStreamManager, stream: string, consumer: string, member: string): Promise<void> {
  try {
    await jsm.consumers.unpin(stream, consumer, "PCG");
  } catch (err) {
    const code = apiErrorCode(err);
    if (code === ApiCode.ConsumerNotFound || code === ApiCode.StreamNotFound) {
      throw new ConsumerGroupError("GROUP_NOT_FOUND", `member "${member}" has no consumer "${consumer}" on "${stream}": no instance of it is running, so there is nothing to step down`, {
        cause: err,
        serverCode: code,
      });
    }
    throw wrapServerError(err, `trying to unpin the member's consumer "${consumer}"`);
  }
}
