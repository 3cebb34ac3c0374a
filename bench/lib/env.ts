/**
 * The benchmark environment: a server (started here unless --server is given),
 * connections, streams and fast keyed publishing.
 */
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager, type StreamConfig } from "@nats-io/jetstream";
import { NatsServer } from "../../src/server/launcher.js";

/** A connection with its clients. */
export interface Conn {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
}

/** The server the suite runs against. */
export interface BenchServer {
  url: string;
  version: string;
  connect(name?: string): Promise<Conn>;
  /** Fetches a monitoring endpoint (`/connz`…), when the suite started the server itself. */
  monitor?<T>(path: string): Promise<T>;
  stop(): Promise<void>;
}

/** Starts a server (or wraps `url`). */
export async function benchServer(url?: string): Promise<BenchServer> {
  const server = url ? undefined : await NatsServer.start();
  const target = url ?? server?.url ?? "";
  const conns: NatsConnection[] = [];
  const open = async (name = "bench"): Promise<Conn> => {
    const nc = await connect({ servers: target, name, maxPingOut: 10 });
    conns.push(nc);
    return { nc, js: jetstream(nc), jsm: await jetstreamManager(nc) };
  };
  const probe = await open("bench-probe");
  const version = probe.nc.info?.version ?? "unknown";
  return {
    url: target,
    version,
    connect: open,
    ...(server ? { monitor: <T>(path: string) => server.monitor<T>(path) } : {}),
    async stop() {
      await Promise.allSettled(conns.map((c) => c.close()));
      await server?.stop();
    },
  };
}

/** Stands in for the server when every chosen scenario is pure computation: connecting throws. */
export function noServer(): BenchServer {
  return {
    url: "",
    version: "none (not needed)",
    connect: () => Promise.reject(new Error("this benchmark run started no nats-server: every chosen scenario is serverless")),
    stop: () => Promise.resolve(),
  };
}

/** A partitioned stream `<name>` with subjects `<name>.<key>` and N partitions from its own transform (R1 unless `replicas`). */
export async function partitionedStream(jsm: JetStreamManager, name: string, partitions: number, replicas = 1, extra: Partial<StreamConfig> = {}): Promise<void> {
  await jsm.streams.add({
    ...extra,
    name,
    subjects: [`${name}.*`],
    storage: "file",
    num_replicas: replicas,
    subject_transform: { src: `${name}.*`, dest: `{{partition(${partitions},1)}}.${name}.{{wildcard(1)}}` },
  });
}

/** A plain stream `<name>` with subjects `<name>.*` (R1 unless `replicas`). */
export async function plainStream(jsm: JetStreamManager, name: string, replicas = 1): Promise<void> {
  await jsm.streams.add({ name, subjects: [`${name}.*`], storage: "file", num_replicas: replicas });
}

/**
 * Publishes `count` messages of `size` bytes over `keys` keys (subject `<prefix>.k<key>`),
 * with up to `window` publishes awaiting their ack. The payload starts with `key:seq`.
 */
export async function publishKeyed(js: JetStreamClient, prefix: string, count: number, keys: number, size = 128, window = 512): Promise<void> {
  const pad = "x".repeat(size);
  const perKey = new Array<number>(keys).fill(0);
  const inflight = new Set<Promise<unknown>>();
  for (let i = 0; i < count; i++) {
    const key = i % keys;
    const seq = (perKey[key] ?? 0) + 1;
    perKey[key] = seq;
    const head = `k${key}:${seq}:`;
    const p: Promise<unknown> = js.publish(`${prefix}.k${key}`, head + pad.slice(head.length)).then((): boolean => inflight.delete(p));
    inflight.add(p);
    if (inflight.size >= window) await Promise.race(inflight);
  }
  await Promise.all(inflight);
}

/** Resolves when `check` is true, polling every `everyMs`; rejects after `timeoutMs`. */
export async function until(check: () => boolean | Promise<boolean>, timeoutMs: number, what: string, everyMs = 5): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`benchmark timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
