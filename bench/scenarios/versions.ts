/**
 * Scenario: the server-version matrix. The overhead measurements (raw nats.js with
 * one and with many filter subjects, staticConsume, elasticConsume) on the newest
 * 2.11, 2.12, 2.14 and 2.15 releases, and on 2.14.9 (the last release whose consumers
 * with many filter subjects are slow), each on a server of that release started here.
 * Every ratio is against a raw baseline of the same release in the same run.
 *
 * The 2.15 server is the suite's own (`.tools/nats-server` or NATS_SERVER_BIN); the
 * older ones live in `.tools/nats-server-<release>/`. A full run installs the missing ones
 * through scripts/install-tools.mjs (about 30-60 s each, once); `--quick` (the CI smoke)
 * runs only the releases already installed and reports the others as not installed.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { ConsumerGroupError, createStatic, addMembers, elasticConsume, staticConsume } from "../../src/index.js";
import { NatsServer, serverBinary } from "../../src/server/launcher.js";
import { benchServer, partitionedStream, plainStream, publishKeyed, type BenchServer, type Conn } from "../lib/env.js";
import { median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";
import { PARTITIONS, filters, pinnedConfig, rawCallbackSpan, sourcedGroup, timedHandler } from "./overhead.js";

/**
 * A release of the matrix: its line (`2.14`, the oldest version NatsServer accepts is
 * `<line>.0`), and its install-tools entry, which installs it into `.tools/nats-<tool>/`
 * (none: the suite's own server).
 */
interface Release {
  line: string;
  tool: string | undefined;
}

/** The newest release of each line, and 2.14.9, the last before many-filter consumers got fast. */
const RELEASES: Release[] = [
  { line: "2.11", tool: "server-2.11" },
  { line: "2.12", tool: "server-2.12" },
  { line: "2.14", tool: "server-2.14.9" },
  { line: "2.14", tool: "server-2.14" },
  { line: "2.15", tool: undefined },
];

const root = fileURLToPath(new URL("../../../", import.meta.url));

/** The binary of a release, installing it first unless `quick`; undefined when it is not there. */
function binaryOf(r: Release, quick: boolean, log: (line: string) => void): string | undefined {
  if (!r.tool) return serverBinary();
  const bin = `${root}.tools/nats-${r.tool}/nats-server`;
  if (existsSync(bin) || quick) return existsSync(bin) ? bin : undefined;
  log(`  versions: installing ${r.tool} (node scripts/install-tools.mjs ${r.tool}) ...`);
  const installed = spawnSync(process.execPath, [`${root}scripts/install-tools.mjs`, r.tool], { stdio: ["ignore", "inherit", "inherit"] });
  return installed.status === 0 && existsSync(bin) ? bin : undefined;
}

/** The measurements of one release, one list of samples per layout (absent: not supported). */
interface Samples {
  wholeStream: number[];
  manyFilters: number[];
  perPartition: number[];
  ours: { static: number[] | string; elastic: number[] | string };
  wqManyFilters: number[];
  wqPerPartition: number[];
}

/**
 * One pinned consumer per partition, each with that partition's one filter, consumed
 * side by side; the aggregate rate from the first message of any to the last of all.
 */
async function perPartitionRate(conn: Conn, stream: string, prefix: string, durable: boolean): Promise<number> {
  const consumers: { name: string; pending: number }[] = [];
  for (let p = 0; p < PARTITIONS; p++) {
    const name = `${prefix}_${p}`;
    const config = { ...pinnedConfig(name, durable, [`${p}.>`]), ...(durable ? {} : { inactive_threshold: 5_000_000_000 }) };
    const info = await conn.jsm.consumers.add(stream, config);
    consumers.push({ name, pending: info.num_pending });
  }
  const spans = await Promise.all(consumers.filter((c) => c.pending > 0).map((c) => rawCallbackSpan(conn.js, stream, c.name, c.pending)));
  const total = consumers.reduce((n, c) => n + c.pending, 0);
  const first = Math.min(...spans.map((s) => s.first));
  const last = Math.max(...spans.map((s) => s.last));
  if (durable) for (const c of consumers) await conn.jsm.consumers.delete(stream, c.name);
  return total / ((last - first) / 1000);
}

