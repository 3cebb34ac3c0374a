/**
 * The options of `staticConsume` and `elasticConsume`, and their checks.
 */
import type { ConsumerConfig, JetStreamClient } from "@nats-io/jetstream";
import type { MeterProviderLike } from "./metrics.js";
import { ConsumerGroupError } from "../core/errors.js";
import { assertValidGroupNames } from "../core/names.js";
import { MAX_TIMER_MS, optionalBoolean, optionalFunction, optionalInteger, optionalTimerMs, optionsObject, quoted } from "../core/option-checks.js";
import { effectiveAckWaitMs } from "../core/timing.js";
import type { MessageHandler } from "./pinned-consumer.js";
import type { MemberLifecycle, MemberSettings } from "./member-types.js";
import type { ConcurrencyMode, DispatchPolicy, RetryPolicy } from "./dispatcher.js";
import type { DeadLetter } from "./dead-letter.js";
import type { ConsumerGroupMessage } from "./message.js";
import { wrapServerError } from "./server-errors.js";
import { connectionOf } from "./client-seam.js";
import { MODE_KEY } from "./consumer-mode.js";

/** Options of `staticConsume` and `elasticConsume`. */
export interface ConsumeOptions extends MemberLifecycle {
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
  /**
   * The pull window: the most messages asked for and not yet delivered (a member pulls
   * again once half of it was delivered). Default 200 (serial: twice nats.js's
   * default, so that the byte-limited pulls, each answered with a `409 Batch Completed`,
   * come half as often and more stay in flight) or min(maxBuffered, 256); the server's
   * `max_ack_pending` caps what is outstanding.
   */
  pullBatch?: number;
  /**
   * How handlers run inside this instance:
   * - `serial` (default, Go's behaviour): one message at a time;
   * - `partition`: up to `maxInFlight` at once, never two of the same partition;
   * - `key`: up to `maxInFlight` at once, never two of the same key.
   * Within a partition or key, a message starts only after the previous one's handler
   * succeeded and its ack was sent (queued on the connection, ahead of anything sent
   * after it). Every instance of a member must use the same mode.
   */
  concurrency?: ConcurrencyMode;
  /** Handlers running at once in `partition` and `key` modes. Default 16. */
  maxInFlight?: number;
  /**
   * The key of a message in `key` mode. Default: exactly the subject tokens the
   * partition hash uses (the partitioning wildcards, or the static stream's transform).
   */
  keyOf?: (msg: ConsumerGroupMessage) => string;
  /**
   * The most messages this instance holds at once (buffered plus in flight), in every
   * mode and whatever the consumer's `max_ack_pending` (even -1): pulls wait while it is
   * reached. In `partition` and `key` modes the consumer's `max_ack_pending` is also set
   * to it (plus `maxParked` when keys can block). Default max(256, 4 × maxInFlight).
   */
  maxBuffered?: number;
  /**
   * The bytes this instance holds and asks the server for (buffered, in flight and on
   * their way): each message slot of the buffer gets an equal share, a pull's byte limit
   * is its batch's shares, and the pulls live at once reserve at most twice this, so the
   * server never queues more for it than its slow-consumer limit (`max_pending`, 64 MiB
   * by default) allows while handlers keep the event loop busy. A message larger than a
   * pull's limit (or than this) still comes, alone, once nothing else is held.
   * The server's limit is per connection, so instances that share a connection share
   * their budgets: each has its budget over the number of instances on the connection
   * (together, at most the largest of their budgets). Default 16 MiB. Pulls then carry a byte limit (`max_bytes`), and the server answers
   * each one with a `409 Batch Completed` message; a budget that holds `maxBuffered`
   * messages of the server's `max_payload` (plus 64 KiB each) needs no limit, and pulls
   * go without one: 5-8 % less client CPU per small message in the engine A/B
   * (`bench/ab.ts`, 100,000 messages of 128 B, `serial` and `key`).
   */
  maxBufferedBytes?: number;
  /**
   * In `partition` and `key` modes with `retry` and no `deadLetterSubject`: the most
   * messages parked behind blocked keys (a key whose message failed `maxDeliver` times
   * and has nowhere to go). Parked messages hold no buffer slot, so the other keys keep
   * flowing; they are held here, delivered and unacked, so the consumer's
   * `max_ack_pending` is `maxBuffered` plus this. Their payload bytes are bounded by
   * `maxBufferedBytes` too (on top of the buffer's). Past either bound, later messages of
   * blocked keys take buffer slots again (a `parking_full` status event says so).
   * `0`: no parking. Default 4 × maxBuffered.
   */
  maxParked?: number;
  /**
   * Failure policy. In `partition` and `key` modes (or when given), a handler that
   * throws is retried in place with backoff, holding its key or partition and nothing
   * else; after `maxDeliver` attempts the message goes to `deadLetterSubject` (then it
   * is terminated and its key moves on), or, with no dead-letter subject, its key stays
   * blocked and a `blocked` status event is sent. Default in those modes: maxDeliver =
   * the template's `max_deliver` if set, else 5; backoff 100, 500, 1000, 2000, 5000 ms.
   * `false` (the serial default): a failed message is nak'ed for immediate redelivery.
   */
  retry?:
    | {
        /** Attempts before the message is dead-lettered (or its key blocks). */
        maxDeliver?: number;
        /** The wait before each next attempt, in ms: one value, or one per attempt (the last repeats). */
        backoffMs?: number | number[];
        /**
         * Elastic groups: count each attempt before its handler starts, in the attempts
         * bucket, instead of when it fails. Then an attempt cut by a crash (kill -9, a lost
         * pod) counts even when a rebalance recreates the consumer before the message
         * comes back, and a message's handler starts at most `maxDeliver` times in all.
         * Without it such an attempt can go uncounted: at most one extra start per crash.
         * Costs one awaited request before each attempt and one more when the message is
         * settled (see docs for the measured throughput). Static groups count exactly
         * without it (their consumers keep delivery counts), so there it changes nothing.
         * Default false.
         */
        exactAttempts?: boolean;
      }
    | false;
  /**
   * In Go's serial mode without `retry`, a failed message is nak'ed for redelivery after
   * this delay, chosen by its delivery count (the last step repeats). Default
   * 100, 500, 1000, 2000, 5000 ms; `0` nak's at once, as Go does.
   */
  nakBackoffMs?: number | number[];
  /** A subject stored by some stream; messages that fail `maxDeliver` times are published there. */
  deadLetterSubject?: string;
  /** False: on a membership change, give partitions up without draining handlers in flight (Go's behaviour; for comparison). Default true. */
  handoff?: boolean;
  /** Where metrics go. Default: the global OpenTelemetry MeterProvider (a no-op without an SDK or without `@opentelemetry/api`). */
  meterProvider?: MeterProviderLike;
}

