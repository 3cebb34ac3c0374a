/**
 * Scenario "cluster": a 3-node cluster on loopback (started here, file storage),
 * R3 streams and R3 config/lease buckets. Measured side by side in one run:
 * raw nats.js consume() against staticConsume on an R3 partitioned stream; the
 * server's sourcing rate into the R3 work queue `<stream>-<group>`; raw consume
 * against elasticConsume on that work queue; the same sourcing and raw work-queue
 * consume at R1 on the same cluster; and, to find what sets the R3 ceiling, the CPU
 * each server and the client spent, a raw consumer connected to a follower, and
 * four elastic members in parallel.
 *
 * Every consumer connects to the node that leads the stream it reads, unless the
 * row says "follower". Consumers inherit the stream's replicas; the server places
 * their leaders, and the note says how often that was the stream leader's node.
 */
import { availableParallelism } from "node:os";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type ConsumerConfig, type JetStreamManager } from "@nats-io/jetstream";
import { addMembers, createElastic, createStatic, elasticConsume, staticConsume, type ConsumerGroupMember } from "../../src/index.js";
import { NatsCluster } from "../../src/server/launcher.js";
import { cpuMark, cpuShare, type CpuMark, type CpuShare } from "../lib/cpu.js";
import { partitionedStream, plainStream, publishKeyed, until, type Conn } from "../lib/env.js";
import { median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

const PARTITIONS = 16;
const filters = Array.from({ length: PARTITIONS }, (_, p) => `${p}.>`);
const SCENARIO = "cluster (3 nodes)";
/** The wide pull batch that shows what the in-flight window does on R3. */
const WIDE = 1000;
const cpus = availableParallelism();

/** One timed measurement: a rate, the CPU spent during it, and where the leaders were. */
interface Sample {
  rate: number;
  cpu: CpuShare;
  /** Index of the node leading the stream read or written. */
  leader: number;
  /** Index of the node the client was connected to (-1: none, server-side sourcing). */
  client: number;
  /** Consumer leaders on the client's node, out of the consumers read. */
  consumersLocal: number;
  consumers: number;
  /** The consumer's num_ack_pending, sampled every 100 ms while it ran (raw consumers only). */
  ackPending?: number[];
}

/** The cluster with one connection per node and the server pids. */
interface Nodes {
  cluster: NatsCluster;
  conns: Conn[];
  names: string[];
  pids: number[];
}

async function openNode(url: string, name: string): Promise<Conn> {
  const nc: NatsConnection = await connect({ servers: url, name, ignoreClusterUpdates: true, maxPingOut: 10 });
  return { nc, js: jetstream(nc), jsm: await jetstreamManager(nc) };
}

/** Counts `count` events and marks time and CPU at the first and the last. */
class Window {
  private n = 0;
  private first: CpuMark | undefined;
  private resolve!: (w: { from: CpuMark; to: CpuMark }) => void;
  /** Resolves at the `count`th event. */
  readonly done = new Promise<{ from: CpuMark; to: CpuMark }>((r) => (this.resolve = r));

  constructor(
    private readonly count: number,
    private readonly pids: readonly number[],
  ) {}

  /** One event; true at the last. */
  tick = (): boolean => {
    if (this.n === 0) this.first = cpuMark(this.pids);
    if (++this.n !== this.count) return false;
    this.resolve({ from: this.first ?? cpuMark(this.pids), to: cpuMark(this.pids) });
    return true;
  };
}

function rateOf(count: number, w: { from: CpuMark; to: CpuMark }): { rate: number; cpu: CpuShare } {
  return { rate: count / ((w.to.at - w.from.at) / 1000), cpu: cpuShare(w.from, w.to) };
}

async function leaderOf(jsm: JetStreamManager, nodes: Nodes, stream: string): Promise<number> {
  let index = -1;
  await until(
    async () => {
      const leader = (await jsm.streams.info(stream)).cluster?.leader;
      index = leader === undefined ? -1 : nodes.names.indexOf(leader);
      return index >= 0;
    },
    30_000,
    `a leader for ${stream}`,
    50,
  );
  return index;
}

/** How many of the stream's consumers named `prefix…` have their leader on node `client`. */
async function consumerPlacement(jsm: JetStreamManager, nodes: Nodes, stream: string, client: number, prefix = ""): Promise<{ local: number; all: number }> {
  let local = 0;
  let all = 0;
  for await (const c of jsm.consumers.list(stream)) {
    if (!c.name.startsWith(prefix)) continue;
    all++;
    if (c.cluster?.leader === nodes.names[client]) local++;
  }
  return { local, all };
}

function pinnedConfig(name: string): Partial<ConsumerConfig> {
  return {
    durable_name: name,
    ack_policy: "explicit",
    ack_wait: 5_000_000_000,
    filter_subjects: filters,
    priority_groups: ["PCG"],
    priority_policy: "pinned_client",
    priority_timeout: 5_000_000_000,
  };
}

/** Samples a consumer's num_ack_pending every 100 ms until the returned stop is called. */
function sampleAckPending(jsm: JetStreamManager, stream: string, consumer: string): () => Promise<number[]> {
  const seen: number[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      await new Promise((r) => setTimeout(r, 100));
      if (!running) break;
      const info = await jsm.consumers.info(stream, consumer).catch(() => undefined);
      if (info && info.num_pending > 0) seen.push(info.num_ack_pending);
    }
  })();
  return async () => {
    running = false;
    await loop;
    return seen;
  };
}

