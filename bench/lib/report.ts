/** The results table, the JSON and markdown files, and the scaling chart. */
import { mkdir, writeFile } from "node:fs/promises";
import { cpus, totalmem } from "node:os";
import { dirname } from "node:path";
import * as vega from "vega";
import * as vl from "vega-lite";
import type { Row } from "./types.js";

/** What a run produced. */
export interface RunReport {
  date: string;
  quick: boolean;
  server: string;
  node: string;
  machine: string;
  runs: number;
  messages: number;
  rows: Row[];
}

/** The machine, in one line. */
export function machine(): string {
  const c = cpus();
  return `${c.length} × ${c[0]?.model.trim() ?? "cpu"}, ${(totalmem() / 2 ** 30).toFixed(0)} GiB, ${process.platform} ${process.arch}`;
}

/** Decimals shown per unit: whole numbers unless a unit is a small mean. */
const decimals = (unit: string): number => (unit === "MiB" ? 1 : unit.endsWith("/step") ? 2 : 0);
/** A value; a row whose unit starts with "not " (`not supported`, `not run`) measured nothing and shows only its unit. */
const fmt = (v: number, unit: string): string => (unit.startsWith("not ") ? unit : Number.isFinite(v) ? `${unit === "msgs/s" ? Math.round(v).toLocaleString("en") : v.toFixed(decimals(unit))} ${unit}` : "n/a");

/** Rows as aligned text. */
export function table(rows: Row[]): string {
  const cells = rows.map((r) => [
    r.scenario,
    r.variant,
    fmt(r.value, r.unit),
    r.ratio === undefined ? "" : `${r.ratio.toFixed(2)}× ${r.baseline ?? ""}`.trim(),
    r.target ? `${r.target} ${r.met ? "met" : "MISSED"}` : "",
  ]);
  const head = ["scenario", "variant", "value", "ratio", "target"];
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] ?? "").length)));
  const line = (c: string[]): string => c.map((x, i) => x.padEnd(widths[i] ?? 0)).join("  ").trimEnd();
  return [line(head), line(widths.map((w) => "-".repeat(w))), ...cells.map(line)].join("\n");
}

/** Rows as a markdown document. */
export function markdown(report: RunReport): string {
  const lines = [
    `Run ${report.date}${report.quick ? " (quick)" : ""}: nats-server ${report.server}, Node ${report.node}, ${report.machine}; median of ${report.runs} run(s); ${report.messages.toLocaleString("en")} messages of 128 bytes where not stated otherwise.`,
    "",
    "| scenario | variant | value | ratio | target | note |",
    "|---|---|---|---|---|---|",
    ...report.rows.map(
      (r) =>
        `| ${r.scenario} | ${r.variant} | ${fmt(r.value, r.unit)} | ${r.ratio === undefined ? "" : `${r.ratio.toFixed(2)}× ${r.baseline ?? ""}`} | ${r.target ? `${r.target}: ${r.met ? "met" : "**missed**"}` : ""} | ${r.note ?? ""} |`,
    ),
  ];
  return lines.join("\n") + "\n";
}

/** The scaling chart (measured and ideal throughput by member count), as SVG, drawn by vega-lite. */
export async function scalingChart(rows: Row[]): Promise<string | undefined> {
  const scaling = rows.filter((r) => r.scenario === "3 scaling");
  if (scaling.length === 0) return undefined;
  const values = scaling.flatMap((r) => {
    const members = Number.parseInt(r.variant, 10);
    return [
      { members, throughput: Math.round(r.value), series: "measured" },
      { members, throughput: (members / 5) * 1000, series: "ideal (members ÷ 5 ms)" },
    ];
  });
  const spec = vl.compile({
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: "Throughput by members (5 ms handler, 16 partitions)",
    width: 480,
    height: 280,
    data: { values },
    mark: { type: "line", point: true },
    encoding: {
      x: { field: "members", type: "quantitative", scale: { type: "log", base: 2 }, axis: { values: scaling.map((r) => Number.parseInt(r.variant, 10)) } },
      y: { field: "throughput", type: "quantitative", title: "messages / s" },
      color: { field: "series", type: "nominal", title: null },
    },
  }).spec;
  return new vega.View(vega.parse(spec), { renderer: "none" }).toSVG();
}

/**
 * The fleet's scaling curve (issue 16, items 3 and 6): time from start until every
 * partition was handled, and `describeGroup` time, by group size, as SVG; from the
 * `9 fleet curve` rows (variants `<flavour> <partitions>/<members>: <what>`).
 */
export async function fleetChart(rows: Row[]): Promise<string | undefined> {
  const values = rows
    .filter((r) => r.scenario === "9 fleet curve")
    .flatMap((r) => {
      const m = /^(\w+) (\d+)\/(\d+): (.*)$/.exec(r.variant);
      if (!m) return [];
      const what = m[4]?.startsWith("describe") ? "describeGroup" : "all consuming";
      return [{ partitions: Number(m[2]), ms: r.value, series: `${m[1] ?? ""} ${what}` }];
    });
  if (values.length === 0) return undefined;
  const spec = vl.compile({
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    title: "Fleet by size (members = partitions / 8): until every partition handled, and describe",
    width: 480,
    height: 280,
    data: { values },
    mark: { type: "line", point: true },
    encoding: {
      x: { field: "partitions", type: "quantitative", scale: { type: "log", base: 2 }, axis: { values: [...new Set(values.map((v) => v.partitions))] } },
      y: { field: "ms", type: "quantitative", title: "ms" },
      color: { field: "series", type: "nominal", title: null },
    },
  }).spec;
  return new vega.View(vega.parse(spec), { renderer: "none" }).toSVG();
}

/** Writes a file, creating its folder. */
export async function write(path: string, text: string): Promise<void> {
  await mkdir(dirname(path), { recursive: true });
  await writeFile(path, text);
}
