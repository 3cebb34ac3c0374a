#!/usr/bin/env node
// One-step set-up for a fresh clone: installs the npm dependencies when they are
// missing or stale, then the pinned tools (nats-server, Go reference CLI).
import { spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const lock = join(root, "package-lock.json");
const installed = join(root, "node_modules", ".package-lock.json");

function run(cmd, args) {
  const result = spawnSync(cmd, args, { cwd: root, stdio: "inherit" });
  if (result.status !== 0) process.exit(result.status ?? 1);
}

if (!existsSync(installed) || statSync(installed).mtimeMs < statSync(lock).mtimeMs) {
  console.log("bootstrap: installing npm dependencies (npm ci) ...");
  run("npm", ["ci", "--no-audit", "--no-fund"]);
}
run(process.execPath, [join(root, "scripts", "install-tools.mjs"), ...process.argv.slice(2)]);
