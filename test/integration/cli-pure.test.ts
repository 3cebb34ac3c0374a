/**
 * The CLI's pure parts, without a server or a process: value parsers, rendering,
 * colour rules and connection-setting resolution.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CliError, UsageError } from "../../src/cli/errors.js";
import { loadMetricsSdk } from "../../src/cli/metrics-endpoint.js";
import { colourEnabled, styler } from "../../src/cli/output.js";
import { formatDuration, parseDuration, parseMapping, parsePartitionList, parsePositiveInt, parseWildcards } from "../../src/cli/parse.js";
import { PARTITION_ROWS_LIMIT, list, renderInfo, renderMessage, table } from "../../src/cli/render.js";
import { DEFAULT_SERVER, resolveConnection } from "../../src/cli/connect.js";
import type { InfoDoc } from "../../src/cli/model.js";

const plain = styler(false);

describe("cli pure", () => {
  test("cli parse - numbers, mappings, durations and wildcard indexes", () => {
    assert.equal(parsePositiveInt("10", "max-members"), 10);
    for (const bad of ["0", "-1", "abc", "1.5", ""]) assert.throws(() => parsePositiveInt(bad, "max-members"), UsageError);
    assert.deepEqual(parseMapping("m1:0,1,4-6"), { member: "m1", partitions: [0, 1, 4, 5, 6] });
    for (const bad of ["m1", ":0", "m1:", "m1:a", "m1:3-1", "a:b:1"]) assert.throws(() => parseMapping(bad), UsageError, bad);
    assert.deepEqual(parsePartitionList("0, 1 2"), [0, 1, 2]);
    assert.equal(parseDuration("20ms", "--sleep"), 20);
    assert.equal(parseDuration("1.5s", "--sleep"), 1500);
    assert.equal(parseDuration("1m30s", "--sleep"), 90_000);
    assert.equal(parseDuration("250", "--sleep"), 250);
    for (const bad of ["", "soon", "5 s", "ms"]) assert.throws(() => parseDuration(bad, "--sleep"), UsageError, bad);
    assert.deepEqual(parseWildcards("1,2"), [1, 2]);
    assert.deepEqual(parseWildcards("1 3"), [1, 3]);
    assert.deepEqual(parseWildcards(""), []);
    assert.deepEqual(parseWildcards("none"), []);
    for (const bad of ["0", "x", "1,-2"]) assert.throws(() => parseWildcards(bad), UsageError, bad);
    assert.equal(formatDuration(20), "20ms");
    assert.equal(formatDuration(1500), "1.5s");
  });

  test("cli render - Go-style lists, aligned tables, long partition tables grouped into ranges", () => {
    assert.equal(list(["a", "b"]), "[a b]");
    assert.equal(list([]), "[]");
    assert.equal(table(["A", "LONGER"], [["xyz", "1"], ["q", "22"]], plain), "A    LONGER\nxyz  1\nq    22");
    const max = PARTITION_ROWS_LIMIT + 8;
    const doc: InfoDoc = {
      kind: "elastic",
      stream: "s",
      group: "g",
      config: { max_members: max, partitioning_filters: null, members: ["a", "b"] },
      active_members: ["a"],
      partitions: Array.from({ length: max }, (_, p) => ({ partition: p, member: p < max / 2 ? "a" : "b", active: p < max / 2 })),
    };
    const text = renderInfo(doc, plain);
    assert.match(text, new RegExp(`PARTITIONS {2}MEMBER {2}ACTIVE\n0-${max / 2 - 1} +a +yes\n${max / 2}-${max - 1} +b +no$`));
  });

  test("cli render - a consume line", () => {
    const line = renderMessage({ member: "m1", partition: 3, subject: "orders.k", stream_seq: 9, delivered: 2, pin_id: "P", ts: "2026-01-02T03:04:05.678Z" }, plain);
    assert.equal(line, "03:04:05.678 [m1] partition=3 subject=orders.k seq=9 delivered=2 pinnedID=P");
  });

  test("cli output - colour only on a TTY, never with NO_COLOR or TERM=dumb", () => {
    assert.equal(colourEnabled({ write: () => true, isTTY: true }, {}), true);
    assert.equal(colourEnabled({ write: () => true }, {}), false);
    assert.equal(colourEnabled({ write: () => true, isTTY: true }, { NO_COLOR: "1" }), false);
    assert.equal(colourEnabled({ write: () => true, isTTY: true }, { TERM: "dumb" }), false);
    assert.equal(styler(true).red("x"), "\u001b[31mx\u001b[39m");
    assert.equal(plain.red("x"), "x");
  });

  test("cli connect - settings: flag, then environment, then context, then the default", async () => {
    const xdg = await mkdtemp(join(tmpdir(), "cg-pure-"));
    try {
      const base = { XDG_CONFIG_HOME: xdg };
      assert.deepEqual(resolveConnection({}, base), { servers: [DEFAULT_SERVER], timeoutMs: 5000, serverSource: "default" });
      await mkdir(join(xdg, "nats", "context"), { recursive: true });
      await writeFile(join(xdg, "nats", "context", "c.json"), JSON.stringify({ url: "nats://ctx:4222", user: "cu", password: "cp", creds: "~/x.creds", jetstream_domain: "hub" }));
      const fromContext = resolveConnection({ context: "c" }, { ...base, HOME: "/home/me" });
      assert.deepEqual(fromContext, { servers: ["nats://ctx:4222"], timeoutMs: 5000, serverSource: "context", authSource: "context", user: "cu", password: "cp", creds: "/home/me/x.creds", jsDomain: "hub", jsSource: "context", context: "c" });
      const fromEnv = resolveConnection({ context: "c" }, { ...base, NATS_URL: "nats://a:1,nats://b:2", NATS_USER: "eu", NATS_TIMEOUT: "2s" });
      assert.deepEqual(fromEnv.servers, ["nats://a:1", "nats://b:2"]);
      assert.equal(fromEnv.user, "eu");
      assert.equal(fromEnv.password, "cp");
      assert.equal(fromEnv.timeoutMs, 2000);
      const fromFlags = resolveConnection({ context: "c", server: "nats://f:3", user: "fu", timeout: "750ms" }, { ...base, NATS_URL: "nats://a:1", NATS_USER: "eu" });
      assert.deepEqual(fromFlags.servers, ["nats://f:3"]);
      assert.equal(fromFlags.user, "fu");
      assert.equal(fromFlags.timeoutMs, 750);
      // a flag's API prefix replaces the context's domain, and errors blame the flag
      const prefixFlag = resolveConnection({ context: "c", jsApiPrefix: "$JS.x.API" }, base);
      assert.deepEqual([prefixFlag.jsDomain, prefixFlag.jsApiPrefix, prefixFlag.jsSource], [undefined, "$JS.x.API", "flag"]);
      await writeFile(join(xdg, "nats", "context.txt"), "c\n");
      assert.equal(resolveConnection({}, base).context, "c", "the selected context");
      assert.throws(() => resolveConnection({ timeout: "later" }, base), UsageError);
    } finally {
      await rm(xdg, { recursive: true, force: true });
    }
  });

  test("cli metrics - a missing OpenTelemetry SDK is METRICS_DEPENDENCY_MISSING with the npm line; other load errors pass through", async () => {
    const missing = (name: string): Promise<unknown> => Promise.reject(Object.assign(new Error(`Cannot find package '${name}'`), { code: "ERR_MODULE_NOT_FOUND" }));
    await assert.rejects(loadMetricsSdk(missing), (err: unknown) => {
      assert.ok(err instanceof CliError);
      assert.equal(err.code, "METRICS_DEPENDENCY_MISSING");
      assert.match(err.message, /npm install @opentelemetry\/api@\S+ @opentelemetry\/sdk-metrics@\S+ @opentelemetry\/exporter-prometheus@\S+/);
      assert.match(err.message, /Cannot find package '@opentelemetry\//, "says what failed to load");
      return true;
    });
    const broken = new SyntaxError("Unexpected token");
    await assert.rejects(loadMetricsSdk(() => Promise.reject(broken)), (err: unknown) => err === broken);
    const loaded = await loadMetricsSdk();
    assert.equal(typeof loaded.sdk.MeterProvider, "function", "the devDependencies load");
    assert.equal(typeof loaded.exporter.PrometheusExporter, "function");
  });
});