/** Consumer-config fields a concurrency mode sets. */
export function modeConsumerSettings(options: ConsumeOptions, settings: MemberSettings): Partial<ConsumerConfig> {
  if (settings.dispatch.mode === "serial") return {};
  return {
    // What the buffer holds, plus what may be parked behind blocked keys (held, delivered and unacked).
    max_ack_pending: maxBufferedOf(options, settings.dispatch.maxInFlight) + (settings.dispatch.parking?.maxMessages ?? 0),
    // Instances of one member share a consumer: the mode is recorded so a mismatch is reported clearly.
    metadata: { ...(options.consumerConfig?.metadata ?? {}), [MODE_KEY]: settings.dispatch.mode },
  };
}

function maxBufferedOf(options: ConsumeOptions, maxInFlight: number): number {
  return options.maxBuffered === undefined ? Math.max(256, 4 * maxInFlight) : options.maxBuffered;
}

/** Every key of {@link ConsumeOptions}: the record's type makes the compiler say when one is added or removed. */
const CONSUME_OPTIONS: Record<keyof ConsumeOptions, true> = {
  stream: true,
  group: true,
  member: true,
  handler: true,
  consumerConfig: true,
  drainTimeoutMs: true,
  pullBatch: true,
  concurrency: true,
  maxInFlight: true,
  keyOf: true,
  maxBuffered: true,
  maxBufferedBytes: true,
  maxParked: true,
  retry: true,
  nakBackoffMs: true,
  deadLetterSubject: true,
  handoff: true,
  meterProvider: true,
  onAssigned: true,
  onRevoked: true,
  onPinned: true,
  onUnpinned: true,
  onError: true,
};

