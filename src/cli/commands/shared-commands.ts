/**
 * The commands both flavours share, defined once: `ls`, `info`, `delete`,
 * `member-info`, `step-down` and `consume`, each with its command-line action
 * and its prompt form.
 */
import { Option } from "commander";
import type { GroupKind } from "../../index.js";
import { deleteGroup, groupInfo, listGroups, memberInfo, stepDown } from "../operations.js";
import { renderDeleted, renderGroupList, renderInfo, renderMemberInfo, renderStepDown } from "../render.js";
import { UsageError } from "../errors.js";
import { withSession } from "../session.js";
import { DELETE_WARNING, confirmOrCancel } from "./common.js";
import { autoJoinOptions, concurrencyOptions, metricsOptions, requestedAutoJoin, requestedConcurrency, requestedLagPolicy, requestedMetrics, runConsume, sleepMs } from "./consume.js";
import { lagPolicyOptions } from "./lag-policy.js";
import { flavourOf, type ArgSpec, type CommandSpec } from "./spec.js";

/** The stream and group a flavour's help examples use. */
export const EXAMPLE: Record<GroupKind, { stream: string; group: string }> = {
  static: { stream: "orders", group: "billing" },
  elastic: { stream: "orders", group: "shipping" },
};

/** `orders billing` / `orders shipping`. */
export const where = (kind: GroupKind): string => `${EXAMPLE[kind].stream} ${EXAMPLE[kind].group}`;

/** `a static` / `an elastic`. */
export const article = (kind: GroupKind): string => (kind === "static" ? "a static" : "an elastic");

/** `<stream>`. */
export const STREAM: ArgSpec = { name: "stream", description: "stream name" };
/** `<name>`: the group. */
export const GROUP: ArgSpec = { name: "name", description: "consumer group name" };
/** `<member>`. */
export const MEMBER: ArgSpec = { name: "member", description: "member name" };

const BOTH = ["static", "elastic"] as const;

/** `ls|list <stream>`. */
export const lsCommand: CommandSpec = {
  name: "ls",
  aliases: ["list"],
  flavours: BOTH,
  description: "list the consumer groups defined on a stream",
  args: [STREAM],
  examples: (kind) => [`cg ${kind} ls ${EXAMPLE[kind].stream}`, `cg ${kind} list ${EXAMPLE[kind].stream} --json`],
  run: async ({ kind, args: [stream], cmd }) =>
    withSession(cmd, async (s) => s.out.result(await listGroups(await s.js(), flavourOf(kind), stream as string), renderGroupList)),
  prompt: {
    usage: "[stream]",
    run: async (sh, args, kind) => {
      const stream = await sh.arg(args, 0, "stream name: ");
      sh.print(renderGroupList(await listGroups(await sh.session.js(), kind, stream)));
    },
  },
};

/** `info <stream> <name>`. */
export const infoCommand: CommandSpec = {
  name: "info",
  flavours: BOTH,
  description: (kind) => `get ${kind} consumer group info: config, active members and the partition → member table`,
  args: [STREAM, GROUP],
  examples: (kind) => [`cg ${kind} info ${where(kind)}`, `cg ${kind} info ${where(kind)} --json`],
  run: async ({ kind, args: [stream, group], cmd }) =>
    withSession(cmd, async (s) => s.out.result(await groupInfo(await s.js(), flavourOf(kind), stream as string, group as string), renderInfo)),
  prompt: {
    run: async (sh, args, kind) => {
      const { stream, group } = await sh.target(args);
      sh.print(renderInfo(await groupInfo(await sh.session.js(), kind, stream, group), sh.session.out.out));
    },
  },
};

/** `delete|rm <stream> <name> [-f]`. */
export const deleteCommand: CommandSpec = {
  name: "delete",
  aliases: ["rm"],
  flavours: BOTH,
  description: (kind) => `delete ${article(kind)} partitioned consumer group (its members stop consuming)`,
  args: [STREAM, GROUP],
  options: () => [forceOption()],
  examples: (kind) => [`cg ${kind} delete ${where(kind)}`, `cg ${kind} rm ${where(kind)} -f`],
  run: async ({ kind, args: [stream, group], opts, cmd }) =>
    withSession(cmd, async (s) => {
      if (opts["force"] !== true) await confirmOrCancel(s, DELETE_WARNING);
      s.out.result(await deleteGroup(await s.js(), flavourOf(kind), stream as string, group as string), renderDeleted);
    }),
  prompt: {
    run: async (sh, args, kind) => {
      const { stream, group } = await sh.target(args);
      await sh.confirm();
      sh.print(renderDeleted(await deleteGroup(await sh.session.js(), kind, stream, group)));
    },
  },
};

