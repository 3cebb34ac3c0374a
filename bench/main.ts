/**
 * `npm run bench [-- --quick] [-- --server nats://…] [-- --only overhead,scaling]`:
 * runs the benchmark scenarios against a nats-server it starts (or --server), prints
 * a table, and writes bench/results/latest.json and latest.md (and, for a full run,
 * the charts bench/results/scaling.svg and fleet.svg). Every ratio is against a baseline
 * measured in the same run. A run of only serverless scenarios (`--only assignment`)
 * starts no server.
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { benchServer, noServer } from "./lib/env.js";
import { fleetChart, machine, markdown, scalingChart, table, write, type RunReport } from "./lib/report.js";
import type { BenchContext, Row, Scenario } from "./lib/types.js";
import { assignment } from "./scenarios/assignment.js";
import { attempts } from "./scenarios/attempts.js";
import { cluster } from "./scenarios/cluster.js";
import { concurrency } from "./scenarios/concurrency.js";
import { describeScale } from "./scenarios/describe.js";
import { failover } from "./scenarios/failover.js";
import { fleet } from "./scenarios/fleet.js";
import { holds } from "./scenarios/holds.js";
import { memory } from "./scenarios/memory.js";
import { orderVsGo } from "./scenarios/order-vs-go.js";
import { overhead } from "./scenarios/overhead.js";
import { rebalance } from "./scenarios/rebalance.js";
import { scaling } from "./scenarios/scaling.js";
import { versions } from "./scenarios/versions.js";

const scenarios: Record<string, Scenario> = { overhead, "order-vs-go": orderVsGo, concurrency, scaling, failover, rebalance, memory, describe: describeScale, fleet, cluster, holds, assignment, versions, attempts };
/** Scenarios that never touch the suite's server (cluster, holds and versions start servers of their own): a run of only these starts none. */
const serverless = new Set(["assignment", "versions", "cluster", "holds"]);

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    server: { type: "string" },
    only: { type: "string" },
    runs: { type: "string" },
    messages: { type: "string" },
  },
});
const quick = values.quick ?? false;
const chosen = values.only ? values.only.split(",") : Object.keys(scenarios);
for (const name of chosen) {
  if (!scenarios[name]) {
    console.error(`unknown scenario "${name}"; known: ${Object.keys(scenarios).join(", ")}`);
    process.exit(2);
  }
}
const runs = Number(values.runs ?? (quick ? 1 : 3));
const messages = Number(values.messages ?? (quick ? 5_000 : 100_000));
const server = chosen.every((name) => serverless.has(name)) ? noServer() : await benchServer(values.server);
let counter = 0;
const ctx: BenchContext = {
  server,
  quick,
  runs,
  messages,
  keys: 1000,
  log: (line) => console.error(line),
  name: (prefix) => `${prefix}_${Date.now().toString(36)}_${++counter}`,
};
console.error(`bench: nats-server ${server.version}${server.url ? ` at ${server.url}` : ""}; ${runs} run(s) of ${messages} messages${quick ? " (quick)" : ""}`);
const rows: Row[] = [];
try {
  for (const name of chosen) {
    console.error(`bench: ${name} ...`);
    rows.push(...(await (scenarios[name] as Scenario)(ctx)));
  }
} finally {
  await server.stop();
}
const report: RunReport = { date: new Date().toISOString(), quick, server: server.version, node: process.version, machine: machine(), runs, messages, rows };
console.log(table(rows));
const results = fileURLToPath(new URL("../../bench/results/", import.meta.url));
await write(`${results}latest.json`, JSON.stringify(report, null, 2) + "\n");
await write(`${results}latest.md`, markdown(report));
const svg = quick ? undefined : await scalingChart(rows);
if (svg) await write(`${results}scaling.svg`, svg);
const fleetSvg = quick ? undefined : await fleetChart(rows);
if (fleetSvg) await write(`${results}fleet.svg`, fleetSvg);
console.error(`bench: wrote ${results}latest.json and latest.md${svg ? " and scaling.svg" : ""}${fleetSvg ? " and fleet.svg" : ""}`);
