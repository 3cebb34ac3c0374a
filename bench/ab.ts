/**
 * Engine A/B: `node dist/bench/ab.js --old <tree> [--new <tree>] [--rounds 5] [--messages 100000]
 * [--modes serial,partition,key] [--flavours static,elastic] [--pull-batch n]`. Each tree is a built
 * checkout of this package (its `dist/src/index.js` is imported by the child process).
 * For every flavour and concurrency mode, rounds of one old and one new run are
 * interleaved (the order alternates from round to round) against one nats-server
 * started here, each run in a fresh process on a fresh group of the same messages
 * (bench/mode-process.ts): a no-op synchronous handler, 16 partitions, 1000 keys.
 * Prints, per mode, the medians of msgs/s and of client CPU µs per message, the
 * ratio of the medians and the median of the paired ratios; writes
 * bench/results/ab-latest.json. `--cpu-prof <dir>` writes a V8 CPU profile of every run there;
 * `--together` runs the old and the new run of a round at the same time (each on its own
 * group), so a machine whose load varies loads both alike: their rates then share the
 * server, and only their ratio and CPU per message compare. `--pull-batch n` gives both
 * engines' members the same pull window; `--new-max-buffered-bytes n` gives the new
 * engine's members that byte budget (a budget no window can reach sends pulls without
 * a byte limit: what the fence and the hold cost, without the byte bound). Each run's line also gives the protocol
 * messages its connection published and received and its socket writes per 1,000
 * handled, and the CPU per message of the nats-servers on this machine over the run
 * (every one of them: meaningless while other servers start and stop beside it); `AB_STATUS=1` makes each
 * child tally the status messages it received (`409 Batch Completed` per byte-limited
 * pull, say), `AB_WRITE_SIZES=1` the sizes of its socket writes.
 */
import { spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { addMembers, createElastic, createStatic, deleteElastic, deleteStatic, type ConcurrencyMode } from "../src/index.js";
import { benchServer, partitionedStream, plainStream, publishKeyed, until, type Conn } from "./lib/env.js";
import { write } from "./lib/report.js";
import { median } from "./lib/stats.js";
import type { ModeRunResult, ModeRunSettings } from "./mode-process.js";

const CHILD = fileURLToPath(new URL("./mode-process.js", import.meta.url));
const PARTITIONS = 16;
const KEYS = 1000;

const { values } = parseArgs({
  options: {
    old: { type: "string", default: "/work/wt-bench-old" },
    new: { type: "string" },
    rounds: { type: "string", default: "5" },
    messages: { type: "string", default: "100000" },
    modes: { type: "string", default: "serial,partition,key" },
    flavours: { type: "string", default: "static,elastic" },
    "cpu-prof": { type: "string" },
    together: { type: "boolean", default: false },
    "pull-batch": { type: "string" },
    "new-max-buffered-bytes": { type: "string" },
  },
});
const here = fileURLToPath(new URL("../../", import.meta.url));
const engines = { old: resolve(values.old ?? "", "dist/src/index.js"), new: resolve(values.new ?? here, "dist/src/index.js") } as const;
for (const path of Object.values(engines)) if (!existsSync(path)) throw new Error(`no built engine at ${path} (run tsc in that tree)`);
const rounds = Number(values.rounds);
const count = Number(values.messages);
const modes = (values.modes ?? "").split(",") as ConcurrencyMode[];
const flavours = (values.flavours ?? "").split(",") as ("static" | "elastic")[];
/** A folder for a V8 CPU profile of every run (`--cpu-prof <dir>`). */
const profiles = values["cpu-prof"];
/** `--together`: the old and the new run of a round at the same time, on groups of their own. */
const together = values.together ?? false;
/** `--pull-batch n`: both engines' members pull with this window instead of their defaults. */
const pullBatch = values["pull-batch"] !== undefined ? Number(values["pull-batch"]) : undefined;
/** `--new-max-buffered-bytes n`: the new engine's members have this byte budget instead of the default. */
const newMaxBufferedBytes = values["new-max-buffered-bytes"] !== undefined ? Number(values["new-max-buffered-bytes"]) : undefined;

/** Runs one child and returns what it measured. */
function runChild(settings: ModeRunSettings, name: string): Promise<ModeRunResult> {
  const flags = profiles ? ["--cpu-prof", "--cpu-prof-interval=100", `--cpu-prof-dir=${profiles}`, `--cpu-prof-name=${name}.cpuprofile`] : [];
  return new Promise((resolveRun, reject) => {
    const child = spawn(process.execPath, [...flags, CHILD, JSON.stringify(settings)], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (c: string) => (out += c));
    const timer = setTimeout(() => child.kill("SIGKILL"), 300_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      const line = out.trim().split("\n").pop() ?? "";
      try {
        resolveRun(JSON.parse(line) as ModeRunResult);
      } catch {
        reject(new Error(`a mode run exited (code ${String(code)}) without a result: ${out}`));
      }
    });
  });
}

