/**
 * Scenario 9, a fleet at scale (issue 16, item 3): one static and one elastic group of
 * 1,024 partitions and 128 members, spread over at most 8 processes (each hosting its
 * instances on one shared connection), with a hot standby in another process for a
 * quarter of the members. Measured: create time; time from starting the processes
 * until every partition has had a message handled (one message per partition is
 * published as they start); `describeGroup` and `cg describe` time; adding one member
 * to an elastic group until its first handled message (10 adds); RSS per process and
 * per instance; the config's size in the KV; and the server's subscriptions and KV
 * watchers of the fleet. A full run also measures the scaling curve (all consuming and
 * describe at 64/8, 256/32, 1,024/128 and 4,096/512 partitions/members).
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { Kvm } from "@nats-io/kv";
import { addMembers, createElastic, createStatic, describeGroup, partitionOf } from "../../src/index.js";
import { partitionOwners } from "../../src/core/assignment.js";
import { bucketName, configKey } from "../../src/core/names.js";
import type { ElasticConsumerGroupConfig } from "../../src/core/types.js";
import { partitionedStream, plainStream, until, type Conn } from "../lib/env.js";
import { startFleetProcess, type FleetProcess } from "../lib/process.js";
import { clock, median, percentile } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

const CG = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));
const SCENARIO = "9 fleet";
/** The scaling curve's scenario name (bench/lib/report.ts draws it). */
export const FLEET_CURVE = "9 fleet curve";
const MAX_PROCESSES = 8;
const ALL_CONSUMING_TARGET_MS = 10_000;
const DESCRIBE_TARGET_MS = 1_000;
const REBALANCE_TARGET_MS = 2_000;

type Flavour = "static" | "elastic";

/** What one fleet run measured. */
interface FleetResult {
  flavour: Flavour;
  partitions: number;
  members: number;
  processes: number;
  instances: number;
  createMs: number;
  readyMs: number;
  allConsumingMs: number;
  describeMs: number[];
  cliDescribeMs: number[];
  rebalanceMs: number[];
  rss: { rss: number; instances: number }[];
  configBytes: number;
  subscriptions: number | undefined;
  kvWatchers: number;
}

/** A subject per partition: `<stream>.k<n>` for the first n that hashes to it. */
function subjectsPerPartition(stream: string, partitions: number): string[] {
  const subjects = new Array<string | undefined>(partitions);
  let found = 0;
  for (let n = 0; found < partitions; n++) {
    const subject = `${stream}.k${n}`;
    const p = partitionOf(subject, partitions, { filter: `${stream}.*`, wildcards: [1] });
    if (subjects[p] === undefined) {
      subjects[p] = subject;
      found += 1;
    }
  }
  return subjects as string[];
}

