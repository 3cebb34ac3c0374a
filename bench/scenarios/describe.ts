/**
 * Scenario 8, describe at scale (issue 16, item 3): `describeGroup` of a static group
 * with 1,024 partitions and 128 members whose consumers exist and have delivered part
 * of their backlog, counted the two ways describe can count: temporary consumers (a
 * stream without `allow_direct`, the only way before) and direct gets (a stream with
 * it, and always on an elastic work queue). Same messages, same consumers; both
 * descriptions must agree.
 */
import type { JetStreamManager } from "@nats-io/jetstream";
import { createStatic, describeGroup, type GroupDescription } from "../../src/index.js";
import { countWithDirectGet } from "../../src/observe/counts.js";
import { partitionAssignment } from "../../src/core/assignment.js";
import { staticConsumerName } from "../../src/core/names.js";
import type { StaticConsumerGroupConfig } from "../../src/core/types.js";
import { publishKeyed, type Conn } from "../lib/env.js";
import { clock, median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

const PARTITIONS = 1024;
const MEMBERS = 128;

/** Scenario 8: describe time, temporary consumers against direct gets. */
export async function describeScale(ctx: BenchContext): Promise<Row[]> {
  const conn = await ctx.server.connect();
  const rounds = ctx.quick ? 1 : 3;
  const messages = ctx.quick ? 5_000 : 20_000;
  const times = { consumers: [] as number[], direct: [] as number[], inFlight: [] as number[], countFromStart: [] as number[], countFromMiddle: [] as number[] };
  const perPartition: string[] = [];
  for (const allowDirect of [false, true]) {
    const stream = ctx.name(allowDirect ? "dsd" : "dsc");
    await conn.jsm.streams.add({
      name: stream,
      subjects: [`${stream}.*`],
      storage: "file",
      allow_direct: allowDirect,
      subject_transform: { src: `${stream}.*`, dest: `{{partition(${PARTITIONS},1)}}.${stream}.{{wildcard(1)}}` },
    });
    const members = Array.from({ length: MEMBERS }, (_, i) => `m${String(i).padStart(3, "0")}`);
    const config = await createStatic(conn.js, { stream, group: "g", maxMembers: PARTITIONS, members, onWarning: () => undefined });
    await publishKeyed(conn.js, stream, messages, 4096, 64);
    await memberConsumers(conn.jsm, stream, config);
    const descriptions: GroupDescription[] = [];
    for (let run = 0; run < rounds; run++) {
      const started = clock();
      descriptions.push(await describeGroup(conn.js, "static", stream, "g"));
      (allowDirect ? times.direct : times.consumers).push(clock() - started);
    }
    const pending = descriptions[0]?.partitions.reduce((n, p) => n + (p.pending ?? 0), 0) ?? 0;
    const inFlight = descriptions[0]?.partitions.reduce((n, p) => n + (p.ackPending ?? 0), 0) ?? 0;
    ctx.log(`  describe ${PARTITIONS} partitions, ${MEMBERS} members, ${allowDirect ? "direct gets" : "temporary consumers"}: ${(allowDirect ? times.direct : times.consumers).map((t) => t.toFixed(0)).join(", ")} ms; pending ${pending}, in flight ${inFlight}`);
    // Every consumer starts halfway: messages from there on are pending.
    const expected = messages - Math.floor(messages / 2) + 1;
    if (pending + inFlight !== expected) throw new Error(`describe counted ${pending} pending + ${inFlight} in flight; expected ${expected}`);
    perPartition.push(JSON.stringify(descriptions[0]?.partitions.map((p) => [p.pending, p.ackPending])));
    if (allowDirect) {
      // What one count costs the server: from the start of the stream, and from the middle (a member's position).
      for (const [from, into] of [[1, times.countFromStart], [Math.floor(messages / 2), times.countFromMiddle]] as const) {
        const started = clock();
        await Promise.all(Array.from({ length: PARTITIONS }, (_, p) => countWithDirectGet(conn.jsm, stream, `${p}.>`, from)));
        into.push(clock() - started);
      }
      ctx.log(`  ${PARTITIONS} direct-get counts at once: from sequence 1 ${times.countFromStart.at(-1)?.toFixed(0)} ms, from the middle ${times.countFromMiddle.at(-1)?.toFixed(0)} ms`);
      // The harder state: one message in flight on every member consumer, so each partition needs
      // both of its counts (what is pending, and what is delivered but not acked).
      await oneInFlightEach(conn, stream, config);
      for (let run = 0; run < rounds; run++) {
        const started = clock();
        const d = await describeGroup(conn.js, "static", stream, "g");
        times.inFlight.push(clock() - started);
        const inFlightNow = d.partitions.reduce((n, p) => n + (p.ackPending ?? 0), 0);
        if (inFlightNow !== MEMBERS) throw new Error(`describe counted ${inFlightNow} messages in flight; expected ${MEMBERS}, one per member`);
      }
      ctx.log(`  describe with one message in flight per member, direct gets: ${times.inFlight.map((t) => t.toFixed(0)).join(", ")} ms`);
    }
    await conn.jsm.streams.delete(stream);
  }
  if (perPartition[0] !== perPartition[1]) throw new Error("the two ways of counting disagree on some partition");
  const consumers = median(times.consumers);
  const direct = median(times.direct);
  return [
    { scenario: "8 describe", variant: `static describeGroup, ${PARTITIONS} partitions, ${MEMBERS} members: temporary consumers (no allow_direct)`, value: Math.round(consumers), unit: "ms", samples: times.consumers },
    {
      scenario: "8 describe",
      variant: `same, direct gets (allow_direct; always on elastic work queues)`,
      value: Math.round(direct),
      unit: "ms",
      baseline: "temporary consumers",
      ratio: direct / consumers,
      target: "< 1000 ms",
      met: direct < 1000,
      samples: times.direct,
      note: "no member has a message in flight: its consumer's totals answer half of the counts",
    },
    {
      scenario: "8 describe",
      variant: `${PARTITIONS} partition counts at once (direct gets), from sequence 1`,
      value: Math.round(median(times.countFromStart)),
      unit: "ms",
      samples: times.countFromStart,
      note: "the server answers from its per-subject index",
    },
    {
      scenario: "8 describe",
      variant: `${PARTITIONS} partition counts at once (direct gets), from the middle of the stream`,
      value: Math.round(median(times.countFromMiddle)),
      unit: "ms",
      baseline: "from sequence 1",
      ratio: median(times.countFromMiddle) / median(times.countFromStart),
      samples: times.countFromMiddle,
      note: "the server walks the messages after the sequence: what a member's position costs",
    },
    {
      scenario: "8 describe",
      variant: "same, direct gets, one message in flight on every member consumer",
      value: Math.round(median(times.inFlight)),
      unit: "ms",
      target: "< 1000 ms",
      met: median(times.inFlight) < 1000,
      samples: times.inFlight,
      note: "one count per partition with a backlog, and one batch direct get of each member's delivery window for what is in flight",
    },
  ];
}

/**
 * The members' durables, as their instances make them, each having delivered (and
 * acked) its first message or so: describe then counts from their positions.
 */
async function memberConsumers(jsm: JetStreamManager, stream: string, config: StaticConsumerGroupConfig): Promise<void> {
  const info = await jsm.streams.info(stream);
  const half = Math.floor(info.state.last_seq / 2);
  await Promise.all(
    [...partitionAssignment(config)].map(async ([member, partitions]) => {
      const name = staticConsumerName("g", member);
      await jsm.consumers.add(stream, {
        durable_name: name,
        ack_policy: "explicit",
        filter_subjects: partitions.map((p) => `${p}.>`),
        // Positioned halfway: what comes before counts as handled, the rest as pending.
        deliver_policy: "by_start_sequence",
        opt_start_seq: half,
      });
    }),
  );
}

/** Every member consumer takes one message and does not ack it (AckWait is long enough for the rounds). */
async function oneInFlightEach(conn: Conn, stream: string, config: StaticConsumerGroupConfig): Promise<void> {
  await Promise.all(
    [...partitionAssignment(config)].map(async ([member]) => {
      const consumer = await conn.js.consumers.get(stream, staticConsumerName("g", member));
      const m = await consumer.next({ expires: 5000 });
      if (!m) throw new Error(`member ${member}'s consumer delivered nothing`);
    }),
  );
}
