/**
 * Test helpers: a real nats-server per test file, connections to it, fresh names,
 * and waiting on conditions with a timeout (never blind sleeps).
 */
import { connect, type ConnectionOptions, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager } from "@nats-io/jetstream";
import { NatsServer, NatsCluster, type ServerOptions } from "../../src/server/launcher.js";
import { NatsSuperCluster } from "../../src/server/super-cluster.js";

export { NatsServer, NatsCluster, NatsSuperCluster };

let counter = 0;

/** A name no other test uses: letters, digits and `_` only, valid for streams, groups and members. */
export function uniqueName(prefix = "t"): string {
  counter += 1;
  return `${prefix}_${process.pid}_${counter}_${Math.random().toString(36).slice(2, 7)}`;
}

/** A connection with its JetStream client and manager. */
export interface Client {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
}

/** How often {@link connectTo} asks for account info before it gives up. */
const ACCOUNT_INFO_ATTEMPTS = 3;

/**
 * Connects to a server we started (loopback only) and checks that JetStream answers
 * (account info). A check that times out is asked again, up to three times in all: a
 * loaded machine's cluster can take longer than one request's 5 s to answer. A
 * connection whose check failed for good is closed before the error is thrown, so it
 * cannot keep reconnecting (and keep the test process alive) after the test ended.
 */
export async function connectTo(server: NatsServer | NatsCluster | string | string[], options: ConnectionOptions = {}): Promise<Client> {
  const servers = typeof server === "string" || Array.isArray(server) ? server : server instanceof NatsCluster ? server.urls : server.url;
  const nc = await connect({ servers, ...options });
  for (let attempt = 1; ; attempt++) {
    try {
      return { nc, js: jetstream(nc), jsm: await jetstreamManager(nc) };
    } catch (err) {
      const timedOut = err instanceof Error && err.name === "TimeoutError";
      if (!timedOut || attempt >= ACCOUNT_INFO_ATTEMPTS) {
        await nc.close().catch(() => undefined);
        throw err;
      }
    }
  }
}

/** A started server plus one client, torn down together. */
export interface TestEnv extends Client {
  server: NatsServer;
  /** Opens another connection to the same server. */
  connect(options?: ConnectionOptions): Promise<Client>;
  /** Closes every connection opened here and stops the server. */
  close(): Promise<void>;
}

/** Starts a throwaway JetStream server on a free loopback port and connects to it. */
export async function startEnv(options: ServerOptions = {}): Promise<TestEnv> {
  const server = await NatsServer.start(options);
  const clients: Client[] = [];
  const open = async (opts: ConnectionOptions = {}): Promise<Client> => {
    const c = await connectTo(server, opts);
    clients.push(c);
    return c;
  };
  const first = await open();
  return {
    ...first,
    server,
    connect: open,
    async close() {
      await Promise.allSettled(clients.map((c) => (c.nc.isClosed() ? Promise.resolve() : c.nc.close())));
      await server.stop();
    },
  };
}

/**
 * Polls `check` until it returns a truthy value, or fails after `timeoutMs`.
 *
 * @returns the truthy value
 */
export async function waitFor<T>(check: () => T | Promise<T>, timeoutMs: number, what: string, intervalMs = 20): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last instanceof Error ? ` (last error: ${last.message})` : ""}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** A promise plus its resolver, for waiting on events. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