/** One pinned consumer with `subjects` (none: the whole stream); its rate. */
async function oneConsumerRate(conn: Conn, stream: string, name: string, subjects: string[], count: number, durable: boolean): Promise<number> {
  await conn.jsm.consumers.add(stream, { ...pinnedConfig(name, durable, subjects), ...(durable ? {} : { inactive_threshold: 5_000_000_000 }) });
  const span = await rawCallbackSpan(conn.js, stream, name, count);
  if (durable) await conn.jsm.consumers.delete(stream, name);
  return count / ((span.last - span.first) / 1000);
}

/** `SERVER_TOO_OLD`'s message, or rethrows. */
function tooOld(err: unknown): string {
  if (err instanceof ConsumerGroupError && err.code === "SERVER_TOO_OLD") return err.message;
  throw err;
}

/** One release's server, its streams of `messages` messages and its samples so far. */
interface Subject {
  server: BenchServer;
  conn: Conn;
  /** The partitioned stream (static groups and the raw layouts). */
  stream: string;
  /** The plain stream elastic groups source from. */
  source: string;
  samples: Samples;
}

async function prepare(ctx: BenchContext, server: BenchServer): Promise<Subject> {
  const conn = await server.connect();
  const stream = ctx.name("vs");
  await partitionedStream(conn.jsm, stream, PARTITIONS);
  await publishKeyed(conn.js, stream, ctx.messages, ctx.keys);
  const source = ctx.name("ve");
  await plainStream(conn.jsm, source);
  await publishKeyed(conn.js, source, ctx.messages, ctx.keys);
  const samples: Samples = { wholeStream: [], manyFilters: [], perPartition: [], ours: { static: [], elastic: [] }, wqManyFilters: [], wqPerPartition: [] };
  return { server, conn, stream, source, samples };
}

/** Run number `run` of every measurement on one release. */
async function measureOnce(ctx: BenchContext, subject: Subject, run: number): Promise<void> {
  const { conn, stream, source, samples: s } = subject;
  s.wholeStream.push(await oneConsumerRate(conn, stream, `whole_${run}`, [], ctx.messages, true));
  s.manyFilters.push(await oneConsumerRate(conn, stream, `many_${run}`, filters, ctx.messages, true));
  s.perPartition.push(await perPartitionRate(conn, stream, `part_${run}`, true));
  if (Array.isArray(s.ours.static)) {
    try {
      const group = `g${run}`;
      await createStatic(conn.js, { stream, group, maxMembers: PARTITIONS, members: ["m"] });
      const timed = timedHandler(ctx.messages);
      const member = await staticConsume(conn.js, { stream, group, member: "m", handler: timed.handler });
      s.ours.static.push(await timed.done);
      await member.stop();
    } catch (err) {
      s.ours.static = tooOld(err);
    }
  }
  try {
    await sourcedGroup(conn, source, `rawmany${run}`, ctx.messages);
    s.wqManyFilters.push(await oneConsumerRate(conn, `${source}-rawmany${run}`, "raw", filters, ctx.messages, false));
    await sourcedGroup(conn, source, `rawpart${run}`, ctx.messages);
    s.wqPerPartition.push(await perPartitionRate(conn, `${source}-rawpart${run}`, "raw", false));
    if (Array.isArray(s.ours.elastic)) {
      const group = `g${run}`;
      await sourcedGroup(conn, source, group, ctx.messages);
      const timed = timedHandler(ctx.messages);
      const member = await elasticConsume(conn.js, { stream: source, group, member: "m", consumerConfig: { ack_policy: "explicit" }, handler: timed.handler });
      await addMembers(conn.js, source, group, ["m"]);
      s.ours.elastic.push(await timed.done);
      await member.stop();
    }
  } catch (err) {
    s.ours.elastic = tooOld(err);
  }
  ctx.log(
    `  versions ${subject.server.version} run ${run + 1}: whole stream ${s.wholeStream[run]?.toFixed(0)}, 16 filters ${s.manyFilters[run]?.toFixed(0)}, ` +
      `16 consumers ${s.perPartition[run]?.toFixed(0)}, static ${Array.isArray(s.ours.static) ? s.ours.static[run]?.toFixed(0) : "n/a"}; ` +
      `work queue: 16 filters ${s.wqManyFilters[run]?.toFixed(0)}, 16 consumers ${s.wqPerPartition[run]?.toFixed(0)}, elastic ${Array.isArray(s.ours.elastic) ? s.ours.elastic[run]?.toFixed(0) : "n/a"} msgs/s`,
  );
}

