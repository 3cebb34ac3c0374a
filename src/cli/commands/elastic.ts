/**
 * The elastic consumer groups' own commands (`create`, `add`, `drop`,
 * `create-mapping`, `delete-mapping`) with Go cg's arguments and aliases, and their
 * prompt forms. `create` takes the partitioning wildcard indexes as flags (one
 * `--wildcards` per `--filter`), and asks for them on stdin, as Go does, when
 * only `--filter` is given.
 */
import { Option } from "commander";
import type { MemberMapping, PartitioningFilter } from "../../index.js";
import { CliError, UsageError } from "../errors.js";
import { parseMapping, parseNonNegativeInt, parseWildcards } from "../parse.js";
import { addGroupMembers, createElasticGroup, deleteGroupMappings, dropGroupMembers, setGroupMappings } from "../operations.js";
import { renderAdded, renderCreated, renderDropped, renderMappings, renderMappingsDeleted } from "../render.js";
import { withSession, type Session } from "../session.js";
import { arg, collect, mappingsArg, maxMembersArg } from "./common.js";
import { GROUP, STREAM } from "./shared-commands.js";
import type { CommandSpec } from "./spec.js";

/** Go's question for one filter's wildcard indexes. */
export const wildcardsQuestion = (filter: string): string => `space separated partitioning wildcard indexes for filter ${filter}: `;

/**
 * The partitioning filters of `elastic create`: none (whole subject), the flags
 * paired in order, or the filters with their indexes asked on stdin.
 *
 * @throws UsageError when the flags do not pair up, or stdin ends before an answer
 */
export async function partitioningFilters(session: Session, filters: string[], wildcards: number[][] | undefined): Promise<PartitioningFilter[] | null> {
  if (filters.length === 0) {
    if (wildcards && wildcards.length > 0) throw new UsageError("--wildcards needs a --filter: give one --wildcards per --filter, in the same order (no --filter at all partitions on the whole subject)");
    return null;
  }
  if (wildcards && wildcards.length > 0) {
    if (wildcards.length !== filters.length) {
      throw new UsageError(`give one --wildcards per --filter, in the same order ("none" for the whole subject): got ${filters.length} --filter and ${wildcards.length} --wildcards`);
    }
    return filters.map((filter, i) => ({ filter, partitioning_wildcards: wildcards[i] ?? [] }));
  }
  const result: PartitioningFilter[] = [];
  for (const filter of filters) {
    const line = await session.lines.question(wildcardsQuestion(filter));
    if (line === undefined) {
      throw new UsageError(`no partitioning wildcard indexes for filter ${filter} on stdin: pass them with --wildcards (one per --filter, "none" for the whole subject)`);
    }
    result.push({ filter, partitioning_wildcards: parseWildcards(line) });
  }
  return result;
}

const MEMBERS = { name: "members", description: "member names", variadic: true };
const MAPPINGS = { name: "mappings", description: "mappings of members to partition numbers in the format <member>:<partition1>,<partition2>,...", variadic: true, parse: mappingsArg };
const canceled = (): CliError => new CliError("CANCELED", "operation canceled");

/** `elastic create <stream> <name> <max-members> [--filter … --wildcards …]`. */
export const elasticCreateCommand: CommandSpec = {
  name: "create",
  flavours: ["elastic"],
  description: "create an elastic partitioned consumer group (it starts with no members: add them with `add` or `create-mapping`)",
  args: [STREAM, GROUP, { name: "max-members", description: "max number of members (the number of partitions)", parse: maxMembersArg }],
  options: () => [
    new Option("--filter <filter>", "partitioning filter(s), repeatable; none: partition on the whole subject").argParser(collect),
    new Option("--wildcards <indexes>", 'the partitioning wildcard indexes of each --filter, in order: "1", "1,2" or "none" (whole subject); asked on stdin when omitted').argParser(
      (value: string, previous: number[][] | undefined) => [...(previous ?? []), arg(parseWildcards)(value)],
    ),
    new Option("--max-buffered-msgs <n>", "max number of buffered messages (0 for no limit)").argParser(arg((v) => parseNonNegativeInt(v, "--max-buffered-msgs"))).default(0),
    new Option("--max-buffered-bytes <n>", "max number of buffered bytes (0 for no limit)").argParser(arg((v) => parseNonNegativeInt(v, "--max-buffered-bytes"))).default(0),
  ],
  examples: [
    "cg elastic create orders shipping 4",
    "cg elastic create orders shipping 4 --filter 'orders.*.*' --wildcards 1",
    "cg elastic create orders shipping 8 --filter 'orders.*.*' --wildcards 1,2 --filter 'returns.>' --wildcards none",
    "cg elastic create orders shipping 4 --filter 'orders.*.*'    # asks for the indexes",
  ],
  run: async ({ args: [stream, group, maxMembers], opts, cmd }) =>
    withSession(cmd, async (s) => {
      const filters = await partitioningFilters(s, (opts["filter"] as string[] | undefined) ?? [], opts["wildcards"] as number[][] | undefined);
      const doc = await createElasticGroup(await s.js(), {
        stream: stream as string,
        group: group as string,
        maxMembers: maxMembers as number,
        filters,
        maxBufferedMsgs: opts["maxBufferedMsgs"] as number,
        maxBufferedBytes: opts["maxBufferedBytes"] as number,
      });
      s.out.result(doc, renderCreated);
    }),
  prompt: {
    usage: "[stream group max-members]",
    run: async (sh, args) => {
      const { stream, group } = await sh.target(args);
      const maxMembers = await sh.maxMembers(args);
      const js = await sh.session.js();
      const filters = await sh.filterLoop(true);
      const count = (name: string) => (a: string) => (a === "" ? 0 : parseNonNegativeInt(a, name));
      const maxBufferedMsgs = await sh.askParsed("max buffered messages (0 for no limit): ", count("max buffered messages"));
      const maxBufferedBytes = await sh.askParsed("max buffered bytes (0 for no limit): ", count("max buffered bytes"));
      sh.print(renderCreated(await createElasticGroup(js, { stream, group, maxMembers, filters: filters.length > 0 ? filters : null, maxBufferedMsgs, maxBufferedBytes })));
    },
  },
};

