/**
 * `cg elastic lag`: the lag signal of an elastic group for autoscalers, from the
 * library's `groupLag`: the backlog per partition, per member and in all, the source
 * lag, the drain rate and the recommended member count. One JSON document with
 * `--json` (the same document the `/lag` route of `consume --metrics-port` serves).
 */
import { Option } from "commander";
import { DEFAULT_LAG_SAMPLE_MS, DEFAULT_TARGET_DRAIN_MS } from "../../index.js";
import { lagDoc } from "../lag-doc.js";
import { formatDuration } from "../parse.js";
import { renderLag } from "../render.js";
import { withSession } from "../session.js";
import { arg } from "./common.js";
import { lagForCli, lagPolicy, lagPolicyOptions, parseSample } from "./lag-policy.js";
import { GROUP, STREAM, where } from "./shared-commands.js";
import type { CommandSpec } from "./spec.js";

/** `elastic lag <stream> <name> [--target-drain] [--rate-per-member] [--sample]`. */
export const lagCommand: CommandSpec = {
  name: "lag",
  flavours: ["elastic"],
  description: "the lag signal for autoscalers: pending messages per partition, per member and in all, the source lag, the drain rate and the recommended member count",
  args: [STREAM, GROUP],
  options: () => [
    ...lagPolicyOptions(),
    new Option("--sample <duration>", "watch the work queue this long to measure the drain rate (0: do not measure)").default(formatDuration(DEFAULT_LAG_SAMPLE_MS)).argParser(arg((v) => (parseSample(v), v))),
  ],
  examples: [`cg elastic lag ${where("elastic")}`, `cg elastic lag ${where("elastic")} --target-drain 30s --json`, `cg elastic lag ${where("elastic")} --rate-per-member 200 --sample 0`],
  run: async ({ args: [stream, group], opts, cmd }) =>
    withSession(cmd, async (s) => {
      const policy = lagPolicy(cmd);
      const sampleMs = parseSample(opts["sample"] as string);
      s.out.result(lagDoc(await lagForCli(await s.js(), stream as string, group as string, policy, { sampleMs })), renderLag);
    }),
  prompt: {
    run: async (sh, args) => {
      const { stream, group } = await sh.target(args);
      const policy = { targetDrainMs: DEFAULT_TARGET_DRAIN_MS, ratePerMember: undefined };
      sh.print(renderLag(lagDoc(await lagForCli(await sh.session.js(), stream, group, policy)), sh.session.out.out));
    },
  },
};
