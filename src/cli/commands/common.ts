/**
 * Small helpers the command files share: commander argument parsers that report
 * usage errors, repeatable options, help examples and y/n confirmation.
 */
import { InvalidArgumentError, type Command } from "commander";
import { UsageError, CliError } from "../errors.js";
import { isYes, parseMapping, parsePositiveInt } from "../parse.js";
import { ConsumerGroupError, type GroupKind, type MemberMapping } from "../../index.js";
import type { Session } from "../session.js";

/** Turns a parser that throws {@link UsageError} into a commander argument parser. */
export function arg<T>(parse: (value: string) => T): (value: string) => T {
  return (value: string) => {
    try {
      return parse(value);
    } catch (err) {
      if (err instanceof UsageError) throw new InvalidArgumentError(err.message);
      throw err;
    }
  };
}

/** A variadic argument parser: parses each value and collects them. */
export function variadic<T>(parse: (value: string) => T): (value: string, previous: T[] | undefined) => T[] {
  const one = arg(parse);
  return (value, previous) => [...(previous ?? []), one(value)];
}

/** A repeatable option's accumulator. */
export function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

/** The `<max-members>` parser. */
export const maxMembersArg = arg((v) => parsePositiveInt(v, "max-members"));

/** The `<mappings...>` parser. */
export const mappingsArg = variadic<MemberMapping>(parseMapping);

/** Adds an "Examples:" section to a command's help. */
export function examples(cmd: Command, lines: string[]): Command {
  return cmd.addHelpText("after", `\nExamples:\n${lines.map((l) => `  $ ${l}`).join("\n")}\n`);
}

/** Go's delete warning, word for word. */
export const DELETE_WARNING = "WARNING: this operation will cause all existing consumer members to terminate consuming are you sure? (y/n): ";

/**
 * Asks a y/n question on stdin; anything but `y` cancels.
 *
 * @throws CliError `CANCELED` ("operation canceled") unless the answer is yes
 */
export async function confirmOrCancel(session: Session, question: string): Promise<void> {
  const answer = await session.lines.question(question);
  if (!isYes(answer)) throw new CliError("CANCELED", "operation canceled");
}

/**
 * Adds to a "no such group" error how to list the groups of the stream; any other
 * error is returned as it is.
 *
 * @param err - what was thrown
 * @param kind - the flavour the command looked for
 * @param stream - the stream it looked on
 */
export function withListHint(err: unknown, kind: GroupKind, stream: string): unknown {
  if (err instanceof ConsumerGroupError && err.code === "GROUP_NOT_FOUND" && !err.message.includes(" ls ")) {
    return new ConsumerGroupError(err.code, `${err.message}; see the ${kind} groups of the stream with "cg ${kind} ls ${stream}"`, {
      cause: err,
      ...(err.serverCode === undefined ? {} : { serverCode: err.serverCode }),
    });
  }
  return err;
}
