/**
 * `cg static prompt` / `cg elastic prompt`: Go cg's interactive shell, driven by
 * stdin. Missing arguments are asked one at a time. Unlike Go, `create-mapping`
 * applies the mappings you type, and `drop` does not exist in static mode.
 * `consume` is not available here: run it in its own terminal.
 */
import type { GroupKind, MemberMapping, PartitioningFilter } from "../../index.js";
import { CliError, describeError, UsageError } from "../errors.js";
import {
  addGroupMembers,
  createElasticGroup,
  createStaticGroup,
  deleteGroup,
  deleteGroupMappings,
  dropGroupMembers,
  groupInfo,
  listGroups,
  memberInfo,
  setGroupMappings,
  stepDown,
} from "../operations.js";
import { isYes, parseMapping, parseNonNegativeInt, parsePartitionList, parsePositiveInt, parseWildcards, words } from "../parse.js";
import {
  renderAdded,
  renderCreated,
  renderDeleted,
  renderDropped,
  renderGroupList,
  renderInfo,
  renderMappings,
  renderMappingsDeleted,
  renderMemberInfo,
  renderStepDown,
  table,
} from "../render.js";
import type { Session } from "../session.js";
import { DELETE_WARNING } from "./common.js";

/** Stdin ended in the middle of a question: leave the prompt. */
class EndOfInput extends Error {}

/** Thrown when an answer is left empty: the command is dropped, the prompt goes on. */
const canceled = (): CliError => new CliError("CANCELED", "operation canceled");

const HELP: [string, string][] = [
  ["help, ?", "this help"],
  ["exit, quit", "leave the prompt"],
  ["static, elastic", "switch mode"],
  ["ls, list [stream]", "list the consumer groups of a stream"],
  ["info [stream group]", "config, active members and the partition → member table"],
  ["create [stream group max-members]", "create a group (asks for the rest)"],
  ["delete, rm [stream group]", "delete a group (asks for confirmation)"],
  ["member-info, memberinfo, minfo [stream group member]", "is the member in the membership, is it active"],
  ["step-down, stepdown, sd [stream group member]", "have the server pin another instance of the member"],
  ["add [stream group members...]", "elastic: add members"],
  ["drop [stream group members...]", "elastic: drop members"],
  ["create-mapping, createmapping, cm [stream group mappings...]", "elastic: set member mappings (member:p1,p2)"],
  ["delete-mapping, deletemapping, dm [stream group]", "elastic: delete the member mappings (asks for confirmation)"],
];

/** One prompt session. */
class Shell {
  constructor(
    private readonly session: Session,
    private kind: GroupKind,
  ) {}

  private print(text: string): void {
    process.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
  }

  private async ask(question: string): Promise<string> {
    const answer = await this.session.lines.question(question);
    if (answer === undefined) throw new EndOfInput();
    return answer.trim();
  }

  /** The argument at `index`, or the answer to `question`; an empty answer cancels. */
  private async arg(args: string[], index: number, question: string): Promise<string> {
    const given = args[index];
    if (given !== undefined) return given;
    const answer = await this.ask(question);
    if (answer === "") throw canceled();
    return answer;
  }

  /** Asks until `parse` accepts the answer. */
  private async askParsed<T>(question: string, parse: (answer: string) => T): Promise<T> {
    for (;;) {
      const answer = await this.ask(question);
      try {
        return parse(answer);
      } catch (err) {
        if (!(err instanceof UsageError)) throw err;
        this.session.out.error(describeError(err));
      }
    }
  }

  private target = async (args: string[]): Promise<{ stream: string; group: string }> => ({
    stream: await this.arg(args, 0, "stream name: "),
    group: await this.arg(args, 1, "consumer group name: "),
  });

  private requireElastic(command: string): void {
    if (this.kind !== "elastic") {
      throw new UsageError(`${command} is only available in elastic mode (static groups are immutable: delete and create the group again); type "elastic" to switch`);
    }
  }

  private async mappingLoop(): Promise<MemberMapping[]> {
    const mappings: MemberMapping[] = [];
    for (;;) {
      const member = await this.ask("member name (hit return to finish): ");
      if (member === "") return mappings;
      const partitions = await this.askParsed("comma separated list of partition numbers: ", parsePartitionList);
      mappings.push({ member, partitions });
    }
  }

  private async filterLoop(withWildcards: boolean): Promise<PartitioningFilter[]> {
    const filters: PartitioningFilter[] = [];
    for (;;) {
      const filter = await this.ask("filter (empty when done): ");
      if (filter === "") return filters;
      const wildcards = withWildcards ? await this.askParsed("space separated partitioning wildcard indexes (empty for the whole subject): ", parseWildcards) : [];
      filters.push({ filter, partitioning_wildcards: wildcards });
    }
  }

  private async confirm(): Promise<void> {
    if (!isYes(await this.ask(DELETE_WARNING))) throw canceled();
  }

