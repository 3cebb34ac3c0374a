/**
 * `cg demo` runs to completion against its own embedded server and reports success;
 * Ctrl-C stops it and cleans up.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const CG = fileURLToPath(new URL("../../src/cli/main.js", import.meta.url));

/**
 * Member processes still running of the demo whose server is at `url` (its members get
 * the URL as their first argument; other demos may run on the machine at the same time).
 */
function demoProcesses(url: string): string[] {
  const pattern = `cli/demo/member-process.js ${url.replace(/[.]/g, "\\.")}( |$)`;
  try {
    return execFileSync("pgrep", ["-f", pattern], { encoding: "utf8" }).trim().split("\n").filter(Boolean);
  } catch {
    return [];
  }
}

describe("cli - cg demo", () => {
  test("cli - demo: runs to completion on a fresh embedded server and reports success", async () => {
    const child = spawn(process.execPath, [CG, "demo", "--json", "--orders", "600", "--rate", "200"], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NATS_URL: "" } });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    assert.equal(code, 0, stderr);
    const result = JSON.parse(stdout) as { ok: boolean; published: number; unique: number; lost: number; out_of_order_keys: number; failover_ms: number | null; rebalance_ms: number | null };
    assert.equal(result.ok, true);
    assert.equal(result.published, 600);
    assert.equal(result.unique, 600);
    assert.equal(result.lost, 0);
    assert.equal(result.out_of_order_keys, 0);
    assert.ok(result.failover_ms !== null, "the standby took over");
    assert.ok(result.rebalance_ms !== null, "the fourth member handled orders");
    const url = /started an embedded nats-server \S+ on (nats:\/\/127\.0\.0\.1:\d+)/.exec(stderr)?.[1];
    assert.ok(url, `the demo names its server's URL (stderr: ${stderr.slice(0, 300)})`);
    assert.deepEqual(demoProcesses(url), [], "no member process left behind");
  });

  test("cli - demo: Ctrl-C stops it, cleans up and exits 130", async () => {
    const child = spawn(process.execPath, [CG, "demo", "--orders", "100000", "--rate", "200"], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NATS_URL: "" } });
    let stderr = "";
    const started = new Promise<void>((resolve) =>
      child.stderr.on("data", (d: Buffer) => {
        stderr += d.toString();
        if (stderr.includes("4. publishing")) resolve();
      }),
    );
    await started;
    child.kill("SIGINT");
    const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
    assert.equal(code, 130, stderr);
    assert.match(stderr, /interrupted; everything it started was cleaned up/);
    const url = /started an embedded nats-server \S+ on (nats:\/\/127\.0\.0\.1:\d+)/.exec(stderr)?.[1];
    assert.ok(url, `the demo names its server's URL (stderr: ${stderr.slice(0, 300)})`);
    assert.deepEqual(demoProcesses(url), [], "no member process left behind");
  });
});
