/**
 * `cg demo`: the guided demo, against an embedded nats-server unless --server is given.
 */
import { Option } from "commander";
import { runDemo } from "../demo/run-demo.js";
import { exitCodeFor, onStopSignal, type StopSignal } from "../signals.js";
import type { CommandSpec } from "./spec.js";

/** `cg demo`. */
export const demoCommand: CommandSpec = {
  name: "demo",
  description: "run the guided demo: an elastic group, a crash, a rebalance, and a check that nothing was lost or reordered",
  options: () => [
    new Option("--customers <n>", "customers (keys)").default("50"),
    new Option("--orders <n>", "orders to publish").default("1500"),
    new Option("--rate <n>", "orders per second").default("300"),
    new Option("--handler-ms <n>", "simulated processing time per order").default("5"),
  ],
  examples: ["cg demo                       # embedded nats-server, about 20 s", "cg -s nats://127.0.0.1:4222 demo --orders 3000"],
  run: async ({ opts: raw, cmd }) => {
    const opts = raw as { customers: string; orders: string; rate: string; handlerMs: string };
    const globals = cmd.optsWithGlobals<{ server?: string; json?: boolean }>();
    const source = cmd.parent?.getOptionValueSource("server");
    const explicitServer = source === "cli" || source === "env" ? globals.server : undefined;
    const num = (v: string, name: string): number => {
      const n = Number(v);
      if (!Number.isInteger(n) || n <= 0) cmd.error(`--${name} must be a positive integer, got "${v}"`, { exitCode: 2, code: "cg.usage" });
      return n;
    };
    // Ctrl-C stops the demo where it is; runDemo then stops its members and server before we exit.
    const abort = new AbortController();
    let stoppedBy: StopSignal | undefined;
    const removeHandler = onStopSignal((signal) => {
      stoppedBy = signal;
      abort.abort();
    });
    const result = await runDemo({
      signal: abort.signal,
      ...(explicitServer ? { server: explicitServer } : {}),
      customers: num(opts.customers, "customers"),
      orders: num(opts.orders, "orders"),
      rate: num(opts.rate, "rate"),
      handlerMs: Number(opts.handlerMs),
      log: (line) => process.stderr.write(line + "\n"),
      live: process.stderr.isTTY === true && !globals.json,
    })
      .catch((err: unknown) => {
        if (stoppedBy) return undefined;
        throw err;
      })
      .finally(removeHandler);
    if (!result) {
      process.stderr.write("demo interrupted; everything it started was cleaned up\n");
      process.exitCode = exitCodeFor(stoppedBy ?? "SIGINT");
      return;
    }
    const { report } = result;
    if (globals.json) {
      process.stdout.write(
        JSON.stringify({
          ok: result.ok,
          server_version: result.serverVersion,
          published: report.published,
          handled: report.handled,
          unique: report.unique,
          duplicates: report.duplicates,
          lost: report.lost.length,
          out_of_order_keys: report.outOfOrder.length,
          failover_ms: result.failoverMs === undefined ? null : Math.round(result.failoverMs),
          rebalance_ms: result.rebalanceMs === undefined ? null : Math.round(result.rebalanceMs),
          per_instance: result.perInstance,
          elapsed_ms: Math.round(result.elapsedMs),
        }) + "\n",
      );
    } else {
      const lines = [
        "8. verification:",
        `   published ${report.published} orders; handled ${report.handled} times (${report.unique} distinct, ${report.duplicates} redeliveries after the crash/rebalance)`,
        report.lost.length === 0 ? "   every order was processed: none lost" : `   LOST ${report.lost.length} orders, e.g. ${JSON.stringify(report.lost.slice(0, 3))}`,
        report.outOfOrder.length === 0
          ? "   per-customer order held: each customer's orders were first handled in the order they were published"
          : `   ORDER BROKEN for ${report.outOfOrder.length} customers, e.g. ${JSON.stringify(report.outOfOrder[0])}`,
        `   per instance: ${Object.entries(result.perInstance).map(([k, v]) => `${k}=${v}`).join(", ")}`,
        `9. cleaned up; the demo took ${(result.elapsedMs / 1000).toFixed(1)} s`,
        result.ok ? "RESULT: OK" : "RESULT: FAILED",
      ];
      process.stdout.write(lines.join("\n") + "\n");
    }
    if (!result.ok) process.exitCode = 1;
  },
};
