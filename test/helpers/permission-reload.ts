/**
 * A server whose only user's subscribe permissions can be changed by a config
 * reload (SIGHUP), as an operator reloading permissions would: the server then
 * removes the subscriptions no longer allowed and tells the client with a
 * `Permissions Violation for Subscription` error, which ends what reads from them
 * (e.g. a KV watch). Used to break a member's config watch on purpose.
 */
import { readFile, writeFile } from "node:fs/promises";
import type { JetStreamManager } from "@nats-io/jetstream";
import { NatsServer } from "../../src/server/launcher.js";

const BEGIN = "# --- permissions (rewritten by the test) ---";
const END = "# --- end of permissions ---";

function permissions(denySubscribe: readonly string[]): string {
  return [
    BEGIN,
    `authorization { users: [ { user: "app", password: "app", permissions: { subscribe: { allow: [">"], deny: ${JSON.stringify(denySubscribe)} } } } ] }`,
    `no_auth_user: "app"`,
    END,
  ].join("\n");
}

/** Starts a server where every connection without credentials is user `app`, allowed to subscribe to all but `denySubscribe`. */
export async function startWithPermissions(denySubscribe: readonly string[] = ["nothing.is.denied"]): Promise<NatsServer> {
  return NatsServer.start({ extraConfig: permissions(denySubscribe) });
}

/** Rewrites the subscribe deny list and reloads the server's config (SIGHUP). */
export async function reloadPermissions(server: NatsServer, denySubscribe: readonly string[]): Promise<void> {
  const text = await readFile(server.configFile, "utf8");
  const start = text.indexOf(BEGIN);
  const end = text.indexOf(END);
  if (start === -1 || end === -1) throw new Error("the server was not started with startWithPermissions");
  await writeFile(server.configFile, text.slice(0, start) + permissions(denySubscribe) + text.slice(end + END.length));
  const pid = server.pid;
  if (pid === undefined) throw new Error("the server is not running");
  process.kill(pid, "SIGHUP");
}

/** The deliver subjects of the push consumers (KV watches) on a KV bucket's stream. */
export async function watchSubjects(jsm: JetStreamManager, bucket: string): Promise<string[]> {
  const subjects: string[] = [];
  for await (const ci of jsm.consumers.list(`KV_${bucket}`)) if (ci.config.deliver_subject) subjects.push(ci.config.deliver_subject);
  return subjects;
}
