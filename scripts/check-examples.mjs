#!/usr/bin/env node
// Checks the documentation's TypeScript examples against the package as a user
// gets it, in a fresh temporary project that installs the packed tarball (npm pack)
// and the nats.js peers, against a real nats-server (the project's launcher and
// pinned binary, loopback only):
//   0. before building anything, scripts/check-links.mjs: every relative link and
//      #anchor of README.md, CHANGELOG.md, BENCHMARKS.md and docs/*.md resolves, and
//      every `test/….ts` path they mention exists;
//   1. the installed `cg` is asked for --metrics-port before the OpenTelemetry SDK
//      is installed: it must fail with METRICS_DEPENDENCY_MISSING and the npm line;
//   2. the SDK and the Prometheus exporter are installed (as that line says), and
//      every ```ts block of README.md and docs/*.md, each in its own file, is
//      type-checked with `tsc --strict`;
//   3. the block marked `<!-- example: run -->` (the README's quick start) runs:
//      messages published to it must come out of its handler;
//   4. the installed `cg … consume --metrics-port 0` now serves the metrics.
//
//   node scripts/check-examples.mjs            # build, pack, install, check, run
//   KEEP_EXAMPLES=1 node scripts/check-examples.mjs   # keep the temporary project
//
// Names an example uses without defining (the `js` of an earlier block, the
// user's own `ship()`…) are declared once in scripts/examples-preamble.d.ts.
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { checkLinks } from "./check-links.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const dev = pkg.devDependencies;
const started = Date.now();

function run(cmd, args, options = {}) {
  const result = spawnSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], ...options });
  if (result.status !== 0) {
    console.error(`check-examples: ${cmd} ${args.join(" ")} failed (exit ${result.status})\n${result.stdout ?? ""}${result.stderr ?? ""}`);
    process.exit(1);
  }
  return result.stdout;
}

/** Every ```ts block of a markdown file, with its first line's number and whether it is marked to run. */
export function extractBlocks(markdown) {
  const blocks = [];
  const lines = markdown.split("\n");
  let current;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (current === undefined && /^```(ts|typescript)\s*$/.test(line)) {
      let j = i - 1;
      while (j >= 0 && lines[j].trim() === "") j--;
      const marker = /^<!--\s*example:\s*(.*?)\s*-->$/.exec(lines[j]?.trim() ?? "");
      current = { line: i + 2, code: [], run: marker !== null && marker[1].split(/\s+/).includes("run") };
    } else if (current !== undefined && /^```\s*$/.test(line)) {
      blocks.push({ ...current, code: current.code.join("\n") });
      current = undefined;
    } else if (current !== undefined) {
      current.code.push(line);
    }
  }
  return blocks;
}

const sources = ["README.md", ...readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)];

// 0. the pages' links, anchors and test paths
const broken = checkLinks();
if (broken.length > 0) {
  console.error(`check-examples: ${broken.length} broken reference(s) in the documentation:\n  ${broken.join("\n  ")}`);
  process.exit(1);
}
console.log("check-examples: every relative link, #anchor and test/….ts path of README.md, CHANGELOG.md, BENCHMARKS.md and docs/*.md resolves");

// 1. the package as published
console.log("check-examples: building and packing ...");
run("npm", ["run", "build", "--silent"], { cwd: root });
const work = mkdtempSync(join(tmpdir(), "pcg-examples-"));
const tarball = run("npm", ["pack", "--silent", "--pack-destination", work], { cwd: root }).trim().split("\n").at(-1);

// 2. a fresh project that installs it, the nats.js peers, and the compiler
writeFileSync(join(work, "package.json"), JSON.stringify({ name: "pcg-examples", private: true, type: "module" }, null, 2));
console.log(`check-examples: installing ${tarball} into ${work} ...`);
run(
  "npm",
  [
    "install",
    "--no-audit",
    "--no-fund",
    "--loglevel=error",
    `./${tarball}`,
    `@nats-io/jetstream@${dev["@nats-io/jetstream"]}`,
    `@nats-io/kv@${dev["@nats-io/kv"]}`,
    `@nats-io/transport-node@${dev["@nats-io/transport-node"]}`,
    `typescript@${dev.typescript}`,
    `@types/node@${dev["@types/node"]}`,
  ],
  { cwd: work },
);

// 3. one file per block
const files = [];
let runnable;
for (const source of sources) {
  const blocks = extractBlocks(readFileSync(join(root, source), "utf8"));
  blocks.forEach((block, i) => {
    const name = `${basename(source, ".md")}-${i + 1}.ts`;
    // `export {}` makes every block a module of its own, so top-level await works and names do not clash
    writeFileSync(join(work, name), `// ${source}:${block.line}\n${block.code}\nexport {};\n`);
    files.push({ name, source, line: block.line });
    if (block.run) runnable = { name, source, line: block.line };
  });
}
if (!runnable) {
  console.error("check-examples: no block is marked <!-- example: run --> (the README's quick start)");
  process.exit(1);
}
copyFileSync(join(root, "scripts", "examples-preamble.d.ts"), join(work, "preamble.d.ts"));
writeFileSync(
  join(work, "tsconfig.json"),
  JSON.stringify(
    {
      compilerOptions: {
        target: "ES2022",
        lib: ["ES2023", "ESNext.Disposable"],
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        skipLibCheck: true,
        types: ["node"],
        outDir: "out",
      },
      files: ["preamble.d.ts", ...files.map((f) => f.name)],
    },
    null,
    2,
  ),
);

