/**
 * Rebalance latency of an elastic group: while messages flow on every partition,
 * `m2` is added (its partitions move from `m1` to it) and the time from
 * `addMembers` returning to m2 handling its first message of a moved partition is
 * taken; then m2 is dropped again and the next sample starts once m1 has them back.
 */
import {
  addMembers,
  deleteMembers,
  elasticConsume,
  memberPartitions,
  workQueueStreamName,
  type ConsumerGroupMember,
} from "../../src/index.js";
import { uniqueName, waitFor, type TestEnv } from "./nats.js";
import { createLoadGroup, nanos } from "./load-scenario.js";
import { keyNames, now, sleep, type KeyedMessage } from "./load-harness.js";

export interface LatencyOptions {
  handoff: boolean;
  samples: number;
  partitions: number;
  ackWaitMs: number;
  /** Background publish rate, messages per second, over 200 keys. */
  publishRate: number;
}

export interface LatencyResult {
  samplesMs: number[];
  medianMs: number;
  p95Ms: number;
}

/** The q-quantile (0..1) of some numbers, nearest rank. */
export function quantile(values: number[], q: number): number {
  const s = [...values].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))] ?? NaN;
}

export async function measureRebalanceLatency(env: TestEnv, o: LatencyOptions): Promise<LatencyResult> {
  const stream = uniqueName("lat");
  const group = "g";
  const subjectOf = await createLoadGroup(env, "elastic", stream, group, o.partitions, ["m1"]);
  const handled: { member: string; partition: number; at: number }[] = [];
  const members: ConsumerGroupMember[] = [];
  for (const member of ["m1", "m2"]) {
    const c = await env.connect();
    members.push(
      await elasticConsume(c.js, {
        stream,
        group,
        member,
        concurrency: "key",
        handoff: o.handoff,
        consumerConfig: { ack_wait: nanos(o.ackWaitMs) },
        handler: async (msg) => {
          msg.json<KeyedMessage>();
          handled.push({ member, partition: msg.partition, at: now() });
          await sleep(1 + Math.random() * 2);
        },
      }),
    );
  }
  // Messages on every partition, all the time.
  let publishing = true;
  const keys = keyNames(200);
  const publisher = (async () => {
    let seq = 0;
    const window = 20;
    while (publishing) {
      seq += 1;
      await Promise.all(keys.slice((seq * window) % keys.length, ((seq * window) % keys.length) + window).map((key) => env.js.publish(subjectOf(key), JSON.stringify({ key, seq }))));
      await sleep((window / o.publishRate) * 1000);
    }
  })();
  const moved = memberPartitions(["m1", "m2"], o.partitions, undefined, "m2");
  const handledBy = (member: string, since: number): boolean => handled.some((h) => h.member === member && h.at > since && moved.includes(h.partition));
  const samplesMs: number[] = [];
  try {
    await waitFor(() => handledBy("m1", 0), 20_000, "m1 to consume");
    for (let i = 0; i < o.samples; i++) {
      await addMembers(env.js, stream, group, ["m2"]);
      const t0 = now();
      await waitFor(() => handledBy("m2", t0), 30_000, `m2 to handle a message of a moved partition (sample ${i + 1})`, 5);
      const first = handled.find((h) => h.member === "m2" && h.at > t0 && moved.includes(h.partition));
      samplesMs.push((first?.at ?? now()) - t0);
      await deleteMembers(env.js, stream, group, ["m2"]);
      const t1 = now();
      await waitFor(() => handledBy("m1", t1), 30_000, `m1 to get the partitions back (sample ${i + 1})`, 5);
      await sleep(100);
    }
  } finally {
    publishing = false;
    await publisher;
    await Promise.allSettled(members.map((m) => m.stop()));
    await env.jsm.streams.delete(workQueueStreamName(stream, group)).catch(() => undefined);
    await env.jsm.streams.delete(stream).catch(() => undefined);
  }
  return { samplesMs, medianMs: quantile(samplesMs, 0.5), p95Ms: quantile(samplesMs, 0.95) };
}
