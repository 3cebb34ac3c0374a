/**
 * The public shapes of a member instance: its handle, its status events, its
 * lifecycle callbacks, and the settings it runs with.
 */
import type { MeterProviderLike } from "./metrics.js";
import type { ConsumerGroupError } from "../core/errors.js";
import type { DeadLetter } from "./dead-letter.js";
import type { DispatchPolicy, ParkedKey, ReleaseResult } from "./dispatcher.js";
import type { MessageHandler } from "./pinned-consumer.js";

/** What a member instance reports on {@link ConsumerGroupMember.status}. */
export type MemberStatus =
  /** The instance created or bound its consumer and pulls for these partitions. */
  | {
      /** The kind of event. */
      type: "joined";
      /** The member's partitions now. */
      partitions: number[];
    }
  /** The member has no partitions under the current config (not in membership, over the cap, or an empty mapping); it idles. */
  | {
      /** The kind of event. */
      type: "idle";
      /** Why, in words. */
      reason: string;
    }
  /** The member's partitions changed (elastic membership change). */
  | {
      /** The kind of event. */
      type: "partitions_changed";
      /** The member's partitions now. */
      partitions: number[];
      /** Partitions gained. */
      assigned: number[];
      /** Partitions given up. */
      revoked: number[];
    }
  /** The config changed without changing this member's partitions. */
  | {
      /** The kind of event. */
      type: "config_changed";
      /** The KV revision of the config. */
      revision: number;
    }
  /**
   * A repartition in progress let this member take more of its partitions' messages
   * (the transition layout of partitions no longer held back): the instance drains and
   * rejoins with a consumer that has them.
   */
  | {
      /** The kind of event. */
      type: "consumer_refreshed";
      /** The member's partitions (unchanged). */
      partitions: number[];
    }
  /** This instance is now the pinned (active) one. */
  | {
      /** The kind of event. */
      type: "pinned";
      /** The pin id the server gave this instance. */
      pinId: string;
    }
  /** This instance lost its pin and is a standby. */
  | {
      /** The kind of event. */
      type: "unpinned";
    }
  /** A handler threw or rejected (attempt n); it is retried in place, or nak'ed for redelivery in Go's default serial mode. */
  | {
      /** The kind of event. */
      type: "handler_error";
      /** What went wrong. */
      error: unknown;
      /** The message subject, without the partition token. */
      subject: string;
      /** The partition of the message. */
      partition: number;
      /** The stream sequence of the message (of the work-queue stream in elastic groups). */
      seq: number;
      /** The attempt that failed, from 1. */
      attempt: number;
    }
  /** A message failed `maxDeliver` times and was published to the dead-letter subject, then terminated. */
  | {
      /** The kind of event. */
      type: "dead_lettered";
      /** The message subject, without the partition token. */
      subject: string;
      /** The partition of the message. */
      partition: number;
      /** The stream sequence of the message (of the work-queue stream in elastic groups). */
      seq: number;
      /** Where the dead letter was published. */
      deadLetterSubject: string;
      /** What went wrong. */
      error: unknown;
    }
  /** A message failed `maxDeliver` times and there is no dead-letter subject: its key (or partition) waits for it. */
  | {
      /** The kind of event. */
      type: "blocked";
      /** The key (or partition) that waits. */
      lane: string;
      /** The message subject, without the partition token. */
      subject: string;
      /** The partition of the message. */
      partition: number;
      /** The stream sequence of the message (of the work-queue stream in elastic groups). */
      seq: number;
      /** What went wrong. */
      error: unknown;
    }
  /** A blocked key (or partition) goes on: its message was handled (a retry passed), dead-lettered by a release, or given back (its partition moved). */
  | {
      /** The kind of event. */
      type: "unblocked";
      /** The key (or partition). */
      lane: string;
      /** The message subject, without the partition token. */
      subject: string;
      /** The partition of the message. */
      partition: number;
      /** The stream sequence of the message. */
      seq: number;
      /** What became of it. */
      outcome: "handled" | "dead_lettered" | "given_back";
    }
  /** The messages parked behind blocked keys reached `maxParked` (or `maxBufferedBytes`): later ones of blocked keys take buffer slots again. */
  | {
      /** The kind of event. */
      type: "parking_full";
      /** Messages parked. */
      messages: number;
      /** Their payload bytes. */
      bytes: number;
    }
  /**
   * Elastic groups: the attempts bucket (which counts a message's failed attempts across
   * rebalances) could not be read or written; this attempt was counted from the server's
   * delivery count alone. A missing permission (code `PERMISSION_DENIED`) names the subject.
   */
  | {
      /** The kind of event. */
      type: "attempts_unrecorded";
      /** The message subject, without the partition token. */
      subject: string;
      /** The partition of the message. */
      partition: number;
      /** The stream sequence of the message in the work-queue stream. */
      seq: number;
      /** What went wrong. */
      error: unknown;
    }
  /** The member's consumer disappeared under a running instance; it is being recreated. */
  | {
      /** The kind of event. */
      type: "consumer_lost";
      /** Why, in words. */
      reason: string;
    }
  /**
   * Creating or using the consumer failed for now; the instance retries. A missing
   * permission (code `PERMISSION_DENIED`) names the subject and the operation.
   */
  | {
      /** The kind of event. */
      type: "consumer_error";
      /** What went wrong. */
      error: ConsumerGroupError;
      /** When the next attempt is made, in ms. */
      retryInMs: number;
    }
  /**
   * Handlers were still running when the drain timeout (`drainTimeoutMs`) passed, on
   * `stop()` or a rebalance. Their `msg.signal` is now aborted; the instance keeps
   * sending `working()` for them and releases their partitions only once they settled,
   * so no message ever runs twice at once.
   */
  | {
      /** The kind of event. */
      type: "drain_timeout";
      /** Handlers still running. */
      running: number;
      /** How long the drain waited before this event, in ms. */
      waitedMs: number;
    }
  /** The config watch failed (e.g. the KV stream lost quorum); it is re-opened with backoff while the member keeps consuming. */
  | {
      /** The kind of event. */
      type: "watch_error";
      /** What went wrong. */
      error: ConsumerGroupError;
      /** When the next attempt is made, in ms. */
      retryInMs: number;
    }
  /** The config watch was re-opened after a failure; the config was re-read at `revision`. */
  | {
      /** The kind of event. */
      type: "watch_restarted";
      /** The KV revision of the config. */
      revision: number;
      /** The attempts it took. */
      attempts: number;
    }
  /** A handler succeeded but its ack was not confirmed: the message may be redelivered (it is not counted as handled). */
  | {
      /** The kind of event. */
      type: "ack_failed";
      /** The message subject, without the partition token. */
      subject: string;
      /** The partition of the message. */
      partition: number;
      /** The stream sequence of the message (of the work-queue stream in elastic groups). */
      seq: number;
      /** What went wrong. */
      error: unknown;
    }
  /** Auto-join: this instance wrote a membership change (members joined, or left or expired). */
  | {
      /** The kind of event. */
      type: "membership_written";
      /** The KV revision of the config written. */
      revision: number;
      /** Auto members added. */
      added: string[];
      /** Auto members removed (left, or their last lease expired). */
      removed: string[];
    }
  /**
   * Auto-join: this instance's lease ran out or could not be renewed in time. Nothing
   * new starts here until a new lease is written (the instance is fenced: a
   * member removed meanwhile never handles partitions it no longer owns).
   */
  | {
      /** The kind of event. */
      type: "lease_lost";
      /** What happened. */
      error: ConsumerGroupError;
    }
  /** Auto-join: this instance holds a lease again after losing it. */
  | {
      /** The kind of event. */
      type: "lease_restored";
    }
  /**
   * Starts were held for `durationMs` and go on now (reported from 100 ms on). A hold
   * keeps per-key order when the server may still redeliver an earlier message:
   * `takeover` (this instance got the pin and waited for what the previous holder left
   * unacked), `gap` (the consumer delivered something this instance never received: a
   * cut connection, a leader change), `redeliveries` (a takeover waited for the server's
   * redelivery queue). `fenced`: no answer from the server proved the pin was still
   * this instance's (a stalled, blocked or cut-off instance starts nothing).
   */
  | {
      /** The kind of event. */
      type: "starts_held";
      /** Why starts were held. */
      reason: "takeover" | "gap" | "redeliveries" | "fenced";
      /** How long, in ms. */
      durationMs: number;
    }
  /**
   * The connection was lost right after the event loop was blocked (`blockedMs`), had
   * almost no idle time (`busyShare`), or while the instance's pulls could bring at least
   * the server's default `max_pending` of 64 MiB (`askedBytes`): most likely the server cut
   * it as a slow consumer (it read too slowly while the server had more queued for it
   * than its `max_pending`). Deliveries lost with it come back after AckWait; starts are held
   * until then (see `starts_held`). Handlers that keep the event loop busy (synchronous
   * work) cause it; so does a `maxBufferedBytes` above the server's limit.
   */
  | {
      /** The kind of event. */
      type: "slow_consumer";
      /** The longest block of the event loop in the seconds before the disconnect, in ms. */
      blockedMs: number;
      /** The share of the ~2 s before the disconnect the event loop was busy (0 to 1). */
      busyShare: number;
      /** What the instance's outstanding pulls could still bring at the disconnect, in bytes (an upper bound). */
      askedBytes: number;
    }
  /** Events were dropped because nobody read this status iterator: `count` since the last event read. */
  | {
      /** The kind of event. */
      type: "events_dropped";
      /** Events dropped since the last one read. */
      count: number;
    }
  /** The instance stopped; `error` is set when it stopped because of one. */
  | {
      /** The kind of event. */
      type: "stopped";
      /** The error that stopped it, when one did. */
      error?: Error;
    };

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
   * Stops the instance: no new pulls, waits for the handler in flight (after
   * `drainTimeoutMs` its `msg.signal` is aborted and it is still awaited, so that a
   * message never runs twice at once), redelivers what was buffered, and unpins if this instance was pinned so a
   * standby takes over at once. Idempotent.
   */
  stop(): Promise<void>;
  /** Resolves when the instance has stopped: to the error that stopped it, or undefined. Never rejects. */
  closed(): Promise<Error | undefined>;
  /** Events from now on, until the instance stops. */
  status(): AsyncIterable<MemberStatus>;
  /**
   * The keys (or partitions) blocked here: a message failed `maxDeliver` times with no
   * dead-letter subject, and the messages behind it wait (parked, see `maxParked`).
   * Empty while the instance does not consume.
   */
  parkedKeys(): ParkedKey[];
  /**
   * Releases the blocked message with stream sequence `seq` (a {@link ParkedKey.seq}):
   * its next attempt runs now (fix what made it fail first), or, with
   * `deadLetterSubject`, it is published there and terminated and its key goes on. An
   * attempt running now finishes first; with a dead-letter subject, if it fails it goes
   * there.
   *
   * @returns `released: false` when no key of this instance is blocked on `seq`
   * @throws ConsumerGroupError `INVALID_ARGUMENT` (not a literal subject), or the dead-letter publish's error (the message stays blocked)
   */
  releaseParkedKey(seq: number, options?: ReleaseOptions): Promise<ReleaseOutcome>;
  /** Same as {@link stop}. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Options of {@link ConsumerGroupMember.releaseParkedKey}. */
