/**
 * Grows a live elastic group's partition count from N to M without losing a
 * message or breaking per-key order of first handling.
 *
 * The protocol, in the order it runs (each step is idempotent, so running it again
 * after a crash resumes where it stopped):
 * 1. **Cut.** One update of the work-queue stream switches its source transform to the
 *    transition layout `pcg-repartition.{{Partition(M,…)}}.…` and records
 *    `{from, to, phase: "moving"}` in the stream's metadata. Every message sourced
 *    before it is in the old layout `<p>.…`; every one after it in the transition
 *    layout, so the two never share a subject.
 * 2. **Config.** The group config gets `max_members = M` (compare-and-set; explicit
 *    mappings get the new partitions, none moves). Members rejoin with their M
 *    partitions `<q>.…`, which also receive what is left of old partition q.
 * 3. **Gates.** A member adds `pcg-repartition.<q>.…` to its consumer once every
 *    *other* old partition that can feed q (p ≡ q mod gcd(N, M)) holds no message:
 *    no old message of a key of q is left unhandled. Nothing else is held back.
 * 4. **Finish.** When no old-layout message is left and every member's consumer has
 *    all its transition filters, one stream update switches the source to Go's
 *    layout `{{Partition(M,…)}}.…` (phase `finishing`): the same consumers receive a
 *    partition's transition messages before its new ones, in stream order.
 * 5. **Done.** When no transition message is left, the record is removed; members
 *    drop the transition filters.
 */
import type { ConsumerInfo, JetStreamClient, JetStreamManager, StoredMsg, StreamConfig, StreamInfo, StreamSource } from "@nats-io/jetstream";
import { partitionAssignment, elasticGetPartitionFilters } from "../core/assignment.js";
import { ConsumerGroupError } from "../core/errors.js";
import { assertPartitionCount } from "../core/limits.js";
import { optionalBoolean, optionalTimerMs, quoted } from "../core/option-checks.js";
import { PRIORITY_GROUP, assertValidGroupNames, configKey, sourceTransforms, workQueueStreamName } from "../core/names.js";
import {
  REPARTITION_METADATA_KEY,
  SWITCH_PAUSE_METADATA_KEY,
  TRANSITION_TOKEN,
  encodeRepartitionRecord,
  growMappings,
  partitionsToWaitFor,
  transitionFilters,
  transitionTransforms,
  type RepartitionPhase,
  type RepartitionRecord,
} from "../core/repartition.js";
import type { ElasticConsumerGroupConfig } from "../core/types.js";
import { ELASTIC, openConfigBucket, readElasticConfigNotStatic, updateConfig } from "../nats/config-store.js";
import { MODE_KEY } from "../nats/consumer-mode.js";
import { MIN_SERVER, managerOf, requireServer } from "../nats/context.js";
import { ApiCode, apiErrorCode, isTransientServerError, wrapServerError } from "../nats/server-errors.js";
import { connectionOf } from "../nats/client-seam.js";
import { layoutOf, readLayout, type StreamLayout } from "./layout.js";
import { readLock, releaseLock, takeLock } from "./repartition-lock.js";
import { registeredAutoMembers } from "./lease-store.js";
import { PRESENCE_WAIT_MS, askPresencePins, presenceSubject } from "./presence.js";

/** Where a repartition is, as reported to `onProgress`. */
export interface RepartitionProgress {
  /** `moving`: old-layout messages are being handled; `finishing`: the transition layout drains; `done`. */
  phase: RepartitionPhase | "done";
  /** The partition count before. */
  from: number;
  /** The partition count after. */
  to: number;
  /** Old-layout messages still stored, per old partition (index = partition). */
  oldLeft: number[];
  /** Transition-layout messages still stored (counted in `finishing`). */
  transitionLeft: number;
  /** New partitions whose transition messages no consumer takes yet: held back for order, or their member is not running. */
  heldBack: number[];
  /** Consumers whose filters do not yet match the new layout (members still rejoining). */
  membersBehind: string[];
  /** Since this call started. */
  elapsedMs: number;
  /** An estimate of the time left, from the rate messages left so far; undefined until there is one. */
  etaMs: number | undefined;
  /** Whether this call resumed a repartition started earlier. */
  resumed: boolean;
}

