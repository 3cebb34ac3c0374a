/**
 * The document `cg … permissions` prints: one role's permission set for one group,
 * with the nats-server user entry and the nsc command built from it, and its human
 * rendering. Pure.
 */
import { nscCommand, serverConfigBlock, type PermissionSet, type UserText } from "../index.js";
import type { Styler } from "./output.js";

/** `permissions`. Keys are snake_case, like the other documents. */
export interface PermissionsDoc {
  kind: PermissionSet["kind"];
  role: PermissionSet["role"];
  stream: string;
  group: string;
  /** The inbox prefix the principal must connect with. */
  inbox_prefix: string;
  publish: string[];
  subscribe: string[];
  allow_responses: boolean;
  /** What the server cannot narrow to this group. */
  exposures: string[];
  /** The nats-server `authorization` block of one user with these permissions. */
  server_config: string;
  /** The nsc command giving an operator-mode user the same lists. */
  nsc: string;
}

/**
 * Builds the document of a permission set.
 *
 * @param set - the set
 * @param user - the user's name in the server block and the nsc command
 */
export function permissionsDoc(set: PermissionSet, user: UserText = {}): PermissionsDoc {
  return {
    kind: set.kind,
    role: set.role,
    stream: set.stream,
    group: set.group,
    inbox_prefix: set.inboxPrefix,
    publish: set.publish,
    subscribe: set.subscribe,
    allow_responses: set.allowResponses,
    exposures: set.exposures,
    server_config: serverConfigBlock(set, user),
    nsc: nscCommand(set, user),
  };
}

/** The human form: the inbox prefix, the server block, the nsc command and the remaining exposures. */
export function renderPermissions(doc: PermissionsDoc, s: Styler): string {
  const lines = [
    s.bold(`${doc.kind} ${doc.role} of ${doc.stream}.${doc.group}`),
    `connect with inbox prefix ${doc.inbox_prefix} (nats.js: inboxPrefix; cg: the connection's inbox prefix option)`,
    "",
    s.bold("nats-server config:"),
    doc.server_config.trimEnd(),
    "",
    s.bold("nsc (operator mode):"),
    doc.nsc.trimEnd(),
  ];
  if (doc.exposures.length > 0) lines.push("", s.bold("not narrowed to this group (see docs/permissions.md):"), ...doc.exposures.map((e) => `  - ${e}`));
  return `${lines.join("\n")}\n`;
}
