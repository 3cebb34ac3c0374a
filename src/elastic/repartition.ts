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
import type { ConsumerInfo, JetStreamClient, JetStreamManager, StreamConfig, StreamInfo, StreamSource } from "@nats-io/jetstream";
import { partitionAssignment, elasticGetPartitionFilters } from "../core/assignment.js";
import { ConsumerGroupError } from "../core/errors.js";
import { assertPartitionCount } from "../core/limits.js";
import { assertValidGroupNames, configKey, sourceTransforms, workQueueStreamName } from "../core/names.js";
import {
  REPARTITION_METADATA_KEY,
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
import { ELASTIC, STATIC, openConfigBucket, readConfig, readConfigIfAny, updateConfig } from "../nats/config-store.js";
import { MODE_KEY } from "../nats/consumer-mode.js";
import { MIN_SERVER, managerOf, requireServer } from "../nats/context.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../nats/server-errors.js";
import { layoutOf, readLayout, type StreamLayout } from "./layout.js";
import { readLock, releaseLock, takeLock } from "./repartition-lock.js";

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
  assertValidGroupNames(stream, group);
  assertPartitionCount(partitions, "the new partition count");
  const pollMs = options.pollMs ?? 250;
  const started = Date.now();
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
  const unverifiedMembers = resumed ? [] : await findUnverifiedMembers(jsm, wq, config.config);
  if (unverifiedMembers.length > 0 && !options.force) {
    throw new ConsumerGroupError(
      "GO_MEMBERS_PRESENT",
      `the elastic consumer group ${stream}.${group} has members that may be Go members: ${unverifiedMembers.join(", ")} (their consumers carry no nats-pcgroups metadata, as Go's and this library's serial mode's do not, or they run no instance now). Go members cannot follow a repartition: Go stops a member when the partition count changes, and a Go instance started before the repartition is done can break per-key order for its partitions. Pass force (--force) when these are all nats-pcgroups members, and start no Go instance of the group until it is done`,
    );
  }
  const record: RepartitionRecord = layout.record ?? { from, to: partitions, phase: "moving", started: new Date().toISOString() };
  // A lock left by a repartition that finished (the config and the stream say its count) is stale.
  await takeLock(kv, stream, group, { from, to: partitions, started: record.started }, (lock) => !layout.record && lock.to === config.config.max_members);
  if (!layout.record) await cut(jsm, info, record, config.config);
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
      await releaseLock(kv, stream, group);
      break;
    }
    const fresh = await workQueueInfo(jsm, wq);
    const latest = layoutOf(fresh);
    if (progress.phase === "moving" && progress.oldLeft.every((n) => n === 0) && progress.membersBehind.length === 0) {
      await finish(jsm, fresh, latest, config.config);
      continue;
    }
    if (progress.phase === "finishing" && progress.transitionLeft === 0) {
      await clearRecord(jsm, fresh);
      continue;
    }
    await sleep(pollMs, options.signal);
  }
  return { from, to: partitions, resumed, durationMs: Date.now() - started, unverifiedMembers };
}

async function readElasticConfig(js: JetStreamClient, jsm: JetStreamManager, stream: string, group: string): Promise<{ config: ElasticConsumerGroupConfig; revision: number }> {
  let kv;
  try {
    kv = await openConfigBucket(js, jsm, "elastic");
  } catch (err) {
    if (err instanceof ConsumerGroupError && err.code === "BUCKET_NOT_FOUND") await refuseStatic(js, jsm, stream, group);
    throw err;
  }
  try {
    return await readConfig(kv, ELASTIC, stream, group);
  } catch (err) {
    if (err instanceof ConsumerGroupError && err.code === "GROUP_NOT_FOUND") await refuseStatic(js, jsm, stream, group);
    throw err;
  }
}

