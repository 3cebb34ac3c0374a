/**
 * `groupLag`: the lag signal of an elastic group for autoscalers: what waits per
 * partition, per member and in all, what the work queue has not sourced yet, how
 * fast the members drain it, and how many members would drain it within a target.
 */
import type { JetStreamClient, JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { memberRoster, partitionOwners } from "../core/assignment.js";
import { ConsumerGroupError } from "../core/errors.js";
import { optionsObject, quoted } from "../core/option-checks.js";
import { assertValidGroupNames, elasticConsumerName, workQueueStreamName } from "../core/names.js";
import { mapWithLimit } from "../core/parallel.js";
import { TRANSITION_TOKEN } from "../core/repartition.js";
import { measureDrain, measuredRatePerMember, recommendMembers, type QueueSample, type Recommendation } from "../core/scaling.js";
import { layoutOf } from "../elastic/layout.js";
import { readElasticConfigNotStatic } from "../nats/config-store.js";
import { managerOf, streamInfo } from "../nats/context.js";
import { REQUESTS_IN_FLIGHT, consumerInfoIfAny, countWithDirectGet } from "./counts.js";

/** The default of {@link GroupLagOptions.targetDrainMs}: one minute. */
export const DEFAULT_TARGET_DRAIN_MS = 60_000;
/** The default of {@link GroupLagOptions.sampleMs}: one second. */
export const DEFAULT_LAG_SAMPLE_MS = 1000;
/** The longest {@link GroupLagOptions.sampleMs}: one minute. */
export const MAX_LAG_SAMPLE_MS = 60_000;
/** A source the work queue has not heard from (messages or heartbeats) for longer than this is reported inactive. */
export const SOURCE_ACTIVE_WITHIN_MS = 30_000;

/** Options of {@link groupLag}. */
export interface GroupLagOptions {
  /** Recommend enough members to drain the backlog within this long, in ms. Default 60 s. */
  targetDrainMs?: number;
  /**
   * Messages per second one member handles, when you know it (from a benchmark of
   * your handler). When given it is used for the recommendation instead of the
   * measured rate, which only shows what members can do while they have a backlog.
   */
  ratePerMember?: number;
  /**
   * How long to watch the work queue to measure the drain rate, in ms: the call takes
   * at least this long. 0 measures nothing (unless `previous` is given). Default 1 s,
   * at most 60 s.
   */
  sampleMs?: number;
  /**
   * An earlier result for the same group: the drain rate is measured from its state to
   * now, without waiting (`sampleMs` is then ignored). A poller passes its last result.
   */
  previous?: GroupLag;
  /** Aborts the wait for the sample window: the call then throws `STOPPED`. */
  signal?: AbortSignal;
}

/** One partition's lag. */
export interface PartitionLag {
  /** The partition number. */
  partition: number;
  /** The member that owns it, if any. */
  owner?: string;
  /**
   * Messages of the partition in the work queue: not yet acknowledged, whether
   * waiting for delivery or being handled (as Kafka's lag counts from the committed offset).
   */
  pending: number;
}

/** One member's lag. */
export interface MemberLag {
  /** The member's name. */
  member: string;
  /** The partitions it owns. */
  partitions: number[];
  /** The pending messages of its partitions. */
  pending: number;
  /** Some instance of it consumes: its consumer has waiting pulls or messages in flight. */
  active: boolean;
  /** Listed as a member but beyond the partition count: it owns nothing and idles. */
  overCap: boolean;
}

/** The work-queue stream's source: the stream the group consumes. */
export interface SourceState {
  /** The source stream's name. */
  stream: string;
  /** Messages of the source stream the work queue has not taken in yet. */
  lag: number;
  /** The work queue heard from the source within the last 30 s and reports no error. */
  active: boolean;
  /** How long ago the work queue last heard from the source (messages or heartbeats), in ms; absent when never. */
  lastActiveMs?: number;
  /** The error the server reports for the source, if any. */
  error?: string;
}

/** Where the rate per member came from. */
export type RateSource =
  /** {@link GroupLagOptions.ratePerMember}. */
  | "given"
  /** Measured from the work queue's state over the sample window. */
  | "measured"
  /** No rate: nothing was given, and nothing was drained in the window (or there was none). */
  | "none";

/** The drain rate behind the recommendation. */
export interface DrainRate {
  /** Where {@link DrainRate.perMember} came from. */
  source: RateSource;
  /** Messages per second per member used for the recommendation, if any. */
  perMember?: number;
  /** The measured rate per member: `drainedPerSecond` / `activeMembers`, when anything was drained. */
  measuredPerMember?: number;
  /** Messages acknowledged per second by all members over the window. */
  drainedPerSecond?: number;
  /** Messages sourced into the work queue per second over the window. */
  inflowPerSecond?: number;
  /** The window the rates were measured over, in ms. */
  windowMs?: number;
  /** Members that were consuming at the end of the window. */
  activeMembers: number;
}

/** Something worth knowing about a lag reading, in plain language. */
export interface LagNote {
  /**
   * - `NO_MEMBERS`: the group has no members, so nothing consumes;
   * - `NO_RATE`: no drain rate, so the recommendation keeps the current member count;
   * - `CAPPED`: the target needs more members than partitions;
   * - `SOURCE_INACTIVE`: the work queue does not hear from its source;
   * - `REPARTITIONING`: a repartition runs (its transition-layout messages are counted).
   */
  code: "NO_MEMBERS" | "NO_RATE" | "CAPPED" | "SOURCE_INACTIVE" | "REPARTITIONING";
  /** What it means and what to do. */
  message: string;
}

/** What {@link groupLag} returns. */
export interface GroupLag {
  /** The stream the group consumes. */
  stream: string;
  /** The group's name. */
  group: string;
  /** The group's work-queue stream, `<stream>-<group>`. */
  workQueue: string;
  /** The group's partition count: the most members it can use. */
  partitionCount: number;
  /** One entry per partition, in order. */
  partitions: PartitionLag[];
  /** One entry per member of the membership, sorted by name. */
  members: MemberLag[];
  /** All pending messages: the sum over the partitions. */
  pending: number;
  /** The work queue's source, if it has one. */
  source?: SourceState;
  /** Messages of the source not in the work queue yet ({@link SourceState.lag}; 0 without a source). */
  sourceLag: number;
  /** What the members have to work through: `pending` + `sourceLag`. */
  backlog: number;
  /** The drain rate behind the recommendation. */
  rate: DrainRate;
  /** The target drain time the recommendation is for, in ms. */
  targetDrainMs: number;
  /** How many members would drain the backlog within the target, capped at the partition count. */
  recommendedMembers: number;
  /** How the recommendation was made: uncapped count, whether capped, basis. */
  recommendation: Recommendation;
  /** What is worth knowing: no members, no rate, capped, an inactive source, a repartition. */
  notes: LagNote[];
  /** The work queue's state at the end of the reading: pass the result as `previous` to measure from it. */
  sample: QueueSample;
  /** When it was read, ISO-8601. */
  at: string;
}

interface ResolvedOptions {
  targetDrainMs: number;
  ratePerMember: number | undefined;
  sampleMs: number;
  previous: GroupLag | undefined;
  signal: AbortSignal | undefined;
}

const positive = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v) && v > 0;