/** CPU time (µs, user + system) of every nats-server process on this machine (Linux /proc; 0 elsewhere). */
function serverCpuUs(): number {
  if (!existsSync("/proc/self/stat")) return 0;
  let total = 0;
  for (const pid of readdirSync("/proc").filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      if (!stat.includes("(nats-server)")) continue;
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      total += (Number(fields[11]) + Number(fields[12])) * (1_000_000 / 100);
    } catch {
      // the process ended meanwhile
    }
  }
  return total;
}

let counter = 0;
/** A fresh group of `count` messages for one run; returns its name once consumable, and how to remove it. */
async function freshGroup(conn: Conn, flavour: "static" | "elastic", stream: string): Promise<{ group: string; remove(): Promise<void> }> {
  const group = `ab${++counter}`;
  if (flavour === "static") {
    await createStatic(conn.js, { stream, group, maxMembers: PARTITIONS, members: ["m"] });
    return { group, remove: () => deleteStatic(conn.js, stream, group) };
  }
  await createElastic(conn.js, { stream, group, maxMembers: PARTITIONS, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
  await until(async () => (await conn.jsm.streams.info(`${stream}-${group}`)).state.messages === count, 600_000, "sourcing", 20);
  await addMembers(conn.js, stream, group, ["m"]);
  return { group, remove: () => deleteElastic(conn.js, stream, group) };
}

interface Sample {
  round: number;
  engine: "old" | "new";
  rate: number;
  cpuUsPerMsg: number;
  outPerThousand?: number;
  writesPerThousand?: number;
  inPerThousand?: number;
  /** nats-server CPU per message over the whole child run (start to stop; with --together, both runs'). */
  serverUsPerMsg?: number;
}

const server = await benchServer();
// Stopped from outside: the server this run started goes with it.
for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => void server.stop().finally(() => process.exit(130)));
const log = (line: string): void => void process.stderr.write(line + "\n");
log(`ab: nats-server ${server.version}; old ${engines.old}; new ${engines.new}; ${rounds} rounds of ${count} messages`);
const samples = new Map<string, Sample[]>();
try {
  const conn = await server.connect("ab-admin");
  const streams = new Map<string, string>();
  for (const flavour of flavours) {
    const stream = `ab_${flavour}_${Date.now().toString(36)}`;
    if (flavour === "static") await partitionedStream(conn.jsm, stream, PARTITIONS);
    else await plainStream(conn.jsm, stream);
    await publishKeyed(conn.js, stream, count, KEYS);
    streams.set(flavour, stream);
  }
  for (let round = 0; round < rounds; round++) {
    for (const flavour of flavours) {
      for (const mode of modes) {
        const order: ("old" | "new")[] = round % 2 === 0 ? ["old", "new"] : ["new", "old"];
        const stream = streams.get(flavour) ?? "";
        const key = `${flavour} ${mode}`;
        const one = async (engine: "old" | "new", group: string): Promise<void> => {
          const serverBefore = serverCpuUs();
          const r = await runChild({ engine: engines[engine], url: server.url, flavour, stream, group, member: "m", mode, count, ...(pullBatch !== undefined ? { pullBatch } : {}), ...(engine === "new" && newMaxBufferedBytes !== undefined ? { maxBufferedBytes: newMaxBufferedBytes } : {}) }, `${flavour}-${mode}-${engine}-${round + 1}`);
          const serverUsPerMsg = (serverCpuUs() - serverBefore) / count;
          samples.set(key, [...(samples.get(key) ?? []), { round, engine, ...r, serverUsPerMsg }]);
          log(`  round ${round + 1} ${key} ${engine}: ${r.rate.toFixed(0)} msgs/s, ${r.cpuUsPerMsg.toFixed(2)} µs/msg, ${r.outPerThousand?.toFixed(1) ?? "?"} published, ${r.inPerThousand?.toFixed(1) ?? "?"} received and ${r.writesPerThousand?.toFixed(1) ?? "?"} socket writes per 1,000, server ${serverUsPerMsg.toFixed(2)} µs/msg`);
        };
        if (together) {
          // Both at once, each on its own group: whatever else loads the machine loads both alike.
          const groups = [await freshGroup(conn, flavour, stream), await freshGroup(conn, flavour, stream)];
          await Promise.all(order.map((engine, i) => one(engine, groups[i]?.group ?? "")));
          for (const g of groups) await g.remove();
          continue;
        }
        for (const engine of order) {
          const g = await freshGroup(conn, flavour, stream);
          await one(engine, g.group);
          await g.remove();
        }
      }
    }
  }
} finally {
  await server.stop();
}

const rows = [...samples].map(([key, list]) => {
  const of = (e: "old" | "new"): Sample[] => list.filter((s) => s.engine === e);
  const oldRate = median(of("old").map((s) => s.rate));
  const newRate = median(of("new").map((s) => s.rate));
  const paired = Array.from({ length: rounds }, (_, r) => {
    const o = of("old").find((s) => s.round === r);
    const n = of("new").find((s) => s.round === r);
    return o && n ? n.rate / o.rate : NaN;
  }).filter(Number.isFinite);
  const pairedCpu = Array.from({ length: rounds }, (_, r) => {
    const o = of("old").find((s) => s.round === r);
    const n = of("new").find((s) => s.round === r);
    return o && n ? n.cpuUsPerMsg / o.cpuUsPerMsg : NaN;
  }).filter(Number.isFinite);
  return {
    key,
    oldRate,
    newRate,
    ratio: newRate / oldRate,
    pairedRatio: median(paired),
    oldCpu: median(of("old").map((s) => s.cpuUsPerMsg)),
    newCpu: median(of("new").map((s) => s.cpuUsPerMsg)),
    pairedCpuRatio: median(pairedCpu),
    samples: list,
  };
});
console.log("| mode | old msgs/s | new msgs/s | new ÷ old (medians) | paired ratio (median) | CPU µs/msg old | new | CPU paired ratio |");
console.log("|---|---|---|---|---|---|---|---|");
for (const r of rows) {
  console.log(`| ${r.key} | ${r.oldRate.toFixed(0)} | ${r.newRate.toFixed(0)} | ${r.ratio.toFixed(3)} | ${r.pairedRatio.toFixed(3)} | ${r.oldCpu.toFixed(2)} | ${r.newCpu.toFixed(2)} | ${r.pairedCpuRatio.toFixed(3)} |`);
}
const results = fileURLToPath(new URL("../../bench/results/", import.meta.url));
await write(`${results}ab-latest.json`, JSON.stringify({ date: new Date().toISOString(), server: server.version, engines, rounds, messages: count, rows }, null, 2) + "\n");
