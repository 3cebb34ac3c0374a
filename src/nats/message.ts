/**
 * The message a member's handler receives: the JetStream message with the
 * partition token stripped from its subject and the partition exposed.
 */
import type { DeliveryInfo, JsMsg } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import { partitionOfStored, splitStoredSubject } from "../core/repartition.js";
import { deliveryNumbers, type DeliveryNumbers } from "./ack-subject.js";
import { replySubject } from "./client-seam.js";

/** A signal that never aborts: messages handled outside a drain. */
const NEVER_ABORTED: AbortSignal = new AbortController().signal;

/** How a message was settled, if it was. */
export type Settlement = "ack" | "nak" | "term";

/**
 * A message delivered to a consumer-group member.
 *
 * `subject` drops everything up to the first `.` (the partition token), as Go's
 * `ConsumerGroupMsg.Subject()` does; `rawSubject` keeps it. In elastic groups,
 * `info` and `seq` refer to the work-queue stream, and the origin is in the
 * `Nats-Stream-Source` header.
 */
export class ConsumerGroupMessage {
  private settledAs: Settlement | undefined;

  /**
   * @param msg - the underlying nats.js message
   * @param partition - the partition it belongs to
   * @param signal - aborts when the handler should give up (see {@link ConsumerGroupMessage.signal})
   */
  constructor(
    /** The underlying nats.js message, for anything not wrapped here. */
    readonly msg: JsMsg,
    /** The partition of the message (Go does not expose it). */
    readonly partition: number,
    /**
     * Aborted when the instance wants the handler to finish early: the drain timeout
     * of a `stop()` or a rebalance passed while it still runs. The instance still waits
     * for the handler to settle (and keeps its message from being redelivered meanwhile),
     * so pass it to whatever the handler awaits (`fetch(url, { signal: msg.signal })`).
     */
    readonly signal: AbortSignal = NEVER_ABORTED,
  ) {}

  /** The subject without the partition token, e.g. `orders.eu.42`. */
  get subject(): string {
    return splitStoredSubject(this.msg.subject).subject;
  }

  /**
   * The subject as stored, partition token included, e.g. `7.orders.eu.42` (during a
   * repartition, `pcg-repartition.7.orders.eu.42` for messages in the transition layout).
   */
  get rawSubject(): string {
    return this.msg.subject;
  }

  /** The payload. */
  get data(): Uint8Array {
    return this.msg.data;
  }

  /** The headers, `Nats-Pin-Id` (and `Nats-Stream-Source` in elastic groups) included. */
  get headers(): MsgHdrs | undefined {
    return this.msg.headers;
  }

  /** Stream, consumer, sequences and delivery count. */
  get info(): DeliveryInfo {
    return this.msg.info;
  }

  /** The stream sequence. */
  get seq(): number {
    return this.msg.seq;
  }

  /** True when this is a redelivery. */
  get redelivered(): boolean {
    return this.msg.redelivered;
  }

  /** The pin id the server delivered this message under. */
  get pinId(): string | undefined {
    return this.msg.headers?.get("Nats-Pin-Id") || undefined;
  }

  /** How the message was settled so far, if at all. */
  get settlement(): Settlement | undefined {
    return this.settledAs;
  }

  /** The payload decoded as UTF-8. */
  string(): string {
    return this.msg.string();
  }

  /** The payload parsed as JSON. */
  json<T = unknown>(): T {
    return this.msg.json<T>();
  }

  /** Acknowledges the message. */
  ack(): void {
    this.settledAs ??= "ack";
    this.msg.ack();
  }

  /**
   * Acknowledges and waits for the server to confirm (Go's `DoubleAck`).
   *
   * @returns false if the message was already acked
   * @throws when the server does not confirm in time (e.g. the consumer was recreated)
   */
  async ackAck(opts?: { timeout?: number }): Promise<boolean> {
    this.settledAs ??= "ack";
    return this.msg.ackAck(opts?.timeout === undefined ? undefined : { timeout: opts.timeout });
  }

  /**
   * Asks for redelivery, optionally after a delay.
   *
   * @param delayMs - milliseconds before redelivery
   */
  nak(delayMs?: number): void {
    this.settledAs ??= "nak";
    this.msg.nak(delayMs);
  }

  /** Tells the server the handler is still working (resets AckWait). */
  working(): void {
    this.msg.working();
  }

  /**
   * Stops redelivery for good.
   *
   * @param reason - recorded in the server's advisory (server >= 2.11)
   */
  term(reason?: string): void {
    this.settledAs ??= "term";
    this.msg.term(reason);
  }

  /**
   * Terminates the message as a request, so that the server confirms it (nats.js confirms
   * only acks): `request` sends the payload to the ack subject and resolves on the answer.
   *
   * @returns false when the server did not confirm (the consumer was deleted meanwhile, say): the message may come back
   */
  async termConfirmed(reason: string, request: (subject: string, payload: string) => Promise<unknown>): Promise<boolean> {
    this.settledAs ??= "term";
    const reply = replySubject(this.msg);
    if (reply === undefined) {
      this.msg.term(reason);
      return false;
    }
    try {
      await request(reply, `+TERM ${reason}`);
      return true;
    } catch {
      return false;
    }
  }
}

/**
 * The stream sequence and delivery count of a delivered message, read from its ack
 * subject (cheaper than nats.js's whole delivery info); from that info when the
 * message has no JetStream ack subject.
 */
export function deliveryNumbersOf(msg: JsMsg): DeliveryNumbers {
  const reply = replySubject(msg);
  return (reply !== undefined ? deliveryNumbers(reply) : undefined) ?? { streamSequence: msg.seq, deliveryCount: msg.info.deliveryCount, consumerSequence: msg.info.deliverySequence };
}

/**
 * The partition number of a stored subject (its first token).
 *
 * @returns NaN when the first token is not a number
 */
export function partitionOfStoredSubject(subject: string): number {
  return partitionOfStored(subject);
}
