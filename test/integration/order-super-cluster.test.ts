/**
 * Per-key order when a super-cluster loses a leader (the fault catalogue's
 * super-cluster row): two 3-node clusters joined by gateways, the origin stream (R3)
 * placed in cluster A, the group's work queue and config bucket (R3) in cluster B,
 * where the group was created, and two members, each with a pinned instance and a hot
 * standby, all connected to B's nodes. Keyed messages are published to A throughout.
 * A node of B is killed for 8 s and restarted on its store: in one case the work
 * queue's leader, in the other a member consumer's leader (not the work queue's).
 * Connections and consumer leaders are placed so that each case has a member whose
 * pinned instance loses its connection while its consumer's leader lives: such an
 * instance misses deliveries, which come back only after AckWait, behind later ones.
 *
 * The fault checker (test/helpers/fault-check.ts) is applied to each member's runs:
 * nothing lost, per-key order of first handling, no two runs of a key at once, no start
 * under a pin another instance had replaced. A duplicate must be a message whose earlier
 * run ended between {@link ACK_LOSS_BEFORE_MS} before the kill and the time the killed
 * node was healthy again: its ack may have gone to a leader that died.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { ConnectionOptions } from "@nats-io/transport-node";
import { addMembers, createElastic, elasticConsume, partitionOf, workQueueStreamName, type ConsumerGroupMember } from "../../src/index.js";
import { FaultLog, KeyedPublisher, clock, summary, type FaultReport, type FaultRun } from "../helpers/fault-check.js";
import { NatsSuperCluster, connectTo, type NatsServer, uniqueName, waitFor, type Client } from "../helpers/nats.js";

const nanos = (ms: number): number => ms * 1_000_000;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** How long the leader's node stays down. */
const FAULT_MS = 8_000;
/** The library's default AckWait: a gap's messages come back this long after their delivery. */
const ACK_WAIT_MS = 5_000;
const PARTITIONS = 4;
const KEYS = 20;
const MEMBERS: readonly string[] = ["m1", "m2"];
/** The stream of the elastic config bucket. */
const BUCKET_STREAM = "KV_elastic-consumer-groups";
/** Asynchronous work per message: the members keep up with the load, with a backlog after each pause. */
const WORK_MS = 2;
/**
 * An ack sent this long before the kill may still be lost: the leader took it but had
 * not replicated it (the followers commit what it proposed, so such a window is short).
 */
const ACK_LOSS_BEFORE_MS = 1_000;

/** One instance: its member, its name in the member's log, its handle, and what it reported. */
interface Instance {
  member: string;
  who: string;
  /** The server it connected to first. */
  node: string;
  handle: ConsumerGroupMember;
  events: { at: number; text: string }[];
}

/** What a run measured. */
interface Outcome {
  reports: Map<string, FaultReport>;
  logs: Map<string, FaultLog>;
  instances: Instance[];
  killAt: number;
  healthyAt: number;
}

