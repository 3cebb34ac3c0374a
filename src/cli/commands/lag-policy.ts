/**
 * What `elastic lag` and `elastic consume --metrics-port` share about the lag: the
 * flags that shape the recommendation (`--target-drain`, `--rate-per-member`), their
 * parsers, and reading the lag with the CLI's error hints.
 */
import { Option, type Command } from "commander";
import type { JetStreamClient } from "@nats-io/jetstream";
import { DEFAULT_TARGET_DRAIN_MS, MAX_LAG_SAMPLE_MS, groupLag, type GroupLag, type GroupLagOptions } from "../../index.js";
import { UsageError } from "../errors.js";
import { formatDuration, parseDuration, parsePositiveNumber } from "../parse.js";
import { arg, withListHint } from "./common.js";

/** How the recommendation is asked for: `--target-drain` and `--rate-per-member`. */
export interface LagPolicy {
  /** Drain the backlog within this long, in ms. */
  targetDrainMs: number;
  /** Messages per second one member handles; measured when absent. */
  ratePerMember: number | undefined;
}

/** Parses `--target-drain`: a duration > 0. */
export function parseTargetDrain(value: string): number {
  const ms = parseDuration(value, "--target-drain");
  if (!(ms > 0)) throw new UsageError(`--target-drain must be a duration > 0 such as 30s or 2m, got "${value}"`);
  return ms;
}

/** Parses `--sample`: a duration from 0 (no measurement) to 60 s. */
export function parseSample(value: string): number {
  const ms = parseDuration(value, "--sample");
  if (ms > MAX_LAG_SAMPLE_MS) throw new UsageError(`--sample must be at most ${formatDuration(MAX_LAG_SAMPLE_MS)}, got "${value}"`);
  return ms;
}

/**
 * `--target-drain` and `--rate-per-member`, shared by `elastic lag` and `elastic consume`
 * (where they shape what the metrics endpoint recommends).
 *
 * @param what - what the options shape, for the help
 */
export function lagPolicyOptions(what = "recommend"): Option[] {
  return [
    new Option("--target-drain <duration>", `${what} enough members to drain the backlog within this long`).default(formatDuration(DEFAULT_TARGET_DRAIN_MS)).argParser(arg((v) => (parseTargetDrain(v), v))),
    new Option("--rate-per-member <msgs/s>", "messages per second one member handles (from a benchmark of your handler); measured from the work queue when absent").argParser(
      arg((v) => parsePositiveNumber(v, "--rate-per-member")),
    ),
  ];
}

/** The policy a command line asks for. */
export function lagPolicy(cmd: Command): LagPolicy {
  const opts = cmd.opts<{ targetDrain: string; ratePerMember?: number }>();
  return { targetDrainMs: parseTargetDrain(opts.targetDrain), ratePerMember: opts.ratePerMember };
}

/**
 * Reads a group's lag, adding to "no such group" errors how to list the groups.
 *
 * @throws ConsumerGroupError as {@link groupLag}
 */
export async function lagForCli(js: JetStreamClient, stream: string, group: string, policy: LagPolicy, extra: Omit<GroupLagOptions, "targetDrainMs" | "ratePerMember"> = {}): Promise<GroupLag> {
  try {
    return await groupLag(js, stream, group, { ...extra, targetDrainMs: policy.targetDrainMs, ...(policy.ratePerMember !== undefined ? { ratePerMember: policy.ratePerMember } : {}) });
  } catch (err) {
    throw withListHint(err, "elastic", stream);
  }
}