function forceOption(): Option {
  return new Option("-f, --force", "force delete the consumer group, without asking");
}

/** `member-info|memberinfo|minfo <stream> <name> <member>`. */
export const memberInfoCommand: CommandSpec = {
  name: "member-info",
  aliases: ["memberinfo", "minfo"],
  flavours: BOTH,
  description: (kind) => `get ${kind} consumer group member info`,
  args: [STREAM, GROUP, MEMBER],
  examples: (kind) => [`cg ${kind} member-info ${where(kind)} m1`, `cg ${kind} minfo ${where(kind)} m1 --json`],
  run: async ({ kind, args: [stream, group, member], cmd }) =>
    withSession(cmd, async (s) => s.out.result(await memberInfo(await s.js(), flavourOf(kind), stream as string, group as string, member as string), renderMemberInfo)),
  prompt: {
    run: async (sh, args, kind) => {
      const { stream, group } = await sh.target(args);
      const member = await sh.arg(args, 2, "member name: ");
      sh.print(renderMemberInfo(await memberInfo(await sh.session.js(), kind, stream, group, member), sh.session.out.out));
    },
  },
};

/** `step-down|stepdown|sd <stream> <name> <member>`. */
export const stepDownCommand: CommandSpec = {
  name: "step-down",
  aliases: ["stepdown", "sd"],
  flavours: BOTH,
  description: "initiate a step down for a member: the server pins another of its instances",
  args: [STREAM, GROUP, MEMBER],
  examples: (kind) => [`cg ${kind} step-down ${where(kind)} m1`, `cg ${kind} sd ${where(kind)} m1`],
  run: async ({ kind, args: [stream, group, member], cmd }) =>
    withSession(cmd, async (s) => s.out.result(await stepDown(await s.js(), flavourOf(kind), stream as string, group as string, member as string), renderStepDown)),
  prompt: {
    run: async (sh, args, kind) => {
      const { stream, group } = await sh.target(args);
      const member = await sh.arg(args, 2, "member name: ");
      sh.print(renderStepDown(await stepDown(await sh.session.js(), kind, stream, group, member)));
    },
  },
};

/** `consume|join <stream> <name> <member>`, with `--metrics-port`. */
export const consumeCommand: CommandSpec = {
  name: "consume",
  aliases: ["join"],
  flavours: BOTH,
  description: (kind) => `join ${article(kind)} partitioned consumer group as a member instance (Ctrl-C to stop)`,
  args: [STREAM, GROUP, { ...MEMBER, description: "member name (elastic with --auto: default $HOSTNAME, the pod name on Kubernetes)", optionalFor: ["elastic"] }],
  examples: (kind) => [
    `cg ${kind} consume ${where(kind)} m1`,
    `cg ${kind} join ${where(kind)} m1 --sleep 100ms --json`,
    `cg ${kind} consume ${where(kind)} m1 --metrics-port 9464`,
    ...(kind === "elastic" ? [`cg elastic consume ${where(kind)} m1 --metrics-port 9464 --target-drain 30s   # with the group's lag at /lag`, `cg elastic consume ${where(kind)} --auto --assignment sticky`] : []),
  ],
  options: (kind) => [
    ...metricsOptions(kind),
    ...concurrencyOptions(),
    ...(kind === "elastic" ? [...lagPolicyOptions("with --metrics-port, recommend (on /metrics and /lag)"), ...autoJoinOptions()] : []),
  ],
  run: async ({ kind, args: [stream, group, member], cmd }) => {
    const metrics = requestedMetrics(cmd); // a usage error comes before any connection
    const concurrency = requestedConcurrency(cmd);
    const lag = kind === "elastic" ? requestedLagPolicy(cmd, metrics !== undefined) : undefined;
    const autoJoin = kind === "elastic" ? requestedAutoJoin(cmd) : undefined;
    if (member === undefined && !autoJoin) throw new UsageError("missing the member name: pass <member>, or --auto to join the group with a lease (member name: $HOSTNAME)");
    await withSession(cmd, (s) =>
      runConsume(s, {
        kind: flavourOf(kind),
        stream: stream as string,
        group: group as string,
        member: member as string | undefined,
        sleepMs: sleepMs(cmd),
        concurrency,
        ...(metrics ? { metrics } : {}),
        ...(lag && metrics ? { lag } : {}),
        ...(autoJoin ? { autoJoin } : {}),
      }),
    );
  },
  prompt: { unavailable: (kind) => `run "cg ${kind} consume <stream> <group> <member> [--sleep 20ms]" in another terminal` },
};
