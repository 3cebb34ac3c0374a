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

/**
 * Starts a proxy on a free loopback port that forwards to 127.0.0.1:`targetPort`.
 *
 * @param delayMs - added to every chunk in each direction (a slow link); 0 pipes directly
 */
export async function startTcpProxy(targetPort: number, delayMs = 0): Promise<TcpProxy> {
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
    if (delayMs > 0) {
      // Same delay for every chunk: order is kept.
      const forward = (from: Socket, to: Socket): void => void from.on("data", (chunk) => setTimeout(() => to.destroyed || to.write(chunk), delayMs));
      forward(client, upstream);
      forward(upstream, client);
    } else {
      client.pipe(upstream);
      upstream.pipe(client);
    }
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
