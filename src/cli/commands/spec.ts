/**
 * The shape of a `cg` command definition, and the one function that turns the
 * command table into the commander program. `--help`, the interactive prompt and
 * the shell completions are all read from the same definitions, so a command is
 * added in one place: its entry in the table (`table.ts`).
 */
import { Argument, type Command, type Option } from "commander";
import type { GroupKind, MemberMapping, PartitioningFilter } from "../../index.js";
import type { Session } from "../session.js";
import { examples as addExamples } from "./common.js";

/** A value that may depend on the flavour (`static` or `elastic`) the command is registered under. */
export type PerKind<T> = T | ((kind: GroupKind) => T);

/** A positional argument. */
export interface ArgSpec {
  /** Its name in the usage line, e.g. `stream` (shown as `<stream>`). */
  name: string;
  /** What it is. */
  description: string;
  /** Takes the rest of the words (`<members...>`). */
  variadic?: boolean;
  /** Parses (and checks) the word; a variadic argument's parser also gets what it collected so far. */
  parse?: (value: string, previous: never) => unknown;
  /** The only values it takes (also what the shell completions offer). */
  choices?: readonly string[];
  /** The flavours under which it may be left out (`[member]`). */
  optionalFor?: readonly GroupKind[];
}

/** An argument's usage word under `kind`: `<name>`, `<name...>` or `[name]`. */
function argWord(a: ArgSpec, kind: GroupKind | undefined): string {
  const name = `${a.name}${a.variadic ? "..." : ""}`;
  return kind !== undefined && a.optionalFor?.includes(kind) ? `[${name}]` : `<${name}>`;
}

/** One run of a command from the command line. */
export interface Invocation {
  /** The flavour, for a command under `cg static` / `cg elastic`; undefined at the top level. */
  kind: GroupKind | undefined;
  /** The positional arguments, parsed, in order (a variadic one is an array). */
  args: readonly unknown[];
  /** The command's own options, parsed. */
  opts: Record<string, unknown>;
  /** The commander command (for the global flags and the session). */
  cmd: Command;
}

/** What a prompt command gets to talk to the user: the prompt's questions and its output. */
export interface PromptShell {
  /** The session (its connection is made on the first command that needs it). */
  readonly session: Session;
  /** Prints a block of text on stdout. */
  print(text: string): void;
  /** Asks a question; leaves the prompt when stdin ends. */
  ask(question: string): Promise<string>;
  /** The word at `index`, or the answer to `question`; an empty answer cancels the command. */
  arg(args: readonly string[], index: number, question: string): Promise<string>;
  /** Asks until `parse` accepts the answer (usage errors are printed and asked again). */
  askParsed<T>(question: string, parse: (answer: string) => T): Promise<T>;
  /** The stream and group: the first two words, or asked. */
  target(args: readonly string[]): Promise<{ stream: string; group: string }>;
  /** The partition count: the third word, or asked until it is a positive integer. */
  maxMembers(args: readonly string[]): Promise<number>;
  /** Asks Go's delete question; anything but yes cancels. */
  confirm(): Promise<void>;
  /** Asks member mappings one member at a time, until an empty member name. */
  mappingLoop(): Promise<MemberMapping[]>;
  /** Asks filters (and their wildcard indexes when `withWildcards`) until an empty filter. */
  filterLoop(withWildcards: boolean): Promise<PartitioningFilter[]>;
  /** The member names after the stream and group, or asked; none cancels. */
  members(args: readonly string[]): Promise<string[]>;
}

/** How a command runs in the interactive prompt. */
export interface PromptSpec {
  /** The arguments the prompt takes, for its help (default: the command's positional arguments). */
  usage?: string;
  /** Runs the command with the words typed after its name; missing ones are asked. */
  run(shell: PromptShell, args: readonly string[], kind: GroupKind): Promise<void>;
}

