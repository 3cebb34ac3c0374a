/**
 * Scenario 2, strict order head to head with Go: one member owning all 16 partitions
 * with `max_ack_pending` 1 and AckWait 2 s (Go cg's consumer template), a no-op
 * handler that acks, each member in its own process, on the same stream in the same
 * run: ours against Go's pcgroups v0.2.2 `StaticConsume` (the interop driver).
 *
 * Then the same guarantee, per-key order of first handling that holds across a kill -9
 * of the pinned instance, at depth (issue 16, item 2): Go keeps it only with
 * `max_ack_pending` 1; ours keeps it with a deep buffer (the takeover waits for the dead
 * instance's redeliveries; `reliability-crash-depth.test.ts` proves it at 1,000). So
 * ours in `serial` mode with `max_ack_pending` 256 against Go at 1, and the
 * `partition` and `key` modes in the same table.
 */
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { createStatic } from "../../src/index.js";
import { partitionedStream, publishKeyed } from "../lib/env.js";
import { startMember, startProcess, type MemberProcess } from "../lib/process.js";
import { clock, median } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

const DRIVER = fileURLToPath(new URL("../../../.tools/go-driver/pcg-driver", import.meta.url));

async function timed(member: MemberProcess): Promise<number> {
  try {
    await member.ready;
    const [first, done] = await Promise.all([member.first, member.done]);
    return done - first;
  } finally {
    await member.stop();
  }
}

/** Scenario 2. */
export async function orderVsGo(ctx: BenchContext): Promise<Row[]> {
  if (!existsSync(DRIVER)) throw new Error(`the Go driver is missing at ${DRIVER}: run "npm run tools"`);
  const conn = await ctx.server.connect();
  // One ack round trip per message: 10,000 give a steady rate. The deep runs read more: a fresh
  // Node process spends its first ~10,000 messages warming up (the JIT), a Go binary does not.
  const count = ctx.quick ? 1000 : 10_000;
  const deepCount = ctx.quick ? 1000 : 50_000;
  const stream = ctx.name("h2h");
  await partitionedStream(conn.jsm, stream, 16);
  await publishKeyed(conn.js, stream, deepCount, ctx.keys);
  const ours: number[] = [];
  const go: number[] = [];
  const raw: number[] = [];
  const deep = { serial: [] as number[], partition: [] as number[], key: [] as number[] };
  for (let run = 0; run < ctx.runs; run++) {
    // The same consumer through nats.js alone: how fast the Node client goes at all here.
    const durable = `raw${run}`;
    await conn.jsm.consumers.add(stream, {
      durable_name: durable,
      ack_policy: "explicit",
      ack_wait: 2_000_000_000,
      max_ack_pending: 1,
      filter_subjects: Array.from({ length: 16 }, (_, p) => `${p}.>`),
      priority_groups: ["PCG"],
      priority_policy: "pinned_client",
      priority_timeout: 2_000_000_000,
    });
    const consumer = await conn.js.consumers.get(stream, durable);
    let n = 0;
    let first = 0;
    let finish!: () => void;
    const finished = new Promise<void>((r) => (finish = r));
    const messages = await consumer.consume({
      group: "PCG",
      expires: 1000,
      callback: (m) => {
        if (n === 0) first = clock();
        m.ack();
        if (++n === count) finish();
      },
    });
    await finished;
    raw.push((count - 1) / ((clock() - first) / 1000));
    await messages.close();
    for (const side of ["go", "ours"] as const) {
      const group = `${side}${run}`;
      await createStatic(conn.js, { stream, group, maxMembers: 16, members: ["m"] });
      const member =
        side === "go"
          ? startProcess(DRIVER, [ctx.server.url, "bench-static", stream, group, "m", "2000", "1", String(count)])
          : startMember({ url: ctx.server.url, flavour: "static", stream, group, member: "m", handlerMs: 0, ackWaitMs: 2000, maxAckPending: 1, target: count });
      const ms = await timed(member);
      (side === "go" ? go : ours).push((count - 1) / (ms / 1000));
    }
    for (const mode of ["serial", "partition", "key"] as const) {
      const group = `deep${mode}${run}`;
      await createStatic(conn.js, { stream, group, maxMembers: 16, members: ["m"] });
      const member = startMember({
        url: ctx.server.url,
        flavour: "static",
        stream,
        group,
        member: "m",
        handlerMs: 0,
        ackWaitMs: 2000,
        target: deepCount,
        ...(mode === "serial" ? { maxAckPending: 256 } : { concurrency: mode, maxInFlight: mode === "key" ? 64 : 16 }),
      });
      deep[mode].push((deepCount - 1) / ((await timed(member)) / 1000));
    }
    ctx.log(`  strict order run ${run + 1}: Go ${go[run]?.toFixed(0)}, raw nats.js ${raw[run]?.toFixed(0)}, ours ${ours[run]?.toFixed(0)}; at depth: serial ${deep.serial[run]?.toFixed(0)}, partition ${deep.partition[run]?.toFixed(0)}, key ${deep.key[run]?.toFixed(0)} msgs/s`);
  }
  const ratio = median(ours) / median(go);
  return [
    { scenario: "2 strict order vs Go", variant: "Go pcgroups v0.2.2 StaticConsume, max_ack_pending 1", value: median(go), unit: "msgs/s", samples: go },
    {
      scenario: "2 strict order vs Go",
      variant: "raw nats.js consume(), same consumer",
      value: median(raw),
      unit: "msgs/s",
      baseline: "Go",
      ratio: median(raw) / median(go),
      samples: raw,
      note: "the Node client alone: each message waits for its ack's round trip",
    },
    {
      scenario: "2 strict order vs Go",
      variant: "staticConsume, max_ack_pending 1",
      value: median(ours),
      unit: "msgs/s",
      baseline: "Go",
      ratio,
      samples: ours,
      note: `Go's own config, one ack round trip per message: ${(median(ours) / median(raw)).toFixed(2)}× raw nats.js on the same consumer (the guarantee's comparison is the next row)`,
    },
    {
      scenario: "2 strict order vs Go",
      variant: "staticConsume serial, max_ack_pending 256 (order kept across a kill -9 by the takeover)",
      value: median(deep.serial),
      unit: "msgs/s",
      baseline: "Go",
      ratio: median(deep.serial) / median(go),
      target: ">= 5.0",
      met: median(deep.serial) / median(go) >= 5,
      samples: deep.serial,
    },
    { scenario: "2 strict order vs Go", variant: "staticConsume partition, maxInFlight 16, maxBuffered 256", value: median(deep.partition), unit: "msgs/s", baseline: "Go", ratio: median(deep.partition) / median(go), samples: deep.partition },
    { scenario: "2 strict order vs Go", variant: "staticConsume key, maxInFlight 64, maxBuffered 256", value: median(deep.key), unit: "msgs/s", baseline: "Go", ratio: median(deep.key) / median(go), samples: deep.key },
  ];
}
