/**
 * The source switch of a repartition: how the work-queue stream's source transform
 * changes (the cut, and the finish) without losing or repeating a message.
 */
import type { JetStreamManager, StoredMsg, StreamInfo } from "@nats-io/jetstream";
import { ConsumerGroupError } from "../../core/errors.js";
import { REPARTITION_METADATA_KEY, SWITCH_PAUSE_METADATA_KEY, TRANSITION_TOKEN, encodeRepartitionRecord, type RepartitionRecord } from "../../core/repartition.js";
import { ApiCode, apiErrorCode, isMessageGone, wrapServerError } from "../../nats/server-errors.js";
import { listConsumers, sleep, updateStream, updatedConfig, withStart, workQueueInfo } from "./stream-ops.js";

/**
 * How long the member consumers are paused at most while the source switches (they are
 * resumed as soon as it is done). It only runs out when the process running the switch
 * died: the members then drop the old source's copies themselves, which needs them to
 * have read the record, and they read it every 10 s at most.
 */
const SWITCH_PAUSE_MS = 30_000;

/** How long a switch waits for a source that does not run before it gives up with an error. */
const SOURCE_WAIT_MS = 10_000;

/**
 * Switches the work-queue stream's source to `transforms` (and stores `record`)
 * without losing or repeating a message. nats-server restarts a source whose
 * transform changed as a new source, from the time of the stream's last message, or
 * from the origin's start while the stream still holds its first message: in-flight
 * origin messages would be skipped, or the whole origin sourced again. So:
 * 1. the stream is marked (see SWITCH_PAUSE_METADATA_KEY) and the member consumers are
 *    paused: from now on, what is sourced stays stored;
 * 2. the newest message the old source stored is the anchor (see {@link switchAnchor}):
 *    the new source starts right after its origin sequence (`opt_start_seq`), so
 *    nothing in flight is skipped and nothing handled comes again;
 * 3. what the old source still stored after the anchor was never handed to anyone:
 *    the new source delivers it again, in the new layout, so the old copies are deleted
 *    (members drop any they get, should this process die first: `isReplacedCopy`);
 * 4. once the new source runs (and, when it already stored past it, without the start
 *    position), the mark goes and the consumers are resumed.
 *
 * @param fromTransition - whether the old source is the transition layout (the finish) or the old one (the cut)
 */
