/**
 * `cg static prompt` / `cg elastic prompt`: Go cg's interactive shell, driven by
 * stdin. Its commands, their aliases and its help are those of the command
 * table; each command's prompt form asks for missing arguments one at a time.
 * Unlike Go, `create-mapping` applies the mappings you type, and `drop` does not
 * exist in static mode. `consume` and `top` are not available here: run them in
 * their own terminal.
 */
import type { GroupKind, MemberMapping, PartitioningFilter } from "../../index.js";
import { CliError, describeError, UsageError } from "../errors.js";
import { isYes, parsePartitionList, parsePositiveInt, parseWildcards, words } from "../parse.js";
import { table } from "../render.js";
import type { Session } from "../session.js";
import { DELETE_WARNING } from "./common.js";
import { argUsage, findCommand, flavourCommands, perKind, type CommandSpec, type PromptShell } from "./spec.js";

/** Stdin ended in the middle of a question: leave the prompt. */
class EndOfInput extends Error {}

/** Thrown when an answer is left empty: the command is dropped, the prompt goes on. */
const canceled = (): CliError => new CliError("CANCELED", "operation canceled");

/** The prompt's own commands, before those of the table. */
const BUILT_INS: [string, string][] = [
  ["help, ?", "this help"],
  ["exit, quit", "leave the prompt"],
  ["static, elastic", "switch mode"],
];

/**
 * The prompt's help for a flavour: its own commands, then every command of the
 * table under that flavour (those not available in the prompt say so).
 *
 * @param commands - the command table
 * @param kind - the flavour
 */
export function promptHelp(commands: readonly CommandSpec[], kind: GroupKind): [string, string][] {
  const rows = flavourCommands(commands, kind)
    .filter((c) => c.prompt !== undefined && c.name !== "prompt")
    .map((c): [string, string] => {
      const names = [c.name, ...(c.aliases ?? [])].join(", ");
      const prompt = c.prompt;
      if (prompt === undefined || "unavailable" in prompt) return [names, `not in the prompt: ${perKind(prompt?.unavailable ?? "", kind)}`];
      const usage = prompt.usage ?? (c.args && c.args.length > 0 ? `[${argUsage(c.args).replace(/[<>]/g, "")}]` : "");
      return [usage === "" ? names : `${names} ${usage}`, perKind(c.description, kind)];
    });
  return [...BUILT_INS, ...rows];
}

/** One prompt session. */
class Shell implements PromptShell {
  constructor(
    readonly session: Session,
    private kind: GroupKind,
    private readonly commands: readonly CommandSpec[],
  ) {}

  print(text: string): void {
    process.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
  }

  async ask(question: string): Promise<string> {
    const answer = await this.session.lines.question(question);
    if (answer === undefined) throw new EndOfInput();
    return answer.trim();
  }

  async arg(args: readonly string[], index: number, question: string): Promise<string> {
    const given = args[index];
    if (given !== undefined) return given;
    const answer = await this.ask(question);
    if (answer === "") throw canceled();
    return answer;
  }

  async askParsed<T>(question: string, parse: (answer: string) => T): Promise<T> {
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

  async target(args: readonly string[]): Promise<{ stream: string; group: string }> {
    return { stream: await this.arg(args, 0, "stream name: "), group: await this.arg(args, 1, "consumer group name: ") };
  }

  async maxMembers(args: readonly string[]): Promise<number> {
    const given = args[2];
    return given !== undefined ? parsePositiveInt(given, "max members") : this.askParsed("max members: ", (a) => parsePositiveInt(a, "max members"));
  }

  async confirm(): Promise<void> {
    if (!isYes(await this.ask(DELETE_WARNING))) throw canceled();
  }

  async mappingLoop(): Promise<MemberMapping[]> {
    const mappings: MemberMapping[] = [];
    for (;;) {
      const member = await this.ask("member name (hit return to finish): ");
      if (member === "") return mappings;
      const partitions = await this.askParsed("comma separated list of partition numbers: ", parsePartitionList);
      mappings.push({ member, partitions });
    }
  }

  async filterLoop(withWildcards: boolean): Promise<PartitioningFilter[]> {
    const filters: PartitioningFilter[] = [];
    for (;;) {
      const filter = await this.ask("filter (empty when done): ");
      if (filter === "") return filters;
      const wildcards = withWildcards ? await this.askParsed("space separated partitioning wildcard indexes (empty for the whole subject): ", parseWildcards) : [];
      filters.push({ filter, partitioning_wildcards: wildcards });
    }
  }

  async members(args: readonly string[]): Promise<string[]> {
    if (args.length > 2) return args.slice(2);
    const members = words(await this.ask("space separated member names: "));
    if (members.length === 0) throw canceled();
    return members;
  }

  /** Runs one line; false to leave the prompt. */
  async run(line: string): Promise<boolean> {
    const [command, ...args] = words(line);
    if (command === undefined) return true;
    switch (command) {
      case "?":
      case "help":
        this.print(table(["COMMAND", "WHAT IT DOES"], promptHelp(this.commands, this.kind), this.session.out.out));
        return true;
      case "exit":
      case "quit":
        return false;
      case "static":
      case "elastic":
        this.kind = command;
        return true;
    }
    const spec = findCommand(this.commands, this.kind, command);
    if (spec === undefined || spec.prompt === undefined || spec.name === "prompt") {
      const other: GroupKind = this.kind === "static" ? "elastic" : "static";
      if (spec === undefined && findCommand(this.commands, other, command)) {
        throw new UsageError(`${command} is only available in ${other} mode${other === "elastic" ? " (static groups are immutable: delete and create the group again)" : ""}; type "${other}" to switch`);
      }
      this.print(`unknown command: ${command}`);
      return true;
    }
    if ("unavailable" in spec.prompt) {
      this.print(`${command} is not available in prompt mode: ${perKind(spec.prompt.unavailable, this.kind)}`);
      return true;
    }
    await spec.prompt.run(this, args, this.kind);
    return true;
  }

  nextLine(): Promise<string | undefined> {
    return this.session.lines.question(`[${this.kind}]> `);
  }
}

/**
 * Runs the interactive prompt until `exit`, `quit` or the end of stdin.
 *
 * @param session - the session (its connection is made on the first command that needs it)
 * @param kind - the starting mode
 * @param commands - the command table
 * @throws UsageError with `--json` (the prompt prints text)
 */
export async function runPrompt(session: Session, kind: GroupKind, commands: readonly CommandSpec[]): Promise<void> {
  if (session.out.json) throw new UsageError("the prompt is interactive and prints text: --json is not supported with prompt");
  const shell = new Shell(session, kind, commands);
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
