/**
 * A loopback TCP proxy in front of a server, so a test can cut a client's
 * connection abruptly (as a network failure would) and let it reconnect, slow it
 * down, or hold it half-open (bytes neither delivered nor dropped, then released).
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";

/** A running proxy. */
export interface TcpProxy {
  url: string;
  /** Sets the delay each chunk gets in each direction from now on (a link that becomes slow). */
  setDelay(ms: number): void;
  /** Destroys every proxied connection (both sides), as a lost network would. */
  dropAll(): void;
  /** Drops every connection and refuses new ones for `ms` (an outage longer than a reconnect). */
  outage(ms: number): Promise<void>;
  /**
   * Holds every proxied connection for `ms`, in both directions: nothing is delivered and
   * nothing is closed (a half-open link: both ends still see an open connection). Then
   * everything that came meanwhile is released, in order, and the link works again.
   * Connections opened during the hold are held too. Resolves once released.
   */
  hold(ms: number): Promise<void>;
  /** True while a {@link TcpProxy.hold} is in force. */
  readonly holding: boolean;
  close(): Promise<void>;
}

/**
 * Starts a proxy on a free loopback port that forwards to 127.0.0.1:`targetPort`.
 *
 * @param delayMs - added to every chunk in each direction (a slow link); 0 pipes directly
 * @param adjustable - the delay may change later ({@link TcpProxy.setDelay})
 */
export async function startTcpProxy(targetPort: number, delayMs = 0, adjustable = false): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let delay = delayMs;
  let refusing = false;
  let holding = false;
  /** Called when a hold ends: each proxied direction resumes, with what it kept. */
  const onRelease = new Set<() => void>();
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
    if (delayMs > 0 || adjustable) {
      // Each chunk leaves `delay` after it came, through one queue per direction: never before the
      // chunk ahead of it, whatever the delay was then (timers of different lengths may fire out of order).
      // While the proxy holds, the queue keeps filling and nothing leaves it.
      const forward = (from: Socket, to: Socket): void => {
        const queue: { chunk: Buffer; due: number }[] = [];
        let timer: NodeJS.Timeout | undefined;
        const pump = (): void => {
          timer = undefined;
          if (holding) return;
          while (queue.length > 0 && (queue[0]?.due ?? 0) <= Date.now()) {
            const next = queue.shift();
            if (next && !to.destroyed) to.write(next.chunk);
          }
          const head = queue[0];
          if (head) timer = setTimeout(pump, Math.max(0, head.due - Date.now()));
        };
        const release = (): void => {
          clearTimeout(timer);
          pump();
        };
        onRelease.add(release);
        from.on("close", () => onRelease.delete(release));
        from.on("data", (chunk: Buffer) => {
          queue.push({ chunk, due: Date.now() + delay });
          if (!holding) timer ??= setTimeout(pump, delay);
        });
      };
      forward(client, upstream);
      forward(upstream, client);
    } else {
      // A hold unpipes and pauses both sides: the bytes wait in the sockets (and the
      // kernel's buffers), in order, and flow again once piped back.
      const connect = (): void => {
        client.pipe(upstream);
        upstream.pipe(client);
      };
      const release = (): void => {
        if (!client.destroyed && !upstream.destroyed) connect();
      };
      onRelease.add(release);
      client.on("close", () => onRelease.delete(release));
      if (holding) {
        client.pause();
        upstream.pause();
      } else connect();
    }
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  const port = await listenOnLoopback(server);
  return {
    url: `nats://127.0.0.1:${port}`,
    setDelay(ms) {
      if (!adjustable && delayMs === 0) throw new Error("start the proxy with adjustable = true to change its delay");
      delay = ms;
    },
    dropAll() {
      for (const s of sockets) s.destroy();
    },
    async outage(ms) {
      refusing = true;
      for (const s of sockets) s.destroy();
      await new Promise((r) => setTimeout(r, ms));
      refusing = false;
    },
    get holding() {
      return holding;
    },
    async hold(ms) {
      if (holding) throw new Error("the proxy already holds its connections");
      holding = true;
      if (delayMs === 0 && !adjustable) {
        for (const s of sockets) {
          s.unpipe();
          s.pause();
        }
      }
      await new Promise((r) => setTimeout(r, ms));
      holding = false;
      for (const release of [...onRelease]) release();
    },
    async close() {
      holding = false;
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** A running {@link startTapProxy}. */
export interface TapProxy {
  /** Where clients connect (`nats://127.0.0.1:<port>`). */
  url: string;
  /** The port clients connect to. */
  port: number;
  close(): Promise<void>;
}

/**
 * A loopback proxy that shows a test each chunk a client sends before it is forwarded:
 * `toServer` may hold a chunk (its promise), and the chunks behind it wait, in order;
 * `fromServer` sees each chunk the server sends. For lining one client's request up
 * behind another's as the server sees them.
 */
export async function startTapProxy(targetPort: number, toServer: (chunk: Buffer) => Promise<void> | void, fromServer?: (chunk: Buffer) => void): Promise<TapProxy> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host: "127.0.0.1", port: targetPort });
    for (const sock of [client, upstream]) {
      sockets.add(sock);
      sock.on("close", () => sockets.delete(sock));
      sock.on("error", () => sock.destroy());
    }
    if (fromServer) upstream.on("data", (chunk: Buffer) => fromServer(chunk));
    upstream.pipe(client);
    let chain = Promise.resolve();
    client.on("data", (chunk: Buffer) => {
      chain = chain.then(async () => {
        await toServer(chunk);
        if (!upstream.destroyed) upstream.write(chunk);
      });
    });
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  const port = await listenOnLoopback(server);
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    async close() {
      for (const sock of sockets) sock.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Starts `server` on a free loopback port and returns the port. */
export async function listenOnLoopback(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  return typeof address === "object" && address ? address.port : 0;
}
