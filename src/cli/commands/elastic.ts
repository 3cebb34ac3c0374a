/**
 * `cg elastic …`: elastic consumer groups, with Go cg's commands, arguments and
 * aliases. `create` takes the partitioning wildcard indexes as flags (one
 * `--wildcards` per `--filter`), and asks for them on stdin, as Go does, when
 * only `--filter` is given.
 */
import type { Command } from "commander";
import type { MemberMapping, PartitioningFilter } from "../../index.js";
import { UsageError } from "../errors.js";
import { parseNonNegativeInt, parseWildcards } from "../parse.js";
import { addGroupMembers, createElasticGroup, deleteGroup, deleteGroupMappings, dropGroupMembers, setGroupMappings } from "../operations.js";
import {
  renderAdded,
  renderCreated,
  renderDeleted,
  renderDropped,
  renderMappings,
  renderMappingsDeleted,
} from "../render.js";
import { withSession, type Session } from "../session.js";
import { DELETE_WARNING, arg, collect, confirmOrCancel, examples, mappingsArg, maxMembersArg } from "./common.js";
import { sleepOption } from "./consume.js";
import { registerGroupCommands, registerMemberCommands } from "./shared-commands.js";

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

interface CreateOptions {
  filter?: string[];
  wildcards?: number[][];
  maxBufferedMsgs: number;
  maxBufferedBytes: number;
}

/** Adds `cg elastic` and its subcommands. */
export function registerElastic(program: Command): void {
  const mode = program.command("elastic").description("elastic consumer groups mode").addOption(sleepOption());
  examples(mode, [
    "cg elastic create orders shipping 4 --filter 'orders.*.*' --wildcards 1",
    "cg elastic add orders shipping m1 m2",
    "cg elastic consume orders shipping m1",
    "cg elastic prompt",
  ]);

  registerGroupCommands(mode, "elastic", { stream: "orders", group: "shipping" });

  examples(
    mode
      .command("create")
      .description("create an elastic partitioned consumer group (it starts with no members: add them with `add` or `create-mapping`)")
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .argument("<max-members>", "max number of members (the number of partitions)", maxMembersArg)
      .option("--filter <filter>", "partitioning filter(s), repeatable; none: partition on the whole subject", collect)
      .option(
        "--wildcards <indexes>",
        'the partitioning wildcard indexes of each --filter, in order: "1", "1,2" or "none" (whole subject); asked on stdin when omitted',
        (value: string, previous: number[][] | undefined) => [...(previous ?? []), arg(parseWildcards)(value)],
      )
      .option("--max-buffered-msgs <n>", "max number of buffered messages (0 for no limit)", arg((v) => parseNonNegativeInt(v, "--max-buffered-msgs")), 0)
      .option("--max-buffered-bytes <n>", "max number of buffered bytes (0 for no limit)", arg((v) => parseNonNegativeInt(v, "--max-buffered-bytes")), 0)
      .action(async (stream: string, group: string, maxMembers: number, opts: CreateOptions, cmd: Command) =>
        withSession(cmd, async (s) => {
          const filters = await partitioningFilters(s, opts.filter ?? [], opts.wildcards);
          const doc = await createElasticGroup(await s.js(), { stream, group, maxMembers, filters, maxBufferedMsgs: opts.maxBufferedMsgs, maxBufferedBytes: opts.maxBufferedBytes });
          s.out.result(doc, renderCreated);
        }),
      ),
    [
      "cg elastic create orders shipping 4",
      "cg elastic create orders shipping 4 --filter 'orders.*.*' --wildcards 1",
      "cg elastic create orders shipping 8 --filter 'orders.*.*' --wildcards 1,2 --filter 'returns.>' --wildcards none",
      "cg elastic create orders shipping 4 --filter 'orders.*.*'    # asks for the indexes",
    ],
  );

  examples(
    mode
      .command("delete")
      .alias("rm")
      .description("delete an elastic partitioned consumer group (its members stop consuming)")
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .option("-f, --force", "force delete the consumer group, without asking")
      .action(async (stream: string, group: string, opts: { force?: boolean }, cmd: Command) =>
        withSession(cmd, async (s) => {
          if (!opts.force) await confirmOrCancel(s, DELETE_WARNING);
          s.out.result(await deleteGroup(await s.js(), "elastic", stream, group), renderDeleted);
        }),
      ),
    ["cg elastic delete orders shipping", "cg elastic rm orders shipping -f"],
  );

  examples(
    mode
      .command("add")
      .description("add members to a partitioned consumer group")
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .argument("<members...>", "member names")
      .action(async (stream: string, group: string, members: string[], _opts: unknown, cmd: Command) =>
        withSession(cmd, async (s) => s.out.result(await addGroupMembers(await s.js(), stream, group, members), renderAdded)),
      ),
    ["cg elastic add orders shipping m1 m2 m3"],
  );

  examples(
    mode
      .command("drop")
      .description("drop members from a partitioned consumer group")
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .argument("<members...>", "member names")
      .action(async (stream: string, group: string, members: string[], _opts: unknown, cmd: Command) =>
        withSession(cmd, async (s) => s.out.result(await dropGroupMembers(await s.js(), stream, group, members), renderDropped)),
      ),
    ["cg elastic drop orders shipping m3"],
  );

  examples(
    mode
      .command("create-mapping")
      .aliases(["cm", "createmapping"])
      .description("create member mappings for a partitioned consumer group (replaces its members)")
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .argument("<mappings...>", "mappings of members to partition numbers in the format <member>:<partition1>,<partition2>,...", mappingsArg)
      .action(async (stream: string, group: string, mappings: MemberMapping[], _opts: unknown, cmd: Command) =>
        withSession(cmd, async (s) => s.out.result(await setGroupMappings(await s.js(), stream, group, mappings), renderMappings)),
      ),
    ["cg elastic create-mapping orders shipping m1:0,1 m2:2,3", "cg elastic cm orders shipping m1:0-2 m2:3"],
  );

  examples(
    mode
      .command("delete-mapping")
      .aliases(["dm", "deletemapping"])
      .description("delete member mappings for a partitioned consumer group (it has no members afterwards)")
      .argument("<stream>", "stream name")
      .argument("<name>", "consumer group name")
      .action(async (stream: string, group: string, _opts: unknown, cmd: Command) =>
        withSession(cmd, async (s) => s.out.result(await deleteGroupMappings(await s.js(), stream, group), renderMappingsDeleted)),
      ),
    ["cg elastic delete-mapping orders shipping", "cg elastic dm orders shipping"],
  );

  registerMemberCommands(mode, "elastic", { stream: "orders", group: "shipping" });
}