/** `elastic add <stream> <name> <members...>`. */
export const addCommand: CommandSpec = {
  name: "add",
  flavours: ["elastic"],
  description: "add members to a partitioned consumer group",
  args: [STREAM, GROUP, MEMBERS],
  examples: ["cg elastic add orders shipping m1 m2 m3"],
  run: async ({ args: [stream, group, members], cmd }) =>
    withSession(cmd, async (s) => s.out.result(await addGroupMembers(await s.js(), stream as string, group as string, members as string[]), renderAdded)),
  prompt: {
    run: async (sh, args) => {
      const { stream, group } = await sh.target(args);
      const members = await sh.members(args);
      sh.print(renderAdded(await addGroupMembers(await sh.session.js(), stream, group, members)));
    },
  },
};

/** `elastic drop <stream> <name> <members...>`. */
export const dropCommand: CommandSpec = {
  name: "drop",
  flavours: ["elastic"],
  description: "drop members from a partitioned consumer group",
  args: [STREAM, GROUP, MEMBERS],
  examples: ["cg elastic drop orders shipping m3"],
  run: async ({ args: [stream, group, members], cmd }) =>
    withSession(cmd, async (s) => s.out.result(await dropGroupMembers(await s.js(), stream as string, group as string, members as string[]), renderDropped)),
  prompt: {
    run: async (sh, args) => {
      const { stream, group } = await sh.target(args);
      const members = await sh.members(args);
      sh.print(renderDropped(await dropGroupMembers(await sh.session.js(), stream, group, members)));
    },
  },
};

/** `elastic create-mapping|cm|createmapping <stream> <name> <mappings...>`. */
export const createMappingCommand: CommandSpec = {
  name: "create-mapping",
  aliases: ["cm", "createmapping"],
  flavours: ["elastic"],
  description: "create member mappings for a partitioned consumer group (replaces its members)",
  args: [STREAM, GROUP, MAPPINGS],
  examples: ["cg elastic create-mapping orders shipping m1:0,1 m2:2,3", "cg elastic cm orders shipping m1:0-2 m2:3"],
  run: async ({ args: [stream, group, mappings], cmd }) =>
    withSession(cmd, async (s) => s.out.result(await setGroupMappings(await s.js(), stream as string, group as string, mappings as MemberMapping[]), renderMappings)),
  prompt: {
    run: async (sh, args) => {
      const { stream, group } = await sh.target(args);
      const mappings = args.length > 2 ? args.slice(2).map(parseMapping) : await sh.mappingLoop();
      if (mappings.length === 0) throw canceled();
      sh.print(renderMappings(await setGroupMappings(await sh.session.js(), stream, group, mappings)));
    },
  },
};

/** `elastic delete-mapping|dm|deletemapping <stream> <name>`. */
export const deleteMappingCommand: CommandSpec = {
  name: "delete-mapping",
  aliases: ["dm", "deletemapping"],
  flavours: ["elastic"],
  description: "delete member mappings for a partitioned consumer group (it has no members afterwards)",
  args: [STREAM, GROUP],
  examples: ["cg elastic delete-mapping orders shipping", "cg elastic dm orders shipping"],
  run: async ({ args: [stream, group], cmd }) =>
    withSession(cmd, async (s) => s.out.result(await deleteGroupMappings(await s.js(), stream as string, group as string), renderMappingsDeleted)),
  prompt: {
    run: async (sh, args) => {
      const { stream, group } = await sh.target(args);
      await sh.confirm();
      sh.print(renderMappingsDeleted(await deleteGroupMappings(await sh.session.js(), stream, group)));
    },
  },
};
