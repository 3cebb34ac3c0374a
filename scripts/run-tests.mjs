#!/usr/bin/env node
// Runs the compiled test suite with node:test. Each test file starts its own
// nats-server(s), so files can run in parallel.
//   node scripts/run-tests.mjs                 # everything
//   node scripts/run-tests.mjs unit            # one folder under dist/test
//   node scripts/run-tests.mjs unit integration/static-consume.test.js   # a folder and a file
// Node 22+ takes a folder given to `node --test` for a module path (and runs
// nothing), so the folders are expanded here into explicit file lists.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const testRoot = join(root, "dist", "test");

/** Every `*.test.js` under `dir`, sorted, recursively. */
function testFiles(dir) {
  return readdirSync(dir, { withFileTypes: true })
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .flatMap((entry) => {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) return testFiles(path);
      return entry.isFile() && entry.name.endsWith(".test.js") ? [path] : [];
    });
}

const args = process.argv.slice(2);
const files = (args.length > 0 ? args : ["unit", "integration"]).flatMap((arg) => {
  const path = join(testRoot, arg);
  if (!existsSync(path)) {
    console.error(`run-tests: ${path} does not exist (build first: tsc -p tsconfig.json)`);
    process.exit(2);
  }
  return statSync(path).isDirectory() ? testFiles(path) : [path];
});
if (files.length === 0) {
  console.error(`run-tests: no *.test.js files under ${args.join(", ") || "unit, integration"}`);
  process.exit(2);
}
// The soaks run 9-10 processes with a 1 s AckWait for about 75 s: they run on their own,
// after the rest, so the other files' load does not stretch their timings.
const SOLO = ["soak.test.js", "autoscale-soak.test.js"];
const solo = files.filter((f) => SOLO.some((name) => f.endsWith(`/${name}`)));
const shared = files.filter((f) => !solo.includes(f));
const concurrency = process.env.TEST_CONCURRENCY ?? String(Math.max(2, availableParallelism()));
// A test file that leaves a connection or a timer open never exits, and node --test
// waits for it forever. Each batch therefore has a deadline (the whole suite takes
// 7-10 minutes on a 2-core machine); when it passes, the runner is stopped, and it
// reports the files that had not ended as cancelled ("Promise resolution is still
// pending"): those are the ones that hung.
const deadlineMinutes = Number(process.env.TEST_RUN_TIMEOUT_MIN ?? "30");
if (!(deadlineMinutes > 0)) {
  console.error(`run-tests: TEST_RUN_TIMEOUT_MIN must be a positive number of minutes, not ${process.env.TEST_RUN_TIMEOUT_MIN}`);
  process.exit(2);
}
let status = 0;
for (const [batch, parallel] of [[shared, concurrency], [solo, "1"]]) {
  if (batch.length === 0) continue;
  const result = spawnSync(process.execPath, ["--test", `--test-concurrency=${parallel}`, "--test-reporter=spec", ...batch], {
    cwd: root,
    stdio: "inherit",
    timeout: deadlineMinutes * 60_000,
    killSignal: "SIGTERM",
  });
  if (result.error?.code === "ETIMEDOUT") {
    console.error(
      `run-tests: the test run did not end within ${deadlineMinutes} min (TEST_RUN_TIMEOUT_MIN) and was stopped. ` +
        "The files reported above as cancelled did not exit: a test left a connection, a server or a timer open.",
    );
    status = 1;
  } else if (result.status !== 0) {
    status = result.status ?? 1;
  }
}
process.exit(status);