/** The keys of {@link GroupLagOptions}. */
const LAG_KEYS: readonly string[] = Object.keys({ targetDrainMs: true, ratePerMember: true, sampleMs: true, previous: true, signal: true } satisfies Record<keyof GroupLagOptions, true>);

function resolveOptions(stream: string, group: string, options: GroupLagOptions): ResolvedOptions {
  optionsObject(options, "groupLag options (e.g. { targetDrainMs: 60_000 })", LAG_KEYS);
  const { targetDrainMs = DEFAULT_TARGET_DRAIN_MS, ratePerMember, sampleMs = DEFAULT_LAG_SAMPLE_MS, previous, signal } = options;
  if (!positive(targetDrainMs)) throw new ConsumerGroupError("INVALID_ARGUMENT", `targetDrainMs must be a positive number of milliseconds (how fast the backlog should drain), got ${quoted(targetDrainMs)}`);
  if (ratePerMember !== undefined && !positive(ratePerMember)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `ratePerMember must be a positive number of messages per second one member handles (or absent, to measure it), got ${quoted(ratePerMember)}`);
  }
  if (typeof sampleMs !== "number" || !Number.isFinite(sampleMs) || sampleMs < 0 || sampleMs > MAX_LAG_SAMPLE_MS) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `sampleMs must be a number of milliseconds from 0 (no measurement) to ${MAX_LAG_SAMPLE_MS}, got ${quoted(sampleMs)}`);
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new ConsumerGroupError("INVALID_ARGUMENT", `signal must be an AbortSignal, got ${quoted(signal)}`);
  const earlier: unknown = previous;
  if (
    earlier !== undefined &&
    (typeof earlier !== "object" || earlier === null || previous?.stream !== stream || previous.group !== group || typeof (previous.sample as unknown) !== "object" || previous.sample === null || typeof previous.sample.atMs !== "number")
  ) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `previous must be an earlier groupLag result of ${stream}.${group}, got ${quoted(earlier)}`);
  }
  return { targetDrainMs, ratePerMember, sampleMs, previous, signal };
}

