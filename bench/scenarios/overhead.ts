/**
 * Scenario 1, library overhead: one member owning all 16 partitions with a no-op
 * handler, against a raw nats.js consume() of the same messages through the same
 * kind of consumer (pinned, filtered on all 16 partitions, explicit acks); in each
 * concurrency mode (`serial`, the default, carries the target).
 */
import type { ConsumerConfig, JetStreamClient } from "@nats-io/jetstream";
import { addMembers, createElastic, createStatic, elasticConsume, staticConsume, type ConcurrencyMode } from "../../src/index.js";
import { partitionedStream, plainStream, publishKeyed, until, type Conn } from "../lib/env.js";
import { clock, median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

/** The partition count of the overhead streams. */
export const PARTITIONS = 16;
/** One filter subject per partition: the member consumer's filters when it owns them all. */
export const filters = Array.from({ length: PARTITIONS }, (_, p) => `${p}.>`);

/**
 * A pinned (priority group `PCG`), explicitly acked consumer on `subjects` (every
 * partition by default; none means the whole stream), as a member consumer is.
 */
export function pinnedConfig(name: string, durable: boolean, subjects: string[] = filters): Partial<ConsumerConfig> {
  return {
    ...(durable ? { durable_name: name } : { name }),
    ack_policy: "explicit",
    ack_wait: 5_000_000_000,
    ...(subjects.length > 0 ? { filter_subjects: subjects } : {}),
    priority_groups: ["PCG"],
    priority_policy: "pinned_client",
    priority_timeout: 5_000_000_000,
  };
}

/**
 * A raw nats.js consume() of `count` messages, acking each; returns msgs/s from the
 * first message to the last. Iterator mode is the documented way; callback mode is
 * faster; the scenario takes the faster of the two as its baseline.
 */
export async function rawConsume(js: JetStreamClient, stream: string, consumer: string, count: number, mode: "iterator" | "callback"): Promise<number> {
  if (mode === "callback") {
    const span = await rawCallbackSpan(js, stream, consumer, count);
    return count / ((span.last - span.first) / 1000);
  }
  const c = await js.consumers.get(stream, consumer);
  let n = 0;
  let first = 0;
  const messages = await c.consume({ group: "PCG", expires: 2500 });
  for await (const m of messages) {
    if (n === 0) first = clock();
    m.ack();
    if (++n === count) break;
  }
  return count / ((clock() - first) / 1000);
}

/**
 * A raw nats.js callback consume() of `count` messages from a pinned consumer, acking
 * each; resolves with the clock readings of the first and the last message, so that
 * consumers run side by side can be timed together.
 */
export async function rawCallbackSpan(js: JetStreamClient, stream: string, consumer: string, count: number, pinned = true): Promise<{ first: number; last: number }> {
  const c = await js.consumers.get(stream, consumer);
  let n = 0;
  let first = 0;
  let done!: (last: number) => void;
  const finished = new Promise<number>((r) => (done = r));
  const messages = await c.consume({
    ...(pinned ? { group: "PCG" } : {}),
    expires: 2500,
    callback: (m) => {
      if (n === 0) first = clock();
      m.ack();
      if (++n === count) done(clock());
    },
  });
  const last = await finished;
  await messages.close();
  return { first, last };
}

/**
 * Creates an elastic group of {@link PARTITIONS} partitions (no members) on the plain
 * stream `stream` of `<stream>.<key>` subjects and waits until its work-queue stream
 * holds all `messages`; returns the sourcing rate in msgs/s.
 */
export async function sourcedGroup(conn: Conn, stream: string, group: string, messages: number): Promise<number> {
  const started = clock();
  await createElastic(conn.js, { stream, group, maxMembers: PARTITIONS, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
  await until(async () => (await conn.jsm.streams.info(`${stream}-${group}`)).state.messages === messages, 600_000, "sourcing", 20);
  return messages / ((clock() - started) / 1000);
}

/** Counts handled messages and times them from the first to the `count`th. */
export function timedHandler(count: number): { handler: () => void; done: Promise<number> } {
  let n = 0;
  let first = 0;
  let resolve!: (rate: number) => void;
  const done = new Promise<number>((r) => (resolve = r));
  return {
    handler: () => {
      if (n === 0) first = clock();
      if (++n === count) resolve(count / ((clock() - first) / 1000));
    },
    done,
  };
}

async function staticRuns(ctx: BenchContext): Promise<Row[]> {
  const conn = await ctx.server.connect();
  const stream = ctx.name("ovs");
  await partitionedStream(conn.jsm, stream, PARTITIONS);
  await publishKeyed(conn.js, stream, ctx.messages, ctx.keys);
  const rawIterator: number[] = [];
  const rawCallback: number[] = [];
  const rawPlain: number[] = [];
  const ours = oursByMode();
  for (let run = 0; run < ctx.runs; run++) {
    for (const [mode, into] of [["iterator", rawIterator], ["callback", rawCallback]] as const) {
      const durable = `raw_${mode}_${run}`;
      await conn.jsm.consumers.add(stream, pinnedConfig(durable, true));
      into.push(await rawConsume(conn.js, stream, durable, ctx.messages, mode));
      await conn.jsm.consumers.delete(stream, durable);
    }
    const plain = `raw_plain_${run}`;
    await conn.jsm.consumers.add(stream, { durable_name: plain, ack_policy: "explicit", ack_wait: 5_000_000_000 });
    rawPlain.push(await plainRate(conn.js, stream, plain, ctx.messages));
    await conn.jsm.consumers.delete(stream, plain);
    for (const mode of MODES) {
      const group = `g${run}_${mode}`;
      await createStatic(conn.js, { stream, group, maxMembers: PARTITIONS, members: ["m"] });
      const timed = timedHandler(ctx.messages);
      const member = await staticConsume(conn.js, { stream, group, member: "m", ...modeOption(mode), handler: timed.handler });
      ours[mode].push(await timed.done);
      await member.stop();
    }
    ctx.log(`  overhead static run ${run + 1}: raw iterator ${rawIterator[run]?.toFixed(0)}, raw callback ${rawCallback[run]?.toFixed(0)}, raw plain ${rawPlain[run]?.toFixed(0)}, ours ${oursLine(ours, run)} msgs/s`);
  }
  return overheadRows("static stream", "staticConsume, 16 partitions, no-op", rawIterator, rawCallback, rawPlain, ours);
}

async function elasticRuns(ctx: BenchContext): Promise<Row[]> {
  const conn = await ctx.server.connect();
  const stream = ctx.name("ove");
  await plainStream(conn.jsm, stream);
  await publishKeyed(conn.js, stream, ctx.messages, ctx.keys);
  const sourcing: number[] = [];
  const rawIterator: number[] = [];
  const rawCallback: number[] = [];
  const rawPlain: number[] = [];
  const ours = oursByMode();
  const sourced = async (group: string): Promise<void> => {
    sourcing.push(await sourcedGroup(conn, stream, group, ctx.messages));
  };
  for (let run = 0; run < ctx.runs; run++) {
    for (const [mode, into] of [["iterator", rawIterator], ["callback", rawCallback]] as const) {
      const rawGroup = `raw_${mode}_${run}`;
      await sourced(rawGroup);
      await conn.jsm.consumers.add(`${stream}-${rawGroup}`, { ...pinnedConfig("raw", false), inactive_threshold: 5_000_000_000 });
      into.push(await rawConsume(conn.js, `${stream}-${rawGroup}`, "raw", ctx.messages, mode));
    }
    const plainGroup = `raw_plain_${run}`;
    await sourced(plainGroup);
    await conn.jsm.consumers.add(`${stream}-${plainGroup}`, { name: "raw", ack_policy: "explicit", ack_wait: 5_000_000_000, inactive_threshold: 5_000_000_000 });
    rawPlain.push(await plainRate(conn.js, `${stream}-${plainGroup}`, "raw", ctx.messages));
    for (const mode of MODES) {
      const group = `g${run}_${mode}`;
      await sourced(group);
      const timed = timedHandler(ctx.messages);
      const member = await elasticConsume(conn.js, { stream, group, member: "m", consumerConfig: { ack_policy: "explicit" }, ...modeOption(mode), handler: timed.handler });
      await addMembers(conn.js, stream, group, ["m"]);
      ours[mode].push(await timed.done);
      await member.stop();
    }
    ctx.log(
      `  overhead elastic run ${run + 1}: sourcing ${sourcing[sourcing.length - 1]?.toFixed(0)}, raw iterator ${rawIterator[run]?.toFixed(0)}, raw callback ${rawCallback[run]?.toFixed(0)}, raw plain ${rawPlain[run]?.toFixed(0)}, ours ${oursLine(ours, run)} msgs/s`,
    );
  }
  return [
    { scenario: "1 overhead", variant: "server sourcing rate into the work queue", value: median(sourcing), unit: "msgs/s", samples: sourcing, note: "elastic groups cannot go faster than this over time" },
    ...overheadRows("work-queue stream", "elasticConsume, 16 partitions, no-op", rawIterator, rawCallback, rawPlain, ours),
  ];
}

/** The overhead target (issue 16): at least this share of the faster raw consume of the same consumer layout. */
const OVERHEAD_TARGET = 0.95;

/**
 * A raw callback consume() of an unpinned consumer without filter subjects: the
 * plainest way to read the stream, as a second baseline.
 */
async function plainRate(js: JetStreamClient, stream: string, consumer: string, count: number): Promise<number> {
  const span = await rawCallbackSpan(js, stream, consumer, count, false);
  return count / ((span.last - span.first) / 1000);
}

/** The concurrency modes the overhead scenario runs, each on a group of its own. */
const MODES: readonly ConcurrencyMode[] = ["serial", "partition", "key"];

/** Rates of ours, per mode. */
type OursByMode = Record<ConcurrencyMode, number[]>;

function oursByMode(): OursByMode {
  return { serial: [], partition: [], key: [] };
}

/** The consume option of a mode (serial is the default and passes none, as before). */
/**
 * nats.js's default pull window (`max_messages`), which the raw consumes use: ours pulls
 * with the same window, so that the ratio measures what the library adds, not a deeper
 * pipeline (its `serial` default is 200).
 */
const RAW_PULL_WINDOW = 100;

function modeOption(mode: ConcurrencyMode): { concurrency?: ConcurrencyMode; pullBatch?: number } {
  return mode === "serial" ? { pullBatch: RAW_PULL_WINDOW } : { concurrency: mode };
}

function oursLine(ours: OursByMode, run: number): string {
  return MODES.map((m) => `${m} ${ours[m][run]?.toFixed(0) ?? "?"}`).join(", ");
}

function overheadRows(where: string, label: string, iterator: number[], callback: number[], plain: number[], byMode: OursByMode): Row[] {
  const best = Math.max(median(iterator), median(callback));
  const bestName = best === median(iterator) ? "raw iterator" : "raw callback";
  const ours = byMode.serial;
  const r = median(ours) / best;
  const modeRows: Row[] = MODES.filter((m) => m !== "serial").map((m) => ({
    scenario: "1 overhead",
    variant: `${label}, concurrency ${m} (maxInFlight 16)`,
    value: median(byMode[m]),
    unit: "msgs/s",
    baseline: `${bestName}, same consumer layout (the faster raw)`,
    ratio: median(byMode[m]) / best,
    samples: byMode[m],
    note: `${(median(byMode[m]) / median(ours)).toFixed(2)}× serial; the mode sets the consumer's max_ack_pending to 256 (the raw consumers have none), and a synchronous no-op handler leaves nothing to run in parallel`,
  }));
  return [
    { scenario: "1 overhead", variant: `raw nats.js consume(), iterator, pinned, 16 filters (${where})`, value: median(iterator), unit: "msgs/s", samples: iterator },
    { scenario: "1 overhead", variant: `raw nats.js consume(), callback, pinned, 16 filters (${where})`, value: median(callback), unit: "msgs/s", samples: callback },
    {
      scenario: "1 overhead",
      variant: `raw nats.js consume(), callback, plain consumer without filters (${where})`,
      value: median(plain),
      unit: "msgs/s",
      samples: plain,
      note: `the plainest read of the stream; ours is ${(median(ours) / median(plain)).toFixed(2)}× of it (the rest is the server's cost of filters and pinning)`,
    },
    {
      scenario: "1 overhead",
      variant: label,
      value: median(ours),
      unit: "msgs/s",
      baseline: `${bestName}, same consumer layout (the faster raw)`,
      ratio: r,
      target: `>= ${OVERHEAD_TARGET.toFixed(2)}`,
      met: r >= OVERHEAD_TARGET,
      samples: ours,
    },
    ...modeRows,
  ];
}

/** Scenario 1. */
export async function overhead(ctx: BenchContext): Promise<Row[]> {
  return [...(await staticRuns(ctx)), ...(await elasticRuns(ctx))];
}
