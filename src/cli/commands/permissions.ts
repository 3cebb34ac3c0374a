/**
 * `cg static|elastic permissions <stream> <name> --role member|viewer|admin`: the
 * least-privilege permissions of one role of one group, as a nats-server
 * `authorization` block and an nsc command (one JSON document with `--json`).
 * Connects to nothing.
 */
import { Option } from "commander";
import { ConsumerGroupError, PERMISSION_ROLES, groupPermissions, type GroupKind, type PermissionRequest, type PermissionRole } from "../../index.js";
import { UsageError } from "../errors.js";
import { permissionsDoc, renderPermissions } from "../permissions-doc.js";
import { withSession } from "../session.js";
import { collect } from "./common.js";
import { GROUP, STREAM, where } from "./shared-commands.js";
import { flavourOf, type CommandSpec } from "./spec.js";

/** The request the command line describes. */
function requestOf(kind: GroupKind, stream: string, group: string, opts: Record<string, unknown>): PermissionRequest {
  const request: PermissionRequest = { kind, role: opts["role"] as PermissionRole, stream, group };
  if (typeof opts["member"] === "string") request.member = opts["member"];
  if (typeof opts["name"] === "string") request.name = opts["name"];
  if (opts["retries"] === true) request.retries = true;
  if (opts["auto"] === true) request.autoJoin = true;
  if (opts["lag"] === true) request.lag = true;
  if (opts["repartition"] === true) request.repartition = true;
  if (Array.isArray(opts["consumerOf"])) request.members = opts["consumerOf"] as string[];
  return request;
}

/** The permission set, with a bad combination of flags reported as a usage error (exit 2). */
function build(request: PermissionRequest): ReturnType<typeof groupPermissions> {
  try {
    return groupPermissions(request);
  } catch (err) {
    if (err instanceof ConsumerGroupError) throw new UsageError(err.message.replace(/\bmember name\b/, "member name (--member)"));
    throw err;
  }
}

/** `permissions <stream> <name> --role <role> [--member m] [--name n] [--user u] [--retries] [--auto] [--lag] [--repartition] [--consumer-of m]`. */
export const permissionsCommand: CommandSpec = {
  name: "permissions",
  flavours: ["static", "elastic"],
  description: "print the least-privilege permissions of a member, a read-only viewer or an admin of one group (a nats-server config block and an nsc command); connects to nothing",
  args: [STREAM, GROUP],
  options: (kind) => [
    new Option("--role <role>", "member, viewer or admin").choices(PERMISSION_ROLES).makeOptionMandatory(),
    new Option("--member <member>", "the member (role member)"),
    new Option("--name <name>", "the viewer's or admin's name in its inbox prefix").default(undefined, "default"),
    new Option("--user-name <user>", "the user name in the config block and the nsc command (default: from the inbox prefix)"),
    ...(kind === "elastic"
      ? [
          new Option("--retries", "member: it counts failed attempts (retry, a dead-letter subject, --concurrency partition|key)"),
          new Option("--auto", "member: an auto member (consume --auto), which writes its group's membership"),
          new Option("--lag", "member: it serves the group's lag (consume --metrics-port)"),
          new Option("--repartition", "admin: it may run repartition"),
        ]
      : [new Option("--consumer-of <member>", "viewer or admin: narrow consumer access to this member's durable (repeatable; default every consumer of the stream)").argParser(collect)]),
  ],
  examples: (kind) => [
    `cg ${kind} permissions ${where(kind)} --role member --member m1`,
    `cg ${kind} permissions ${where(kind)} --role viewer --json`,
    `cg ${kind} permissions ${where(kind)} --role admin --name ops`,
  ],
  run: async ({ kind, args: [stream, group], opts, cmd }) =>
    withSession(cmd, (s) => {
      const request = requestOf(flavourOf(kind), stream as string, group as string, opts);
      const user = typeof opts["userName"] === "string" ? { user: opts["userName"] } : {};
      s.out.result(permissionsDoc(build(request), user), renderPermissions);
      return Promise.resolve();
    }),
  prompt: {
    usage: "[stream] [name] [role] [member]",
    run: async (sh, args, kind) => {
      const { stream, group } = await sh.target(args);
      const role = await sh.arg(args, 2, "role (member, viewer or admin): ");
      if (!(PERMISSION_ROLES as readonly string[]).includes(role)) throw new UsageError(`unknown role "${role}"; use member, viewer or admin`);
      const request: PermissionRequest = { kind, role: role as PermissionRole, stream, group };
      if (role === "member") request.member = await sh.arg(args, 3, "member name: ");
      sh.print(renderPermissions(permissionsDoc(build(request)), sh.session.out.out));
    },
  },
};