/** The rows of one release. */
function rowsOf(version: string, s: Samples): Row[] {
  const scenario = "versions";
  const rate = (variant: string, samples: number[], baseline?: { name: string; samples: number[] }, note?: string): Row => ({
    scenario,
    variant: `${version}: ${variant}`,
    value: median(samples),
    unit: "msgs/s",
    samples,
    ...(baseline && samples.length > 0 && baseline.samples.length > 0 ? { baseline: baseline.name, ratio: median(samples) / median(baseline.samples) } : {}),
    ...(note ? { note } : {}),
  });
  const unsupported = (variant: string, why: string): Row => ({ scenario, variant: `${version}: ${variant}`, value: 0, unit: "not supported", note: why });
  const whole = { name: "raw, 1 consumer, whole stream", samples: s.wholeStream };
  const many = { name: "raw, 1 consumer, 16 filters", samples: s.manyFilters };
  const wqMany = { name: "raw, 1 consumer, 16 filters (work queue)", samples: s.wqManyFilters };
  const rows: Row[] = [
    rate("raw, 1 consumer, whole stream (no filter)", s.wholeStream),
    rate("raw, 1 consumer, 16 filters", s.manyFilters, whole),
    rate("raw, 16 consumers, 1 filter each (aggregate)", s.perPartition, whole),
  ];
  const oursStatic = s.ours.static;
  rows.push(
    Array.isArray(oursStatic)
      ? rate("staticConsume, 16 partitions, no-op", oursStatic, many, `${(median(oursStatic) / median(s.wholeStream)).toFixed(2)}x the whole-stream consume`)
      : unsupported("staticConsume", oursStatic),
  );
  if (s.wqManyFilters.length > 0) rows.push(rate("raw, 1 consumer, 16 filters (work queue)", s.wqManyFilters, whole));
  if (s.wqPerPartition.length > 0) rows.push(rate("raw, 16 consumers, 1 filter each (work queue, aggregate)", s.wqPerPartition, wqMany));
  const oursElastic = s.ours.elastic;
  rows.push(
    Array.isArray(oursElastic)
      ? rate("elasticConsume, 16 partitions, no-op", oursElastic, wqMany, `${(median(oursElastic) / median(s.wholeStream)).toFixed(2)}x the whole-stream consume`)
      : unsupported("elasticConsume", oursElastic),
  );
  return rows;
}

/** A started server of one release, with the bench's view of it. */
interface Started {
  process: NatsServer;
  server: BenchServer;
}

async function startRelease(bin: string, line: string): Promise<Started> {
  const process = await NatsServer.start({ bin, minVersion: `${line}.0` });
  try {
    return { process, server: await benchServer(process.url) };
  } catch (err) {
    await process.stop();
    throw err;
  }
}

async function stopAll(started: Started[]): Promise<void> {
  for (const s of started) {
    await s.server.stop();
    await s.process.stop();
  }
}

/**
 * Measures on the given releases (nats-server binaries and their lines, e.g. `2.14`),
 * all started at once; each run goes over every release in turn, so that a change in
 * the machine's load falls on all of them alike. The rows of every release.
 */
export async function releaseRows(ctx: BenchContext, releases: { bin: string; line: string }[]): Promise<Row[]> {
  const started: Started[] = [];
  try {
    for (const r of releases) started.push(await startRelease(r.bin, r.line));
    const subjects: Subject[] = [];
    for (const s of started) subjects.push(await prepare(ctx, s.server));
    for (let run = 0; run < ctx.runs; run++) {
      for (const subject of subjects) await measureOnce(ctx, subject, run);
    }
    return subjects.flatMap((subject) => rowsOf(subject.server.version, subject.samples));
  } finally {
    await stopAll(started);
  }
}

/** The server-version matrix. */
export async function versions(ctx: BenchContext): Promise<Row[]> {
  const missing: Row[] = [];
  const releases: { bin: string; line: string }[] = [];
  const log = (line: string): void => ctx.log(line);
  for (const r of RELEASES) {
    const bin = binaryOf(r, ctx.quick, log);
    if (bin) {
      releases.push({ bin, line: r.line });
    } else {
      const why = ctx.quick ? `not installed (--quick installs nothing: node scripts/install-tools.mjs ${r.tool})` : `installing it failed (node scripts/install-tools.mjs ${r.tool})`;
      missing.push({ scenario: "versions", variant: `${r.tool}`, value: 0, unit: "not run", note: why });
    }
  }
  return [...(await releaseRows(ctx, releases)), ...missing];
}