/** The keys `staticConsume` takes (`elasticConsume` adds `autoJoin`). */
export const CONSUME_OPTION_KEYS: readonly string[] = Object.keys(CONSUME_OPTIONS);

/** The keys of the `retry` option. */
const RETRY_KEYS: readonly string[] = Object.keys({ maxDeliver: true, backoffMs: true, exactAttempts: true } satisfies Record<keyof Exclude<ConsumeOptions["retry"], false | undefined>, true>);

/**
 * Checks the options shared by both flavours and derives the instance settings.
 *
 * @throws ConsumerGroupError `INVALID_ARGUMENT`, `INVALID_NAME`, `INVALID_HANDLER`, `INVALID_CONSUMER_TEMPLATE`
 */
export function checkConsumeOptions(
  js: JetStreamClient,
  options: ConsumeOptions,
  defaultKeyOf: (msg: ConsumerGroupMessage) => string,
  what = "consume options",
  extraKeys: readonly string[] = [],
): MemberSettings {
  if (!options || typeof options !== "object" || Array.isArray(options)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `consume options must be an object with stream, group, member and handler, got ${quoted(options)}`);
  }
  optionsObject(options, what, [...CONSUME_OPTION_KEYS, ...extraKeys]);
  assertValidGroupNames(options.stream, options.group, options.member);
  if (typeof options.handler !== "function") {
    throw new ConsumerGroupError("INVALID_HANDLER", "a message handler must be provided: pass handler: async (msg) => { ... }");
  }
  if (options.consumerConfig !== undefined && (typeof options.consumerConfig !== "object" || options.consumerConfig === null || Array.isArray(options.consumerConfig))) {
    throw new ConsumerGroupError("INVALID_CONSUMER_TEMPLATE", `consumerConfig must be a consumer config object (nats.js shape, snake_case), got ${quoted(options.consumerConfig)}`);
  }
  const template = options.consumerConfig ?? {};
  if (template.filter_subject !== undefined && template.filter_subject !== "") {
    throw new ConsumerGroupError(
      "INVALID_CONSUMER_TEMPLATE",
      `the consumer template sets filter_subject ${quoted(template.filter_subject)}, which clashes with the member's partition filters; remove it (use the group's filters instead)`,
    );
  }
  if (template.deliver_subject) {
    throw new ConsumerGroupError("INVALID_CONSUMER_TEMPLATE", "the consumer template sets deliver_subject: member consumers are pull consumers; remove it");
  }
  if (template.ack_wait !== undefined && (typeof template.ack_wait !== "number" || !Number.isFinite(template.ack_wait) || template.ack_wait < 0)) {
    throw new ConsumerGroupError("INVALID_CONSUMER_TEMPLATE", `the consumer template's ack_wait must be a non-negative number of nanoseconds, got ${quoted(template.ack_wait)}`);
  }
  const ackWaitMs = effectiveAckWaitMs(template.ack_wait);
  if (ackWaitMs > MAX_ACK_WAIT_MS) {
    throw new ConsumerGroupError(
      "INVALID_CONSUMER_TEMPLATE",
      `the consumer template's ack_wait must be at most 7 days (${MAX_ACK_WAIT_MS * 1_000_000} ns): a member's timers run to twice it, and Node.js timers hold about 24.8 days; got ${String(template.ack_wait)} ns (a handler that runs longer keeps its message with msg.working())`,
    );
  }
  const concurrency = options.concurrency === undefined ? "serial" : options.concurrency;
  if (!["serial", "partition", "key"].includes(concurrency)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `concurrency must be "serial", "partition" or "key", got ${quoted(concurrency)}`);
  }
  // Checked in every mode, though only `partition` and `key` use it: a wrong value is a mistake wherever it is.
  const givenInFlight = options.maxInFlight === undefined ? 16 : options.maxInFlight;
  if (typeof givenInFlight !== "number" || !Number.isSafeInteger(givenInFlight) || givenInFlight < 1) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `maxInFlight must be a positive number, got ${quoted(options.maxInFlight)} (a whole number of handlers at once)`);
  }
  const maxInFlight = concurrency === "serial" ? 1 : givenInFlight;
  optionalFunction(options.keyOf, "keyOf", "a function (msg) => string");
  const maxBuffered = maxBufferedOf(options, maxInFlight);
  if (typeof maxBuffered !== "number" || !Number.isSafeInteger(maxBuffered) || maxBuffered < maxInFlight) {
    throw new ConsumerGroupError(
      "INVALID_ARGUMENT",
      `maxBuffered must be a whole number of messages >= maxInFlight (${maxInFlight})${options.maxBuffered === undefined ? ` (its default, 4 × maxInFlight, is ${maxBuffered}: pass a smaller maxInFlight)` : ""}, got ${quoted(options.maxBuffered)}`,
    );
  }
  const maxBufferedBytes = options.maxBufferedBytes === undefined ? DEFAULT_MAX_BUFFERED_BYTES : options.maxBufferedBytes;
  if (typeof maxBufferedBytes !== "number" || !Number.isSafeInteger(maxBufferedBytes) || maxBufferedBytes < 1024) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `maxBufferedBytes must be a whole number of bytes from 1024 to ${Number.MAX_SAFE_INTEGER}, got ${quoted(options.maxBufferedBytes)}`);
  }
  const provider: unknown = options.meterProvider;
  if (provider !== undefined && (typeof provider !== "object" || provider === null || typeof (provider as { getMeter?: unknown }).getMeter !== "function")) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `meterProvider must be an OpenTelemetry MeterProvider (an object with getMeter()), got ${quoted(provider)}`);
  }
  const retry = retryPolicy(js, options, template, concurrency);
  const lifecycle: MemberLifecycle = {};
  for (const name of ["onAssigned", "onRevoked", "onPinned", "onUnpinned", "onError"] as const) {
    const fn = optionalFunction(options[name], name);
    if (fn !== undefined) Object.assign(lifecycle, { [name]: fn });
  }
  const nakSteps = delaySteps(options.nakBackoffMs, "nakBackoffMs", [100, 500, 1000, 2000, 5000]);
  const maxParked = options.maxParked === undefined ? 4 * maxBuffered : options.maxParked;
  if (typeof maxParked !== "number" || !Number.isSafeInteger(maxParked) || maxParked < 0) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `maxParked must be a whole number of messages >= 0 (0: no parking), got ${quoted(options.maxParked)}`);
  }
  // Only a key that can block parks: with a dead-letter subject its message goes there instead.
  const parks = concurrency !== "serial" && retry !== undefined && retry.deadLetter === undefined && maxParked > 0;
  const dispatch: DispatchPolicy = {
    mode: concurrency,
    maxInFlight,
    keyOf: options.keyOf ?? defaultKeyOf,
    workingIntervalMs: ackWaitMs / 2,
    nakDelayMs: (deliveryCount) => nakSteps[Math.min(Math.max(deliveryCount, 1) - 1, nakSteps.length - 1)] ?? 0,
    ...(retry ? { retry } : {}),
    ...(parks ? { parking: { maxMessages: maxParked, maxBytes: maxBufferedBytes } } : {}),
  };
  const pullBatch = optionalInteger(options.pullBatch, "pullBatch", concurrency === "serial" ? 200 : Math.min(maxBuffered, 256), 1, Number.MAX_SAFE_INTEGER, "messages");
  return {
    handler: options.handler,
    ackWaitMs,
    drainTimeoutMs: optionalTimerMs(options.drainTimeoutMs, "drainTimeoutMs", ackWaitMs),
    handoff: optionalBoolean(options.handoff, "handoff", true),
    pullBatch,
    // The local cap: what the process holds, whatever the consumer's max_ack_pending (even -1).
    localBufferCap: Math.max(maxBuffered, maxInFlight),
    maxBufferedBytes,
    dispatch,
    deadLetterTo: (subject) => deadLetterTarget(js, options.stream, options.group, subject),
    lifecycle,
    ...(options.meterProvider ? { meterProvider: options.meterProvider } : {}),
  };
}

