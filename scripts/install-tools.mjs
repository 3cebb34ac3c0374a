#!/usr/bin/env node
// Installs the real tools the tests and the demo need into the git-ignored
// `.tools/` folder, by name, through `go install`. Idempotent: a tool whose
// pinned version is already there is not rebuilt.
//
//   node scripts/install-tools.mjs            # everything
//   node scripts/install-tools.mjs server     # only nats-server
//   node scripts/install-tools.mjs go-driver  # only the interop tests' Go driver (go build)
//   node scripts/install-tools.mjs server-2.10 server-2.11  # old servers (old-server.test.ts, the versions bench)
//   node scripts/install-tools.mjs server-2.12 server-2.14 server-2.14.9  # more releases for the versions bench
//   node scripts/install-tools.mjs node-20 node-22 node-24  # Node.js builds for the CI matrix (only when named)
//
// NATS_SERVER_BIN=/path/to/nats-server skips building the server and uses that binary.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const versions = JSON.parse(readFileSync(join(root, "scripts/tool-versions.json"), "utf8"));
const toolsDir = join(root, ".tools");

/** Each tool: where it goes, what `go install` builds, how to read back its version. */
const tools = {
  server: {
    version: versions.natsServer,
    dir: join(toolsDir, "nats-server"),
    bin: "nats-server",
    pkg: `github.com/nats-io/nats-server/v2@${versions.natsServer}`,
    installedVersion: (bin) => run(bin, ["--version"]).match(/v?(\d+\.\d+\.\d+\S*)/)?.[1],
    skip: () => process.env.NATS_SERVER_BIN,
  },
  "go-cg": {
    version: versions.goPcgroupsCli,
    // A folder of its own, so Go's `cg` never shadows ours on a PATH.
    dir: join(toolsDir, "go-pcgroups"),
    bin: "cg",
    pkg: `github.com/synadia-io/orbit.go/pcgroups/cg@${versions.goPcgroupsCli}`,
    installedVersion: (_bin, dir) => readStamp(dir),
    skip: () => undefined,
  },
  // The interop tests' Go driver (interop/go-driver), built from source with `go build`.
  // Its "version" is a hash of its sources, so it is rebuilt only when they change.
  "go-driver": {
    version: goDriverHash(),
    dir: join(toolsDir, "go-driver"),
    bin: "pcg-driver",
    pkg: "./interop/go-driver (go build)",
    installedVersion: (_bin, dir) => readStamp(dir),
    skip: () => undefined,
    build: (bin) =>
      spawnSync("go", ["build", "-trimpath", "-buildvcs=false", "-o", bin, "."], {
        cwd: join(root, "interop", "go-driver"),
        stdio: "inherit",
        env: { ...process.env, CGO_ENABLED: "0", GOFLAGS: "-mod=mod" },
      }),
  },
  // Older server releases (each `go install` takes 30-60 s); 2.10 and 2.11 come with a plain
  // run (npm test needs them), 2.12, 2.14 and 2.14.9 only when named.
  // test/integration/old-server.test.ts starts 2.10 (no priority groups) and 2.11 (no
  // whole-subject {{partition(N)}}) for the SERVER_TOO_OLD checks; the `versions` benchmark
  // scenario starts 2.11, 2.12, 2.14.9 and 2.14 (it installs the missing ones through this script)
  // to compare throughput across releases. Nothing else starts them.
  "server-2.10": oldServer("2.10", versions.natsServer210 ?? "v2.10.27"),
  "server-2.11": oldServer("2.11", versions.natsServer211 ?? "v2.11.17"),
  "server-2.12": { ...oldServer("2.12", versions.natsServer212 ?? "v2.12.15"), onlyWhenNamed: true },
  "server-2.14": { ...oldServer("2.14", versions.natsServer214 ?? "v2.14.10"), onlyWhenNamed: true },
  // The last 2.14 release with slow many-filter consumers: the versions benchmark shows the step.
  "server-2.14.9": { ...oldServer("2.14.9", versions.natsServer2149 ?? "v2.14.9"), onlyWhenNamed: true },
  // Node.js lines for the CI matrix, from the npm registry's official builds
  // (node-<platform>-<arch>). Installed only when named: `npm test` runs on the node
  // that runs it.
  "node-20": nodeLine("20", versions.node20),
  "node-22": nodeLine("22", versions.node22),
  "node-24": nodeLine("24", versions.node24),
};

/** A tool entry for a Node.js build in `.tools/node-<line>/` (its `bin/node`), unpacked from the npm registry. */
function nodeLine(line, version) {
  const pkg = `node-${process.platform}-${process.arch}@${version}`;
  return {
    version,
    dir: join(toolsDir, `node-${line}`),
    bin: join("bin", "node"),
    pkg,
    optIn: true,
    installedVersion: (bin) => run(bin, ["--version"]).trim(),
    skip: () => undefined,
    build: (bin) => unpackNode(pkg, dirname(dirname(bin))),
  };
}

