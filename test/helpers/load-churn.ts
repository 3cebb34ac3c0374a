/**
 * The membership-churn scenario for elastic groups: keyed messages published at a
 * steady rate while members are added, dropped and stopped (then restarted) every
 * second; at the end the delivery checker says what was lost, reordered or handled
 * twice. All members run in this process, each instance on its own connection.
 */
import {
  addMembers,
  deleteMembers,
  elasticConsume,
  workQueueStreamName,
  type ConcurrencyMode,
  type ConsumerGroupMember,
} from "../../src/index.js";
import { checkDelivery, type DeliveryReport, type HandledRecord } from "../../src/cli/demo/delivery-check.js";
import { uniqueName, waitFor, type Client, type TestEnv } from "./nats.js";
import { createLoadGroup, nanos } from "./load-scenario.js";
import { Published, keyNames, now, prng, publishKeyed, sleep, type KeyedMessage } from "./load-harness.js";

export interface ChurnOptions {
  handoff: boolean;
  seed: number;
  /** Member names; instances of all of them run (idle when outside the membership). */
  members: string[];
  /** The membership size stays within [min, max]. */
  minMembers: number;
  maxMembers: number;
  partitions: number;
  keys: number;
  perKey: number;
  /** Target publish rate, messages per second. */
  publishRate: number;
  churnEveryMs: number;
  ackWaitMs: number;
  mode: ConcurrencyMode;
  /** Handler latency, uniform in [min, max] ms. */
  latencyMs: [number, number];
}

export interface ChurnResult {
  report: DeliveryReport;
  actions: string[];
  /** Times a handler started while one of the same key ran in another instance. */
  crossInstanceOverlaps: number;
  /** Handled messages per second over the whole run. */
  throughput: number;
  durationMs: number;
}

interface Instance {
  member: ConsumerGroupMember;
  client: Client;
}

export async function runChurn(env: TestEnv, o: ChurnOptions): Promise<ChurnResult> {
  const stream = uniqueName("churn");
  const group = "g";
  const rng = prng(o.seed);
  const initial = o.members.slice(0, o.minMembers);
  const subjectOf = await createLoadGroup(env, "elastic", stream, group, o.partitions, initial);
  const membership = new Set(initial);
  const handled: HandledRecord[] = [];
  const runningKey = new Map<string, { count: number; instance: number }>();
  let crossInstanceOverlaps = 0;
  let nextInstanceId = 0;
  const instances = new Map<string, Instance>();
  const actions: string[] = [];
  const started = now();
  const log = (what: string): void => void actions.push(`${((now() - started) / 1000).toFixed(1)}s ${what}`);

  const startInstance = async (name: string): Promise<void> => {
    const client = await env.connect();
    const id = ++nextInstanceId;
    const member = await elasticConsume(client.js, {
      stream,
      group,
      member: name,
      concurrency: o.mode,
      handoff: o.handoff,
      consumerConfig: { ack_wait: nanos(o.ackWaitMs) },
      handler: async (msg) => {
        const { key, seq } = msg.json<KeyedMessage>();
        handled.push({ key, seq, at: now() });
        const r = runningKey.get(key);
        if (r && r.count > 0 && r.instance !== id) crossInstanceOverlaps += 1;
        runningKey.set(key, { count: (r?.count ?? 0) + 1, instance: id });
        try {
          const [lo, hi] = o.latencyMs;
          await sleep(lo + rng() * (hi - lo));
        } finally {
          const after = runningKey.get(key);
          if (after) after.count -= 1;
        }
      },
    });
    instances.set(name, { member, client });
  };
  const stopInstance = async (name: string): Promise<void> => {
    const inst = instances.get(name);
    if (!inst) return;
    instances.delete(name);
    await inst.member.stop();
    await inst.client.nc.close();
  };

  for (const name of o.members) await startInstance(name);
  const published = new Published();
  const total = o.keys * o.perKey;
  const window = 100;
  const publishing = publishKeyed(env.js, subjectOf, keyNames(o.keys), o.perKey, published, { window, pauseMs: Math.max(1, Math.round((window / o.publishRate) * 1000)) });
  let publishingDone = false;
  void publishing.then(() => (publishingDone = true));

  // Churn until everything is published.
  const restarts: Promise<void>[] = [];
  const pick = <T>(items: T[]): T => items[Math.floor(rng() * items.length)] as T;
  while (!publishingDone) {
    await sleep(o.churnEveryMs);
    if (publishingDone) break;
    const outside = o.members.filter((m) => !membership.has(m));
    const runningInside = [...membership].filter((m) => instances.has(m));
    const choices: string[] = [];
    if (membership.size < o.maxMembers && outside.length > 0) choices.push("add");
    if (membership.size > o.minMembers) choices.push("drop");
    if (runningInside.length > 0) choices.push("stop");
    const action = pick(choices);
    if (action === "add") {
      const m = pick(outside);
      membership.add(m);
      await addMembers(env.js, stream, group, [m]);
      log(`add ${m} → [${[...membership].join(",")}]`);
    } else if (action === "drop") {
      const m = pick([...membership]);
      membership.delete(m);
      await deleteMembers(env.js, stream, group, [m]);
      log(`drop ${m} → [${[...membership].join(",")}]`);
    } else if (action === "stop") {
      const m = pick(runningInside);
      log(`stop ${m}`);
      await stopInstance(m);
      log(`stopped ${m}`);
      restarts.push(
        sleep(1000 + rng() * 1000).then(async () => {
          await startInstance(m);
          log(`restarted ${m}`);
        }),
      );
    }
  }
  await publishing;
  await Promise.all(restarts);
  for (const name of o.members) if (!instances.has(name)) await startInstance(name);

  try {
    const unique = (): number => new Set(handled.map((h) => `${h.key}/${h.seq}`)).size;
    await waitFor(() => unique() >= total, 90_000, `all ${total} messages handled (unique so far ${unique()})`, 200);
    await waitFor(async () => (await env.jsm.streams.info(workQueueStreamName(stream, group))).state.messages === 0, 30_000, "the work queue to empty", 100);
    const durationMs = now() - started;
    // Late duplicates (a redelivery after an ack that was lost) show up within AckWait.
    await sleep(Math.min(o.ackWaitMs, 2000));
    return {
      report: checkDelivery(published.perKey, handled),
      actions,
      crossInstanceOverlaps,
      throughput: total / (durationMs / 1000),
      durationMs,
    };
  } finally {
    await Promise.allSettled([...instances.keys()].map((name) => stopInstance(name)));
    await env.jsm.streams.delete(workQueueStreamName(stream, group)).catch(() => undefined);
    await env.jsm.streams.delete(stream).catch(() => undefined);
  }
}
