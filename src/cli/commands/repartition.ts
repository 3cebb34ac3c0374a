/**
 * `cg elastic repartition <stream> <name> <partitions> [--force]`: grows a live
 * elastic group's partition count, showing progress; interrupted, it is resumed by
 * running it again. `cg static repartition` prints the steps for a static group.
 */
import { Option } from "commander";
import { repartition, staticRepartitionPlan, ConsumerGroupError, type RepartitionProgress, type RepartitionResult, type RepartitionRetry, type StaticRepartitionPlan } from "../../index.js";
import { ExitRequest } from "../errors.js";
import type { Styler } from "../output.js";
import { exitCodeFor, onStopSignal, type StopSignal } from "../signals.js";
import { withSession } from "../session.js";
import { flavourOf, type CommandSpec } from "./spec.js";
import { arg } from "./common.js";
import { parsePositiveInt } from "../parse.js";
import { GROUP, STREAM } from "./shared-commands.js";

const BAR_WIDTH = 24;

/**
 * One progress line: phase, a bar of what is left, messages left per old partition,
 * held partitions, an estimate.
 *
 * @param peak - the most messages left seen so far (the bar's full length)
 */
export function renderProgress(p: RepartitionProgress, s: Styler, peak: number): string {
  const oldLeft = p.oldLeft.reduce((a, b) => a + b, 0);
  const left = oldLeft + p.transitionLeft;
  const what = p.phase === "moving" ? `${oldLeft} old-layout messages left` : p.phase === "finishing" ? `${p.transitionLeft} transition messages left` : "done";
  const filled = p.phase === "done" ? BAR_WIDTH : peak === 0 ? 0 : Math.round(((peak - left) / peak) * BAR_WIDTH);
  const bar = `[${"#".repeat(filled)}${"-".repeat(BAR_WIDTH - filled)}]`;
  const perPartition = p.phase === "moving" ? `  (${p.oldLeft.map((n, i) => `p${i} ${n}`).join(" · ")})` : "";
  const held = p.heldBack.length > 0 ? `  held back: ${p.heldBack.join(",")}` : "";
  const behind = p.membersBehind.length > 0 ? `  rejoining: ${p.membersBehind.join(",")}` : "";
  const eta = p.etaMs !== undefined && p.phase !== "done" ? `  eta ${Math.ceil(p.etaMs / 1000)}s` : "";
  return `${s.bold(p.phase.padEnd(9))} ${bar} ${what}${perPartition}${held}${behind}${eta}`;
}

/** The line printed before a transient server error is tried again. */
export function renderRetry(r: RepartitionRetry): string {
  return `transient server error, trying again in ${(r.delayMs / 1000).toFixed(1)}s (attempt ${r.attempt} of ${r.maxAttempts}): ${r.error.message}`;
}

/** The closing line of a repartition. */
export function renderRepartitioned(r: RepartitionResult): string {
  const forced = r.unverifiedMembers.length > 0 ? ` (forced past members not shown to be nats-pcgroups: ${r.unverifiedMembers.join(", ")})` : "";
  return `repartitioned from ${r.from} to ${r.to} partitions in ${(r.durationMs / 1000).toFixed(1)}s${r.resumed ? " (resumed)" : ""}${forced}`;
}

/** The steps of a static repartition, numbered, with their commands. */
export function renderStaticPlan(plan: StaticRepartitionPlan, s: Styler): string {
  const lines = [
    `${s.bold(`${plan.stream}.${plan.group}`)} is a static group: its partitions come from the stream's own transform (${plan.transform.dest}), which the library does not change. To go from ${plan.from} to ${plan.to} partitions:`,
    "",
  ];
  plan.steps.forEach((step, i) => {
    lines.push(`${i + 1}. ${step.what}`);
    if (step.command) lines.push(`     ${step.command}`);
  });
  return lines.join("\n");
}

/** `static|elastic repartition <stream> <name> <partitions>`. */
export const repartitionCommand: CommandSpec = {
  name: "repartition",
  flavours: ["static", "elastic"],
  description: (kind) =>
    kind === "elastic"
      ? "grow a live elastic group's partition count, keeping per-key order (run it again to resume one that was interrupted)"
      : "print the steps that repartition a static group (its stream's transform is yours to change)",
  args: [STREAM, GROUP, { name: "partitions", description: "the new partition count", parse: arg((v) => parsePositiveInt(v, "partitions")) }],
  options: (kind) => (kind === "elastic" ? [new Option("--force", "go on although some members cannot be shown to be nats-pcgroups (consumers of members no running instance vouches for, as Go's, members not running); start no Go instance of the group until it is done")] : []),
  examples: (kind) =>
    kind === "elastic" ? ["cg elastic repartition orders shipping 12", "cg elastic repartition orders shipping 12 --json"] : ["cg static repartition orders billing 8"],
  run: async ({ kind, args: [stream, group, partitions], opts, cmd }) =>
    withSession(cmd, async (s) => {
      const js = await s.js();
      if (flavourOf(kind) === "static") {
        s.out.result(await staticRepartitionPlan(js, stream as string, group as string, partitions as number), renderStaticPlan);
        return;
      }
      const stop = new AbortController();
      let signal: StopSignal | undefined;
      const release = onStopSignal((sig) => {
        signal = sig;
        stop.abort();
      });
      const live = !s.out.json && process.stderr.isTTY === true;
      let lastPhase = "";
      let lastAt = 0;
      let peak = 0;
      try {
        const result = await repartition(js, stream as string, group as string, partitions as number, {
          force: opts["force"] === true,
          signal: stop.signal,
          onRetry: (r) => {
            if (s.out.json) return s.out.event({ retry: { attempt: r.attempt, maxAttempts: r.maxAttempts, delayMs: r.delayMs, error: r.error.message } }, () => "");
            process.stderr.write(`${live ? "\n" : ""}${renderRetry(r)}\n`);
          },
          onProgress: (p) => {
            if (s.out.json) return s.out.event({ progress: p }, () => "");
            peak = Math.max(peak, p.oldLeft.reduce((a, b) => a + b, 0) + p.transitionLeft);
            const line = renderProgress(p, s.out.err, peak);
            // On a terminal the line is redrawn; elsewhere a line is printed when it changes, at most once a second.
            if (live) process.stderr.write(`\r\x1b[2K${line}`);
            else if (p.phase !== lastPhase || Date.now() - lastAt >= 1000) {
              process.stderr.write(`${line}\n`);
              lastAt = Date.now();
              lastPhase = p.phase;
            }
          },
        });
        if (live) process.stderr.write("\n");
        s.out.result(result, renderRepartitioned);
      } catch (err) {
        if (live) process.stderr.write("\n");
        if (signal && err instanceof ConsumerGroupError && err.code === "STOPPED") {
          s.out.error({ code: err.code, message: err.message, exitCode: exitCodeFor(signal) });
          throw new ExitRequest(exitCodeFor(signal));
        }
        throw err;
      } finally {
        release();
      }
    }),
  prompt: { unavailable: (kind) => (kind === "elastic" ? `run "cg elastic repartition <stream> <name> <partitions>" outside the prompt: it shows progress until done` : `run "cg static repartition <stream> <name> <partitions>"`) },
};
