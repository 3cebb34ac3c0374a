/**
 * The commands both flavours share, defined once: `prompt`, `ls`, `info`,
 * `member-info`, `step-down` and `consume`.
 */
import type { Command } from "commander";
import type { GroupKind } from "../../index.js";
import { groupInfo, listGroups, memberInfo, stepDown } from "../operations.js";
import { renderGroupList, renderInfo, renderMemberInfo, renderStepDown } from "../render.js";
import { withSession } from "../session.js";
import { examples } from "./common.js";
import { runConsume, sleepMs } from "./consume.js";
import { runPrompt } from "./prompt.js";

/**
 * Adds `prompt`, `ls` and `info` to a flavour's command.
 *
 * @param mode - the `static` or `elastic` command
 * @param kind - its flavour
 * @param example - the stream and group its help examples use
 */
export function registerGroupCommands(mode: Command, kind: GroupKind, example: { stream: string; group: string }): void {
  examples(
    mode
      .command("prompt")
      .description("interactive prompt")
      .action(async (_opts: unknown, cmd: Command) => withSession(cmd, (s) => runPrompt(s, kind))),
    [`cg ${kind} prompt`],
  );

  examples(
    mode
      .command("ls")
      .alias("list")
      .description("list the consumer groups defined on a stream")
      .argument("<stream>", "stream name")
      .action(async (stream: string, _opts: unknown, cmd: Command) =>
        withSession(cmd, async (s) => s.out.result(await listGroups(await s.js(), kind, stream), renderGroupList)),
      ),
    [`cg ${kind} ls ${example.stream}`, `cg ${kind} list ${example.stream} --json`],
  );

  examples(
    mode
      .command("info")
      .description(`get ${kind} consumer group info: config, active members and the partition → member table`)
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .action(async (stream: string, group: string, _opts: unknown, cmd: Command) =>
        withSession(cmd, async (s) => s.out.result(await groupInfo(await s.js(), kind, stream, group), renderInfo)),
      ),
    [`cg ${kind} info ${example.stream} ${example.group}`, `cg ${kind} info ${example.stream} ${example.group} --json`],
  );
}

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