/** Options of {@link repartition}. */
export interface RepartitionOptions {
  /** Called after each check (every `pollMs`). */
  onProgress?: (progress: RepartitionProgress) => void;
  /**
   * Repartition even though some members cannot be shown to be this library's:
   * consumers without its metadata (Go's, and this library's in `serial` mode, the
   * default, whose consumer config is exactly Go's so that Go and TypeScript instances
   * can share a member), and members with partitions that run no instance now. Pass
   * it when you know they are all this library's. A Go member cannot follow the
   * transition layout: Go stops it when the partition count changes, a running Go
   * consumer holds the finish back, and a Go instance started while the repartition
   * is finishing can break per-key order for its partitions, so start none until it
   * is done.
   */
  force?: boolean;
  /** How often the stream and consumers are checked (default 250 ms). */
  pollMs?: number;
  /** Aborting stops this call (the repartition stays where it is; run it again to finish it). */
  signal?: AbortSignal;
  /**
   * Called before a transient server error is tried again (a timeout, a leader
   * election, the server racing a member's consumer being made): up to
   * {@link REPARTITION_ATTEMPTS} attempts in a row, waiting 0.5 s doubling to 8 s.
   */
  onRetry?: (retry: RepartitionRetry) => void;
}

/** A transient error a repartition is about to try again after (see `onRetry`). */
export interface RepartitionRetry {
  /** The attempt about to run (2 for the first retry). */
  attempt: number;
  /** The attempts in a row it makes at most. */
  maxAttempts: number;
  /** How long it waits first. */
  delayMs: number;
  /** What failed. */
  error: Error;
}

/** What a finished repartition reports. */
export interface RepartitionResult {
  /** The partition count before. */
  from: number;
  /** The partition count after. */
  to: number;
  /** Whether this call resumed one started earlier. */
  resumed: boolean;
  /** How long this call took. */
  durationMs: number;
  /** Members `force` went past: consumers without this library's metadata, and members running no instance. */
  unverifiedMembers: string[];
}

/**
 * Grows a live elastic group's partition count to `partitions`, under load, with
 * members consuming: no message lost, and no message of a key starts under the new
 * layout while an earlier one of that key from the old layout is unhandled. Resolves
 * when the group is fully in the new layout. If the process running it dies, call
 * it again with the same count: it resumes. Members keep consuming, in order,
 * meanwhile; the group just stays in the transition layout until it is finished.
 *
 * Growing to a multiple of the current count is cheapest: each new partition then
 * waits for one old partition only, and the old partitions never wait.
 *
 * @param partitions - the new partition count, larger than the current one
 * @throws ConsumerGroupError `INVALID_NAME`, `INVALID_MAX_MEMBERS` (not larger, not an integer),
 *   `GROUP_NOT_FOUND`, `BUCKET_NOT_FOUND` (no elastic group was ever created), `STATIC_GROUP`, `REPARTITION_IN_PROGRESS` (to another count), `GO_MEMBERS_PRESENT`
 *   (unless `force`), `CONFIG_MISMATCH`, `STREAM_NOT_FOUND`, `SERVER_TOO_OLD`, `STOPPED` (aborted)
 *
 * @example
 * ```ts
 * await repartition(js, "orders", "shipping", 12, {
 *   onProgress: (p) => console.log(p.phase, p.oldLeft.reduce((a, b) => a + b, 0)),
 * });
 * ```
 */
export async function repartition(js: JetStreamClient, stream: string, group: string, partitions: number, options: RepartitionOptions = {}): Promise<RepartitionResult> {
  const started = Date.now();
  checkRepartitionOptions(options);
  // Counts failures in a row: a run that reported progress since the last one starts over.
  let failures = 0;
  let progressed = false;
  const watched: RepartitionOptions = {
    ...options,
    onProgress: (p) => {
      progressed = true;
      options.onProgress?.(p);
    },
  };
  // Decided from a reading taken before the lock; when another run moved the group on before the
  // lock was ours, everything is decided again from a new reading (a few times at most).
  for (let attempt = 0; ; attempt++) {
    let result: RepartitionResult | "read again";
    try {
      result = await repartitionOnce(js, stream, group, partitions, watched, started, attempt >= 3);
    } catch (err) {
      if (progressed) failures = 0;
      progressed = false;
      failures += 1;
      if (!isRetryableRepartitionError(err) || failures >= REPARTITION_ATTEMPTS || options.signal?.aborted) throw err;
      // Every step is safe to run again: the next call resumes from the record and the lock this one left.
      const delayMs = retryDelayMs(failures);
      options.onRetry?.({ attempt: failures + 1, maxAttempts: REPARTITION_ATTEMPTS, delayMs, error: err instanceof Error ? err : new Error(String(err)) });
      await sleep(delayMs, options.signal);
      continue;
    }
    if (result !== "read again") return result;
  }
}

