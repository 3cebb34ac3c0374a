/**
 * Parked keys seen from outside the member: every running elastic instance of a group
 * lists its blocked keys, and the one holding a blocked message releases it, on request
 * over the group's presence subject (see `presence.ts`). What `cg elastic park` runs.
 */
import type { NatsConnection } from "@nats-io/nats-core";
import { assertValidGroupNames } from "../core/names.js";
import { ConsumerGroupError } from "../core/errors.js";
import { optionalTimerMs, optionsObject, quoted } from "../core/option-checks.js";
import { isLiteralSubject } from "../nats/consume-options.js";
import type { ParkedKey } from "../nats/dispatcher.js";
import type { ReleaseOptions, ReleaseOutcome } from "../nats/member-types.js";
import { isPermissionError } from "../nats/server-errors.js";
import { presenceAnswerOf, presenceRequestBody, presenceSubject, type ParkingAnswer } from "./presence.js";

/** A blocked key, with the member whose instance holds it. */
export interface ListedParkedKey extends ParkedKey {
  /** The member of the instance that holds it. */
  member: string;
}

/** How long a parked-key request collects answers. */
export const PARKING_WAIT_MS = 2000;

/** Options of {@link listParkedKeys} and {@link releaseParkedKey}. */
export interface ParkingRequestOptions {
  /** How long to wait for the instances' answers. Default {@link PARKING_WAIT_MS}. */
  waitMs?: number;
}

/** Sends a parked-key request and reads the answers until `done` says so or the wait ends. */
async function ask(nc: NatsConnection, stream: string, group: string, body: string, waitMs: number, done: (answer: ParkingAnswer) => boolean): Promise<ParkingAnswer[]> {
  const answers: ParkingAnswer[] = [];
  let replies: AsyncIterable<{ string(): string }>;
  try {
    replies = await nc.requestMany(presenceSubject(stream, group), body, { strategy: "timer", maxWait: waitMs });
  } catch (err) {
    throw askFailed(err, stream, group);
  }
  try {
    for await (const reply of replies) {
      const text = reply.string();
      if (!presenceAnswerOf(text)) continue;
      const answer = JSON.parse(text) as ParkingAnswer;
      answers.push(answer);
      if (done(answer)) break;
    }
  } catch (err) {
    // No responders is nobody answering; a refused publish is not.
    if (isPermissionError(err)) throw askFailed(err, stream, group);
  }
  return answers;
}

function askFailed(err: unknown, stream: string, group: string): ConsumerGroupError {
  const subject = presenceSubject(stream, group);
  const detail = err instanceof Error ? err.message : String(err);
  return isPermissionError(err)
    ? new ConsumerGroupError("PERMISSION_DENIED", `may not ask the group's instances on ${subject}: ${detail}; grant publish permission on that subject (docs/permissions.md)`, { cause: err })
    : new ConsumerGroupError("SERVER_ERROR", `could not ask the group's instances on ${subject}: ${detail}`, { cause: err });
}

/** The keys of {@link ParkingRequestOptions}. */
const PARKING_KEYS: readonly string[] = Object.keys({ waitMs: true } satisfies Record<keyof ParkingRequestOptions, true>);
/** The keys of {@link releaseParkedKey}'s options. */
const RELEASE_KEYS: readonly string[] = [...PARKING_KEYS, ...Object.keys({ deadLetterSubject: true } satisfies Record<keyof ReleaseOptions, true>)];

function waitOf(options: ParkingRequestOptions, what: string, keys: readonly string[]): number {
  optionsObject(options, what, keys);
  return optionalTimerMs(options.waitMs, "waitMs", PARKING_WAIT_MS);
}

/**
 * The blocked keys of an elastic group's running instances (those of this library that
 * answer on the presence subject), by member and sequence.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `INVALID_ARGUMENT`, `PERMISSION_DENIED`
 */