/**
 * `npm pack` of an official Node.js build, unpacked into `dir` (replacing what was there).
 * Returns a spawnSync-like result for {@link install}.
 */
function unpackNode(pkg, dir) {
  const tmp = mkdtempSync(join(tmpdir(), "pcg-node-"));
  try {
    const packed = spawnSync("npm", ["pack", pkg, "--pack-destination", tmp, "--silent"], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
    if (packed.status !== 0) return packed;
    const tarball = join(tmp, packed.stdout.trim().split("\n").at(-1) ?? "");
    const untar = spawnSync("tar", ["-xzf", tarball, "-C", tmp], { stdio: "inherit" });
    if (untar.status !== 0) return untar;
    rmSync(dir, { recursive: true, force: true });
    renameSync(join(tmp, "package"), dir);
    return { status: existsSync(join(dir, "bin", "node")) ? 0 : 1 };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/** A tool entry for an old nats-server in `.tools/nats-server-<line>/`, never overridden by NATS_SERVER_BIN. */
function oldServer(line, version) {
  return {
    version,
    dir: join(toolsDir, `nats-server-${line}`),
    bin: "nats-server",
    pkg: `github.com/nats-io/nats-server/v2@${version}`,
    installedVersion: (bin) => run(bin, ["--version"]).match(/v?(\d+\.\d+\.\d+\S*)/)?.[1],
    skip: () => undefined,
  };
}

/** sha256 of the Go driver's sources (go.mod, go.sum, *.go), as its version stamp. */
function goDriverHash() {
  const dir = join(root, "interop", "go-driver");
  const hash = createHash("sha256");
  for (const file of ["go.mod", "go.sum", "main.go"]) {
    hash.update(`${file}\0`);
    hash.update(existsSync(join(dir, file)) ? readFileSync(join(dir, file)) : "");
    hash.update("\0");
  }
  return `src-${hash.digest("hex").slice(0, 16)}`;
}

function run(cmd, args, opts = {}) {
  return execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], ...opts });
}

function readStamp(dir) {
  const stamp = join(dir, "VERSION");
  return existsSync(stamp) ? readFileSync(stamp, "utf8").trim() : undefined;
}

function requireGo() {
  const probe = spawnSync("go", ["version"], { encoding: "utf8" });
  if (probe.error || probe.status !== 0) {
    console.error(
      "install-tools: Go is not installed or not on PATH.\n" +
        "  The project builds nats-server and the Go reference CLI with `go install`.\n" +
        "  Install Go 1.25 or newer (https://go.dev/doc/install, or your package manager),\n" +
        "  or point NATS_SERVER_BIN at an existing nats-server >= 2.14.3 binary.",
    );
    process.exit(1);
  }
}

function install(name) {
  const tool = tools[name];
  if (!tool) {
    console.error(`install-tools: unknown tool "${name}"; known: ${Object.keys(tools).join(", ")}`);
    process.exit(2);
  }
  const override = tool.skip();
  if (override) {
    console.log(`install-tools: ${name}: using ${override} (from the environment)`);
    return;
  }
  const bin = join(tool.dir, tool.bin);
  const want = tool.version.replace(/^v/, "");
  if (existsSync(bin)) {
    let have;
    try {
      have = tool.installedVersion(bin, tool.dir)?.replace(/^v/, "");
    } catch {
      have = undefined;
    }
    if (have === want) {
      console.log(`install-tools: ${name} ${tool.version} already installed`);
      return;
    }
  }
  const how = tool.optIn ? "npm pack" : tool.build ? "go build" : "go install";
  if (!tool.optIn) requireGo();
  mkdirSync(tool.dir, { recursive: true });
  const started = Date.now();
  console.log(`install-tools: ${how} ${tool.pkg} ...`);
  const result = tool.build
    ? tool.build(bin)
    : spawnSync("go", ["install", tool.pkg], {
        stdio: "inherit",
        env: { ...process.env, GOBIN: tool.dir, CGO_ENABLED: "0", GOFLAGS: "-mod=mod" },
      });
  if (result.status !== 0) {
    console.error(`install-tools: ${how} ${tool.pkg} failed (exit ${result.status}).`);
    process.exit(1);
  }
  writeFileSync(join(tool.dir, "VERSION"), `${tool.version}\n`);
  console.log(`install-tools: ${name} ${tool.version} installed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

const wanted = process.argv.slice(2);
const byDefault = (name) => !tools[name].optIn && !tools[name].onlyWhenNamed;
for (const name of wanted.length > 0 ? wanted : Object.keys(tools).filter(byDefault)) install(name);
