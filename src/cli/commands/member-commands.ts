/**
 * The member commands both flavours share: `member-info`, `step-down` and `consume`.
 */
import type { Command } from "commander";
import type { GroupKind } from "../../index.js";
import { memberInfo, stepDown } from "../operations.js";
import { renderMemberInfo, renderStepDown } from "../render.js";
import { withSession } from "../session.js";
import { examples } from "./common.js";
import { runConsume, sleepMs } from "./consume.js";

/**
 * Adds `member-info`, `step-down` and `consume` to a flavour's command.
 *
 * @param mode - the `static` or `elastic` command
 * @param kind - its flavour
 * @param example - the stream and group its help examples use
 */
export function registerMemberCommands(mode: Command, kind: GroupKind, example: { stream: string; group: string }): void {
  const where = `${example.stream} ${example.group}`;
  const withMember = (cmd: Command): Command =>
    cmd.argument("<stream>", "stream name").argument("<name>", "consumer group name").argument("<member>", "member name");

  examples(
    withMember(mode.command("member-info").aliases(["memberinfo", "minfo"]).description(`get ${kind} consumer group member info`)).action(
      async (stream: string, group: string, member: string, _opts: unknown, cmd: Command) =>
        withSession(cmd, async (s) => s.out.result(await memberInfo(await s.js(), kind, stream, group, member), renderMemberInfo)),
    ),
    [`cg ${kind} member-info ${where} m1`, `cg ${kind} minfo ${where} m1 --json`],
  );

  examples(
    withMember(mode.command("step-down").aliases(["stepdown", "sd"]).description("initiate a step down for a member: the server pins another of its instances")).action(
      async (stream: string, group: string, member: string, _opts: unknown, cmd: Command) =>
        withSession(cmd, async (s) => s.out.result(await stepDown(await s.js(), kind, stream, group, member), renderStepDown)),
    ),
    [`cg ${kind} step-down ${where} m1`, `cg ${kind} sd ${where} m1`],
  );

  examples(
    withMember(
      mode
        .command("consume")
        .alias("join")
        .description(`join ${kind === "static" ? "a static" : "an elastic"} partitioned consumer group as a member instance (Ctrl-C to stop)`),
    ).action(async (stream: string, group: string, member: string, _opts: unknown, cmd: Command) =>
      withSession(cmd, (s) => runConsume(s, { kind, stream, group, member, sleepMs: sleepMs(cmd) })),
    ),
    [`cg ${kind} consume ${where} m1`, `cg ${kind} join ${where} m1 --sleep 100ms --json`],
  );
}