export async function listParkedKeys(nc: NatsConnection, stream: string, group: string, options: ParkingRequestOptions = {}): Promise<ListedParkedKey[]> {
  assertValidGroupNames(stream, group);
  const answers = await ask(nc, stream, group, presenceRequestBody({ kind: "park_list" }), waitOf(options, "listParkedKeys options", PARKING_KEYS), () => false);
  const keys = answers.flatMap((a) => (Array.isArray(a.parked) ? a.parked.map((p) => ({ ...p, member: a.member })) : []));
  return keys.sort((x, y) => x.member.localeCompare(y.member) || x.seq - y.seq);
}

/**
 * Releases the blocked message with work-queue sequence `seq` in an elastic group: the
 * instance that holds it tries it again now, or, with `deadLetterSubject`, publishes it
 * there and terminates it (see `ConsumerGroupMember.releaseParkedKey`).
 *
 * The request expires when the wait ends, by this process's clock: an instance that reads
 * it later (stalled meanwhile) does nothing, so `NOT_PARKED` means nothing was released
 * as long as the hosts' clocks agree to well within the wait. A dead-letter release whose
 * attempt still runs when half the wait has passed is answered `result: "pending"`: the
 * outcome follows as a `dead_lettered` or `unblocked` status event of the member.
 *
 * @throws ConsumerGroupError `NOT_PARKED` when no instance that answered holds it blocked; the
 *   instance's error (`INVALID_ARGUMENT`, a dead-letter publish that failed); `INVALID_NAME`, `PERMISSION_DENIED`
 */
export async function releaseParkedKey(nc: NatsConnection, stream: string, group: string, seq: number, options: ReleaseOptions & ParkingRequestOptions = {}): Promise<ReleaseOutcome> {
  assertValidGroupNames(stream, group);
  if (!Number.isSafeInteger(seq) || seq < 1) throw new ConsumerGroupError("INVALID_ARGUMENT", `seq must be a work-queue stream sequence (a whole number >= 1), got ${quoted(seq)}`);
  const waitMs = waitOf(options, "releaseParkedKey options", RELEASE_KEYS);
  if (options.deadLetterSubject !== undefined && !isLiteralSubject(options.deadLetterSubject)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `deadLetterSubject must be a literal subject (no wildcards or spaces), got ${quoted(options.deadLetterSubject)}`);
  }
  const body = presenceRequestBody({
    kind: "park_release",
    seq,
    waitMs,
    expiresAt: Date.now() + waitMs,
    ...(options.deadLetterSubject !== undefined ? { deadLetterSubject: options.deadLetterSubject } : {}),
  });
  const answers = await ask(nc, stream, group, body, waitMs, (a) => a.released?.released === true || a.error !== undefined);
  const failed = answers.find((a) => a.error !== undefined)?.error;
  if (failed) throw new ConsumerGroupError(isKnownCode(failed.code) ? failed.code : "SERVER_ERROR", `member instance could not release seq ${seq}: ${failed.message}`);
  const released = answers.find((a) => a.released?.released === true)?.released;
  if (released) return released;
  throw new ConsumerGroupError(
    "NOT_PARKED",
    answers.length === 0
      ? `no running instance of ${stream}.${group} answered: nothing parks seq ${seq} (members need subscribe permission on ${presenceSubject(stream, group)})`
      : `no running instance of ${stream}.${group} parks seq ${seq} (${answers.length} answered); list the blocked keys with "cg elastic park ls ${stream} ${group}"`,
  );
}

const RELAYED_CODES = new Set(["INVALID_ARGUMENT", "SERVER_ERROR", "PERMISSION_DENIED", "STREAM_NOT_FOUND"]);

function isKnownCode(code: string): code is "INVALID_ARGUMENT" | "SERVER_ERROR" | "PERMISSION_DENIED" | "STREAM_NOT_FOUND" {
  return RELAYED_CODES.has(code);
}