/** How many times in a row a repartition meets a transient server error before it gives up. */
export const REPARTITION_ATTEMPTS = 8;
/** The first wait before trying again, doubled each time up to {@link REPARTITION_RETRY_CAP_MS}. */
const REPARTITION_RETRY_FIRST_MS = 500;
/** The longest wait between two attempts. */
const REPARTITION_RETRY_CAP_MS = 8_000;

/** The wait before attempt `failures + 1`: 0.5, 1, 2, 4, 8, 8, … s (about 31 s over all the attempts). */
export function retryDelayMs(failures: number): number {
  return Math.min(REPARTITION_RETRY_CAP_MS, REPARTITION_RETRY_FIRST_MS * 2 ** Math.max(0, failures - 1));
}

/**
 * Errors a repartition outlives by trying again: timeouts, no responders, a leader
 * election, and the server's own file races on a consumer being made or deleted
 * while the switch pauses it (`open …/meta.inf.tmp: no such file or directory`,
 * `error creating store for consumer`), which the members' rebalances produce.
 */
export function isRetryableRepartitionError(err: unknown): boolean {
  if (err instanceof ConsumerGroupError && err.code !== "SERVER_ERROR") return false;
  if (isTransientServerError(err)) return true;
  let current: unknown = err;
  for (let depth = 0; depth < 6 && current !== undefined && current !== null; depth++) {
    const message = (current as { message?: unknown }).message;
    if (typeof message === "string" && /no such file or directory|error creating store|meta\.(inf|sum)\.tmp|connection disconnected/i.test(message)) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/** The options' types: a `force` that is not a boolean must not count as one. */
function checkRepartitionOptions(options: RepartitionOptions): void {
  if (typeof options !== "object" || options === null) throw new ConsumerGroupError("INVALID_ARGUMENT", `repartition options must be an object, got ${quoted(options)}`);
  optionalBoolean(options.force, "force", false);
  optionalTimerMs(options.pollMs, "pollMs", 250);
  if (options.onProgress !== undefined && typeof options.onProgress !== "function") throw new ConsumerGroupError("INVALID_ARGUMENT", `onProgress must be a function, got ${quoted(options.onProgress)}`);
  if (options.onRetry !== undefined && typeof options.onRetry !== "function") throw new ConsumerGroupError("INVALID_ARGUMENT", `onRetry must be a function, got ${quoted(options.onRetry)}`);
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) throw new ConsumerGroupError("INVALID_ARGUMENT", `signal must be an AbortSignal, got ${quoted(options.signal)}`);
}

async function repartitionOnce(
  js: JetStreamClient,
  stream: string,
  group: string,
  partitions: number,
  options: RepartitionOptions,
  started: number,
  lastAttempt: boolean,
): Promise<RepartitionResult | "read again"> {
  assertValidGroupNames(stream, group);
  assertPartitionCount(partitions, "the new partition count");
  checkRepartitionOptions(options);
  const pollMs = options.pollMs ?? 250;
  const jsm = await managerOf(js);
  requireServer(js, MIN_SERVER, "repartitioning elastic consumer groups");
  const config = await readElasticConfig(js, jsm, stream, group);
  const wq = workQueueStreamName(stream, group);
  const info = await workQueueInfo(jsm, wq);
  const layout = layoutOf(info);
  const kv = await openConfigBucket(js, jsm, "elastic");
  const held = (await readLock(kv, stream, group))?.lock;
  if (!layout.record && held && held.to === partitions && config.config.max_members === partitions && layout.partitions === partitions) {
    // A run that finished everything but releasing its lock (it died just before).
    await releaseLock(kv, stream, group);
    options.onProgress?.(new ProgressTracker(held.from, partitions, started, true).report("done", [], 0, [], []));
    return { from: held.from, to: partitions, resumed: true, durationMs: Date.now() - started, unverifiedMembers: [] };
  }
  const resumed = layout.record !== undefined || held?.to === partitions;
  let from: number;
  if (layout.record) {
    if (layout.record.to !== partitions) {
      throw new ConsumerGroupError(
        "REPARTITION_IN_PROGRESS",
        `a repartition of ${stream}.${group} from ${layout.record.from} to ${layout.record.to} partitions (started ${layout.record.started}) is in progress: finish it first by running it again with ${layout.record.to}`,
      );
    }
    from = layout.record.from;
  } else {
    from = config.config.max_members;
    if (layout.partitions !== from) {
      throw new ConsumerGroupError(
        "CONFIG_MISMATCH",
        `the group config of ${stream}.${group} says ${from} partitions but its work-queue stream "${wq}" hashes into ${String(layout.partitions)}: fix the group (delete and recreate it) before repartitioning`,
      );
    }
    if (partitions <= from) {
      throw new ConsumerGroupError(
        "INVALID_MAX_MEMBERS",
        `${stream}.${group} has ${from} partitions; a repartition only grows the count (got ${partitions}): pass a larger number`,
      );
    }
  }
  // Checked before starting: a repartition already under way is better finished than refused.
  const unverifiedMembers = resumed ? [] : await findUnverifiedMembers(js, jsm, stream, group, config.config);
  if (unverifiedMembers.length > 0 && !options.force) {
    throw new ConsumerGroupError(
      "GO_MEMBERS_PRESENT",
      `the elastic consumer group ${stream}.${group} has members that may be Go members: ${unverifiedMembers.join(", ")} (no running instance answered on ${presenceSubject(stream, group)}, they did not join by auto-join, and their consumers carry no nats-pcgroups metadata, as Go's do not; or they run no instance now). Go members cannot follow a repartition: Go stops a member when the partition count changes, and a Go instance started before the repartition is done can break per-key order for its partitions. Start the members, or give their users subscribe permission on ${presenceSubject(stream, group)} with allow_responses (docs/permissions.md); pass force (--force) when these are all nats-pcgroups members, and start no Go instance of the group until it is done`,
    );
  }
  const record: RepartitionRecord = layout.record ?? { from, to: partitions, phase: "moving", started: new Date().toISOString() };
  // A lock left by a repartition that finished (the config and the stream say its count) is stale.
  // Taken before anything changes: a run of the same repartition that is alive right now is refused.
  const lock = await takeLock(kv, connectionOf(js), stream, group, { from, to: partitions, started: record.started }, (held) => !layout.record && held.to === config.config.max_members);
  let finished = false;
  try {
    // Read again under the lock: a run that held it before may have moved the group on meanwhile.
    const locked = await workQueueInfo(jsm, wq);
    const lockedLayout = layoutOf(locked);
    const lockedConfig = (await readElasticConfig(js, jsm, stream, group)).config;
    if (JSON.stringify(lockedLayout.record) !== JSON.stringify(layout.record) || lockedConfig.max_members !== config.config.max_members) {
      if (lastAttempt) throw new ConsumerGroupError("CONFIG_CONFLICT", `the repartition of ${stream}.${group} kept changing under this call (another run of it?): try again`);
      return "read again";
    }
    if (lockedLayout.record || resumed) await finishInterruptedSwitch(jsm, wq, lockedLayout.record);
    lock.assertHeld();
    if (!lockedLayout.record) await cut(jsm, locked, record, config.config);
    lock.assertHeld();
    await growConfig(js, jsm, stream, group, from, partitions);

    const tracker = new ProgressTracker(from, partitions, started, resumed);
    const drained = new Set<number>();
    const check = async (): Promise<RepartitionProgress> => {
      const now = await readLayout(jsm, wq);
      const current = (await readElasticConfig(js, jsm, stream, group)).config;
      if (!now.record) return tracker.report("done", [], 0, [], []);
      if (now.record.to !== partitions) {
        throw new ConsumerGroupError("REPARTITION_IN_PROGRESS", `the repartition record of ${stream}.${group} changed under this call (now ${now.record.from} to ${now.record.to}): another repartition runs`);
      }
      const oldLeft = now.record.phase === "moving" ? await countPerPartition(jsm, wq, from, drained) : new Array<number>(from).fill(0);
      const transitionLeft = now.record.phase === "finishing" ? await countUnder(jsm, wq, TRANSITION_TOKEN) : 0;
      const { heldBack, behind } = await consumersBehind(jsm, wq, current, now, oldLeft);
      return tracker.report(now.record.phase, oldLeft, transitionLeft, heldBack, behind);
    };

    for (;;) {
      if (options.signal?.aborted) {
        throw new ConsumerGroupError("STOPPED", `the repartition of ${stream}.${group} to ${partitions} partitions was interrupted; it stays where it is and members keep consuming in order: run it again to finish it`);
      }
      const progress = await check();
      options.onProgress?.(progress);
      if (progress.phase === "done") {
        await lock.stop(true);
        await releaseLock(kv, stream, group);
        finished = true;
        break;
      }
      lock.assertHeld();
      const fresh = await workQueueInfo(jsm, wq);
      const latest = layoutOf(fresh);
      // The previous switch's source may not run yet: the server makes its consumer on the origin a
      // moment after the update, reading the start position from the config then. Switching again, or
      // clearing that start position, before it runs would start it from somewhere else.
      const sourceRuns = sourceRunning(fresh);
      if (sourceRuns && sourcedPastStart(fresh)) {
        await dropStart(jsm, fresh);
        continue;
      }
      if (sourceRuns && progress.phase === "moving" && progress.oldLeft.every((n) => n === 0) && progress.membersBehind.length === 0) {
        await finish(jsm, latest, wq, config.config);
        continue;
      }
      if (sourceRuns && progress.phase === "finishing" && progress.transitionLeft === 0) {
        await clearRecord(jsm, fresh);
        continue;
      }
      await sleep(pollMs, options.signal);
    }
  } finally {
    if (!finished) await lock.stop(false);
  }
  return { from, to: partitions, resumed, durationMs: Date.now() - started, unverifiedMembers };
}

async function readElasticConfig(js: JetStreamClient, jsm: JetStreamManager, stream: string, group: string): Promise<{ config: ElasticConsumerGroupConfig; revision: number }> {
  return readElasticConfigNotStatic(
    js,
    jsm,
    stream,
    group,
    `${stream}.${group} is a static consumer group: its partitioning is the stream's own subject transform, which belongs to you. "cg static repartition ${stream} ${group} <partitions>" prints the steps`,
  );
}

async function workQueueInfo(jsm: JetStreamManager, wq: string): Promise<StreamInfo> {
  try {
    return await jsm.streams.info(wq);
  } catch (err) {
    if (apiErrorCode(err) === ApiCode.StreamNotFound) {
      throw new ConsumerGroupError("STREAM_NOT_FOUND", `the elastic consumer group's work-queue stream "${wq}" does not exist: recreate the group`, { cause: err });
    }
    throw wrapServerError(err, `reading the work-queue stream "${wq}"`);
  }
}

/**
 * What cannot be shown to be this library's. A member is this library's when it
 * joined by itself (auto-join: its lease may be running out, its consumer gone), when
 * its consumer carries this library's metadata (every mode but `serial`), or when a
 * running instance answered the presence request (`serial` consumers are exactly
 * Go's). Left: consumers of members nobody vouches for (Go's, or this library's
 * without the presence permission), and members with partitions that run no
 * instance (one of them could be a Go member started later).
 */
async function findUnverifiedMembers(js: JetStreamClient, jsm: JetStreamManager, stream: string, group: string, config: ElasticConsumerGroupConfig): Promise<string[]> {
  const wq = workQueueStreamName(stream, group);
  const [consumers, auto] = await Promise.all([listConsumers(jsm, wq), registeredAutoMembers(js, jsm, stream, group)]);
  // Consumers that look like Go's: only a presence answer vouches for them (asked only when there are any, and over once all answered).
  // A member whose consumer is pinned is vouched for only by the pinned instance's answer: a Go instance
  // may be pinned while an instance of this library stands by (serial mode: both use Go's consumer config).
  const lookLikeGo = consumers.filter((c) => c.config.metadata?.[MODE_KEY] === undefined && !auto.has(c.name));
  const vouched = (c: ConsumerInfo, answered: Map<string, Set<string>>): boolean => {
    const pins = answered.get(c.name);
    const pinned = pinnedIdOf(c);
    return pins !== undefined && (pinned === undefined || pins.has(pinned));
  };
  const answered = lookLikeGo.length === 0 ? new Map<string, Set<string>>() : await askPresencePins(connectionOf(js), stream, group, PRESENCE_WAIT_MS, (seen) => lookLikeGo.every((c) => vouched(c, seen)));
  const unmarked = lookLikeGo.filter((c) => !vouched(c, answered)).map((c) => c.name);
  const running = new Set(consumers.map((c) => c.name));
  const absent = [...partitionAssignment(config)].filter(([member, partitions]) => partitions.length > 0 && !running.has(member) && !auto.has(member)).map(([member]) => member);
  return [...new Set([...unmarked, ...absent])].sort();
}

/** The pinned client of a consumer's priority group, if one is pinned. */
function pinnedIdOf(c: ConsumerInfo): string | undefined {
  const groups = (c as ConsumerInfo & { priority_groups?: { group: string; pinned_client_id?: string }[] }).priority_groups;
  return groups?.find((g) => g.group === PRIORITY_GROUP)?.pinned_client_id || undefined;
}

async function listConsumers(jsm: JetStreamManager, wq: string): Promise<ConsumerInfo[]> {
  const found: ConsumerInfo[] = [];
  try {
    for await (const ci of jsm.consumers.list(wq)) found.push(ci);
  } catch (err) {
    throw wrapServerError(err, `listing the consumers of "${wq}"`);
  }
  return found;
}

/** A stream config to send back in an update: what was read, with `change` applied. */
function updatedConfig(info: StreamInfo, change: (config: StreamConfig) => void): StreamConfig {
  const config = structuredClone(info.config);
  change(config);
  return config;
}

async function updateStream(jsm: JetStreamManager, config: StreamConfig, what: string): Promise<void> {
  try {
    await jsm.streams.update(config.name, config);
  } catch (err) {
    throw wrapServerError(err, `updating the work-queue stream "${config.name}" (${what})`);
  }
}

/** Step 1: the transition layout and the record, in one switch of the source. */
async function cut(jsm: JetStreamManager, info: StreamInfo, record: RepartitionRecord, config: ElasticConsumerGroupConfig): Promise<void> {
  await switchSource(jsm, info.config.name, transitionTransforms(record.to, config.partitioning_filters), record, false, `the cut to the transition layout of ${record.to} partitions`);
}

/** Step 2: the config's partition count (and mappings). */
async function growConfig(js: JetStreamClient, jsm: JetStreamManager, stream: string, group: string, from: number, to: number): Promise<void> {
  const kv = await openConfigBucket(js, jsm, "elastic");
  await updateConfig(kv, ELASTIC, stream, group, (current) => {
    if (current.max_members === to) return current;
    if (current.max_members !== from) {
      throw new ConsumerGroupError("CONFIG_MISMATCH", `the config ${configKey(stream, group)} now says ${current.max_members} partitions, neither ${from} nor ${to}: it was changed during the repartition`);
    }
    const next: ElasticConsumerGroupConfig = { ...current, max_members: to };
    if ((current.member_mappings ?? []).length > 0) next.member_mappings = growMappings(current.member_mappings ?? [], from, to);
    return next;
  });
}

/** Step 4: Go's layout for the new count, phase `finishing`. */
async function finish(jsm: JetStreamManager, layout: StreamLayout, wq: string, config: ElasticConsumerGroupConfig): Promise<void> {
  const record = layout.record;
  if (!record || record.phase !== "moving") return;
  await switchSource(jsm, wq, sourceTransforms(record.to, config.partitioning_filters), { ...record, phase: "finishing" }, true, `switching to the final layout of ${record.to} partitions`);
}

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
async function switchSource(jsm: JetStreamManager, wq: string, transforms: { src: string; dest: string }[], record: RepartitionRecord, fromTransition: boolean, what: string): Promise<void> {
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
async function finishInterruptedSwitch(jsm: JetStreamManager, wq: string, record: RepartitionRecord | undefined): Promise<void> {
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
async function dropStart(jsm: JetStreamManager, info: StreamInfo): Promise<void> {
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
      if (apiErrorCode(err) !== ApiCode.NoMessageFound) throw wrapServerError(err, `deleting message ${m.seq} of "${wq}", which the new layout's source delivers again`);
    }
    seq = m.seq + 1;
  }
}

/** Step 5: the record goes, and so does the start position of the switches (the same source keeps running: Go's config again). */
async function clearRecord(jsm: JetStreamManager, info: StreamInfo): Promise<void> {
  const next = updatedConfig(info, (c) => {
    c.sources = (c.sources ?? []).map((s) => withStart(s, undefined));
    const metadata = { ...(c.metadata ?? {}) };
    delete metadata[REPARTITION_METADATA_KEY];
    delete metadata[SWITCH_PAUSE_METADATA_KEY];
    c.metadata = metadata;
  });
  await updateStream(jsm, next, "removing the finished repartition's record");
}

/** A source that starts right after origin sequence `sourced` (or wherever the server chooses, when undefined). */
function withStart(source: StreamSource, sourced: number | undefined): StreamSource {
  const next: StreamSource = { ...source };
  delete next.opt_start_seq;
  delete next.opt_start_time;
  if (sourced !== undefined) next.opt_start_seq = sourced + 1;
  return next;
}

/** Messages stored under `<token>.>`. */
async function countUnder(jsm: JetStreamManager, wq: string, token: string): Promise<number> {
  try {
    const info = await jsm.streams.info(wq, { subjects_filter: `${token}.>` });
    return Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0);
  } catch (err) {
    throw wrapServerError(err, `counting the messages under "${token}.>" in "${wq}"`);
  }
}

