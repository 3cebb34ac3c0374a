/**
 * Scenario "holds": how long an instance holds its starts after a fault, and how long
 * until handling goes on. Each instance runs in its own process (bench/holds-process.ts)
 * on an elastic member; every start is checked for per-key order and loss.
 *
 * - **Slow-consumer cut**: a server of its own (default limits, its log read for
 *   "Slow Consumer Detected"), 1 MB messages, a 30 ms synchronous handler and a byte
 *   budget above the server's 64 MiB `max_pending`, so the server cuts the pinned
 *   instance; with and without a hot standby. Per cut: the `starts_held` events that
 *   follow (the library's own report of each hold), the longest pause in starts and
 *   when handling went on.
 * - **Consumer leader loss**: a 3-node cluster, R3 streams, one instance connected to
 *   a node that leads neither the consumer nor, where the cluster allows it, the
 *   streams; a steady keyed load; kill -9 of the node leading the member's consumer.
 *   Election time (until the consumer reports a new leader), resume time (the end of
 *   the longest pause in starts), and the holds reported.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { addMembers, createElastic, workQueueStreamName } from "../../src/index.js";
import { NatsCluster, NatsServer } from "../../src/server/launcher.js";
import { plainStream, publishKeyed, until } from "../lib/env.js";
import { checkOrder, longestPause, type OrderReport, type Start } from "../lib/order.js";
import { startHoldsProcess, type HoldsEvent, type HoldsProcess } from "../lib/process.js";
import { clock, median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";
import type { HoldsChildSettings } from "../holds-process.js";

const SCENARIO = "holds";
const ACK_WAIT_MS = 2000;
const PARTITIONS = 4;

/** What one fault run measured. */
interface FaultSample {
  /** Held starts reported after the fault(s): reason and ms. */
  holds: { reason: string; ms: number }[];
  /** Per fault: ms from the fault until handling went on, and the longest pause in starts. */
  resumes: { resumeMs: number; pauseMs: number }[];
  /** Leader loss only: ms until the consumer named a new leader. */
  elections: number[];
  order: OrderReport;
  /** Slow-consumer runs: the server's "Slow Consumer Detected" lines, and the instances' slow_consumer events. */
  cuts?: number;
  /** Per cut: ms until the cut instance saw its disconnect. */
  noticedMs?: number[];
  slowEvents?: number;
  note?: string;
}

/**
 * The times (ms since the epoch) of the server's "Slow Consumer Detected" lines: the
 * server's log stamps local time to the microsecond, `[pid] 2026/12/02 07:04:43.616714 [INF] …`.
 */
export function slowConsumerCuts(log: string): number[] {
  return log.split("\n").flatMap((line) => {
    if (!line.includes("Slow Consumer Detected")) return [];
    const m = /^\[\d+\] (\d{4})\/(\d\d)\/(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,6})/.exec(line);
    if (!m) return [NaN];
    const n = m.slice(1, 7).map(Number);
    const at = new Date(n[0] ?? 0, (n[1] ?? 1) - 1, n[2] ?? 1, n[3] ?? 0, n[4] ?? 0, n[5] ?? 0).getTime();
    return [at + Number(`0.${m[7] ?? "0"}`) * 1000];
  });
}

/** Every start an instance reported. */
function startsOf(p: HoldsProcess): Start[] {
  return p.events.flatMap((e) => (e.ev === "start" ? [{ who: p.who, key: e.key ?? "", seq: e.seq ?? 0, dc: e.dc ?? 0, at: e.at }] : []));
}

function heldAfter(events: readonly HoldsEvent[], from: number): { reason: string; ms: number }[] {
  return events.flatMap((e) => (e.ev === "status" && e.type === "starts_held" && e.at >= from ? [{ reason: e.reason ?? "", ms: e.durationMs ?? 0 }] : []));
}

/** Highest per-key sequence published, from `publishKeyed`'s `k<key>:<seq>` scheme (count messages round-robin over keys). */
function roundRobin(count: number, keys: number): Map<string, number> {
  const m = new Map<string, number>();
  for (let i = 0; i < count; i++) m.set(`k${i % keys}`, (m.get(`k${i % keys}`) ?? 0) + 1);
  return m;
}

