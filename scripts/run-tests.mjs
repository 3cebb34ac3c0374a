#!/usr/bin/env node
// Runs the compiled test suite with node:test. Each test file starts its own
// nats-server(s), so files can run in parallel.
//   node scripts/run-tests.mjs                 # everything
//   node scripts/run-tests.mjs unit            # one folder under dist/test
import { spawnSync } from "node:child_process";
import { availableParallelism } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const folders = process.argv.slice(2);
const targets = (folders.length > 0 ? folders : ["unit", "integration"]).map((f) => join(root, "dist", "test", f) + "/");
const concurrency = process.env.TEST_CONCURRENCY ?? String(Math.max(2, availableParallelism()));
const result = spawnSync(process.execPath, ["--test", `--test-concurrency=${concurrency}`, "--test-reporter=spec", ...targets], {
  cwd: root,
  stdio: "inherit",
});
process.exit(result.status ?? 1);