/**
 * A raw nats.js consume() of `count` messages through a pinned 16-filter consumer,
 * acking each; `maxMessages` is the pull batch (nats.js default 100).
 */
async function rawConsume(
  nodes: Nodes,
  stream: string,
  count: number,
  mode: "iterator" | "callback",
  at: "leader" | "follower",
  maxMessages = 100,
  consumerReplicas?: number,
): Promise<Sample> {
  const admin = nodes.conns[0] as Conn;
  const leader = await leaderOf(admin.jsm, nodes, stream);
  const client = at === "leader" ? leader : (leader + 1) % nodes.conns.length;
  const { js, jsm } = nodes.conns[client] as Conn;
  const name = `raw_${mode}_${at}`;
  await jsm.consumers.add(stream, { ...pinnedConfig(name), ...(consumerReplicas === undefined ? {} : { num_replicas: consumerReplicas }) });
  const c = await js.consumers.get(stream, name);
  const window = new Window(count, nodes.pids);
  const sampled = sampleAckPending(admin.jsm, stream, name);
  if (mode === "iterator") {
    const messages = await c.consume({ group: "PCG", expires: 2500, max_messages: maxMessages });
    for await (const m of messages) {
      m.ack();
      if (window.tick()) break;
    }
  } else {
    const messages = await c.consume({
      group: "PCG",
      expires: 2500,
      max_messages: maxMessages,
      callback: (m) => {
        m.ack();
        window.tick();
      },
    });
    await window.done;
    await messages.close();
  }
  const measured = rateOf(count, await window.done);
  const ackPending = await sampled();
  const placed = await consumerPlacement(jsm, nodes, stream, client, name);
  await jsm.consumers.delete(stream, name);
  return { ...measured, leader, client, consumersLocal: placed.local, consumers: placed.all, ackPending };
}

/** staticConsume of `count` messages with a no-op handler, one member owning all partitions. */
async function oursStatic(nodes: Nodes, stream: string, group: string, count: number): Promise<Sample> {
  const admin = nodes.conns[0] as Conn;
  const leader = await leaderOf(admin.jsm, nodes, stream);
  const { js, jsm } = nodes.conns[leader] as Conn;
  await createStatic(admin.js, { stream, group, maxMembers: PARTITIONS, members: ["m"] });
  const window = new Window(count, nodes.pids);
  const member = await staticConsume(js, { stream, group, member: "m", handler: () => void window.tick() });
  try {
    const measured = rateOf(count, await window.done);
    const placed = await consumerPlacement(jsm, nodes, stream, leader, `${group}-`);
    return { ...measured, leader, client: leader, consumersLocal: placed.local, consumers: placed.all };
  } finally {
    await member.stop();
  }
}