/** How long the terminate of a dead-lettered message waits for the server's confirmation. */
const TERM_CONFIRM_TIMEOUT_MS = 5000;

/** The longest AckWait a member accepts, in ms (7 days): its timers run to twice AckWait. */
const MAX_ACK_WAIT_MS = 7 * 24 * 3600 * 1000;

/** The default byte budget of an instance (shared with the other instances on its connection): a quarter of the server's default slow-consumer limit. */
const DEFAULT_MAX_BUFFERED_BYTES = 16 * 1024 * 1024;

function retryPolicy(js: JetStreamClient, options: ConsumeOptions, template: Partial<ConsumerConfig>, mode: ConcurrencyMode): RetryPolicy | undefined {
  const retry: unknown = options.retry;
  if (retry !== undefined && retry !== false && (typeof retry !== "object" || retry === null || Array.isArray(retry))) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `retry must be false or an object { maxDeliver?, backoffMs?, exactAttempts? }, got ${quoted(retry)}`);
  }
  const given = retry === undefined || retry === false ? retry : optionsObject(retry, "retry", RETRY_KEYS);
  const subject = options.deadLetterSubject;
  // Checked even when no retry policy uses it: a wrong subject is a mistake wherever it is.
  if (subject !== undefined && !isLiteralSubject(subject)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `deadLetterSubject must be a literal subject (no wildcards or spaces), got ${quoted(subject)}`);
  }
  const fields: Record<string, unknown> = given === undefined || given === false ? {} : given;
  const exact = optionalBoolean(fields["exactAttempts"], "retry.exactAttempts", false);
  const fromTemplate = typeof template.max_deliver === "number" && template.max_deliver > 0 ? template.max_deliver : 5;
  const steps = delaySteps(fields["backoffMs"], "retry.backoffMs", [100, 500, 1000, 2000, 5000]);
  if (given === false || (given === undefined && mode === "serial" && subject === undefined)) return undefined;
  const maxDeliver = fields["maxDeliver"] === undefined ? fromTemplate : fields["maxDeliver"];
  if (typeof maxDeliver !== "number" || !Number.isSafeInteger(maxDeliver) || maxDeliver < 1) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `retry.maxDeliver must be an integer >= 1, got ${quoted(maxDeliver)}`);
  }
  return {
    maxDeliver,
    backoffMs: (attempt) => steps[Math.min(attempt - 1, steps.length - 1)] ?? 0,
    ...(exact ? { exact } : {}),
    ...(subject ? { deadLetter: deadLetterTarget(js, options.stream, options.group, subject) } : {}),
  };
}

