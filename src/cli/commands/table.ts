/**
 * The command table: every `cg` command, once. The program (`--help`), the
 * interactive prompt and the shell completions are all built from it, so adding a
 * command is adding its entry here.
 */
import { Command } from "commander";
import type { GroupKind } from "../../index.js";
import { withSession } from "../session.js";
import { completionCommand } from "./completion.js";
import { sleepOption } from "./consume.js";
import { demoCommand } from "./demo.js";
import { describeCommand } from "./describe.js";
import { lagCommand } from "./lag.js";
import { parkCommand } from "./park.js";
import { permissionsCommand } from "./permissions.js";
import { repartitionCommand } from "./repartition.js";
import { addCommand as elasticAddCommand, createMappingCommand, deleteMappingCommand, dropCommand, elasticCreateCommand } from "./elastic.js";
import { runPrompt } from "./prompt.js";
import { pubCommand } from "./pub.js";
import { consumeCommand, deleteCommand, infoCommand, lsCommand, memberInfoCommand, stepDownCommand } from "./shared-commands.js";
import { addCommand, flavourOf, type CommandSpec } from "./spec.js";
import { staticCreateCommand } from "./static.js";
import { topCommand } from "./top.js";

/** `static|elastic prompt`: the interactive shell over this same table. */
const promptCommand: CommandSpec = {
  name: "prompt",
  flavours: ["static", "elastic"],
  description: "interactive prompt",
  examples: (kind) => [`cg ${kind} prompt`],
  run: async ({ kind, cmd }) => withSession(cmd, (s) => runPrompt(s, flavourOf(kind), COMMANDS)),
  prompt: { unavailable: "you are in it" },
};

/**
 * Every command, in help order. Flavour commands (`flavours`) go under
 * `cg static` / `cg elastic`; the others are top-level.
 */
export const COMMANDS: readonly CommandSpec[] = [
  promptCommand,
  lsCommand,
  infoCommand,
  staticCreateCommand,
  elasticCreateCommand,
  deleteCommand,
  elasticAddCommand,
  dropCommand,
  createMappingCommand,
  deleteMappingCommand,
  memberInfoCommand,
  stepDownCommand,
  consumeCommand,
  repartitionCommand,
  parkCommand,
  describeCommand,
  lagCommand,
  topCommand,
  permissionsCommand,
  pubCommand,
  demoCommand,
  completionCommand,
];

/** The two flavour commands themselves: `cg static`, `cg elastic`. */
export const MODES: readonly { kind: GroupKind; description: string; examples: string[] }[] = [
  {
    kind: "static",
    description: "static consumer groups mode",
    examples: ["cg static create balanced orders billing 4 m1 m2", "cg static info orders billing", "cg static consume orders billing m1", "cg static prompt"],
  },
  {
    kind: "elastic",
    description: "elastic consumer groups mode",
    examples: ["cg elastic create orders shipping 4 --filter 'orders.*.*' --wildcards 1", "cg elastic add orders shipping m1 m2", "cg elastic consume orders shipping m1", "cg elastic prompt"],
  },
];

/**
 * Adds the flavours and every command of the table to `program`.
 *
 * @param program - the `cg` program (global flags already added)
 * @param commands - the table (default: {@link COMMANDS})
 */
export function registerCommands(program: Command, commands: readonly CommandSpec[] = COMMANDS): void {
  for (const mode of MODES) {
    const cmd = program.command(mode.kind).description(mode.description).addOption(sleepOption());
    for (const spec of commands) if (spec.flavours?.includes(mode.kind)) addCommand(cmd, spec, mode.kind);
    cmd.addHelpText("after", `\nExamples:\n${mode.examples.map((l) => `  $ ${l}`).join("\n")}\n`);
  }
  for (const spec of commands) if (spec.flavours === undefined) addCommand(program, spec, undefined);
}