const { NatsServer } = await import(pathToFileURL(join(root, "dist", "src", "server", "launcher.js")).href);
const { connect } = await import(pathToFileURL(join(work, "node_modules", "@nats-io", "transport-node", "lib", "mod.js")).href);
const { partitionOf } = await import(pathToFileURL(join(work, "node_modules", "nats-pcgroups", "dist", "src", "index.js")).href);
const server = await NatsServer.start();
let failure;
try {
  failure = checkMetricsMissing(server.url) ?? typeCheckWithoutPeer() ?? installMetricsSdk() ?? typeCheck() ?? (await runQuickStart(server.url)) ?? (await checkMetricsServed(server.url));
} finally {
  await server.stop();
  if (process.env.KEEP_EXAMPLES) console.log(`check-examples: kept ${work}`);
  else rmSync(work, { recursive: true, force: true });
}
if (failure) {
  console.error(`check-examples: ${failure}`);
  process.exit(1);
}
console.log(`check-examples: OK in ${((Date.now() - started) / 1000).toFixed(1)} s`);

/**
 * The package as installed: no test code or source maps in the tarball, no
 * OpenTelemetry package in a library user's node_modules; and the installed `cg`
 * without the OpenTelemetry SDK: --metrics-port must say what to install.
 */
function checkMetricsMissing(url) {
  const shipped = run("tar", ["-tzf", join(work, tarball)]).trim().split("\n");
  const unwanted = shipped.filter((f) => !/^package\/(package\.json|README\.md|LICENSE|dist\/src\/.+\.(js|d\.ts))$/.test(f));
  if (unwanted.length > 0) return `the tarball ships more than dist/src's .js and .d.ts: ${unwanted.slice(0, 10).join(", ")}`;
  if (existsSync(join(work, "node_modules", "@opentelemetry"))) return "installing the package pulled an OpenTelemetry package: library users should get none";
  console.log(`check-examples: the tarball holds ${shipped.length} files (package.json, README, dist/src .js and .d.ts), and installs no OpenTelemetry package`);
  const r = spawnSync(join(work, "node_modules", ".bin", "cg"), ["-s", url, "static", "consume", "orders", "billing", "m2", "--metrics-port", "0"], { cwd: work, encoding: "utf8", timeout: 30_000 });
  if (r.status !== 1 || !/npm install @opentelemetry\/api@\S+ @opentelemetry\/sdk-metrics@\S+ @opentelemetry\/exporter-prometheus@/.test(r.stderr)) {
    return `cg consume --metrics-port without the OpenTelemetry SDK should exit 1 and say what to install; exit ${r.status}:\n${r.stdout}${r.stderr}`;
  }
  console.log("check-examples: without the OpenTelemetry SDK, the installed cg --metrics-port fails with METRICS_DEPENDENCY_MISSING and the npm install line");
  return undefined;
}

/** Installs what `--metrics-port` (and the docs' metrics example) needs, at the project's versions. */
function installMetricsSdk() {
  const names = ["@opentelemetry/api", "@opentelemetry/sdk-metrics", "@opentelemetry/exporter-prometheus"];
  run("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", ...names.map((n) => `${n}@${dev[n]}`)], { cwd: work });
  return undefined;
}

/** tsc --strict over every example; errors point at the markdown lines. */
/**
 * An application that imports the package under `strict` with `skipLibCheck: false`
 * (tsc's defaults), before any OpenTelemetry package is installed: the package's own
 * typings must compile without the optional peer.
 */
