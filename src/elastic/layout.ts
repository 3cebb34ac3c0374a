/**
 * What layout an elastic group's work-queue stream is in, read from the stream
 * itself: its source transform (how many partitions new messages are hashed into)
 * and, while a repartition runs, the record in its metadata. Members read it to
 * choose their consumer filters; the repartition reads it to know where it is.
 */
import type { JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { ConsumerGroupError } from "../core/errors.js";
import { REPARTITION_METADATA_KEY, SWITCH_PAUSE_METADATA_KEY, TRANSITION_TOKEN, decodeRepartitionRecord, filterPartition, partitionsToWaitFor, transitionFilters, type RepartitionRecord } from "../core/repartition.js";
import { elasticLayoutProblem, type LayoutProblem } from "../core/layout-checks.js";
import { ELASTIC_BUCKET } from "../core/names.js";
import { parsePartitionTransform } from "../core/transform.js";
import type { ElasticConsumerGroupConfig } from "../core/types.js";
import { ELASTIC } from "../nats/config-store.js";
import { wrapServerError } from "../nats/server-errors.js";

/** The layout of a work-queue stream. */
export interface StreamLayout {
  /** The partition count new messages are hashed into now (from the source transform); undefined when it has none. */
  partitions: number | undefined;
  /** Whether new messages arrive in the transition layout (`pcg-repartition.<q>.…`). */
  transition: boolean;
  /** The repartition in progress, if one is. */
  record: RepartitionRecord | undefined;
  /** While a source switch holds the member consumers paused: when that pause ends by itself. */
  switchPausedUntil: Date | undefined;
}

/** Reads the layout out of a work-queue stream's info. */
export function layoutOf(info: StreamInfo): StreamLayout {
  const dest = info.config.sources?.[0]?.subject_transforms?.[0]?.dest;
  const raw = info.config.metadata?.[REPARTITION_METADATA_KEY];
  const pausedUntil = new Date(info.config.metadata?.[SWITCH_PAUSE_METADATA_KEY] ?? NaN);
  return {
    switchPausedUntil: Number.isNaN(pausedUntil.getTime()) ? undefined : pausedUntil,
    partitions: dest ? parsePartitionTransform(dest)?.partitions : undefined,
    transition: dest?.startsWith(`${TRANSITION_TOKEN}.`) ?? false,
    record: raw === undefined ? undefined : decodeRepartitionRecord(raw),
  };
}

/**
 * Reads the layout of a work-queue stream.
 *
 * @throws ConsumerGroupError `STREAM_NOT_FOUND` and server errors, typed
 */
export async function readLayout(jsm: JetStreamManager, workQueue: string): Promise<StreamLayout> {
  try {
    return layoutOf(await jsm.streams.info(workQueue));
  } catch (err) {
    if (err instanceof ConsumerGroupError) throw err;
    throw wrapServerError(err, `reading the layout of the work-queue stream "${workQueue}"`);
  }
}

/** True when the stream holds no message with a subject under `<token>.>`. */
export async function noMessagesUnder(jsm: JetStreamManager, workQueue: string, token: string): Promise<boolean> {
  try {
    return (await jsm.direct.getMessage(workQueue, { seq: 0, next_by_subj: `${token}.>` })) === null;
  } catch (err) {
    throw wrapServerError(err, `looking for messages under "${token}.>" in "${workQueue}"`);
  }
}

/**
 * A member's consumer filters for the stream's layout, from its filters under the
 * group config (`finalFilters`, Go's `<q>.<filter>`):
 * - no repartition, or one the config has not reached yet while it is still `moving`: the final filters;
 * - a repartition to this config's count: the final filters plus the transition twin of
 *   each partition whose feeding old partitions hold no message any more (in `finishing`,
 *   all of them). Old partitions never refill once the cut is made, so a twin, once
 *   added, stays.
 *
 * @param partitionCount - the group config's `max_members`
 * @throws ConsumerGroupError `CONFIG_MISMATCH` when the config's count is neither the stream's nor a repartition's target
 */
export async function filtersForLayout(
  jsm: JetStreamManager,
  workQueue: string,
  layout: StreamLayout,
  partitionCount: number,
  finalFilters: readonly string[],
): Promise<string[]> {
  const record = layout.record;
  if (record && record.to === partitionCount) {
    if (record.phase === "finishing") return transitionFilters(finalFilters, () => true);
    const drained = new Map<number, boolean>();
    const isDrained = async (p: number): Promise<boolean> => {
      let known = drained.get(p);
      if (known === undefined) drained.set(p, (known = await noMessagesUnder(jsm, workQueue, String(p))));
      return known;
    };
    const open = new Set<number>();
    for (const q of new Set(finalFilters.map(filterPartition))) {
      let ready = layout.transition;
      for (const p of partitionsToWaitFor(record.from, record.to, q)) if (ready) ready = await isDrained(p);
      if (ready) open.add(q);
    }
    return transitionFilters(finalFilters, (q) => open.has(q));
  }
  if (record && record.from === partitionCount) {
    // Moving: the old layout's subjects get no new messages, so the old filters are still right.
    if (record.phase === "moving") return [...finalFilters];
    // Finishing: new messages arrive in the final layout, which this config does not know yet.
    throw new ConsumerGroupError(
      "CONFIG_MISMATCH",
      `a repartition of "${workQueue}" to ${record.to} partitions is finishing but this member's config still says ${partitionCount}: waiting for the config watch to deliver the new one`,
    );
  }
  if (layout.partitions !== undefined && layout.partitions !== partitionCount) {
    throw new ConsumerGroupError(
      "CONFIG_MISMATCH",
      `the group config says ${partitionCount} partitions but the work-queue stream "${workQueue}" hashes into ${layout.partitions} and no repartition is in progress: change the partition count only with repartition() or "cg elastic repartition"`,
    );
  }
  return [...finalFilters];
}

/**
 * How an elastic config disagrees with its work-queue stream's source transforms
 * (see {@link elasticLayoutProblem}); nothing while a repartition is in progress.
 *
 * @param info - the work-queue stream's info
 * @param config - the stored config
 */
export function configLayoutProblem(info: StreamInfo, config: ElasticConsumerGroupConfig): LayoutProblem | undefined {
  const layout = layoutOf(info);
  const transforms = (info.config.sources?.[0]?.subject_transforms ?? []).map((t) => ({ src: t.src ?? "", dest: t.dest }));
  return elasticLayoutProblem(config, transforms, layout.record !== undefined || layout.transition);
}

/**
 * The `CONFIG_MISMATCH` error of a config that disagrees with its work queue, saying
 * what was not done and how to repair it (the exact value to put back, when the
 * transforms tell it).
 *
 * @param problem - what {@link configLayoutProblem} found
 * @param key - the config's KV key
 * @param refused - what was refused and why, e.g. "Nothing was written"
 */
export function layoutMismatchError(problem: LayoutProblem, key: string, refused: string): ConsumerGroupError {
  const put = problem.repaired ? `'${ELASTIC.encode(problem.repaired).replace(/'/g, "'\\''")}'` : undefined;
  const repair = put
    ? `put back the value the work queue was made from (nats kv put ${ELASTIC_BUCKET} ${key} ${put}), or delete the group and create it again; change the partition count only with repartition() / "cg elastic repartition"`
    : "delete the group and create it again; change the partition count only with repartition() / \"cg elastic repartition\"";
  return new ConsumerGroupError("CONFIG_MISMATCH", `elastic consumer group config "${key}": ${problem.message}. ${refused}. To repair it, ${repair}`);
}
