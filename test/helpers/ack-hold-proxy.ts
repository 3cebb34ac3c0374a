/**
 * A loopback proxy in front of a nats-server that lets a client's first JetStream
 * ack through to the server and then holds every byte the server sends back, so
 * the ack's confirmation never arrives: the server has the ack, the client does
 * not know it. A test kills the client in that window.
 */
import { createConnection, createServer, type Socket } from "node:net";
import { listenOnLoopback } from "./tcp-proxy.js";

/** A running proxy. */
export interface AckHoldProxy {
  /** `nats://127.0.0.1:<port>` to give the client. */
  url: string;
  /** Whether a client has sent an ack (and the server's replies are held since). */
  holding(): boolean;
  /** Closes the proxy and every connection through it. */
  close(): Promise<void>;
}

/** The protocol line of a publication to an ack subject: `PUB $JS.ACK.…` or `HPUB $JS.ACK.…`. */
const ACK_PUB = /(?:^|\n)H?PUB \$JS\.ACK\./;

/**
 * Starts the proxy on a free loopback port, forwarding to 127.0.0.1:`targetPort`.
 *
 * @param targetPort - the server's client port
 */
export async function startAckHoldProxy(targetPort: number): Promise<AckHoldProxy> {
  const sockets = new Set<Socket>();
  let held = false;
  const server = createServer((client) => {
    const upstream = createConnection({ host: "127.0.0.1", port: targetPort });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => s.destroy());
    }
    // the tail of the previous chunk, so a protocol line split across chunks is still seen
    let tail = "";
    client.on("data", (chunk: Buffer) => {
      const text = tail + chunk.toString("latin1");
      if (ACK_PUB.test(text)) held = true;
      tail = text.slice(-32);
      upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (!held) client.write(chunk);
    });
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  const port = await listenOnLoopback(server);
  return {
    url: `nats://127.0.0.1:${port}`,
    holding: () => held,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