/**
 * Creates elastic group `group` on `stream` and measures the server's sourcing rate
 * into its work queue from the first sourced message to the last.
 */
async function sourced(nodes: Nodes, stream: string, group: string, count: number): Promise<Sample> {
  const admin = nodes.conns[0] as Conn;
  const wq = `${stream}-${group}`;
  // The work queue's first sighting (maybe still empty) and its first sighting with messages.
  let exists: { mark: CpuMark; messages: number } | undefined;
  let first: { mark: CpuMark; messages: number } | undefined;
  let last: CpuMark | undefined;
  let stop = false;
  const poll = (async () => {
    while (!stop) {
      const messages = await admin.jsm.streams.info(wq).then(
        (i) => i.state.messages,
        () => undefined,
      );
      if (messages !== undefined) {
        const seen = { mark: cpuMark(nodes.pids), messages };
        exists ??= seen;
        if (messages > 0 && messages < count) first ??= seen;
        if (messages >= count) {
          last = seen.mark;
          return;
        }
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  const requested = { mark: cpuMark(nodes.pids), messages: 0 };
  try {
    await createElastic(admin.js, { stream, group, maxMembers: PARTITIONS, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await until(() => last !== undefined, 600_000, `sourcing into ${wq}`, 10);
  } finally {
    stop = true;
    await poll;
  }
  // From the first partial sighting; when sourcing finished between two polls, from the work queue's
  // first sighting, or (when it was full at once) from the create request: slower, never infinite.
  const from = first ?? (exists && exists.messages < count ? exists : requested);
  const to = last as CpuMark;
  const leader = await leaderOf(admin.jsm, nodes, wq);
  const rate = (count - from.messages) / ((to.at - from.mark.at) / 1000);
  return { rate, cpu: cpuShare(from.mark, to), leader, client: -1, consumersLocal: 0, consumers: 0 };
}

/**
 * elasticConsume of `count` messages with a no-op handler, `members` members in this
 * process; `pullBatch` (also the local cap when above its default 256) when given.
 */
async function oursElastic(nodes: Nodes, stream: string, group: string, count: number, members: number, pullBatch?: number): Promise<Sample> {
  const admin = nodes.conns[0] as Conn;
  const wq = `${stream}-${group}`;
  const leader = await leaderOf(admin.jsm, nodes, wq);
  const { js, jsm } = nodes.conns[leader] as Conn;
  const window = new Window(count, nodes.pids);
  const names = Array.from({ length: members }, (_, i) => `m${i + 1}`);
  const running: ConsumerGroupMember[] = [];
  try {
    for (const member of names) {
      const batch = pullBatch === undefined ? {} : { pullBatch, maxBuffered: Math.max(256, pullBatch) };
      running.push(await elasticConsume(js, { stream, group, member, consumerConfig: { ack_policy: "explicit" }, ...batch, handler: () => void window.tick() }));
    }
    await addMembers(admin.js, stream, group, names);
    const measured = rateOf(count, await window.done);
    const placed = await consumerPlacement(jsm, nodes, wq, leader);
    return { ...measured, leader, client: leader, consumersLocal: placed.local, consumers: placed.all };
  } finally {
    await Promise.allSettled(running.map((m) => m.stop()));
  }
}

/** The CPU of one measurement, in the note's words (share of one core; the machine's core count bounds the sum). */
function cpuWords(samples: readonly Sample[]): string {
  const last = samples[samples.length - 1];
  if (!last) return "";
  const nodesCount = last.cpu.servers.length;
  // Medians per role over the runs: the node leading the stream, the client's node when it is not the leader, the other(s).
  const leaderCpu = median(samples.map((s) => s.cpu.servers[s.leader] ?? NaN));
  const others = median(samples.map((s) => s.cpu.servers.filter((_, i) => i !== s.leader).reduce((a, b) => a + b, 0) / (nodesCount - 1)));
  const client = median(samples.map((s) => s.cpu.self));
  const total = median(samples.map((s) => s.cpu.servers.reduce((a, b) => a + b, 0) + s.cpu.self));
  const machine = median(samples.map((s) => s.cpu.machine));
  const pct = (x: number): string => `${Math.round(x * 100)}%`;
  const clientWords = last.client < 0 ? "" : `, client ${pct(client)}`;
  const placement = last.consumers === 0 ? "" : `; consumer leader on the client's node in ${samples.filter((s) => s.consumersLocal === s.consumers).length}/${samples.length} runs`;
  const pending = samples.flatMap((s) => s.ackPending ?? []);
  const pendingWords = pending.length === 0 ? "" : `; consumer num_ack_pending while running: median ${median(pending)} (of ${pending.length} samples)`;
  return `CPU (of one core): stream leader ${pct(leaderCpu)}, each other node ${pct(others)}${clientWords}; these together ${pct(total)}, the machine ${pct(machine)} of ${cpus}00%${placement}${pendingWords}`;
}

function row(variant: string, samples: readonly Sample[], extra: Partial<Row> = {}): Row {
  const values = samples.map((s) => s.rate);
  const note = [extra.note, cpuWords(samples)].filter((x) => x).join("; ");
  return { scenario: SCENARIO, variant, value: median(values), unit: "msgs/s", samples: values, ...extra, note };
}

function versus(samples: readonly Sample[], baseline: readonly Sample[], name: string): Partial<Row> {
  return { baseline: name, ratio: median(samples.map((s) => s.rate)) / median(baseline.map((s) => s.rate)) };
}

/** Scenario "cluster". */
export async function cluster(ctx: BenchContext): Promise<Row[]> {
  const started = await NatsCluster.start(3);
  const conns: Conn[] = [];
  try {
    for (const [i, node] of started.nodes.entries()) conns.push(await openNode(node.url, `bench-cluster-n${i + 1}`));
    const nodes: Nodes = { cluster: started, conns, names: started.nodes.map((n) => n.name), pids: started.nodes.map((n) => n.pid ?? -1) };
    const admin = conns[0] as Conn;
    ctx.log(`  cluster: 3 nodes ${nodes.names.join(", ")} (pids ${nodes.pids.join(", ")}); nats-server ${started.nodes[0]?.version}`);

    // R3 first, so the group config and lease buckets (created with the first group's stream's replicas) are R3.
    const s3 = ctx.name("cls3");
    const e3 = ctx.name("cle3");
    const s1 = ctx.name("cls1");
    const e1 = ctx.name("cle1");
    // A cluster just started may still be electing its meta leader: the first R3 create is retried.
    await until(
      () =>
        partitionedStream(admin.jsm, s3, PARTITIONS, 3).then(
          () => true,
          () => false,
        ),
      30_000,
      "the first R3 stream",
      250,
    );
    await plainStream(admin.jsm, e3, 3);
    await partitionedStream(admin.jsm, s1, PARTITIONS, 1);
    await plainStream(admin.jsm, e1, 1);
    for (const s of [s3, e3, s1, e1]) await publishKeyed(admin.js, s, ctx.messages, ctx.keys);

    const n = ctx.messages;
    const r3 = { iterator: [] as Sample[], callback: [] as Sample[], callbackR1Consumer: [] as Sample[], ours: [] as Sample[], sourcing: [] as Sample[], wqIterator: [] as Sample[], wqCallback: [] as Sample[], wqFollower: [] as Sample[], wqOurs: [] as Sample[], wqOurs4: [] as Sample[], wqWide: [] as Sample[], wqOursWide: [] as Sample[] };
    const r1 = { callback: [] as Sample[], sourcing: [] as Sample[], wqCallback: [] as Sample[], wqOurs: [] as Sample[] };
    const fmt = (s: Sample | undefined): string => (s ? s.rate.toFixed(0) : "?");
    for (let run = 0; run < ctx.runs; run++) {
      // (a) R3 partitioned stream: raw both modes, then ours.
      r3.iterator.push(await rawConsume(nodes, s3, n, "iterator", "leader"));
      r3.callback.push(await rawConsume(nodes, s3, n, "callback", "leader"));
      // The same with an R1 consumer: what the consumer's replicated ack state costs (a work queue's consumers must match its replicas).
      r3.callbackR1Consumer.push(await rawConsume(nodes, s3, n, "callback", "leader", 100, 1));
      r3.ours.push(await oursStatic(nodes, s3, `g${run}`, n));
      // (b, c) R3 work queue: each consume needs its own freshly sourced work queue.
      const wq3 = async (group: string, into: Sample[], consume: () => Promise<Sample>): Promise<void> => {
        r3.sourcing.push(await sourced(nodes, e3, group, n));
        into.push(await consume());
      };
      await wq3(`ri${run}`, r3.wqIterator, () => rawConsume(nodes, `${e3}-ri${run}`, n, "iterator", "leader"));
      await wq3(`rc${run}`, r3.wqCallback, () => rawConsume(nodes, `${e3}-rc${run}`, n, "callback", "leader"));
      await wq3(`rf${run}`, r3.wqFollower, () => rawConsume(nodes, `${e3}-rf${run}`, n, "callback", "follower"));
      await wq3(`g${run}`, r3.wqOurs, () => oursElastic(nodes, e3, `g${run}`, n, 1));
      await wq3(`g4_${run}`, r3.wqOurs4, () => oursElastic(nodes, e3, `g4_${run}`, n, 4));
      // The window: pulls of 1,000 instead of 100 (more acks can be on their way at once).
      await wq3(`rw${run}`, r3.wqWide, () => rawConsume(nodes, `${e3}-rw${run}`, n, "callback", "leader", WIDE));
      await wq3(`gw${run}`, r3.wqOursWide, () => oursElastic(nodes, e3, `gw${run}`, n, 1, WIDE));
      // (d) R1 on the same cluster.
      r1.callback.push(await rawConsume(nodes, s1, n, "callback", "leader"));
      r1.sourcing.push(await sourced(nodes, e1, `rc${run}`, n));
      r1.wqCallback.push(await rawConsume(nodes, `${e1}-rc${run}`, n, "callback", "leader"));
      r1.sourcing.push(await sourced(nodes, e1, `g${run}`, n));
      r1.wqOurs.push(await oursElastic(nodes, e1, `g${run}`, n, 1));
      ctx.log(
        `  cluster run ${run + 1}: R3 stream raw it/cb/cb-R1-consumer ${fmt(r3.iterator[run])}/${fmt(r3.callback[run])}/${fmt(r3.callbackR1Consumer[run])} static ${fmt(r3.ours[run])}; ` +
          `R3 sourcing ${fmt(r3.sourcing[r3.sourcing.length - 1])}; R3 WQ raw it/cb/follower ${fmt(r3.wqIterator[run])}/${fmt(r3.wqCallback[run])}/${fmt(r3.wqFollower[run])} ` +
          `elastic 1/4 members ${fmt(r3.wqOurs[run])}/${fmt(r3.wqOurs4[run])}; pulls of ${WIDE}: raw ${fmt(r3.wqWide[run])} elastic ${fmt(r3.wqOursWide[run])}; R1 stream raw cb ${fmt(r1.callback[run])}, sourcing ${fmt(r1.sourcing[r1.sourcing.length - 1])}, ` +
          `WQ raw cb ${fmt(r1.wqCallback[run])} elastic ${fmt(r1.wqOurs[run])} msgs/s`,
      );
      ctx.log(`    R3 WQ raw callback ${cpuWords([r3.wqCallback[run] as Sample])}; R1 WQ raw callback ${cpuWords([r1.wqCallback[run] as Sample])}`);
    }

    const fasterStatic = median(r3.iterator.map((s) => s.rate)) >= median(r3.callback.map((s) => s.rate)) ? r3.iterator : r3.callback;
    const fasterWq = median(r3.wqIterator.map((s) => s.rate)) >= median(r3.wqCallback.map((s) => s.rate)) ? r3.wqIterator : r3.wqCallback;
    const fasterName = (which: Sample[], iterator: Sample[]): string => `R3 raw ${which === iterator ? "iterator" : "callback"} (the faster raw)`;
    return [
      row("R3 partitioned stream: raw nats.js consume(), iterator", r3.iterator),
      row("R3 partitioned stream: raw nats.js consume(), callback", r3.callback, versus(r3.callback, r1.callback, "R1 raw callback, same cluster")),
      row("R3 partitioned stream: raw callback, R1 consumer", r3.callbackR1Consumer, {
        ...versus(r3.callbackR1Consumer, r3.callback, "R3 raw callback, R3 consumer"),
        note: "what an R3 consumer's replicated ack state costs: most of the R1 to R3 loss on a limits stream",
      }),
      row("R3 partitioned stream: staticConsume, 16 partitions, no-op", r3.ours, versus(r3.ours, fasterStatic, fasterName(fasterStatic, r3.iterator))),
      row("R3 server sourcing rate into the work queue", r3.sourcing, {
        ...versus(r3.sourcing, r1.sourcing, "R1 sourcing, same cluster"),
        note: "elastic groups cannot go faster than this over time",
      }),
      row("R3 work queue: raw nats.js consume(), iterator", r3.wqIterator),
      row("R3 work queue: raw nats.js consume(), callback", r3.wqCallback, {
        ...versus(r3.wqCallback, r1.wqCallback, "R1 work-queue raw callback, same cluster"),
        note:
          "the R3 ceiling: every ack is a replicated consumer-state update and a replicated delete; the pull window (100) stays full of messages whose acks the server has not applied yet, so the rate is window / ack-apply time (see the pulls-of-1000 and R1-consumer rows)",
      }),
      row("R3 work queue: raw callback, client on a follower", r3.wqFollower, versus(r3.wqFollower, r3.wqCallback, "R3 raw callback on the leader")),
      row("R3 work queue: elasticConsume, 1 member, no-op", r3.wqOurs, {
        ...versus(r3.wqOurs, fasterWq, fasterName(fasterWq, r3.wqIterator)),
        note: "the same ceiling as raw (compare the R1 elastic ratio: no R3-only loss in the library); on R3 work queues raise pullBatch and maxBuffered",
      }),
      row("R3 work queue: elasticConsume, 4 members in one process", r3.wqOurs4, {
        ...versus(r3.wqOurs4, r3.wqOurs, "1 member"),
        note: "more consumers (4 raft groups) do not raise it, a wider window on one consumer does: the cost is per replicated ack batch, not per consumer",
      }),
      row(`R3 work queue: raw callback, pulls of ${WIDE} messages`, r3.wqWide, versus(r3.wqWide, r3.wqCallback, "pulls of 100 (the nats.js default)")),
      row(`R3 work queue: elasticConsume, pullBatch ${WIDE}`, r3.wqOursWide, versus(r3.wqOursWide, r3.wqWide, `R3 raw callback, pulls of ${WIDE}`)),
      row("R1 partitioned stream: raw nats.js consume(), callback", r1.callback),
      row("R1 server sourcing rate into the work queue", r1.sourcing),
      row("R1 work queue: raw nats.js consume(), callback", r1.wqCallback, versus(r1.wqCallback, r1.callback, "R1 raw callback on the partitioned (limits) stream")),
      row("R1 work queue: elasticConsume, 1 member, no-op", r1.wqOurs, versus(r1.wqOurs, r1.wqCallback, "R1 work-queue raw callback")),
    ];
  } finally {
    await Promise.allSettled(conns.map((c) => c.nc.close()));
    await started.stop();
  }
}