function typeCheckWithoutPeer() {
  writeFileSync(
    join(work, "no-peer.ts"),
    [
      'import { elasticConsume, staticConsume, type ConsumeOptions, type ConsumerGroupMember } from "nats-pcgroups";',
      "const options: Partial<ConsumeOptions> = { concurrency: \"key\", maxBuffered: 64 };",
      "const members: ConsumerGroupMember[] = [];",
      "console.log(typeof elasticConsume, typeof staticConsume, options, members.length);",
      "export {};",
      "",
    ].join("\n"),
  );
  writeFileSync(
    join(work, "tsconfig.no-peer.json"),
    JSON.stringify({ compilerOptions: { target: "ES2022", lib: ["ES2023", "ESNext.Disposable"], module: "NodeNext", moduleResolution: "NodeNext", strict: true, skipLibCheck: false, types: ["node"], noEmit: true }, files: ["no-peer.ts"] }, null, 2),
  );
  const tsc = spawnSync(process.execPath, [join(work, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.no-peer.json"], { cwd: work, encoding: "utf8" });
  if (tsc.status !== 0) return `the package's typings do not compile without @opentelemetry/api (strict, skipLibCheck false):\n${tsc.stdout}${tsc.stderr}`;
  console.log("check-examples: the package's typings compile without @opentelemetry/api (strict, skipLibCheck false)");
  return undefined;
}

function typeCheck() {
  console.log(`check-examples: type-checking ${files.length} examples (${sources.map((s) => `${s}: ${files.filter((f) => f.source === s).length}`).join(", ")}) ...`);
  const tsc = spawnSync(process.execPath, [join(work, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json", "--strict"], { cwd: work, encoding: "utf8" });
  if (tsc.status !== 0) {
    // the example file's line 2 is the block's first line
    const mapped = tsc.stdout.replace(/^([\w.-]+\.ts)\((\d+),(\d+)\)/gm, (all, file, line, col) => {
      const f = files.find((x) => x.name === file);
      return f ? `${f.source}:${f.line + Number(line) - 2}:${col} (${file})` : all;
    });
    return `the examples do not compile against the packed package:\n${mapped}${tsc.stderr}`;
  }
  console.log(`check-examples: ${files.length} examples compile (tsc --strict against ${tarball})`);
  return undefined;
}

/**
 * Runs the marked block (its server URL swapped for the test server's), publishes
 * keyed orders, and waits for its handler to print them: `<partition> <subject>`.
 * Resolves to a failure message, or undefined.
 */
async function runQuickStart(url) {
  const code = readFileSync(join(work, "out", runnable.name.replace(/\.ts$/, ".js")), "utf8");
  const urls = code.match(/nats:\/\/[\w.:-]+/g) ?? [];
  if (urls.length !== 1) return `${runnable.source}:${runnable.line}: the quick start should name exactly one server URL, found ${urls.length}`;
  writeFileSync(join(work, "out", "quick-start.js"), code.replace(urls[0], url));
  console.log(`check-examples: running ${runnable.source}:${runnable.line} against nats-server at ${url} ...`);
  const child = spawn(process.execPath, [join(work, "out", "quick-start.js")], { cwd: work, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (c) => (stdout += c));
  child.stderr.setEncoding("utf8").on("data", (c) => (stderr += c));
  const exited = new Promise((resolve) => child.on("close", (code, signal) => resolve({ code, signal })));
  const nc = await connect({ servers: url });
  try {
    const jsm = await (await import(pathToFileURL(join(work, "node_modules", "@nats-io", "jetstream", "lib", "mod.js")).href)).jetstreamManager(nc);
    // the example creates the stream and the group, then joins as m1 (partitions 0 and 1 of 4)
    const ready = await poll(async () => (await jsm.consumers.list("orders").next().catch(() => [])).some((c) => c.name === "billing-m1"), 30_000);
    if (!ready) return `the quick start did not join the group within 30 s:\n${stdout}${stderr}`;
    const subjects = Array.from({ length: 40 }, (_, i) => `orders.c${i}`);
    for (const s of subjects) await nc.request(s, "{}");
    const mine = subjects.filter((s) => [0, 1].includes(partitionOf(s, 4, { filter: "orders.*", wildcards: [1] })));
    const expected = mine.map((s) => `${partitionOf(s, 4, { filter: "orders.*", wildcards: [1] })} ${s}`);
    const done = await poll(() => expected.every((line) => stdout.split("\n").includes(line)), 30_000);
    if (!done) return `the quick start's handler printed ${stdout.trim().split("\n").length} of the ${expected.length} lines expected:\n${stdout}${stderr}`;
    console.log(`check-examples: the quick start handled its ${expected.length} messages (of ${subjects.length} published; the rest belong to m2)`);
    return undefined;
  } finally {
    await nc.close();
    child.kill("SIGTERM");
    await exited;
  }
}

/** The installed `cg` with the SDK installed: --metrics-port serves the member's metrics. */
async function checkMetricsServed(url) {
  const child = spawn(join(work, "node_modules", ".bin", "cg"), ["-s", url, "--json", "static", "consume", "orders", "billing", "m2", "--metrics-port", "0"], { cwd: work, stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (c) => (stderr += c));
  child.stdout.resume();
  const exited = new Promise((resolve) => child.on("close", resolve));
  try {
    const up = await poll(() => /"metrics_url":"[^"]+"/.test(stderr), 30_000);
    if (!up) return `cg consume --metrics-port 0 did not start serving within 30 s:\n${stderr}`;
    const metricsUrl = /"metrics_url":"([^"]+)"/.exec(stderr)[1];
    // m2 handles the orders the quick start left to it
    const served = await poll(async () => /^messaging_process_duration_seconds_count\{.*pcg_member="m2".*\} [1-9]/m.test(await (await fetch(metricsUrl)).text()), 30_000);
    if (!served) return `${metricsUrl} never showed m2's handled messages:\n${stderr}`;
    console.log(`check-examples: with the SDK installed, the installed cg serves messaging_process_duration_seconds at ${metricsUrl}`);
    return undefined;
  } finally {
    child.kill("SIGTERM");
    await exited;
  }
}

/** Polls `check` every 50 ms until it is true or `ms` pass; resolves to whether it became true. */
async function poll(check, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    if (await check()) return true;
    if (Date.now() > deadline) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
}


