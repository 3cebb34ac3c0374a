/**
 * Dead letters: where a message goes after its last failed attempt, and what the
 * stored copy says about where it came from and why it failed.
 */
import { headers as createHeaders, type MsgHdrs } from "@nats-io/transport-node";
import type { ConsumerGroupMessage } from "./message.js";

/** Where messages that keep failing go. */
export interface DeadLetter {
  /** The dead-letter subject. */
  subject: string;
  /** Names the group in the dead letter's `Nats-Msg-Id`: groups that share a dead-letter subject each store theirs. */
  idPrefix: string;
  /**
   * Stores the dead letter (resolves once it is stored). `msgId` names the origin
   * message, so a dead letter published again after a crash is dropped by the
   * stream's duplicate window instead of stored twice.
   */
  publish(subject: string, payload: Uint8Array, headers: MsgHdrs, msgId: string): Promise<void>;
  /**
   * Sends `payload` to `subject` as a request and resolves on the answer: the dead-lettered
   * message's terminate is confirmed with it. Absent: the terminate is sent and not confirmed.
   */
  request?(subject: string, payload: string): Promise<unknown>;
}

/** Header names of a dead letter. */
export const DeadLetterHeaders = {
  /** The stream the message came from (the source stream, in elastic groups). */
  OriginStream: "Pcg-Origin-Stream",
  /** Its sequence in that stream. */
  OriginSequence: "Pcg-Origin-Sequence",
  /** Its partition. */
  Partition: "Pcg-Partition",
  /** Its key ("" when the key function failed for it). */
  Key: "Pcg-Key",
  /** How many times a handler ran it. */
  DeliveryCount: "Pcg-Delivery-Count",
  /** The last error, on one line, at most 1,024 characters. */
  Error: "Pcg-Error",
  /** Its subject, without the partition token. */
  Subject: "Pcg-Subject",
} as const;

/** The longest error text a dead letter keeps. */
const ERROR_TEXT_MAX = 1024;

/**
 * The headers of `msg`'s dead letter.
 *
 * @param key - its key ("" when unknown)
 * @param attempts - its failed attempts in all (the server's earlier deliveries, and those counted across rebalances, included)
 * @param error - the last failure
 */
export function deadLetterHeaders(msg: ConsumerGroupMessage, key: string, attempts: number, error: unknown): MsgHdrs {
  const h = createHeaders();
  // In elastic groups the origin is in Nats-Stream-Source: "<stream> <seq> …".
  // (get() returns "" for a missing header, and pinned deliveries always have headers.)
  const source = msg.headers?.get("Nats-Stream-Source")?.split(" ").filter((t) => t !== "");
  h.set(DeadLetterHeaders.OriginStream, source?.[0] ?? msg.info.stream);
  h.set(DeadLetterHeaders.OriginSequence, source?.[1] ?? String(msg.seq));
  h.set(DeadLetterHeaders.Partition, String(msg.partition));
  h.set(DeadLetterHeaders.Key, key);
  h.set(DeadLetterHeaders.DeliveryCount, String(attempts));
  h.set(DeadLetterHeaders.Subject, msg.subject);
  h.set(DeadLetterHeaders.Error, (error instanceof Error ? error.message : String(error)).replace(/[\r\n]+/g, " ").slice(0, ERROR_TEXT_MAX));
  return h;
}

/**
 * Stores `msg`'s dead letter at `target`, then terminates `msg` (only once it is
 * stored: a failed publish leaves the message to be tried again).
 *
 * @returns whether the server confirmed the terminate (an unconfirmed one may be lost, and the message come back); undefined when `target` cannot ask
 */
export async function sendToDeadLetter(target: DeadLetter, msg: ConsumerGroupMessage, key: string, attempts: number, error: unknown): Promise<boolean | undefined> {
  const headers = deadLetterHeaders(msg, key, attempts, error);
  // The id names the group and the stored message (its sequence and time, so a recreated stream's reused sequence is another id).
  await target.publish(target.subject, msg.data, headers, `${target.idPrefix}:${msg.info.stream}:${msg.seq}:${msg.info.timestampNanos}`);
  const reason = `dead-lettered to ${target.subject}`;
  if (target.request) return msg.termConfirmed(reason, (subject, payload) => target.request?.(subject, payload) ?? Promise.resolve());
  msg.term(reason);
  return undefined;
}