/** A `cg` command: everything `--help`, the prompt and the completions know about it. */
export interface CommandSpec {
  /** The command's name. */
  name: string;
  /** Other names for it (Go cg's aliases). */
  aliases?: readonly string[];
  /** The flavours it exists under (`cg static <name>`, `cg elastic <name>`); absent for a top-level command. */
  flavours?: readonly GroupKind[];
  /** One line of help. */
  description: PerKind<string>;
  /** Positional arguments, in order. */
  args?: readonly ArgSpec[];
  /** Options (fresh instances on every call: commander keeps state in them). */
  options?: (kind: GroupKind | undefined) => Option[];
  /** Command lines for its help's "Examples:" section. */
  examples?: PerKind<readonly string[]>;
  /** Subcommands (`static create balanced|mapped`), which inherit the flavours. */
  subcommands?: readonly CommandSpec[];
  /** Runs it; absent for a command that only groups subcommands. */
  run?: (call: Invocation) => Promise<void>;
  /** In the prompt: how it runs there, or why it is not available (a flavour command must say which). */
  prompt?: PromptSpec | { unavailable: PerKind<string> };
}

/**
 * The flavour of a flavour command's invocation.
 *
 * @throws Error when the command was registered at the top level (a bug in the table)
 */
export function flavourOf(kind: GroupKind | undefined): GroupKind {
  if (kind === undefined) throw new Error("a flavour command was registered at the top level");
  return kind;
}

/** Resolves a {@link PerKind} value. */
export function perKind<T>(value: PerKind<T>, kind: GroupKind | undefined): T {
  if (typeof value !== "function") return value;
  if (kind === undefined) throw new Error("a top-level command cannot have per-flavour help");
  return (value as (kind: GroupKind) => T)(kind);
}

/** The usage words of a command's arguments: `<stream> <name> <members...>`. */
export function argUsage(args: readonly ArgSpec[] | undefined, kind?: GroupKind): string {
  return (args ?? []).map((a) => argWord(a, kind)).join(" ");
}

/**
 * Adds a command (and its subcommands) to `parent`.
 *
 * @param parent - the program, or a flavour's command
 * @param spec - the definition
 * @param kind - the flavour it is registered under, if any
 */
export function addCommand(parent: Command, spec: CommandSpec, kind: GroupKind | undefined): Command {
  const cmd = parent.command(spec.name).description(perKind(spec.description, kind));
  if (spec.aliases && spec.aliases.length > 0) cmd.aliases([...spec.aliases]);
  for (const a of spec.args ?? []) {
    const argument = new Argument(argWord(a, kind), a.description);
    if (a.parse) argument.argParser(a.parse as (value: string, previous: unknown) => unknown);
    if (a.choices) argument.choices(a.choices);
    cmd.addArgument(argument);
  }
  for (const option of spec.options?.(kind) ?? []) cmd.addOption(option);
  for (const sub of spec.subcommands ?? []) addCommand(cmd, sub, kind);
  const run = spec.run;
  if (run) {
    const arity = spec.args?.length ?? 0;
    cmd.action(async (...params: unknown[]) => {
      const self = params[arity + 1] as Command;
      await run({ kind, args: params.slice(0, arity), opts: self.opts(), cmd: self });
    });
  }
  const lines = spec.examples === undefined ? [] : perKind(spec.examples, kind);
  if (lines.length > 0) addExamples(cmd, [...lines]);
  return cmd;
}

/** The flavour commands of a table under `kind`, in table order. */
export function flavourCommands(table: readonly CommandSpec[], kind: GroupKind): CommandSpec[] {
  return table.filter((c) => c.flavours?.includes(kind));
}

/** The command `word` names (its name or an alias) under `kind`, if any. */
export function findCommand(table: readonly CommandSpec[], kind: GroupKind, word: string): CommandSpec | undefined {
  return flavourCommands(table, kind).find((c) => c.name === word || c.aliases?.includes(word));
}