describe("order - a super-cluster losing the work queue's leaders", () => {
  let sc: NatsSuperCluster;
  const clients: Client[] = [];
  const open = async (urls: string[], options: ConnectionOptions = {}): Promise<Client> => {
    const c = await connectTo(urls, { maxReconnectAttempts: -1, reconnectTimeWait: 100, ...options });
    clients.push(c);
    return c;
  };
  before(async () => {
    const t = clock();
    sc = await NatsSuperCluster.start(2, 3);
    console.log(`super-cluster ${sc.clusters.map((c) => c.name).join(" + ")} (2 x 3 nodes) healthy after ${Math.round(clock() - t)} ms`);
  });
  after(async () => {
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await sc.stop();
  });

  /** Records an instance's status events and its connection's, relative to nothing yet (absolute times). */
  const watch = (inst: Instance, client: Client): void => {
    void (async () => {
      for await (const e of inst.handle.status()) {
        const detail = e.type === "starts_held" ? ` ${e.reason} ${e.durationMs} ms` : e.type === "consumer_error" || e.type === "watch_error" ? ` ${e.error.code} (${e.error.message})` : e.type === "consumer_lost" ? ` ${e.reason}` : "";
        inst.events.push({ at: clock(), text: `${e.type}${detail}` });
      }
    })();
    void (async () => {
      for await (const s of client.nc.status()) inst.events.push({ at: clock(), text: `conn ${s.type}${"server" in s ? ` ${String(s.server)}` : ""}` });
    })();
  };

  /** Steps a consumer's leader down until `node` leads it (a preferred step-down, server >= 2.11). */
  const moveConsumerLeader = async (admin: Client, stream: string, consumer: string, node: NatsServer): Promise<void> => {
    await waitFor(
      async () => {
        if ((await sc.leader(stream, consumer)) === node) return true;
        const request = JSON.stringify({ placement: { preferred: node.name } });
        await admin.nc.request(`$JS.API.CONSUMER.LEADER.STEPDOWN.${stream}.${consumer}`, request, { timeout: 5_000 }).catch(() => undefined);
        return false;
      },
      30_000,
      `${consumer}'s consumer to be led by ${node.name}`,
      500,
    );
  };

  async function leaderLossRun(target: "stream" | "consumer"): Promise<Outcome> {
    const [clusterA, clusterB] = sc.clusters;
    assert.ok(clusterA && clusterB);
    const adminA = await open(clusterA.urls);
    const adminB = await open(clusterB.urls);
    const stream = uniqueName(`sc_${target}`);
    const wq = workQueueStreamName(stream, "g");
    const filter = `${stream}.*`;
    await adminA.jsm.streams.add({ name: stream, subjects: [filter], num_replicas: 3, placement: { cluster: clusterA.name, tags: [] } });
    // Created over a connection to B, the work queue and the config bucket land in B.
    await createElastic(adminB.js, { stream, group: "g", maxMembers: PARTITIONS, partitioningFilters: [{ filter, partitioning_wildcards: [1] }] });
    await addMembers(adminB.js, stream, "g", [...MEMBERS]);
    const where = async (name: string): Promise<string | undefined> => (await adminB.jsm.streams.info(name)).cluster?.name;
    assert.equal(await where(stream), clusterA.name, "the origin stream is in cluster A");
    assert.equal(await where(wq), clusterB.name, "the work queue is in cluster B");
    assert.equal(await where(BUCKET_STREAM), clusterB.name, "the config bucket is in cluster B");

    const logs = new Map(MEMBERS.map((m) => [m, new FaultLog()]));
    const instances: Instance[] = [];
    // The node each instance connects to first (it fails over to B's other nodes). Stream case: the
    // node killed is the work queue's leader W, with m1's pinned instance on W. Consumer case: the
    // node killed is Y, with m2's pinned instance on Y.
    const wqLeader = await waitFor(() => sc.leader(wq), 20_000, "the work queue's leader");
    const [x, y] = clusterB.nodes.filter((n) => n !== wqLeader);
    assert.ok(x && y);
    const firstNode: Record<string, [NatsServer, NatsServer]> = target === "stream" ? { m1: [wqLeader, x], m2: [x, y] } : { m1: [x, wqLeader], m2: [y, x] };
    const startInstance = async (member: string, who: "A" | "B"): Promise<Instance> => {
      const first = firstNode[member]?.[who === "A" ? 0 : 1];
      assert.ok(first);
      const client = await open([first.url, ...clusterB.urls.filter((u) => u !== first.url)], { noRandomize: true });
      const log = logs.get(member);
      assert.ok(log);
      const handle = await elasticConsume(client.js, {
        stream,
        group: "g",
        member,
        consumerConfig: { ack_wait: nanos(ACK_WAIT_MS) },
        handler: log.handler(who, () => sleep(WORK_MS)),
      });
      const inst: Instance = { member, who, node: first.name, handle, events: [] };
      instances.push(inst);
      watch(inst, client);
      return inst;
    };
    for (const m of MEMBERS) await startInstance(m, "A");

    // Consumer leaders, moved before anything is published (with nothing delivered, a step-down changes
    // nothing). Stream case: m1's on X (W's loss cuts its pinned instance off while its consumer's
    // leader lives), m2's on W (it loses both leaders, its instances keep their connections).
    // Consumer case: m1's on Y (a leader loss alone), m2's on X (a lost connection alone).
    await moveConsumerLeader(adminB, wq, "m1", target === "stream" ? x : y);
    await moveConsumerLeader(adminB, wq, "m2", target === "stream" ? wqLeader : x);
    const planned = target === "stream" ? wqLeader : y;

    const publisher = await open(clusterA.urls);
    const pub = new KeyedPublisher(publisher.js, (key) => `${stream}.${key}`, KEYS, stream);
    await pub.publish(2 * KEYS);
    for (const m of MEMBERS) await waitFor(() => logs.get(m)?.startsBy("A"), 30_000, `${m}/A to take the pin and start`);
    for (const m of MEMBERS) await startInstance(m, "B");
    for (const m of MEMBERS) await waitFor(async () => (await adminB.jsm.consumers.info(wq, m)).num_waiting >= 2, 20_000, `the standby's pull on ${m}`);

    // As fast as one publisher's round trips to A's R3 stream go (about 150 a second here), until stopped.
    let loading = true;
    const load = (async () => {
      while (loading) await pub.publish(1);
    })();
    const handled = (): number => [...logs.values()].reduce((n, l) => n + l.unique(), 0);
    let killAt = 0;
    let healthyAt = 0;
    try {
      await waitFor(() => handled() >= 300, 30_000, "handling under way");
      const victim = await waitFor(() => (target === "stream" ? sc.leader(wq) : sc.leader(wq, "m1")), 20_000, `the ${target} leader`);
      assert.equal(victim, planned, `the ${target} leader is still on the node planned for it`);
      const roles: { what: string; stream: string; consumer?: string }[] = [
        { what: "work queue", stream: wq },
        { what: "config bucket", stream: BUCKET_STREAM },
        ...MEMBERS.map((m) => ({ what: `consumer ${m}`, stream: wq, consumer: m })),
      ];
      const held = (await Promise.all(roles.map(async (r) => ((await sc.leader(r.stream, r.consumer)) === victim ? r : undefined)))).filter((r) => r !== undefined);
      killAt = clock();
      await victim.kill();
      // While the node is down: when another node took over each leadership it held.
      const waiting = new Set(held);
      const elected: string[] = [];
      while (clock() - killAt < FAULT_MS) {
        for (const r of [...waiting]) {
          const now = await sc.leader(r.stream, r.consumer);
          if (now && now !== victim) {
            waiting.delete(r);
            elected.push(`${r.what} ${now.name} +${Math.round(clock() - killAt)} ms`);
          }
        }
        await sleep(Math.max(0, Math.min(200, FAULT_MS - (clock() - killAt))));
      }
      const restartAt = clock();
      await victim.restart(true);
      healthyAt = clock();
      console.log(
        `  killed ${victim.name} (leader of ${held.map((r) => r.what).join(", ")}) for ${Math.round(restartAt - killAt)} ms; new leaders: ${elected.join(", ") || "none seen"}` +
          `${waiting.size > 0 ? ` (none seen for ${[...waiting].map((r) => r.what).join(", ")})` : ""}; healthy ${Math.round(healthyAt - restartAt)} ms after its restart`,
      );
      const atHealthy = handled();
      await waitFor(() => handled() >= atHealthy + 200, 30_000, "handling to go on after the restart");
    } finally {
      loading = false;
      await load;
    }

    // Which member each key belongs to, from the partitions the members' instances hold.
    const memberOf = (key: string): string => {
      const p = partitionOf(`${stream}.${key}`, PARTITIONS, { filter, wildcards: [1] });
      return instances.find((i) => i.handle.partitions().includes(p))?.member ?? "none";
    };
    const published = new Map(MEMBERS.map((m) => [m, new Map<string, number>()]));
    for (const [key, n] of pub.published) published.get(memberOf(key))?.set(key, n);
    assert.equal([...published.values()].reduce((n, m) => n + m.size, 0), KEYS, "every key belongs to a member");

    await waitFor(
      async () => {
        for (const m of MEMBERS) {
          const log = logs.get(m);
          const total = [...(published.get(m)?.values() ?? [])].reduce((a, b) => a + b, 0);
          if (!log || log.unique() < total || !log.allEnded()) return false;
          const ci = await adminB.jsm.consumers.info(wq, m);
          if (ci.num_ack_pending !== 0 || ci.num_pending !== 0) return false;
        }
        return true;
      },
      45_000,
      "everything handled and acked",
      200,
    ).catch((err: unknown) => console.log(`  not settled: ${err instanceof Error ? err.message : String(err)}`));
    const reports = new Map(MEMBERS.map((m) => [m, (logs.get(m) ?? new FaultLog()).check(published.get(m) ?? new Map())]));
    await Promise.allSettled(instances.map((i) => i.handle.stop()));
    return { reports, logs, instances, killAt, healthyAt };
  }

  /** The longest time without a start, from the kill on, and when it began (ms after the kill). */
  const longestPause = (runs: FaultRun[], from: number): { ms: number; at: number } => {
    const starts = runs.map((r) => r.start).filter((t) => t >= from).sort((a, b) => a - b);
    let best = { ms: 0, at: 0 };
    let prev = from;
    for (const t of starts) {
      if (t - prev > best.ms) best = { ms: Math.round(t - prev), at: Math.round(prev - from) };
      prev = t;
    }
    return best;
  };

  /**
   * Every run of a message after its first, and whether the fault explains it: the
   * earlier run ended between {@link ACK_LOSS_BEFORE_MS} before the kill and the time
   * the killed node was healthy again (its ack may have gone to a leader that died, or
   * to no leader at all).
   */
  const duplicates = (runs: FaultRun[], killAt: number, backAt: number): { text: string; explained: boolean }[] => {
    const seen = new Map<string, FaultRun>();
    const out: { text: string; explained: boolean }[] = [];
    for (const r of [...runs].sort((a, b) => a.start - b.start)) {
      const id = `${r.key}/${r.seq}`;
      const prev = seen.get(id);
      seen.set(id, r);
      if (!prev) continue;
      const end = prev.end ?? Number.POSITIVE_INFINITY;
      out.push({
        text: `${id}: ${prev.who}#${prev.deliveryCount} ended ${Math.round(end - killAt)} ms after the kill, ${r.who}#${r.deliveryCount} started ${Math.round(r.start - killAt)} ms after it`,
        explained: end >= killAt - ACK_LOSS_BEFORE_MS && end <= backAt,
      });
    }
    return out;
  };

  const cases = [
    { target: "stream", what: "the work queue's stream leader" },
    { target: "consumer", what: "a member consumer's leader (not the work queue's)" },
  ] as const;
  for (const { target, what } of cases) {
    test(`order - super-cluster: ${what} killed for 8 s and restarted keeps per-key order, nothing lost, no overlaps`, { timeout: 150_000 }, async () => {
      const t = clock();
      const { reports, logs, instances, killAt, healthyAt } = await leaderLossRun(target);
      for (const [m, report] of reports) {
        const log = logs.get(m);
        assert.ok(log);
        const pause = longestPause(log.runs, killAt);
        const byWho = (who: string) => log.runs.filter((r) => r.who === who && r.start >= killAt).length;
        console.log(summary(`  ${target} ${m}`, report));
        console.log(`    after the kill: A started ${byWho("A")}, B ${byWho("B")}; longest pause in starts ${pause.ms} ms from +${pause.at} ms`);
        for (const inst of instances.filter((i) => i.member === m)) {
          const evs = inst.events.filter((e) => e.at >= killAt - 2_000).map((e) => `${e.text} @${Math.round(e.at - killAt)}`);
          console.log(`    ${m}/${inst.who} (on ${inst.node}): ${evs.join("; ") || "no events"}`);
        }
        for (const v of report.outOfOrder.slice(0, 5)) console.log(`    order: ${v}`);
        for (const v of report.overlaps.slice(0, 3)) console.log(`    overlap: ${v}`);
        for (const d of duplicates(log.runs, killAt, healthyAt).slice(0, 8)) console.log(`    duplicate${d.explained ? "" : " (unexplained)"}: ${d.text}`);
      }
      console.log(`  ${target} case took ${Math.round(clock() - t)} ms`);
      for (const [m, report] of reports) {
        const where = `${target} ${m}`;
        assert.deepEqual(report.lost.slice(0, 10), [], `${where}: nothing lost (${report.lost.length} lost)`);
        assert.deepEqual(report.outOfOrder.slice(0, 10), [], `${where}: per-key order of first handling (${report.outOfOrder.length} out of order, ${report.keysOutOfOrder} keys)`);
        assert.deepEqual(report.overlaps.slice(0, 10), [], `${where}: no two runs of a key at once (${report.overlaps.length})`);
        assert.deepEqual(report.staleStarts.slice(0, 10), [], `${where}: no start under a superseded pin (${report.staleStarts.length})`);
        const unexplained = duplicates(logs.get(m)?.runs ?? [], killAt, healthyAt).filter((d) => !d.explained);
        assert.deepEqual(unexplained.slice(0, 10).map((d) => d.text), [], `${where}: every duplicate's earlier run ended around the fault (${unexplained.length} did not)`);
      }
    });
  }
});