/** Whether `subject` can be a dead-letter subject: literal, no spaces. */
export function isLiteralSubject(subject: unknown): subject is string {
  return typeof subject === "string" && subject !== "" && !/[\s*>]/.test(subject);
}

/**
 * Where a group's dead letters go when published to `subject`.
 *
 * @throws ConsumerGroupError `INVALID_ARGUMENT` when `subject` is not a literal subject
 */
export function deadLetterTarget(js: JetStreamClient, stream: string, group: string, subject: string): DeadLetter {
  if (!isLiteralSubject(subject)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `a dead-letter subject must be a literal subject (no wildcards or spaces), got ${JSON.stringify(subject)}`);
  }
  return {
    subject,
    idPrefix: `pcg-dead-letter:${stream}:${group}`,
    async publish(to, payload, headers, msgId) {
      try {
        await js.publish(to, payload, { headers, msgID: msgId });
      } catch (err) {
        throw wrapServerError(err, `publishing a dead letter to "${to}"`, "a stream must store the dead-letter subject");
      }
    },
    request: (to, payload) => connectionOf(js).request(to, payload, { timeout: TERM_CONFIRM_TIMEOUT_MS }),
  };
}

/** A delay option (one number, or steps by attempt): checked, with its default. */
function delaySteps(given: unknown, name: string, fallback: number[]): number[] {
  if (given === undefined) return fallback;
  const steps: unknown[] = Array.isArray(given) ? given : [given];
  if (steps.length === 0 || steps.some((ms) => typeof ms !== "number" || !Number.isFinite(ms) || ms < 0 || ms > MAX_TIMER_MS)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `${name} must be a non-negative number of ms up to ${MAX_TIMER_MS} or a non-empty array of them, got ${quoted(given)}`);
  }
  return steps as number[];
}
