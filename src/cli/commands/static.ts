/**
 * `cg static create balanced|mapped`: static consumer groups' own command, with Go
 * cg's arguments, and its prompt form (which asks for members or mappings).
 */
import { Option } from "commander";
import type { MemberMapping } from "../../index.js";
import { createStaticGroup } from "../operations.js";
import { words } from "../parse.js";
import { renderCreated } from "../render.js";
import { withSession, type Session } from "../session.js";
import { collect, mappingsArg, maxMembersArg } from "./common.js";
import { GROUP, STREAM } from "./shared-commands.js";
import type { CommandSpec } from "./spec.js";

function printWarnings(session: Session, warnings: readonly string[]): void {
  for (const w of warnings) session.out.warn(w);
}

const MAX_MEMBERS = { name: "max-members", description: "max number of members (the number of partitions)", parse: maxMembersArg };
const filterOption = (): Option => new Option("--filter <filter>", "filter(s) on the subject after the partition number, repeatable").argParser(collect);

/** `static create balanced|mapped`; in the prompt, `create` asks for the rest. */
export const staticCreateCommand: CommandSpec = {
  name: "create",
  flavours: ["static"],
  description: "create a static partitioned consumer group",
  examples: ["cg static create balanced orders billing 4 m1 m2", "cg static create mapped orders billing 4 m1:0,1 m2:2,3"],
  subcommands: [
    {
      name: "balanced",
      description: "create a static partitioned consumer group with balanced members",
      args: [STREAM, GROUP, MAX_MEMBERS, { name: "members", description: "member names", variadic: true }],
      options: () => [filterOption()],
      examples: ["cg static create balanced orders billing 4 m1 m2", "cg static create balanced orders billing 4 m1 m2 --filter 'orders.*'"],
      run: async ({ args: [stream, group, maxMembers, members], opts, cmd }) =>
        withSession(cmd, async (s) => {
          const doc = await createStaticGroup(await s.js(), {
            stream: stream as string,
            group: group as string,
            maxMembers: maxMembers as number,
            filters: (opts["filter"] as string[] | undefined) ?? [],
            members: members as string[],
          });
          printWarnings(s, doc.warnings);
          s.out.result(doc, renderCreated);
        }),
    },
    {
      name: "mapped",
      description: "create a static partitioned consumer group with member mappings",
      args: [
        STREAM,
        GROUP,
        MAX_MEMBERS,
        { name: "mappings", description: "mappings of members to partition numbers in the format <member>:<partition1>,<partition2>,...", variadic: true, parse: mappingsArg },
      ],
      options: () => [filterOption()],
      examples: ["cg static create mapped orders billing 4 m1:0,1 m2:2,3", "cg static create mapped orders billing 6 m1:0-3 m2:4,5"],
      run: async ({ args: [stream, group, maxMembers, mappings], opts, cmd }) =>
        withSession(cmd, async (s) => {
          const doc = await createStaticGroup(await s.js(), {
            stream: stream as string,
            group: group as string,
            maxMembers: maxMembers as number,
            filters: (opts["filter"] as string[] | undefined) ?? [],
            mappings: mappings as MemberMapping[],
          });
          printWarnings(s, doc.warnings);
          s.out.result(doc, renderCreated);
        }),
    },
  ],
  prompt: {
    usage: "[stream group max-members]",
    run: async (sh, args) => {
      const { stream, group } = await sh.target(args);
      const maxMembers = await sh.maxMembers(args);
      const js = await sh.session.js();
      const members = words(await sh.ask("space separated set of members (hit return to set member mappings instead): "));
      const mappings = members.length > 0 ? undefined : await sh.mappingLoop();
      const filters = (await sh.filterLoop(false)).map((f) => f.filter);
      const doc = await createStaticGroup(js, { stream, group, maxMembers, filters, ...(mappings ? { mappings } : { members }) });
      for (const w of doc.warnings) sh.session.out.warn(w);
      sh.print(renderCreated(doc));
    },
  },
};
