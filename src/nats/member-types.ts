/**
 * The public shapes of a member instance: its handle, its status events, its
 * lifecycle callbacks, and the settings it runs with.
 */
import type { MeterProvider } from "@opentelemetry/api";
import type { ConsumerGroupError } from "../core/errors.js";
import type { DispatchPolicy } from "./dispatcher.js";
import type { MessageHandler } from "./pinned-consumer.js";

/** What a member instance reports on {@link ConsumerGroupMember.status}. */
export type MemberStatus =
  /** The instance created or bound its consumer and pulls for these partitions. */
  | { type: "joined"; partitions: number[] }
  /** The member has no partitions under the current config (not in membership, over the cap, or an empty mapping); it idles. */
  | { type: "idle"; reason: string }
  /** The member's partitions changed (elastic membership change). */
  | { type: "partitions_changed"; partitions: number[]; assigned: number[]; revoked: number[] }
  /** The config changed without changing this member's partitions. */
  | { type: "config_changed"; revision: number }
  /** This instance is now the pinned (active) one. */
  | { type: "pinned"; pinId: string }
  /** This instance lost its pin and is a standby. */
  | { type: "unpinned" }
  /** A handler threw or rejected (attempt n); it is retried in place, or nak'ed for redelivery in Go's default serial mode. */
  | { type: "handler_error"; error: unknown; subject: string; partition: number; seq: number; attempt: number }
  /** A message failed `maxDeliver` times and was published to the dead-letter subject, then terminated. */
  | { type: "dead_lettered"; subject: string; partition: number; seq: number; deadLetterSubject: string; error: unknown }
  /** A message failed `maxDeliver` times and there is no dead-letter subject: its key (or partition) waits for it. */
  | { type: "blocked"; lane: string; subject: string; partition: number; seq: number; error: unknown }
  /** The member's consumer disappeared under a running instance; it is being recreated. */
  | { type: "consumer_lost"; reason: string }
  /**
   * Creating or using the consumer failed for now; the instance retries. A missing
   * permission (code `PERMISSION_DENIED`) names the subject and the operation.
   */
  | { type: "consumer_error"; error: ConsumerGroupError; retryInMs: number }
  /**
   * Handlers were still running when the drain timeout (`drainTimeoutMs`) passed, on
   * `stop()` or a rebalance. Their `msg.signal` is now aborted; the instance keeps
   * sending `working()` for them and releases their partitions only once they settled,
   * so no message ever runs twice at once.
   */
  | { type: "drain_timeout"; running: number; waitedMs: number }
  /** The config watch failed (e.g. the KV stream lost quorum); it is re-opened with backoff while the member keeps consuming. */
  | { type: "watch_error"; error: ConsumerGroupError; retryInMs: number }
  /** The config watch was re-opened after a failure; the config was re-read at `revision`. */
  | { type: "watch_restarted"; revision: number; attempts: number }
  /** A handler succeeded but its ack was not confirmed: the message may be redelivered (it is not counted as handled). */
  | { type: "ack_failed"; subject: string; partition: number; seq: number; error: unknown }
  /** Events were dropped because nobody read this status iterator: `count` since the last event read. */
  | { type: "events_dropped"; count: number }
  /** The instance stopped; `error` is set when it stopped because of one. */
  | { type: "stopped"; error?: Error };

/** A running member instance. */
export interface ConsumerGroupMember {
  /** The source stream. */
  readonly stream: string;
  /** The group. */
  readonly group: string;
  /** The member this instance runs as. */
  readonly member: string;
  /** The partitions the member owns under the current config. */
  partitions(): number[];
  /**
   * Stops the instance: no new pulls, waits for the handler in flight (bounded),
   * redelivers what was buffered, and unpins if this instance was pinned so a
   * standby takes over at once. Idempotent.
   */
  stop(): Promise<void>;
  /** Resolves when the instance has stopped: to the error that stopped it, or undefined. Never rejects. */
  closed(): Promise<Error | undefined>;
  /** Events from now on, until the instance stops. */
  status(): AsyncIterable<MemberStatus>;
  /** Same as {@link stop}. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Callbacks on the partitions and the pin of an instance; each may be async and is awaited. */
export interface MemberLifecycle {
  /** The instance started consuming these partitions (newly gained ones only). */
  onAssigned?: (partitions: number[]) => void | Promise<void>;
  /**
   * The instance is giving these partitions up. Called after their in-flight handlers
   * finished and were acked, and before the partitions are released to their new owner.
   */
  onRevoked?: (partitions: number[]) => void | Promise<void>;
  /** This instance became the active (pinned) one of its member. */
  onPinned?: (pinId: string) => void | Promise<void>;
  /** This instance became a standby. */
  onUnpinned?: () => void | Promise<void>;
  /** Something went wrong: a handler error, a consumer error, or the error that stopped the instance. */
  onError?: (error: unknown) => void | Promise<void>;
}

/** Settings of one instance, resolved from the consume options. */
export interface MemberSettings {
  handler: MessageHandler;
  ackWaitMs: number;
  /** How long stop() and rebalances wait for handlers in flight before aborting their `msg.signal` (they are still awaited). */
  drainTimeoutMs: number;
  /** False: on a rebalance, give partitions up without waiting for handlers in flight (Go's behaviour). */
  handoff: boolean;
  /** Messages per pull. */
  pullBatch: number;
  /** The most messages held in this process at once (buffered plus running); pulls wait while it is reached. */
  localBufferCap: number;
  /** How handlers run. */
  dispatch: DispatchPolicy;
  lifecycle: MemberLifecycle;
  /** Where metrics go; default: the global OpenTelemetry MeterProvider (a no-op without an SDK). */
  meterProvider?: MeterProvider;
}

