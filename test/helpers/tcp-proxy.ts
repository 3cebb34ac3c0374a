/**
 * A loopback TCP proxy in front of a server, so a test can cut a client's
 * connection abruptly (as a network failure would) and let it reconnect.
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";

/** A running proxy. */
export interface TcpProxy {
  url: string;
  /** Destroys every proxied connection (both sides), as a lost network would. */
  dropAll(): void;
  /** Drops every connection and refuses new ones for `ms` (an outage longer than a reconnect). */
  outage(ms: number): Promise<void>;
  close(): Promise<void>;
}

/** Starts a proxy on a free loopback port that forwards to 127.0.0.1:`targetPort`. */
export async function startTcpProxy(targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let refusing = false;
  const server: Server = createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = createConnection({ host: "127.0.0.1", port: targetPort });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => s.destroy());
    }
    client.pipe(upstream);
    upstream.pipe(client);
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return {
    url: `nats://127.0.0.1:${port}`,
    dropAll() {
      for (const s of sockets) s.destroy();
    },
    async outage(ms) {
      refusing = true;
      for (const s of sockets) s.destroy();
      await new Promise((r) => setTimeout(r, ms));
      refusing = false;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
