/**
 * `cg static …`: static consumer groups, with Go cg's commands, arguments and aliases.
 */
import type { Command } from "commander";
import type { MemberMapping } from "../../index.js";
import { createStaticGroup, deleteGroup } from "../operations.js";
import { renderCreated, renderDeleted } from "../render.js";
import { withSession, type Session } from "../session.js";
import { DELETE_WARNING, collect, confirmOrCancel, examples, mappingsArg, maxMembersArg } from "./common.js";
import { sleepOption } from "./consume.js";
import { registerGroupCommands, registerMemberCommands } from "./shared-commands.js";

function printWarnings(session: Session, warnings: readonly string[]): void {
  for (const w of warnings) session.out.warn(w);
}

/** Adds `cg static` and its subcommands. */
export function registerStatic(program: Command): void {
  const mode = program.command("static").description("static consumer groups mode").addOption(sleepOption());
  examples(mode, [
    "cg static create balanced orders billing 4 m1 m2",
    "cg static info orders billing",
    "cg static consume orders billing m1",
    "cg static prompt",
  ]);

  registerGroupCommands(mode, "static", { stream: "orders", group: "billing" });

  const create = mode.command("create").description("create a static partitioned consumer group");
  examples(create, ["cg static create balanced orders billing 4 m1 m2", "cg static create mapped orders billing 4 m1:0,1 m2:2,3"]);
  examples(
    create
      .command("balanced")
      .description("create a static partitioned consumer group with balanced members")
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .argument("<max-members>", "max number of members (the number of partitions)", maxMembersArg)
      .argument("<members...>", "member names")
      .option("--filter <filter>", "filter(s) on the subject after the partition number, repeatable", collect)
      .action(async (stream: string, group: string, maxMembers: number, members: string[], opts: { filter?: string[] }, cmd: Command) =>
        withSession(cmd, async (s) => {
          const doc = await createStaticGroup(await s.js(), { stream, group, maxMembers, filters: opts.filter ?? [], members });
          printWarnings(s, doc.warnings);
          s.out.result(doc, renderCreated);
        }),
      ),
    ["cg static create balanced orders billing 4 m1 m2", "cg static create balanced orders billing 4 m1 m2 --filter 'orders.*'"],
  );
  examples(
    create
      .command("mapped")
      .description("create a static partitioned consumer group with member mappings")
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .argument("<max-members>", "max number of members (the number of partitions)", maxMembersArg)
      .argument("<mappings...>", "mappings of members to partition numbers in the format <member>:<partition1>,<partition2>,...", mappingsArg)
      .option("--filter <filter>", "filter(s) on the subject after the partition number, repeatable", collect)
      .action(async (stream: string, group: string, maxMembers: number, mappings: MemberMapping[], opts: { filter?: string[] }, cmd: Command) =>
        withSession(cmd, async (s) => {
          const doc = await createStaticGroup(await s.js(), { stream, group, maxMembers, filters: opts.filter ?? [], mappings });
          printWarnings(s, doc.warnings);
          s.out.result(doc, renderCreated);
        }),
      ),
    ["cg static create mapped orders billing 4 m1:0,1 m2:2,3", "cg static create mapped orders billing 6 m1:0-3 m2:4,5"],
  );

  examples(
    mode
      .command("delete")
      .alias("rm")
      .description("delete a static partitioned consumer group (its members stop consuming)")
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .option("-f, --force", "force delete the consumer group, without asking")
      .action(async (stream: string, group: string, opts: { force?: boolean }, cmd: Command) =>
        withSession(cmd, async (s) => {
          if (!opts.force) await confirmOrCancel(s, DELETE_WARNING);
          s.out.result(await deleteGroup(await s.js(), "static", stream, group), renderDeleted);
        }),
      ),
    ["cg static delete orders billing", "cg static rm orders billing -f"],
  );

  registerMemberCommands(mode, "static", { stream: "orders", group: "billing" });
}