function stopped(stream: string, group: string): ConsumerGroupError {
  return new ConsumerGroupError("STOPPED", `reading the lag of ${stream}.${group} was aborted before its sample window ended`);
}

/** Waits `ms`, or until `signal` aborts. */
function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, Math.max(0, ms));
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

function sampleOf(info: StreamInfo, atMs: number): QueueSample {
  return { atMs, lastSeq: info.state.last_seq, messages: info.state.messages };
}

function sourceOf(info: StreamInfo): SourceState | undefined {
  const s = info.sources?.[0];
  if (!s) return undefined;
  const lastActiveMs = typeof s.active === "number" && s.active >= 0 ? Math.round(s.active / 1_000_000) : undefined;
  const error = s.error ? (s.error.description ?? `error ${s.error.err_code ?? s.error.code}`) : undefined;
  return {
    stream: s.name,
    lag: s.lag ?? 0,
    active: error === undefined && lastActiveMs !== undefined && lastActiveMs <= SOURCE_ACTIVE_WITHIN_MS,
    ...(lastActiveMs !== undefined ? { lastActiveMs } : {}),
    ...(error !== undefined ? { error } : {}),
  };
}

/** Counts each partition's messages in the work queue (during a repartition, in both layouts). */
async function partitionCounts(jsm: JetStreamManager, workQueue: string, count: number, transition: boolean): Promise<number[]> {
  const filters = Array.from({ length: count }, (_, p) => [`${p}.>`, ...(transition ? [`${TRANSITION_TOKEN}.${p}.>`] : [])]);
  const counts = await mapWithLimit(filters.flat(), REQUESTS_IN_FLIGHT, (filter) => countWithDirectGet(jsm, workQueue, filter, 1));
  const width = transition ? 2 : 1;
  return filters.map((_, p) => counts.slice(p * width, (p + 1) * width).reduce((a, b) => a + b, 0));
}

const seconds = (ms: number): string => `${Number((ms / 1000).toFixed(1))}s`;

