/**
 * A permission set as text an operator pastes: a nats-server `authorization` user
 * entry, and the `nsc` command that gives an operator-mode user the same lists.
 * Pure; `cg … permissions` prints both.
 */
import type { PermissionSet } from "./permissions.js";

/** How the rendered user is named and authenticated. */
export interface UserText {
  /** The user name (default `<group>-<role>[-<member>]`, from the set's inbox prefix). */
  user?: string;
  /** The password placeholder written into the server block (default `"<password>"`). */
  password?: string;
}

/** The user name a set is rendered under by default: the inbox prefix's tokens after the root, joined by `-`. */
export function defaultUserName(set: PermissionSet): string {
  return set.inboxPrefix.split(".").slice(1).join("-");
}

const quoted = (s: string): string => JSON.stringify(s);

/**
 * One user entry of a nats-server `users: [...]` list restricted to `set`, preceded by
 * a comment naming the inbox prefix the user must connect with. Several entries go in
 * one `authorization` block (or an account's `users`).
 *
 * @param set - the permission set
 * @param text - the user's name and password placeholder
 */
export function userConfigEntry(set: PermissionSet, text: UserText = {}): string {
  const user = text.user ?? defaultUserName(set);
  const list = (subjects: readonly string[]): string => subjects.map((s) => `          ${quoted(s)}`).join("\n");
  return [
    `    # ${set.kind} ${set.role} of ${set.stream}.${set.group}: connect with inboxPrefix ${quoted(set.inboxPrefix)}`,
    `    { user: ${quoted(user)}, password: ${quoted(text.password ?? "<password>")}, permissions: {`,
    "        publish: { allow: [",
    list(set.publish),
    "        ] }",
    "        subscribe: { allow: [",
    list(set.subscribe),
    "        ] }",
    ...(set.allowResponses ? ["        allow_responses: true"] : []),
    "    } }",
  ].join("\n");
}

/**
 * The nats-server config block of one user restricted to `set`: an `authorization`
 * block holding {@link userConfigEntry}.
 *
 * @param set - the permission set
 * @param text - the user's name and password placeholder
 */
export function serverConfigBlock(set: PermissionSet, text: UserText = {}): string {
  return `${["authorization {", "  users: [", userConfigEntry(set, text), "  ]", "}"].join("\n")}\n`;
}

/**
 * The `nsc` command that gives an operator-mode user the set's lists (`--allow-pub`,
 * `--allow-sub`, and `--allow-pub-response` where the set answers requests).
 *
 * @param set - the permission set
 * @param text - the user's name
 */
export function nscCommand(set: PermissionSet, text: UserText = {}): string {
  const user = text.user ?? defaultUserName(set);
  const sq = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;
  const lines = [
    `nsc add user --name ${sq(user)}`,
    ...set.publish.map((s) => `  --allow-pub ${sq(s)}`),
    ...set.subscribe.map((s) => `  --allow-sub ${sq(s)}`),
    ...(set.allowResponses ? ["  --allow-pub-response 1"] : []),
  ];
  return `${lines.join(" \\\n")}\n`;
}