/**
 * Old-layout messages stored per old partition. After the cut nothing new lands in
 * the old layout, so a partition found empty (`drained`) is not counted again.
 */
async function countPerPartition(jsm: JetStreamManager, wq: string, from: number, drained: Set<number>): Promise<number[]> {
  const counts = new Array<number>(from).fill(0);
  for (let p = 0; p < from; p++) {
    if (drained.has(p)) continue;
    counts[p] = await countUnder(jsm, wq, String(p));
    if (counts[p] === 0) drained.add(p);
  }
  return counts;
}

/**
 * Compares every consumer on the stream with what it should have under the
 * new layout: which new partitions are still held back, and which consumers are
 * behind (still on the old layout, missing a transition filter they may have, or
 * left over from a member no longer in the group, until it is deleted or expires).
 */
async function consumersBehind(
  jsm: JetStreamManager,
  wq: string,
  config: ElasticConsumerGroupConfig,
  layout: StreamLayout,
  oldLeft: number[],
): Promise<{ heldBack: number[]; behind: string[] }> {
  const record = layout.record;
  if (!record) return { heldBack: [], behind: [] };
  const open = (q: number): boolean => record.phase === "finishing" || partitionsToWaitFor(record.from, record.to, q).every((p) => (oldLeft[p] ?? 0) === 0);
  // Every consumer, Go's too: one that never takes the transition filters holds the finish back, so a
  // Go member in a forced repartition stalls its own partitions' new messages rather than reorder them.
  const consumers = new Map((await listConsumers(jsm, wq)).map((c) => [c.name, c]));
  const heldBack = new Set<number>();
  const behind: string[] = [];
  for (const member of partitionAssignment(config).keys()) {
    const finalFilters = elasticGetPartitionFilters(config, member);
    if (finalFilters.length === 0) continue;
    const consumer = consumers.get(member);
    const have = new Set(consumer?.config.filter_subjects ?? (consumer?.config.filter_subject ? [consumer.config.filter_subject] : []));
    for (const f of finalFilters) {
      const q = Number(f.slice(0, f.indexOf(".")));
      if (!have.has(`${TRANSITION_TOKEN}.${f}`)) heldBack.add(q);
    }
    if (!consumer) continue;
    consumers.delete(member);
    const want = transitionFilters(finalFilters, open);
    if (want.length !== have.size || want.some((f) => !have.has(f))) behind.push(member);
  }
  behind.push(...consumers.keys());
  return { heldBack: [...heldBack].sort((a, b) => a - b), behind };
}

/** Turns checks into progress reports, with an estimate of the time left. */
class ProgressTracker {
  private first: { at: number; left: number } | undefined;
  constructor(
    private readonly from: number,
    private readonly to: number,
    private readonly started: number,
    private readonly resumed: boolean,
  ) {}

  report(phase: RepartitionProgress["phase"], oldLeft: number[], transitionLeft: number, heldBack: number[], membersBehind: string[]): RepartitionProgress {
    const now = Date.now();
    const left = oldLeft.reduce((a, b) => a + b, 0) + transitionLeft;
    if (!this.first || left > this.first.left) this.first = { at: now, left };
    const done = this.first.left - left;
    const etaMs = done > 0 ? Math.round(((now - this.first.at) / done) * left) : undefined;
    return { phase, from: this.from, to: this.to, oldLeft, transitionLeft, heldBack, membersBehind, elapsedMs: now - this.started, etaMs, resumed: this.resumed };
  }
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
