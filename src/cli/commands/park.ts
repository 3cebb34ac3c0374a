/**
 * `cg elastic park ls <stream> <name>` and `cg elastic park release <stream> <name>
 * <seq> [--dead-letter <subject>]`: the keys blocked in a group's running instances
 * (a message failed `maxDeliver` times with no dead-letter subject; the messages behind
 * it are parked), and releasing one: tried again now, or dead-lettered.
 */
import { Option } from "commander";
import { listParkedKeys, releaseParkedKey, type ListedParkedKey, type ReleaseOutcome } from "../../index.js";
import type { Styler } from "../output.js";
import { parsePositiveInt } from "../parse.js";
import { table } from "../render.js";
import { withSession } from "../session.js";
import { arg } from "./common.js";
import { GROUP, STREAM } from "./shared-commands.js";
import type { CommandSpec } from "./spec.js";

/** What `park ls` prints as JSON. */
export interface ParkedListDoc {
  stream: string;
  group: string;
  parked: ListedParkedKey[];
}

/** `park ls`: one row per blocked key, or a line saying there is none. */
export function renderParked(doc: ParkedListDoc, s: Styler): string {
  if (doc.parked.length === 0) return `no blocked keys in ${doc.stream}.${doc.group} (among the running instances that answered)`;
  const rows = doc.parked.map((p) => [p.member, p.mode === "key" && p.key !== "" ? p.key : s.dim("-"), String(p.partition), String(p.seq), String(p.attempts), String(p.parkedMessages), p.since, p.error]);
  return `${table(["MEMBER", "KEY", "PARTITION", "SEQ", "ATTEMPTS", "WAITING", "SINCE", "LAST ERROR"], rows, s)}\n\nrelease one with: cg elastic park release ${doc.stream} ${doc.group} <seq> [--dead-letter <subject>]`;
}

/** `park release`: what was done. */
export function renderReleased(doc: ReleaseOutcome): string {
  const head = `seq ${doc.seq} released on member ${doc.member}`;
  switch (doc.result) {
    case "dead_lettered":
      return `${head}: dead-lettered, its key goes on`;
    case "handled":
      return `${head}: the attempt running then succeeded, so it was not dead-lettered; its key goes on`;
    case "given_back":
      return `${head}: its partition moved meanwhile; its new owner has it (list the blocked keys again)`;
    case "pending":
      return `${head}: its attempt is still running; it is dead-lettered if that attempt fails (see the member's events, or list the blocked keys again)`;
    default:
      return `${head}: its next attempt runs now (if it fails again, its key blocks again)`;
  }
}

/** `elastic park ls|release`. */
export const parkCommand: CommandSpec = {
  name: "park",
  flavours: ["elastic"],
  description: "list the keys blocked in a group's running instances, or release one",
  examples: ["cg elastic park ls orders shipping", "cg elastic park release orders shipping 1042", "cg elastic park release orders shipping 1042 --dead-letter orders.dlq"],
  subcommands: [
    {
      name: "ls",
      description: "list the blocked keys (a message failed maxDeliver times with no dead-letter subject; the messages behind it wait)",
      args: [STREAM, GROUP],
      examples: ["cg elastic park ls orders shipping", "cg elastic park ls orders shipping --json"],
      run: async ({ args: [stream, group], cmd }) =>
        withSession(cmd, async (s) => {
          const { nc } = await s.connect();
          const parked = await listParkedKeys(nc, stream as string, group as string);
          s.out.result({ stream: stream as string, group: group as string, parked }, renderParked);
        }),
    },
    {
      name: "release",
      description: "release a blocked message: try it again now (after fixing what made it fail), or dead-letter it",
      args: [STREAM, GROUP, { name: "seq", description: "the blocked message's work-queue sequence (SEQ in park ls)", parse: arg((v) => parsePositiveInt(v, "seq")) }],
      options: () => [new Option("--dead-letter <subject>", "publish it to this subject (a stream must store it) and terminate it, instead of trying it again")],
      examples: ["cg elastic park release orders shipping 1042", "cg elastic park release orders shipping 1042 --dead-letter orders.dlq"],
      run: async ({ args: [stream, group, seq], opts, cmd }) =>
        withSession(cmd, async (s) => {
          const { nc } = await s.connect();
          const deadLetter = opts["deadLetter"] as string | undefined;
          const outcome = await releaseParkedKey(nc, stream as string, group as string, seq as number, deadLetter !== undefined ? { deadLetterSubject: deadLetter } : {});
          s.out.result(outcome, renderReleased);
        }),
    },
  ],
  prompt: { unavailable: 'run "cg elastic park ls <stream> <name>" or "cg elastic park release <stream> <name> <seq>" outside the prompt' },
};
