/**
 * Tells a server that wants the TLS handshake first (nats-server's
 * `tls { handshake_first: true }`) from one that is not there. Such a server sends
 * no greeting: a plain client waits until the server drops it or its own timeout
 * fires, and nats.js then reports only "timeout" or an undefined socket error.
 */
import { connect as tlsConnect } from "node:tls";
import { isIP } from "node:net";

/** The port of a `nats://` URL without one. */
const DEFAULT_NATS_PORT = 4222;

/** Host and port of a server URL (`nats://h:p`, `tls://h:p` or `h:p`), or undefined when it cannot be parsed. */
function hostAndPort(server: string): { host: string; port: number } | undefined {
  try {
    const url = new URL(server.includes("://") ? server : `nats://${server}`);
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1");
    return host === "" ? undefined : { host, port: url.port === "" ? DEFAULT_NATS_PORT : Number(url.port) };
  } catch {
    return undefined;
  }
}

/** Whether one server completes a TLS handshake started at once, before any greeting. */
function answersTlsFirst(server: string, timeoutMs: number): Promise<boolean> {
  const target = hostAndPort(server);
  if (!target) return Promise.resolve(false);
  return new Promise((resolve) => {
    // Only a probe: nothing is sent after the handshake, so the certificate need not be trusted.
    const socket = tlsConnect({ host: target.host, port: target.port, rejectUnauthorized: false, ...(isIP(target.host) === 0 ? { servername: target.host } : {}) });
    const done = (answer: boolean): void => {
      clearTimeout(timer);
      socket.removeAllListeners();
      socket.on("error", () => undefined);
      socket.destroy();
      resolve(answer);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    socket.once("secureConnect", () => done(true));
    socket.once("error", () => done(false));
    socket.once("close", () => done(false));
  });
}

/**
 * Whether any of the servers wants the TLS handshake before its greeting: it
 * completes a TLS handshake that the client starts as soon as TCP connects.
 *
 * @param servers - server URLs, without credentials
 * @param timeoutMs - how long each probe may take
 * @returns false for servers that refuse the connection, greet in plain text, or do not answer in time
 */
export async function wantsTlsFirst(servers: readonly string[], timeoutMs: number): Promise<boolean> {
  const answers = await Promise.all(servers.map((s) => answersTlsFirst(s, timeoutMs)));
  return answers.includes(true);
}
