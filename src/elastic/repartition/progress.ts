/**
 * What a repartition reports while it runs: the messages left per layout, the
 * consumers behind, and an estimate of the time left.
 */
import type { JetStreamManager } from "@nats-io/jetstream";
import { partitionAssignment, elasticGetPartitionFilters } from "../../core/assignment.js";
import { TRANSITION_TOKEN, partitionsToWaitFor, transitionFilters, type RepartitionPhase } from "../../core/repartition.js";
import type { ElasticConsumerGroupConfig } from "../../core/types.js";
import { wrapServerError } from "../../nats/server-errors.js";
import type { StreamLayout } from "../layout.js";
import { listConsumers } from "./stream-ops.js";

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

/** Messages stored under `<token>.>`. */
export async function countUnder(jsm: JetStreamManager, wq: string, token: string): Promise<number> {
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
export async function countPerPartition(jsm: JetStreamManager, wq: string, from: number, drained: Set<number>): Promise<number[]> {
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
export async function consumersBehind(
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
export class ProgressTracker {
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