export async function switchSource(jsm: JetStreamManager, wq: string, transforms: { src: string; dest: string }[], record: RepartitionRecord, fromTransition: boolean, what: string): Promise<void> {
  /** Paused consumers: name → creation time (a consumer deleted and made again under the same name is a new, unpaused one). */
  const paused = new Map<string, string>();
  const until = new Date(Date.now() + SWITCH_PAUSE_MS);
  const pauseAll = async (): Promise<number> => {
    let added = 0;
    for (const c of await listConsumers(jsm, wq)) {
      if (paused.get(c.name) === c.created) continue;
      try {
        await jsm.consumers.pause(wq, c.name, until);
        paused.set(c.name, c.created);
        added += 1;
      } catch (err) {
        if (apiErrorCode(err) !== ApiCode.ConsumerNotFound) throw wrapServerError(err, `pausing "${c.name}" while the source of "${wq}" switches`);
      }
    }
    return added;
  };
  let failure: Error | undefined;
  try {
    // Marked first: a member making its consumer from now on pauses it itself (see SWITCH_PAUSE_METADATA_KEY).
    await markSwitchPause(jsm, wq, until);
    const info = await workQueueInfo(jsm, wq);
    const origin = info.config.sources?.[0]?.name ?? "";
    // A consumer made meanwhile (a member joining) was not paused and may have taken what the anchor
    // is read from: it is paused too, and the anchor read again.
    let anchor = await switchAnchor(jsm, wq, origin, pauseAll);
    for (let attempt = 0; attempt < 5 && (await pauseAll()) > 0; attempt++) anchor = await switchAnchor(jsm, wq, origin, pauseAll);
    const next = updatedConfig(await workQueueInfo(jsm, wq), (c) => {
      c.sources = [withStart({ ...(c.sources?.[0] ?? { name: "" }), subject_transforms: transforms }, anchor.origin)];
      const switched: RepartitionRecord = { ...record, switchedAfter: anchor.seq };
      if (anchor.origin !== undefined) switched.switchedAfterOrigin = anchor.origin;
      else delete switched.switchedAfterOrigin;
      c.metadata = { ...(c.metadata ?? {}), [REPARTITION_METADATA_KEY]: encodeRepartitionRecord(switched) };
    });
    await updateStream(jsm, next, what);
    await deleteOldCopies(jsm, wq, anchor.seq + 1, fromTransition);
    // Nothing the new source stores is lost if the consumers resume before it runs; waiting keeps
    // the pause and the switch one step (the loop checks it again before the next switch or clean-up).
    await untilSourceRuns(jsm, wq, Date.now() + SOURCE_WAIT_MS);
    // The start position goes as soon as the new source stored past it (see sourcedPastStart); the loop drops it later otherwise.
    const now = await workQueueInfo(jsm, wq);
    if (sourcedPastStart(now)) await dropStart(jsm, now);
  } catch (err) {
    failure = asError(err);
  }
  // The mark goes before the consumers resume: a member that pauses its new consumer after that resumes it itself.
  const unmarked = await markSwitchPause(jsm, wq, undefined).then(() => undefined, asError);
  // A consumer that cannot be resumed now resumes by itself at `until` (a later run resumes it too).
  await resumePaused(jsm, wq).catch(() => undefined);
  // A failed switch is worth saying first; failing to remove the mark after a good one, next.
  const error = failure ?? unmarked;
  if (error) throw error;
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

/** Sets (or, with `until` undefined, removes) the mark that a source switch holds the member consumers paused. */
async function markSwitchPause(jsm: JetStreamManager, wq: string, until: Date | undefined): Promise<void> {
  const info = await workQueueInfo(jsm, wq);
  const value = until?.toISOString();
  if (info.config.metadata?.[SWITCH_PAUSE_METADATA_KEY] === value) return;
  const next = updatedConfig(info, (c) => {
    const metadata = { ...(c.metadata ?? {}) };
    if (value === undefined) delete metadata[SWITCH_PAUSE_METADATA_KEY];
    else metadata[SWITCH_PAUSE_METADATA_KEY] = value;
    c.metadata = metadata;
  });
  await updateStream(jsm, next, value === undefined ? "ending the pause of a source switch" : "marking the pause of a source switch");
}

/** Resumes every paused consumer of the work-queue stream (the switch's, and those members paused themselves). */
async function resumePaused(jsm: JetStreamManager, wq: string): Promise<void> {
  for (const c of await listConsumers(jsm, wq)) {
    if (!(c as { paused?: boolean }).paused) continue;
    try {
      await jsm.consumers.resume(wq, c.name);
    } catch (err) {
      if (apiErrorCode(err) !== ApiCode.ConsumerNotFound) throw wrapServerError(err, `resuming "${c.name}" after a source switch of "${wq}"`);
    }
  }
}

/**
 * What a run that resumes does first, for a switch a killed run left half done: the
 * consumers it paused are resumed, and the old source's copies stored after the
 * switch's anchor, which the new source delivers again, are deleted.
 */
export async function finishInterruptedSwitch(jsm: JetStreamManager, wq: string, record: RepartitionRecord | undefined): Promise<void> {
  if (record?.switchedAfter !== undefined) await deleteOldCopies(jsm, wq, record.switchedAfter + 1, record.phase === "finishing");
  await markSwitchPause(jsm, wq, undefined);
  await resumePaused(jsm, wq);
}

/**
 * The switch's anchor: the newest message the old source stored, and its origin
 * sequence. Every poll pauses any consumer made meanwhile (a member joining), so
 * whatever is sourced stays stored: the stream's last message either exists (it is
 * the anchor) or was handled before its consumer was paused. Then nats-server >= 2.15
 * says the origin sequence the source last stored ({@link storedOrigin}), however far
 * behind the origin it is. Older servers: the next sourced message becomes the
 * anchor, or, when the stream's last sequence has not moved for {@link IDLE_MS} while
 * the source was heard from lately ({@link sourceFresh}), the source has caught up with
 * the origin as it was when that quiet spell began, and that origin sequence is the
 * anchor's.
 */
async function switchAnchor(jsm: JetStreamManager, wq: string, origin: string, pauseAll: () => Promise<number>): Promise<{ seq: number; origin: number | undefined }> {
  const originLast = async (): Promise<number> => {
    try {
      return (await jsm.streams.info(origin)).state.last_seq;
    } catch (err) {
      throw wrapServerError(err, `reading the source stream "${origin}" of "${wq}"`);
    }
  };
  let quietSince = Date.now();
  let quietSeq = -1;
  let quietOrigin = 0;
  const waitingSince = Date.now();
  for (;;) {
    await pauseAll();
    const info = await workQueueInfo(jsm, wq);
    const last = info.state.last_seq;
    const newest = last > 0 ? await messageAt(jsm, wq, last) : null;
    if (newest) return { seq: last, origin: originSeq(newest.header?.get("Nats-Stream-Source")) };
    // The newest message was handled. nats-server >= 2.15 reports the origin sequence of the last
    // message the source stored: that is the anchor, however far behind the origin the source is.
    // Read twice: the two halves of one info are not taken at the same instant.
    const stored = storedOrigin(info);
    if (stored !== undefined) {
      const again = await workQueueInfo(jsm, wq);
      if (again.state.last_seq === last && storedOrigin(again) === stored) return { seq: last, origin: stored };
      await sleep(ANCHOR_POLL_MS, undefined);
      continue;
    }
    // Older servers: a quiet spell says the source caught up only while it runs and has been
    // heard from lately (a stalled source stores nothing either).
    if (!sourceFresh(info)) {
      quietSeq = -1;
      if (Date.now() - waitingSince >= SOURCE_WAIT_MS) {
        const reason = info.sources?.[0]?.error?.description;
        throw new ConsumerGroupError(
          "SERVER_ERROR",
          `the source of "${wq}" from "${origin}" has not run for ${SOURCE_WAIT_MS / 1000} s${reason ? ` (the server says: ${reason})` : ""}, so the repartition cannot tell what it has sourced: check that "${origin}" exists and is reachable, then run the repartition again`,
        );
      }
    } else if (last !== quietSeq) {
      quietSeq = last;
      quietOrigin = await originLast();
      quietSince = Date.now();
    } else if (Date.now() - quietSince >= IDLE_MS) {
      return { seq: last, origin: quietOrigin };
    }
    await sleep(ANCHOR_POLL_MS, undefined);
  }
}

/** The message at `seq`, or null when it is gone. */
async function messageAt(jsm: JetStreamManager, wq: string, seq: number): Promise<StoredMsg | null> {
  try {
    return await jsm.streams.getMessage(wq, { seq });
  } catch (err) {
    throw wrapServerError(err, `reading message ${seq} of "${wq}"`);
  }
}

/**
 * Whether the work-queue stream's source runs as configured: the server reports the
 * configured transforms for it and has heard from its consumer on the origin. The
 * server makes that consumer a moment after a stream update, with the start position
 * the config has then.
 */
export function sourceRunning(info: StreamInfo): boolean {
  const configured = info.config.sources?.[0]?.subject_transforms ?? [];
  const running = info.sources?.[0];
  if (!running || running.active < 0) return false;
  const actual = running.subject_transforms ?? [];
  return actual.length === configured.length && actual.every((t, i) => t.src === configured[i]?.src && t.dest === configured[i]?.dest);
}

/** How recently a running source must have been heard from (it sends a heartbeat every second when idle) to count as caught up after a quiet spell. */
const SOURCE_FRESH_MS = 5_000;

/** Whether the source runs and was heard from within {@link SOURCE_FRESH_MS}. */
export function sourceFresh(info: StreamInfo): boolean {
  const active = info.sources?.[0]?.active ?? -1;
  return sourceRunning(info) && active < SOURCE_FRESH_MS * 1_000_000;
}

/** The origin sequence of the last message the source stored, as nats-server >= 2.15 reports it (`sources[].seq`); undefined when not reported. */
export function storedOrigin(info: StreamInfo): number | undefined {
  const seq = (info.sources?.[0] as { seq?: unknown } | undefined)?.seq;
  return typeof seq === "number" && Number.isSafeInteger(seq) && seq > 0 ? seq : undefined;
}

/**
 * Whether the source has stored a message at or after its configured start position:
 * from then on the server restarts it (after a crash, or on a new leader) from what it
 * stored, and a start position left in the config would only source everything since
 * the switch again should the stored state be lost. Needs `sources[].seq` (nats-server >= 2.15).
 */
export function sourcedPastStart(info: StreamInfo): boolean {
  const start = info.config.sources?.[0]?.opt_start_seq;
  const stored = storedOrigin(info);
  return start !== undefined && start > 0 && stored !== undefined && stored >= start;
}

/** Removes the switch's start position from the source (the running source keeps going: its identity does not include it). */
export async function dropStart(jsm: JetStreamManager, info: StreamInfo): Promise<void> {
  const next = updatedConfig(info, (c) => {
    c.sources = (c.sources ?? []).map((s) => withStart(s, undefined));
  });
  await updateStream(jsm, next, "removing the switch's start position once its source stored past it");
}

/** Waits until the source runs, at most until `deadline` (epoch ms). */
async function untilSourceRuns(jsm: JetStreamManager, wq: string, deadline: number): Promise<boolean> {
  for (;;) {
    if (sourceRunning(await workQueueInfo(jsm, wq))) return true;
    if (Date.now() >= deadline) return false;
    await sleep(ANCHOR_POLL_MS, undefined);
  }
}

/** How long the switch waits for the old source to store a message before it takes the source as caught up. */
const IDLE_MS = 2000;

const ANCHOR_POLL_MS = 50;

/** The origin sequence in a `Nats-Stream-Source` header (`<stream> <seq> …`). */
function originSeq(header: string | undefined): number | undefined {
  const seq = Number((header ?? "").split(" ")[1]);
  return Number.isSafeInteger(seq) && seq > 0 ? seq : undefined;
}

/**
 * Deletes the messages the old source stored from `fromSeq` on: they were sourced
 * while the consumers were paused, so no one has them, and the new source delivers
 * them again. They all come before the new source's first message.
 */
async function deleteOldCopies(jsm: JetStreamManager, wq: string, fromSeq: number, fromTransition: boolean): Promise<void> {
  for (let seq = fromSeq; ; ) {
    let m;
    try {
      // The next message still stored at or after `seq`: gaps (messages handled since) are skipped.
      m = await jsm.direct.getMessage(wq, { seq, next_by_subj: ">" });
    } catch (err) {
      throw wrapServerError(err, `reading the messages of "${wq}" after the switch`);
    }
    if (!m || m.subject.startsWith(`${TRANSITION_TOKEN}.`) !== fromTransition) return;
    try {
      await jsm.streams.deleteMessage(wq, m.seq, false);
    } catch (err) {
      // Handled by a member meanwhile (a work queue removes it): nothing to delete.
      if (!isMessageGone(err)) throw wrapServerError(err, `deleting message ${m.seq} of "${wq}", which the new layout's source delivers again`);
    }
    seq = m.seq + 1;
  }
}