/** Runs `cg <flavour> describe` to completion; its wall time in ms. */
async function cliDescribe(url: string, flavour: Flavour, stream: string): Promise<number> {
  const started = clock();
  const child = spawn(process.execPath, [CG, "--json", "-s", url, flavour, "describe", stream, "g"], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  if (code !== 0) throw new Error(`cg ${flavour} describe exited ${String(code)}: ${stderr}`);
  return clock() - started;
}

/** The subscriptions the server counts on the fleet's connections (when it lets us see them). */
async function fleetSubscriptions(ctx: BenchContext, prefix: string): Promise<number | undefined> {
  if (!ctx.server.monitor) return undefined;
  const connz = await ctx.server.monitor<{ connections: { name?: string; subscriptions: number }[] }>("/connz?limit=4096");
  return connz.connections.filter((c) => c.name?.startsWith(prefix)).reduce((n, c) => n + c.subscriptions, 0);
}

/** Consumers on a flavour's KV stream: every open config watch is one. */
async function kvConsumers(conn: Conn, flavour: Flavour): Promise<number> {
  return (await conn.jsm.streams.info(`KV_${bucketName(flavour)}`)).state.consumer_count;
}

/**
 * One fleet: create, start, publish one message per partition, wait until each was
 * handled; then (with `full`) describe, the CLI, memory and, for elastic, 10 adds.
 */
async function runFleet(ctx: BenchContext, conn: Conn, flavour: Flavour, partitions: number, members: number, full: boolean, nodeFlags: string[]): Promise<FleetResult> {
  const stream = ctx.name(flavour === "static" ? "fls" : "fle");
  // allow_direct, as docs/observability.md advises for describe (scenario 8 measures a stream without it).
  if (flavour === "static") await partitionedStream(conn.jsm, stream, partitions, 1, { allow_direct: true });
  else await plainStream(conn.jsm, stream);
  const names = Array.from({ length: members }, (_, i) => `m${String(i).padStart(4, "0")}`);
  const createStarted = clock();
  if (flavour === "static") {
    await createStatic(conn.js, { stream, group: "g", maxMembers: partitions, members: names, onWarning: () => undefined });
  } else {
    await createElastic(conn.js, { stream, group: "g", maxMembers: partitions, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(conn.js, stream, "g", names);
  }
  const createMs = clock() - createStarted;
  const kv = await new Kvm(conn.js).open(bucketName(flavour));
  const configBytes = (await kv.get(configKey(stream, "g")))?.value.length ?? 0;
  const watchersBefore = await kvConsumers(conn, flavour);

  // Member i runs in process i mod P; every fourth has a standby in another process, the standbys spread evenly.
  const processes = Math.min(MAX_PROCESSES, members);
  const hosted: string[][] = Array.from({ length: processes }, () => []);
  names.forEach((name, i) => {
    hosted[i % processes]?.push(name);
    if (i % 4 === 0 && processes > 1) hosted[(i + 1 + ((i / 4) % (processes - 1))) % processes]?.push(name);
  });
  const instances = hosted.reduce((n, h) => n + h.length, 0);
  const subjects = subjectsPerPartition(stream, partitions);
  const handledAt = new Map<number, number>();
  const prefix = `${stream}-proc`;
  const started = clock();
  const fleet: FleetProcess[] = hosted.map((h, i) => startFleetProcess({ url: ctx.server.url, name: `${prefix}${i}`, flavour, stream, group: "g", members: h }, nodeFlags));
  try {
    for (const proc of fleet) {
      proc.onPartition = (p, at) => {
        const seen = handledAt.get(p);
        if (seen === undefined || at < seen) handledAt.set(p, at);
      };
    }
    await Promise.all(subjects.map((subject) => conn.js.publish(subject, "x")));
    const readyAt = await Promise.all(fleet.map((p) => p.ready));
    const readyMs = Math.max(...readyAt) - started;
    await until(() => handledAt.size === partitions, 120_000, `every one of ${partitions} partitions to have a message handled`, 20);
    const allConsumingMs = Math.max(...handledAt.values()) - started;
    const rounds = ctx.quick || !full ? 1 : 3;
    const describeMs: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const t = clock();
      const d = await describeGroup(conn.js, flavour, stream, "g");
      describeMs.push(clock() - t);
      if (d.partitions.length !== partitions) throw new Error(`describe listed ${d.partitions.length} partitions, not ${partitions}`);
    }
    const subscriptions = await fleetSubscriptions(ctx, prefix);
    const kvWatchers = (await kvConsumers(conn, flavour)) - watchersBefore;
    const result: FleetResult = {
      flavour,
      partitions,
      members,
      processes,
      instances,
      createMs,
      readyMs,
      allConsumingMs,
      describeMs,
      cliDescribeMs: [],
      rebalanceMs: [],
      rss: [],
      configBytes,
      subscriptions,
      kvWatchers,
    };
    ctx.log(
      `  ${flavour} ${partitions} partitions / ${members} members / ${instances} instances in ${processes} processes: create ${createMs.toFixed(0)} ms, ready ${readyMs.toFixed(0)} ms, all consuming ${allConsumingMs.toFixed(0)} ms, describe ${describeMs.map((t) => t.toFixed(0)).join(", ")} ms; ${subscriptions ?? "?"} subscriptions, ${kvWatchers} KV watchers; config ${configBytes} B`,
    );
    if (!full) return result;
    for (let i = 0; i < rounds; i++) result.cliDescribeMs.push(await cliDescribe(ctx.server.url, flavour, stream));
    result.rss = await Promise.all(fleet.map((p) => p.rss()));
    if (flavour === "elastic") result.rebalanceMs = await addTen(ctx, conn, stream, partitions, fleet, subjects);
    ctx.log(`    cg describe ${result.cliDescribeMs.map((t) => t.toFixed(0)).join(", ")} ms; RSS ${result.rss.map((r) => `${(r.rss / 2 ** 20).toFixed(0)} MiB/${r.instances}`).join(", ")}${result.rebalanceMs.length > 0 ? `; adds ${result.rebalanceMs.map((t) => t.toFixed(0)).join(", ")} ms` : ""}`);
    return result;
  } finally {
    await Promise.allSettled(fleet.map((p) => p.stop()));
    await conn.jsm.streams.delete(stream).catch(() => undefined);
    if (flavour === "elastic") await conn.jsm.streams.delete(`${stream}-g`).catch(() => undefined);
  }
}

/**
 * Adds 10 members one at a time, each with its instance already running (in the
 * processes in turn): from the add to its first handled message. While waiting, one
 * message every 20 ms goes to one of the new member's partitions.
 */
async function addTen(ctx: BenchContext, conn: Conn, stream: string, partitions: number, fleet: FleetProcess[], subjects: string[]): Promise<number[]> {
  const kv = await new Kvm(conn.js).open(bucketName("elastic"));
  const times: number[] = [];
  const adds = ctx.quick ? 3 : 10;
  for (let i = 0; i < adds; i++) {
    const member = `n${i}`;
    const proc = fleet[i % fleet.length] as FleetProcess;
    await proc.start(member);
    const first = proc.first(member);
    const added = clock();
    if (process.env["FLEET_TRACE"]) process.stderr.write(`TRACE ${Date.now()} parent ${member} add\n`);
    await addMembers(conn.js, stream, "g", [member]);
    const entry = await kv.get(configKey(stream, "g"));
    const config = entry?.json<ElasticConsumerGroupConfig>();
    const owned = config ? partitionOwners(config).flatMap((owner, p) => (owner === member ? [p] : [])) : [];
    if (owned.length === 0) throw new Error(`member ${member} owns no partition of ${partitions} after its add`);
    let at: number | undefined;
    void first.then((t) => (at = t));
    for (let n = 0; at === undefined; n++) {
      if (clock() - added > 30_000) throw new Error(`member ${member} handled nothing 30 s after its add`);
      await conn.js.publish(subjects[owned[n % owned.length] as number] as string, "x");
      await new Promise((r) => setTimeout(r, 20));
    }
    times.push(at - added);
    if (process.env["FLEET_TRACE"]) process.stderr.write(`TRACE ${Date.now()} parent ${member} first ${Math.round(at - added)}\n`);
  }
  return times;
}

/** The rows of one fleet at the issue's size. */
function rows(r: FleetResult): Row[] {
  const size = `${r.partitions} partitions, ${r.members} members (${r.instances} instances, ${r.processes} processes)`;
  const out: Row[] = [
    { scenario: SCENARIO, variant: `${r.flavour}: create, ${size}`, value: Math.round(r.createMs), unit: "ms", note: r.flavour === "elastic" ? "createElastic + addMembers" : "createStatic" },
    {
      scenario: SCENARIO,
      variant: `${r.flavour}: start to every partition handled`,
      value: Math.round(r.allConsumingMs),
      unit: "ms",
      target: `< ${ALL_CONSUMING_TARGET_MS} ms`,
      met: r.allConsumingMs < ALL_CONSUMING_TARGET_MS,
      note: `every instance started after ${Math.round(r.readyMs)} ms`,
    },
    {
      scenario: SCENARIO,
      variant: `${r.flavour}: describeGroup`,
      value: Math.round(median(r.describeMs)),
      unit: "ms",
      target: `< ${DESCRIBE_TARGET_MS} ms`,
      met: median(r.describeMs) < DESCRIBE_TARGET_MS,
      samples: r.describeMs.map(Math.round),
    },
  ];
  if (r.cliDescribeMs.length > 0) {
    out.push({
      scenario: SCENARIO,
      variant: `${r.flavour}: cg describe (a new process)`,
      value: Math.round(median(r.cliDescribeMs)),
      unit: "ms",
      target: `< ${DESCRIBE_TARGET_MS} ms`,
      met: median(r.cliDescribeMs) < DESCRIBE_TARGET_MS,
      samples: r.cliDescribeMs.map(Math.round),
      note: "includes Node start and connect",
    });
  }
  if (r.rebalanceMs.length > 0) {
    const p95 = percentile(r.rebalanceMs, 95);
    out.push({
      scenario: SCENARIO,
      variant: `${r.flavour}: add one member to its first message, p95 of ${r.rebalanceMs.length}`,
      value: Math.round(p95),
      unit: "ms",
      target: `< ${REBALANCE_TARGET_MS} ms`,
      met: p95 < REBALANCE_TARGET_MS,
      samples: r.rebalanceMs.map(Math.round),
      note: `p50 ${Math.round(percentile(r.rebalanceMs, 50))} ms`,
    });
  }
  if (r.rss.length > 0) {
    const perProcess = r.rss.map((s) => s.rss / 2 ** 20);
    const perInstance = r.rss.map((s) => s.rss / 2 ** 20 / Math.max(1, s.instances));
    out.push(
      { scenario: SCENARIO, variant: `${r.flavour}: RSS per process`, value: Math.round(median(perProcess)), unit: "MiB", samples: perProcess.map(Math.round), note: "median of the processes" },
      { scenario: SCENARIO, variant: `${r.flavour}: RSS per instance (process RSS / its instances)`, value: Number(median(perInstance).toFixed(1)), unit: "MiB", note: "includes each process's Node and connection" },
    );
  }
  out.push(
    { scenario: SCENARIO, variant: `${r.flavour}: config JSON in the KV`, value: r.configBytes, unit: "B" },
    {
      scenario: SCENARIO,
      variant: `${r.flavour}: server subscriptions of the fleet's connections`,
      value: r.subscriptions ?? NaN,
      unit: "subs",
      note: `${r.kvWatchers} KV watchers for ${r.instances} instances on ${r.processes} connections`,
    },
  );
  return out;
}

/** Scenario 9: a fleet of 1,024 partitions and 128 members (--quick: 64 and 8), and in a full run the scaling curve. */
export async function fleet(ctx: BenchContext): Promise<Row[]> {
  const conn = await ctx.server.connect("bench-fleet");
  const [partitions, members] = ctx.quick ? [64, 8] : [1024, 128];
  // FLEET_CPU_PROF=<dir>: profile the member processes of the issue's size.
  const profile = process.env["FLEET_CPU_PROF"];
  const flags = profile ? ["--cpu-prof", `--cpu-prof-dir=${profile}`] : [];
  const out: Row[] = [];
  const results: FleetResult[] = [];
  // FLEET_FLAVOURS=elastic (or static): one flavour only (while developing).
  const only = process.env["FLEET_FLAVOURS"];
  for (const flavour of (["static", "elastic"] as const).filter((f) => !only || only.split(",").includes(f))) {
    const r = await runFleet(ctx, conn, flavour, partitions, members, true, flags);
    results.push(r);
    out.push(...rows(r));
  }
  // FLEET_NO_CURVE=1: only the issue's size (while developing).
  if (ctx.quick || process.env["FLEET_NO_CURVE"]) return out;
  for (const [p, m] of [
    [64, 8],
    [256, 32],
    [1024, 128],
    [4096, 512],
  ] as const) {
    for (const flavour of ["static", "elastic"] as const) {
      const r = p === partitions ? results.find((x) => x.flavour === flavour) : await runFleet(ctx, conn, flavour, p, m, false, []);
      if (!r) continue;
      out.push(
        { scenario: FLEET_CURVE, variant: `${flavour} ${p}/${m}: start to every partition handled`, value: Math.round(r.allConsumingMs), unit: "ms", note: `${r.instances} instances` },
        { scenario: FLEET_CURVE, variant: `${flavour} ${p}/${m}: describeGroup`, value: Math.round(median(r.describeMs)), unit: "ms" },
      );
    }
  }
  return out;
}