/** Throws `STATIC_GROUP` when `stream.group` is a static group. */
async function refuseStatic(js: JetStreamClient, jsm: JetStreamManager, stream: string, group: string): Promise<void> {
  const kv = await openConfigBucket(js, jsm, "static").catch(() => undefined);
  const found = kv ? await readConfigIfAny(kv, STATIC, stream, group).catch(() => undefined) : undefined;
  if (found) {
    throw new ConsumerGroupError(
      "STATIC_GROUP",
      `${stream}.${group} is a static consumer group: its partitioning is the stream's own subject transform, which belongs to you. "cg static repartition ${stream} ${group} <partitions>" prints the steps`,
    );
  }
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
 * What cannot be shown to be this library's: consumers without its metadata (Go's, or
 * its own in serial mode), and members that own partitions but run no instance now
 * (one of them could be a Go member started later).
 */
async function findUnverifiedMembers(jsm: JetStreamManager, wq: string, config: ElasticConsumerGroupConfig): Promise<string[]> {
  const consumers = await listConsumers(jsm, wq);
  const unmarked = consumers.filter((c) => c.config.metadata?.[MODE_KEY] === undefined).map((c) => c.name);
  const running = new Set(consumers.map((c) => c.name));
  const absent = [...partitionAssignment(config)].filter(([member, partitions]) => partitions.length > 0 && !running.has(member)).map(([member]) => member);
  return [...unmarked, ...absent].sort();
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

/** Step 1: the transition layout and the record, in one stream update. */
async function cut(jsm: JetStreamManager, info: StreamInfo, record: RepartitionRecord, config: ElasticConsumerGroupConfig): Promise<void> {
  const start = await sourcedUpTo(jsm, info.config.name);
  const next = updatedConfig(info, (c) => {
    c.sources = [withStart({ ...(c.sources?.[0] ?? { name: "" }), subject_transforms: transitionTransforms(record.to, config.partitioning_filters) }, start)];
    c.metadata = { ...(c.metadata ?? {}), [REPARTITION_METADATA_KEY]: encodeRepartitionRecord(record) };
  });
  await updateStream(jsm, next, `the cut to the transition layout of ${record.to} partitions`);
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
async function finish(jsm: JetStreamManager, info: StreamInfo, layout: StreamLayout, config: ElasticConsumerGroupConfig): Promise<void> {
  const record = layout.record;
  if (!record || record.phase !== "moving") return;
  const start = await sourcedUpTo(jsm, info.config.name);
  const next = updatedConfig(info, (c) => {
    c.sources = [withStart({ ...(c.sources?.[0] ?? { name: "" }), subject_transforms: sourceTransforms(record.to, config.partitioning_filters) }, start)];
    c.metadata = { ...(c.metadata ?? {}), [REPARTITION_METADATA_KEY]: encodeRepartitionRecord({ ...record, phase: "finishing" }) };
  });
  await updateStream(jsm, next, `switching to the final layout of ${record.to} partitions`);
}

/** Step 5: the record goes, and so does the start position of the switches (the same source keeps running: Go's config again). */
async function clearRecord(jsm: JetStreamManager, info: StreamInfo): Promise<void> {
  const next = updatedConfig(info, (c) => {
    c.sources = (c.sources ?? []).map((s) => withStart(s, undefined));
    const metadata = { ...(c.metadata ?? {}) };
    delete metadata[REPARTITION_METADATA_KEY];
    c.metadata = metadata;
  });
  await updateStream(jsm, next, "removing the finished repartition's record");
}

/**
 * Where the work-queue stream's source has got to, at least: the origin sequence of
 * the newest message still stored (its `Nats-Stream-Source` header), or undefined
 * when none is stored.
 *
 * nats-server restarts a source whose transform changed as a new source, from the
 * time of the stream's last message, or from the origin's start while the stream
 * still holds its first message: origin messages still in flight would be skipped,
 * or the whole origin sourced again. Starting the switched source right after this
 * position instead skips nothing; what the old source delivered after it (messages
 * acked since, or sourced during the switch) comes again, once.
 */
async function sourcedUpTo(jsm: JetStreamManager, wq: string): Promise<number | undefined> {
  let newest;
  try {
    newest = await jsm.streams.getMessage(wq, { last_by_subj: ">" });
  } catch (err) {
    throw wrapServerError(err, `reading the newest message of "${wq}"`);
  }
  const header = newest?.header?.get("Nats-Stream-Source") ?? "";
  const seq = Number(header.split(" ")[1]);
  return Number.isSafeInteger(seq) && seq > 0 ? seq : undefined;
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