/**
 * Reads the lag of an elastic group: pending messages per partition, per member and
 * in all, the work queue's source lag, the members' drain rate, and the member count
 * that drains the backlog (pending + source lag) within `targetDrainMs`:
 * `ceil(backlog / (ratePerMember × targetDrainMs / 1000))`, at least 1 when anything
 * is pending or the group has members, capped at the partition count.
 *
 * The rate per member is `ratePerMember` when given; otherwise it is measured: the
 * work queue's state is read at the start and again `sampleMs` later (or compared
 * with `previous`), and what left it (Δ last sequence − Δ messages: acknowledged
 * messages) per second, divided by the members consuming, is the rate. With no rate
 * (nothing drained in the window and none given), a backlog keeps the current member
 * count (at least 1) and the result carries a `NO_RATE` note; see {@link recommendMembers}.
 *
 * Cost: one stream info (two when sampling), one consumer info per member and one
 * direct get per partition (which carries that partition's oldest message), at most
 * 32 requests in flight. A poller should cache the result for a few seconds.
 *
 * Elastic groups only: a static group's partitions are its own stream's, and it has no
 * work queue to measure.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `INVALID_ARGUMENT` (bad options),
 *   `GROUP_NOT_FOUND`, `BUCKET_NOT_FOUND`, `STATIC_GROUP`, `STREAM_NOT_FOUND` (the work
 *   queue is missing), `STOPPED` (aborted), and server errors such as `PERMISSION_DENIED`
 *
 * @example
 * ```ts
 * const lag = await groupLag(js, "orders", "shipping", { targetDrainMs: 30_000 });
 * console.log(lag.backlog, lag.rate.perMember, lag.recommendedMembers);
 * for (const m of lag.members) console.log(m.member, m.pending);
 * ```
 */