/** Elastic group `g` (4 partitions, member m) on a plain stream `<stream>.*`. */
async function elasticGroup(js: JetStreamClient, jsm: JetStreamManager, stream: string, replicas: number): Promise<string> {
  await plainStream(jsm, stream, replicas);
  await createElastic(js, { stream, group: "g", maxMembers: PARTITIONS, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
  await addMembers(js, stream, "g", ["m"]);
  return workQueueStreamName(stream, "g");
}

/** Waits until every message was started and the consumer holds nothing pending or unacked. */
async function drained(jsm: JetStreamManager, wq: string, starts: () => Start[], total: number, timeoutMs: number): Promise<void> {
  await until(
    async () => {
      if (new Set(starts().map((s) => `${s.key}/${s.seq}`)).size < total) return false;
      const ci = await jsm.consumers.info(wq, "m").catch(() => undefined);
      return ci !== undefined && ci.num_ack_pending === 0 && ci.num_pending === 0;
    },
    timeoutMs,
    "every message handled and acked",
    100,
  );
}

// --- slow-consumer cut ------------------------------------------------------------

const SLOW_MESSAGES = { quick: 60, full: 120 };
const SLOW_KEYS = 10;
const SLOW_SYNC_MS = 30;

async function slowConsumerRun(ctx: BenchContext, standby: boolean): Promise<FaultSample> {
  const dir = await mkdtemp(join(tmpdir(), "pcg-bench-holds-"));
  const serverLog = join(dir, "server.log");
  const server = await NatsServer.start({ extraConfig: `log_file: ${JSON.stringify(serverLog)}` });
  const nc = await connect({ servers: server.url });
  const procs: HoldsProcess[] = [];
  try {
    const js = jetstream(nc);
    const jsm = await jetstreamManager(nc);
    const stream = ctx.name("holds_sc");
    const wq = await elasticGroup(js, jsm, stream, 1);
    const count = ctx.quick ? SLOW_MESSAGES.quick : SLOW_MESSAGES.full;
    // About 1 MB each: under the server's 1 MiB max_payload with the work queue's headers.
    await publishKeyed(js, stream, count, SLOW_KEYS, 1_000_000 - 200, 16);
    await until(async () => (await jsm.streams.info(wq)).state.messages >= count, 60_000, "sourcing", 50);
    const settings = (): HoldsChildSettings => ({
      servers: [server.url],
      flavour: "elastic",
      stream,
      group: "g",
      member: "m",
      ackWaitMs: ACK_WAIT_MS,
      syncMs: SLOW_SYNC_MS,
      // Above the server's 64 MiB max_pending: the server queues past it and cuts the instance.
      maxBufferedBytes: 512 * 1024 * 1024,
    });
    const a = startHoldsProcess("A", settings());
    procs.push(a);
    await a.ready;
    await until(() => startsOf(a).length > 0, 30_000, "A to take the pin and start", 20);
    if (standby) {
      const b = startHoldsProcess("B", settings());
      procs.push(b);
      await b.ready;
    }
    const all = (): Start[] => procs.flatMap(startsOf);
    // Every cut holds starts for about an AckWait; a loaded machine may see several.
    await drained(jsm, wq, all, count, 180_000);
    // The fault is the server's cut; the instance sees its disconnect only once its event loop gets to the socket.
    const cutsAt = slowConsumerCuts(await readFile(serverLog, "utf8").catch(() => "")).filter(Number.isFinite);
    const noticed = a.events.filter((e) => e.ev === "conn" && e.type === "disconnect").map((e) => e.at);
    const resumes = cutsAt.flatMap((at, i) => {
      const pause = longestPause(all(), at, Math.min(cutsAt[i + 1] ?? Infinity, at + 4 * ACK_WAIT_MS));
      return pause ? [{ resumeMs: pause.resumedAt - at, pauseMs: pause.ms }] : [];
    });
    const first = cutsAt[0] ?? Infinity;
    return {
      holds: procs.flatMap((p) => heldAfter(p.events, first)),
      resumes,
      elections: [],
      order: checkOrder(all(), roundRobin(count, SLOW_KEYS)),
      cuts: cutsAt.length,
      noticedMs: cutsAt.flatMap((at) => {
        const seen = noticed.find((t) => t >= at);
        return seen === undefined ? [] : [seen - at];
      }),
      slowEvents: procs.reduce((n, p) => n + p.events.filter((e) => e.ev === "status" && e.type === "slow_consumer").length, 0),
    };
  } finally {
    await Promise.allSettled(procs.map((p) => p.stop()));
    await nc.close();
    await server.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

// --- consumer leader loss ------------------------------------------------------------

const LOAD_RATE = 100;
const LOAD_KEYS = 20;

/** Publishes `k<key>:<seq>:` messages one at a time, about `rate` per second, each retried until stored (deduplicated by id). */
function keyedLoad(js: JetStreamClient, stream: string, rate: number, keys: number): { published: Map<string, number>; stop(): Promise<void> } {
  const published = new Map<string, number>();
  let running = true;
  const loop = (async () => {
    for (let i = 0; running; i++) {
      const key = `k${i % keys}`;
      const seq = (published.get(key) ?? 0) + 1;
      for (;;) {
        try {
          await js.publish(`${stream}.${key}`, `${key}:${seq}:`, { msgID: `${key}:${seq}`, timeout: 1000 });
          break;
        } catch {
          // a leader change: the same message again (the stream drops a duplicate by its id)
          await new Promise((r) => setTimeout(r, 50));
        }
      }
      published.set(key, seq);
      await new Promise((r) => setTimeout(r, 1000 / rate));
    }
  })();
  return {
    published,
    async stop() {
      running = false;
      await loop;
    },
  };
}

async function leaderOf(nc: NatsConnection, subject: string, timeoutMs = 1000): Promise<string | undefined> {
  try {
    const info = (await nc.request(subject, "", { timeout: timeoutMs })).json<{ cluster?: { leader?: string } }>();
    return info.cluster?.leader;
  } catch {
    return undefined;
  }
}

/**
 * Steps leaders down until the consumer's leader is neither the client's node nor (when
 * the cluster allows it in a few tries) a stream leader; returns the consumer's leader
 * and what else it leads.
 */
async function placeLeaders(nc: NatsConnection, stream: string, wq: string, clientNode: string): Promise<{ victim: string; alsoLeads: string[] }> {
  const consumerInfo = `$JS.API.CONSUMER.INFO.${wq}.m`;
  for (let attempt = 0; ; attempt++) {
    const victim = await leaderOf(nc, consumerInfo);
    const source = await leaderOf(nc, `$JS.API.STREAM.INFO.${stream}`);
    const queue = await leaderOf(nc, `$JS.API.STREAM.INFO.${wq}`);
    if (!victim || !source || !queue) {
      await new Promise((r) => setTimeout(r, 200));
      continue;
    }
    const alsoLeads = [...(source === victim ? [stream] : []), ...(queue === victim ? [wq] : [])];
    if (victim !== clientNode && (alsoLeads.length === 0 || attempt >= 6)) return { victim, alsoLeads };
    if (attempt >= 20) throw new Error("cannot move the consumer's leader off the client's node");
    const subject =
      victim === clientNode ? `$JS.API.CONSUMER.LEADER.STEPDOWN.${wq}.m` : source === victim ? `$JS.API.STREAM.LEADER.STEPDOWN.${stream}` : `$JS.API.STREAM.LEADER.STEPDOWN.${wq}`;
    await nc.request(subject, "", { timeout: 5000 }).catch(() => undefined);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

async function leaderLossRun(ctx: BenchContext, cluster: NatsCluster, run: number): Promise<FaultSample> {
  // The admin connection may lose its node: it knows them all.
  const nc = await connect({ servers: cluster.urls, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
  const js = jetstream(nc, { timeout: 2000 });
  const jsm = await jetstreamManager(nc, { timeout: 2000 });
  const procs: HoldsProcess[] = [];
  let load: ReturnType<typeof keyedLoad> | undefined;
  try {
    const stream = ctx.name("holds_ll");
    const wq = await elasticGroup(js, jsm, stream, 3);
    const clientNode = cluster.nodes[run % cluster.nodes.length] as NatsServer;
    const a = startHoldsProcess("A", {
      servers: [clientNode.url],
      flavour: "elastic",
      stream,
      group: "g",
      member: "m",
      ackWaitMs: ACK_WAIT_MS,
      workMs: 2,
    } satisfies HoldsChildSettings);
    procs.push(a);
    await a.ready;
    load = keyedLoad(js, stream, LOAD_RATE, LOAD_KEYS);
    await until(() => startsOf(a).length > 20, 30_000, "A to take the pin and start", 20);
    const { victim, alsoLeads } = await placeLeaders(nc, stream, wq, clientNode.name);
    // Let any hold from the placement settle before the fault.
    await new Promise((r) => setTimeout(r, 2 * ACK_WAIT_MS));
    const node = cluster.nodes.find((n) => n.name === victim) as NatsServer;
    const t0 = clock();
    await node.kill();
    let electedAt = NaN;
    await until(
      async () => {
        // A short timeout: an election answers nothing, and the poll's resolution is this timeout.
        const leader = await leaderOf(nc, `$JS.API.CONSUMER.INFO.${wq}.m`, 250);
        if (leader === undefined || leader === victim) return false;
        electedAt = clock();
        return true;
      },
      60_000,
      "a new consumer leader",
      25,
    );
    // Handling must have gone on for a while past the fault before the window closes.
    await until(() => startsOf(a).some((s) => s.at > t0 + 3 * ACK_WAIT_MS), 60_000, "handling to go on after the leader loss", 50);
    await load.stop();
    const published = load.published;
    load = undefined;
    const total = [...published.values()].reduce((x, y) => x + y, 0);
    await drained(jsm, wq, () => startsOf(a), total, 90_000);
    const pause = longestPause(startsOf(a), t0, t0 + 10 * ACK_WAIT_MS);
    await node.restart(true);
    return {
      holds: heldAfter(a.events, t0),
      resumes: pause ? [{ resumeMs: pause.resumedAt - t0, pauseMs: pause.ms }] : [],
      elections: [electedAt - t0],
      order: checkOrder(startsOf(a), published),
      ...(alsoLeads.length > 0 ? { note: `the killed node also led ${alsoLeads.join(", ")}` } : {}),
    };
  } finally {
    await load?.stop();
    await Promise.allSettled(procs.map((p) => p.stop()));
    await nc.close();
  }
}

// --- rows ---------------------------------------------------------------------------

const stat = (v: readonly number[]): string => (v.length === 0 ? "none" : `median ${median(v).toFixed(0)} ms, max ${Math.max(...v).toFixed(0)} ms, n ${v.length}`);

function faultRows(what: string, samples: FaultSample[], extra: string): Row[] {
  const holds = samples.flatMap((s) => s.holds);
  const holdMs = holds.map((h) => h.ms);
  const reasons = [...new Set(holds.map((h) => h.reason))].map((r) => `${r} ${holds.filter((h) => h.reason === r).length}`).join(", ") || "none";
  const resume = samples.flatMap((s) => s.resumes.map((r) => r.resumeMs));
  const pauses = samples.flatMap((s) => s.resumes.map((r) => r.pauseMs));
  const outOfOrder = samples.reduce((n, s) => n + s.order.outOfOrder.length, 0);
  const lost = samples.reduce((n, s) => n + s.order.lost.length, 0);
  const handled = samples.reduce((n, s) => n + s.order.unique, 0);
  const notes = [...new Set(samples.flatMap((s) => (s.note ? [s.note] : [])))];
  const ackWait = `AckWait ${ACK_WAIT_MS} ms`;
  const rows: Row[] = [
    {
      scenario: SCENARIO,
      variant: `${what}: starts held (starts_held events)`,
      value: median(holdMs),
      unit: "ms",
      baseline: ackWait,
      ratio: median(holdMs) / ACK_WAIT_MS,
      samples: holdMs,
      note: `${stat(holdMs)} (max ${(Math.max(...holdMs, 0) / ACK_WAIT_MS).toFixed(2)}× AckWait); by reason: ${reasons}; ${extra}`,
    },
    {
      scenario: SCENARIO,
      variant: `${what}: until handling went on`,
      value: median(resume),
      unit: "ms",
      baseline: ackWait,
      ratio: median(resume) / ACK_WAIT_MS,
      samples: resume,
      note: `from the fault to the end of the longest pause in starts after it: ${stat(resume)}; the pause itself ${stat(pauses)}${notes.length > 0 ? `; ${notes.join("; ")}` : ""}`,
    },
  ];
  const elections = samples.flatMap((s) => s.elections);
  if (elections.length > 0) {
    rows.push({ scenario: SCENARIO, variant: `${what}: consumer leader elected`, value: median(elections), unit: "ms", baseline: ackWait, ratio: median(elections) / ACK_WAIT_MS, samples: elections, note: stat(elections) });
  }
  rows.push({
    scenario: SCENARIO,
    variant: `${what}: per-key order (first handling) over ${samples.length} run(s)`,
    value: outOfOrder,
    unit: "out of order",
    target: "= 0, nothing lost",
    met: outOfOrder === 0 && lost === 0,
    note: `${handled} messages handled, ${lost} lost`,
  });
  // A fault that did not happen (no cut in a quick run, say) has nothing to time: the row says so instead of a median of nothing.
  return rows.map((r) => (Number.isFinite(r.value) ? r : { scenario: r.scenario, variant: r.variant, value: 0, unit: "not measured", note: `nothing to time: ${r.note ?? ""}` }));
}

/** Scenario "holds". */
export async function holds(ctx: BenchContext): Promise<Row[]> {
  const runs = ctx.quick ? 1 : Math.max(3, ctx.runs);
  const rows: Row[] = [];
  for (const standby of [false, true]) {
    const samples: FaultSample[] = [];
    for (let run = 0; run < runs; run++) {
      const s = await slowConsumerRun(ctx, standby);
      ctx.log(
        `  holds slow consumer${standby ? " + standby" : ""} run ${run + 1}: ${s.cuts} cut(s), ${s.slowEvents} slow_consumer event(s); held ${s.holds.map((h) => `${h.reason} ${h.ms}`).join(", ") || "none"}; resumed ${s.resumes.map((r) => r.resumeMs.toFixed(0)).join(", ")} ms; ${s.order.outOfOrder.length} out of order, ${s.order.lost.length} lost`,
      );
      samples.push(s);
    }
    const cuts = samples.reduce((n, s) => n + (s.cuts ?? 0), 0);
    const events = samples.reduce((n, s) => n + (s.slowEvents ?? 0), 0);
    const noticed = samples.flatMap((s) => s.noticedMs ?? []);
    rows.push(
      ...faultRows(
        `slow-consumer cut of the pinned instance, ${standby ? "with" : "without"} a standby`,
        samples,
        `${cuts} "Slow Consumer Detected" in the server log (times from there), ${events} slow_consumer events, the instance saw its disconnect ${stat(noticed)} after the cut (1 MB messages, ${SLOW_SYNC_MS} ms synchronous handler, byte budget 512 MiB)`,
      ),
    );
  }
  const cluster = await NatsCluster.start(3);
  try {
    const samples: FaultSample[] = [];
    for (let run = 0; run < runs; run++) {
      const s = await leaderLossRun(ctx, cluster, run);
      ctx.log(
        `  holds leader loss run ${run + 1}: elected after ${s.elections.map((e) => e.toFixed(0)).join(", ")} ms; held ${s.holds.map((h) => `${h.reason} ${h.ms}`).join(", ") || "none"}; resumed ${s.resumes.map((r) => r.resumeMs.toFixed(0)).join(", ")} ms; ${s.order.outOfOrder.length} out of order, ${s.order.lost.length} lost${s.note ? `; ${s.note}` : ""}`,
      );
      samples.push(s);
    }
    rows.push(...faultRows("kill -9 of the node leading the member's consumer (3 nodes, R3)", samples, `${LOAD_RATE} msgs/s over ${LOAD_KEYS} keys, 2 ms handler`));
  } finally {
    await cluster.stop();
  }
  return rows;
}