export interface ReleaseOptions {
  /** Dead-letter the blocked message to this subject (a stream must store it) instead of trying it again. */
  deadLetterSubject?: string;
}

/** What {@link ConsumerGroupMember.releaseParkedKey} did. */
export interface ReleaseOutcome {
  /** The member of the instance that answered. */
  member: string;
  /** The blocked message's stream sequence. */
  seq: number;
  /** What was asked. */
  action: "retry" | "dead_letter";
  /** False when no key of the instance was blocked on `seq`. */
  released: boolean;
  /**
   * What became of it: its retry started (`retrying`), it was dead-lettered, or (a
   * dead-letter release that waited for the attempt running then) that attempt
   * succeeded (`handled`) or it was given back with its partition. `pending` (asked over
   * the presence subject only): the attempt still runs; the outcome follows in the status events.
   */
  result?: ReleaseResult | "pending";
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
  /** The most bytes held in this process and asked for at once. */
  maxBufferedBytes: number;
  /** How handlers run. */
  dispatch: DispatchPolicy;
  /** Where a release sends a blocked message, given its dead-letter subject (checked: `INVALID_ARGUMENT`). */
  deadLetterTo(subject: string): DeadLetter;
  lifecycle: MemberLifecycle;
  /** Where metrics go; default: the global OpenTelemetry MeterProvider (a no-op without an SDK). */
  meterProvider?: MeterProviderLike;
}