export async function groupLag(js: JetStreamClient, stream: string, group: string, options: GroupLagOptions = {}): Promise<GroupLag> {
  assertValidGroupNames(stream, group);
  const opts = resolveOptions(stream, group, options);
  if (opts.signal?.aborted) throw stopped(stream, group);
  const jsm = await managerOf(js);
  const { config } = await readElasticConfigNotStatic(
    js,
    jsm,
    stream,
    group,
    `${stream}.${group} is a static consumer group: groupLag reads an elastic group's work queue, and a static group has none; see its backlog per partition with describeGroup (cg static describe ${stream} ${group})`,
  );
  const workQueue = workQueueStreamName(stream, group);
  const readQueue = (): Promise<StreamInfo> => streamInfo(jsm, workQueue, "the elastic consumer group's work-queue stream", "is the group half-deleted? Delete it and create it again");
  const first = await readQueue();
  const firstAt = Date.now();

  const layout = layoutOf(first);
  const repartition = layout.record;
  const counts = await partitionCounts(jsm, workQueue, Math.max(config.max_members, repartition?.to ?? 0), repartition !== undefined || layout.transition);
  const owners = partitionOwners(config);
  const partitions: PartitionLag[] = counts.map((pending, p) => ({ partition: p, ...(owners[p] !== undefined ? { owner: owners[p] } : {}), pending }));

  // The rate: from `previous`, or over a window that starts with the first reading.
  let last = first;
  let lastAt = firstAt;
  let from = opts.previous?.sample;
  if (!from && opts.sampleMs > 0) {
    from = sampleOf(first, firstAt);
    await pause(firstAt + opts.sampleMs - Date.now(), opts.signal);
    if (opts.signal?.aborted) throw stopped(stream, group);
  }
  // Who consumes is read at the end of the window: the members that drained it.
  const roster = memberRoster(config);
  const infos = await mapWithLimit(roster, REQUESTS_IN_FLIGHT, ({ member }) => consumerInfoIfAny(jsm, workQueue, elasticConsumerName(member)));
  const members: MemberLag[] = roster.map(({ member, partitions: owned, overCap }, i) => {
    const info = infos[i];
    return {
      member,
      partitions: owned,
      pending: owned.reduce((n, p) => n + (counts[p] ?? 0), 0),
      active: info !== undefined && (info.num_waiting > 0 || info.num_ack_pending > 0),
      overCap,
    };
  });
  if (!opts.previous && opts.sampleMs > 0) {
    last = await readQueue();
    lastAt = Date.now();
  }
  const sample = sampleOf(last, lastAt);
  const measurement = from ? measureDrain(from, sample) : undefined;
  const activeMembers = members.filter((m) => m.active).length;
  const measured = measuredRatePerMember(measurement, activeMembers);
  const perMember = opts.ratePerMember ?? measured;
  const rate: DrainRate = {
    source: opts.ratePerMember !== undefined ? "given" : measured !== undefined ? "measured" : "none",
    ...(perMember !== undefined ? { perMember } : {}),
    ...(measured !== undefined ? { measuredPerMember: measured } : {}),
    ...(measurement ? { drainedPerSecond: measurement.drainedPerSecond, inflowPerSecond: measurement.inflowPerSecond, windowMs: measurement.windowMs } : {}),
    activeMembers,
  };

  const source = sourceOf(last);
  const pending = counts.reduce((a, b) => a + b, 0);
  const sourceLag = source?.lag ?? 0;
  const backlog = pending + sourceLag;
  const recommendation = recommendMembers({ backlog, members: members.length, partitionCount: config.max_members, targetDrainMs: opts.targetDrainMs, ratePerMember: perMember });

  const notes: LagNote[] = [];
  if (members.length === 0) {
    notes.push({
      code: "NO_MEMBERS",
      message: `the group has no members, so nothing consumes ${backlog > 0 ? `its ${backlog} waiting messages` : "what arrives"}: add members (cg elastic add ${stream} ${group} <member>) or run instances that join by themselves (autoJoin)`,
    });
  }
  if (rate.source === "none" && backlog > 0) {
    const why = measurement ? `nothing was acknowledged in the last ${seconds(measurement.windowMs)} (no member consuming, members starting, or a handler stuck)` : "no sample window was measured";
    const keeps = members.length === 0 ? "the recommendation is 1 member, to start consuming" : `the recommendation keeps the group's ${members.length} member${members.length === 1 ? "" : "s"}`;
    notes.push({ code: "NO_RATE", message: `no drain rate: ${why}, and no rate per member was given; ${keeps}` });
  }
  if (recommendation.capped) {
    notes.push({
      code: "CAPPED",
      message: `draining ${backlog} messages within ${seconds(opts.targetDrainMs)} needs ${recommendation.needed} members, more than the ${config.max_members} partitions: members beyond the partition count idle; grow the group with cg elastic repartition ${stream} ${group} <partitions>`,
    });
  }
  if (!source) notes.push({ code: "SOURCE_INACTIVE", message: `the work queue ${workQueue} has no source: nothing new reaches the group; recreate the group` });
  else if (!source.active) {
    const heard = source.lastActiveMs === undefined ? "has not heard from its source yet (a new group's source starts within a second or so)" : `last heard from its source ${seconds(source.lastActiveMs)} ago`;
    notes.push({ code: "SOURCE_INACTIVE", message: `the work queue ${workQueue} ${heard}${source.error ? ` (${source.error})` : ""}: new messages of ${source.stream} may not reach the group; if it lasts, check that the stream exists and the server is healthy` });
  }
  if (repartition) {
    notes.push({ code: "REPARTITIONING", message: `a repartition from ${repartition.from} to ${repartition.to} partitions runs (${repartition.phase}): pending counts include messages in both layouts` });
  }

  return {
    stream,
    group,
    workQueue,
    partitionCount: config.max_members,
    partitions,
    members,
    pending,
    ...(source ? { source } : {}),
    sourceLag,
    backlog,
    rate,
    targetDrainMs: opts.targetDrainMs,
    recommendedMembers: recommendation.recommended,
    recommendation,
    notes,
    sample,
    at: new Date(lastAt).toISOString(),
  };
}
