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
 *
 * The source switch of steps 1 and 4 is in `source-switch.ts`, the progress reports in
 * `progress.ts`, the lock that keeps two runs apart in `repartition-lock.ts`.
 */
import type { ConsumerInfo, JetStreamClient, JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { partitionAssignment } from "../../core/assignment.js";
import { ConsumerGroupError } from "../../core/errors.js";
import { assertPartitionCount } from "../../core/limits.js";
import { optionalBoolean, optionalTimerMs, optionsObject, quoted } from "../../core/option-checks.js";
import { PRIORITY_GROUP, assertValidGroupNames, configKey, sourceTransforms, workQueueStreamName } from "../../core/names.js";
import { REPARTITION_METADATA_KEY, SWITCH_PAUSE_METADATA_KEY, TRANSITION_TOKEN, growMappings, transitionTransforms, type RepartitionRecord } from "../../core/repartition.js";
import type { ElasticConsumerGroupConfig } from "../../core/types.js";
import { ELASTIC, openConfigBucket, readElasticConfigNotStatic, updateConfig } from "../../nats/config-store.js";
import { MODE_KEY } from "../../nats/consumer-mode.js";
import { MIN_SERVER, managerOf, requireServer } from "../../nats/context.js";
import { isTransientServerError } from "../../nats/server-errors.js";
import { connectionOf } from "../../nats/client-seam.js";
import { layoutOf, readLayout, type StreamLayout } from "../layout.js";
import { registeredAutoMembers } from "../auto-join/lease-store.js";
import { PRESENCE_WAIT_MS, askPresencePins, presenceSubject } from "../presence.js";
import { readLock, releaseLock, takeLock } from "./repartition-lock.js";
import { ProgressTracker, consumersBehind, countPerPartition, countUnder, type RepartitionProgress } from "./progress.js";
import { dropStart, finishInterruptedSwitch, sourceRunning, sourcedPastStart, switchSource } from "./source-switch.js";
import { listConsumers, sleep, updateStream, updatedConfig, withStart, workQueueInfo } from "./stream-ops.js";

export type { RepartitionProgress } from "./progress.js";

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

/** The keys of {@link RepartitionOptions}. */
const REPARTITION_KEYS: readonly string[] = Object.keys({ onProgress: true, force: true, pollMs: true, signal: true, onRetry: true } satisfies Record<keyof RepartitionOptions, true>);

/** The options' types: a `force` that is not a boolean must not count as one. */
function checkRepartitionOptions(options: RepartitionOptions): void {
  optionsObject(options, "repartition options", REPARTITION_KEYS);
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
