/**
 * The options of `staticConsume` and `elasticConsume`, and their checks.
 */
import type { ConsumerConfig } from "@nats-io/jetstream";
import { ConsumerGroupError } from "../core/errors.js";
import { assertValidGroupNames } from "../core/names.js";
import { effectiveAckWaitMs } from "../core/timing.js";
import type { MessageHandler } from "./pinned-consumer.js";
import type { MemberSettings } from "./member.js";

/** Options of `staticConsume` and `elasticConsume`. */
export interface ConsumeOptions {
  /** The source stream. */
  stream: string;
  /** The group. */
  group: string;
  /** The member this instance runs as. Several instances of one member are hot standbys. */
  member: string;
  /**
   * Called for each message, one at a time. May be async; it is awaited. If it
   * returns without settling the message (ack/nak/term), the message is acked; if
   * it throws, the message is nak'ed for redelivery and the error is reported on `status()`.
   */
  handler: MessageHandler;
  /**
   * The consumer template (nats.js shape: snake_case, durations in nanoseconds), as
   * Go's `jetstream.ConsumerConfig` argument. Every instance of a member must pass the
   * same template, because they share one consumer. `ack_wait` defaults to 5 s.
   */
  consumerConfig?: Partial<ConsumerConfig>;
  /** How long `stop()` and rebalances wait for the handler in flight, in ms. Default: AckWait. */
  drainTimeoutMs?: number;
  /** Messages requested per pull. Default 100; the server's `max_ack_pending` caps what is outstanding. */
  pullBatch?: number;
}

/**
 * Checks the options shared by both flavours and derives the instance settings.
 *
 * @throws ConsumerGroupError `INVALID_ARGUMENT`, `INVALID_NAME`, `INVALID_HANDLER`, `INVALID_CONSUMER_TEMPLATE`
 */
export function checkConsumeOptions(options: ConsumeOptions): MemberSettings {
  if (!options || typeof options !== "object") {
    throw new ConsumerGroupError("INVALID_ARGUMENT", "consume options must be an object with stream, group, member and handler");
  }
  assertValidGroupNames(options.stream, options.group, options.member);
  if (typeof options.handler !== "function") {
    throw new ConsumerGroupError("INVALID_HANDLER", "a message handler must be provided: pass handler: async (msg) => { ... }");
  }
  const template = options.consumerConfig ?? {};
  if (template.filter_subject !== undefined && template.filter_subject !== "") {
    throw new ConsumerGroupError(
      "INVALID_CONSUMER_TEMPLATE",
      `the consumer template sets filter_subject "${template.filter_subject}", which clashes with the member's partition filters; remove it (use the group's filters instead)`,
    );
  }
  if (template.deliver_subject) {
    throw new ConsumerGroupError("INVALID_CONSUMER_TEMPLATE", "the consumer template sets deliver_subject: member consumers are pull consumers; remove it");
  }
  if (template.ack_wait !== undefined && (!Number.isFinite(template.ack_wait) || template.ack_wait < 0)) {
    throw new ConsumerGroupError("INVALID_CONSUMER_TEMPLATE", `the consumer template's ack_wait must be a non-negative number of nanoseconds, got ${String(template.ack_wait)}`);
  }
  const ackWaitMs = effectiveAckWaitMs(template.ack_wait);
  const positive = (v: number | undefined, name: string, fallback: number): number => {
    if (v === undefined) return fallback;
    if (!Number.isFinite(v) || v <= 0) throw new ConsumerGroupError("INVALID_ARGUMENT", `${name} must be a positive number, got ${String(v)}`);
    return v;
  };
  return {
    handler: options.handler,
    ackWaitMs,
    drainTimeoutMs: positive(options.drainTimeoutMs, "drainTimeoutMs", ackWaitMs),
    pullBatch: Math.floor(positive(options.pullBatch, "pullBatch", 100)),
  };
}