  private async create(args: string[]): Promise<void> {
    const { stream, group } = await this.target(args);
    const given = args[2];
    const maxMembers = given !== undefined ? parsePositiveInt(given, "max members") : await this.askParsed("max members: ", (a) => parsePositiveInt(a, "max members"));
    const js = await this.session.js();
    if (this.kind === "static") {
      const members = words(await this.ask("space separated set of members (hit return to set member mappings instead): "));
      const mappings = members.length > 0 ? undefined : await this.mappingLoop();
      const filters = (await this.filterLoop(false)).map((f) => f.filter);
      const doc = await createStaticGroup(js, { stream, group, maxMembers, filters, ...(mappings ? { mappings } : { members }) });
      for (const w of doc.warnings) this.session.out.warn(w);
      this.print(renderCreated(doc));
      return;
    }
    const filters = await this.filterLoop(true);
    const count = (name: string) => (a: string) => (a === "" ? 0 : parseNonNegativeInt(a, name));
    const maxBufferedMsgs = await this.askParsed("max buffered messages (0 for no limit): ", count("max buffered messages"));
    const maxBufferedBytes = await this.askParsed("max buffered bytes (0 for no limit): ", count("max buffered bytes"));
    this.print(renderCreated(await createElasticGroup(js, { stream, group, maxMembers, filters: filters.length > 0 ? filters : null, maxBufferedMsgs, maxBufferedBytes })));
  }

  private async members(args: string[]): Promise<string[]> {
    if (args.length > 2) return args.slice(2);
    const members = words(await this.ask("space separated member names: "));
    if (members.length === 0) throw canceled();
    return members;
  }

  /** Runs one line; false to leave the prompt. */
  async run(line: string): Promise<boolean> {
    const [command, ...args] = words(line);
    if (command === undefined) return true;
    const s = this.session.out.out;
    switch (command) {
      case "?":
      case "help":
        this.print(table(["COMMAND", "WHAT IT DOES"], HELP, s));
        return true;
      case "exit":
      case "quit":
        return false;
      case "static":
      case "elastic":
        this.kind = command;
        return true;
      case "ls":
      case "list": {
        const stream = await this.arg(args, 0, "stream name: ");
        this.print(renderGroupList(await listGroups(await this.session.js(), this.kind, stream)));
        return true;
      }
      case "info": {
        const { stream, group } = await this.target(args);
        this.print(renderInfo(await groupInfo(await this.session.js(), this.kind, stream, group), s));
        return true;
      }
      case "create":
        await this.create(args);
        return true;
      case "delete":
      case "rm": {
        const { stream, group } = await this.target(args);
        await this.confirm();
        this.print(renderDeleted(await deleteGroup(await this.session.js(), this.kind, stream, group)));
        return true;
      }
      case "memberinfo":
      case "member-info":
      case "minfo": {
        const { stream, group } = await this.target(args);
        const member = await this.arg(args, 2, "member name: ");
        this.print(renderMemberInfo(await memberInfo(await this.session.js(), this.kind, stream, group, member), s));
        return true;
      }
      case "stepdown":
      case "step-down":
      case "sd": {
        const { stream, group } = await this.target(args);
        const member = await this.arg(args, 2, "member name: ");
        this.print(renderStepDown(await stepDown(await this.session.js(), this.kind, stream, group, member)));
        return true;
      }
      case "add":
      case "drop": {
        this.requireElastic(command);
        const { stream, group } = await this.target(args);
        const members = await this.members(args);
        const js = await this.session.js();
        this.print(command === "add" ? renderAdded(await addGroupMembers(js, stream, group, members)) : renderDropped(await dropGroupMembers(js, stream, group, members)));
        return true;
      }
      case "createmapping":
      case "create-mapping":
      case "cm": {
        this.requireElastic(command);
        const { stream, group } = await this.target(args);
        const mappings = args.length > 2 ? args.slice(2).map(parseMapping) : await this.mappingLoop();
        if (mappings.length === 0) throw canceled();
        this.print(renderMappings(await setGroupMappings(await this.session.js(), stream, group, mappings)));
        return true;
      }
      case "deletemapping":
      case "delete-mapping":
      case "dm": {
        this.requireElastic(command);
        const { stream, group } = await this.target(args);
        await this.confirm();
        this.print(renderMappingsDeleted(await deleteGroupMappings(await this.session.js(), stream, group)));
        return true;
      }
      case "consume":
      case "join":
      case "processing-time":
        this.print(`${command} is not available in prompt mode: run "cg ${this.kind} consume <stream> <group> <member> [--sleep 20ms]" in another terminal`);
        return true;
      default:
        this.print(`unknown command: ${command}`);
        return true;
    }
  }

  prompt(): string {
    return `[${this.kind}]> `;
  }

  async nextLine(): Promise<string | undefined> {
    return this.session.lines.question(this.prompt());
  }
}

/**
 * Runs the interactive prompt until `exit`, `quit` or the end of stdin.
 *
 * @param session - the session (its connection is made on the first command that needs it)
 * @param kind - the starting mode
 */
export async function runPrompt(session: Session, kind: GroupKind): Promise<void> {
  if (session.out.json) throw new UsageError("the prompt is interactive and prints text: --json is not supported with prompt");
  const shell = new Shell(session, kind);
  for (;;) {
    const line = await shell.nextLine();
    if (line === undefined) return;
    try {
      if (!(await shell.run(line))) return;
    } catch (err) {
      if (err instanceof EndOfInput) return;
      session.out.error(describeError(err));
    }
  }
}
