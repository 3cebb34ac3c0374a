/**
 * Reading a group's backlog from the server, shared by `describeGroup` and
 * `groupLag`: how many messages of a subject filter a stream holds (one direct get,
 * or a short-lived consumer where the stream has no direct gets), and a consumer's
 * info when it exists. Requests fan out at most {@link REQUESTS_IN_FLIGHT} at a time.
 */
import type { ConsumerInfo, JetStreamManager } from "@nats-io/jetstream";
import { directGetPending } from "../nats/client-seam.js";
import { ApiCode, apiErrorCode, isPermissionError, wrapServerError } from "../nats/server-errors.js";

/** How many requests (consumer infos, counts) a description or a lag reading has in flight at once. */
export const REQUESTS_IN_FLIGHT = 32;

/** Counts the messages of a filter from a sequence on. */
export type MessageCounter = (jsm: JetStreamManager, stream: string, filter: string, fromSeq: number) => Promise<number>;

/**
 * A consumer's info, or undefined when it does not exist.
 *
 * @throws ConsumerGroupError for any other server error
 */
export async function consumerInfoIfAny(jsm: JetStreamManager, stream: string, name: string): Promise<ConsumerInfo | undefined> {
  try {
    return await jsm.consumers.info(stream, name);
  } catch (err) {
    if (apiErrorCode(err) === ApiCode.ConsumerNotFound) return undefined;
    throw wrapServerError(err, `reading consumer "${name}"`);
  }
}

/**
 * Messages of `filter` with a sequence >= `fromSeq`, through a short-lived ephemeral
 * consumer: only for a static group's stream without `allow_direct`.
 */
export const countWithConsumer: MessageCounter = async (jsm, stream, filter, fromSeq) => {
  const ci = await jsm.consumers.add(stream, {
    filter_subject: filter,
    deliver_policy: "by_start_sequence",
    opt_start_seq: Math.max(1, fromSeq),
    ack_policy: "none",
    mem_storage: true,
    inactive_threshold: 10_000_000_000,
  });
  await jsm.consumers.delete(stream, ci.name).catch(() => undefined);
  return ci.num_pending;
};

/**
 * Messages of `filter` with a sequence >= `fromSeq`, through one direct get (work-queue
 * streams allow them; a static stream may): the first match and the server's count of
 * the matches after it. It carries the first match's payload, so a count costs one
 * message on the wire.
 */
export const countWithDirectGet: MessageCounter = async (jsm, stream, filter, fromSeq) => {
  const seq = Math.max(1, fromSeq);
  try {
    const batch = await jsm.direct.getBatch(stream, { seq, next_by_subj: filter, batch: 1 });
    for await (const m of batch) return 1 + directGetPending(m);
    return 0;
  } catch (err) {
    if (String(err).includes("404") || String(err).toLowerCase().includes("not found")) return 0;
    throw wrapServerError(await whyBatchFailed(jsm, stream, filter, seq, err), `counting the messages of "${filter}" in "${stream}" with a direct get`);
  }
};

/**
 * A batch direct get is a publish with a reply inbox, so a missing permission to
 * publish it is not tied to it and shows as a timeout. A plain direct get is a request,
 * which nats.js fails with the permission violation: one is sent to tell the two apart.
 */
async function whyBatchFailed(jsm: JetStreamManager, stream: string, filter: string, seq: number, err: unknown): Promise<unknown> {
  if (!/timeout/i.test(String(err))) return err;
  try {
    await jsm.direct.getMessage(stream, { seq, next_by_subj: filter });
    return err;
  } catch (probe) {
    return isPermissionError(probe) ? probe : err;
  }
}

/** The widest delivery window {@link windowPartitionCounts} reads in one batch. */
export const WINDOW_MAX_MESSAGES = 1000;
/** The most bytes a window batch may bring (the server stops the batch there). */
const WINDOW_MAX_BYTES = 1 << 20;

/**
 * How many messages of each partition a static stream holds with a sequence from
 * `fromSeq` to `toSeq` (a member consumer's delivered-but-unacked window), read with
 * one batch direct get of the whole window instead of two counts per partition.
 * Undefined when the window is wider than {@link WINDOW_MAX_MESSAGES} or its messages
 * exceed 1 MiB (the caller counts per partition then).
 */
export async function windowPartitionCounts(jsm: JetStreamManager, stream: string, fromSeq: number, toSeq: number): Promise<Map<number, number> | undefined> {
  const width = toSeq - fromSeq + 1;
  if (width <= 0) return new Map();
  if (width > WINDOW_MAX_MESSAGES) return undefined;
  const counts = new Map<number, number>();
  let lastSeq = fromSeq - 1;
  let complete = false;
  try {
    const batch = await jsm.direct.getBatch(stream, { seq: fromSeq, batch: width, max_bytes: WINDOW_MAX_BYTES });
    for await (const m of batch) {
      lastSeq = m.seq;
      if (m.seq > toSeq) {
        complete = true;
        continue;
      }
      const partition = partitionToken(m.subject);
      if (partition !== undefined) counts.set(partition, (counts.get(partition) ?? 0) + 1);
      if (m.seq === toSeq || directGetPending(m) === 0) complete = true;
    }
  } catch (err) {
    if (String(err).includes("404") || String(err).toLowerCase().includes("not found")) return counts;
    return undefined;
  }
  // A batch cut short by its byte limit ends before the window does: counted per partition instead.
  return complete || lastSeq >= toSeq ? counts : undefined;
}

/**
 * The partition a stored subject belongs to as `<p>.>` selects it: a first token in
 * canonical decimal (`0`, `17`; not `01`, `-0`, `1e0`) followed by at least one more
 * token. Undefined for any other subject (one a publisher wrote there itself).
 */
export function partitionToken(subject: string): number | undefined {
  const dot = subject.indexOf(".");
  if (dot <= 0 || dot === subject.length - 1) return undefined;
  const token = subject.slice(0, dot);
  return /^(0|[1-9][0-9]*)$/.test(token) ? Number(token) : undefined;
}
