/**
 * A JetStream super-cluster on loopback: clusters of real nats-server nodes joined by
 * gateways, for tests of streams and consumers that live in different clusters. Like
 * the launcher, it never talks to a server it did not start.
 */
import { NatsCluster, freePorts, startNodes, type NatsServer, type ServerOptions } from "./launcher.js";

/** What `/jsz?accounts=true&streams=true&consumers=true` reports about the streams a node holds. */
interface JszStreams {
  account_details?: {
    stream_detail?: {
      name: string;
      cluster?: { name?: string; leader?: string };
      consumer_detail?: { name: string; cluster?: { leader?: string } }[];
    }[];
  }[];
}

/** What `/jsz` reports about the JetStream meta group. */
interface JszMeta {
  meta_cluster?: { leader?: string; cluster_size?: number; replicas?: { name: string; current?: boolean }[] };
}

/** How long {@link NatsSuperCluster.start} waits for the meta leader to see every node current. */
const META_READY_MS = 30_000;

/**
 * A JetStream super-cluster on loopback: `clusters` clusters of `size` nodes each
 * (default 2 × 3), every cluster with its own name and routes, all joined by
 * gateways. A stream lives in one cluster: the one its `placement.cluster` names, or
 * else the cluster of the server the creating client is connected to. Nodes are
 * killed and restarted on their store with {@link NatsServer.kill} and
 * {@link NatsServer.restart}.
 *
 * @example
 * ```ts
 * await using sc = await NatsSuperCluster.start();
 * const [a, b] = sc.clusters;
 * // connect to b.urls, create streams there; sc.leader("orders") names the leading node
 * ```
 */
export class NatsSuperCluster {
  private constructor(
    /** The clusters, in start order (names `<prefix>-A`, `<prefix>-B`, ...). */
    readonly clusters: NatsCluster[],
  ) {}

  /** Every node of every cluster. */
  get nodes(): NatsServer[] {
    return this.clusters.flatMap((c) => c.nodes);
  }

  /**
   * Starts the clusters and waits until every node reports JetStream healthy (the
   * JetStream meta group spans all clusters, so no node is healthy before the
   * gateways are up).
   *
   * @param clusters - how many clusters (at least 2)
   * @param size - nodes per cluster
   * @param options - options every node gets (not its name, ports, cluster or gateway)
   * @throws Error when a node does not start or become healthy (every node is then stopped)
   */
  static async start(clusters = 2, size = 3, options: Omit<ServerOptions, "cluster" | "name" | "port" | "monitorPort" | "gateway"> = {}): Promise<NatsSuperCluster> {
    if (clusters < 2 || size < 1) throw new Error(`a super-cluster needs at least 2 clusters of at least 1 node, not ${clusters} x ${size}`);
    // Every port of every node at once: a node not started yet must not find its port taken by another's.
    const all = await freePorts(4 * clusters * size);
    const take = (): number[] => all.splice(0, size);
    const layout = Array.from({ length: clusters }, () => ({ clients: take(), monitors: take(), routes: take(), gateways: take() }));
    const prefix = `pcg-${layout[0]?.routes[0] ?? 0}`;
    const names = layout.map((_, c) => `${prefix}-${String.fromCharCode(65 + c)}`);
    const gateways = layout.map((l, c) => ({ name: names[c] ?? "", ports: l.gateways }));
    const specs = layout.flatMap((l, c) => {
      const name = names[c] ?? "";
      return l.routes.map((port, i) => ({
        ...options,
        name: `${name}-n${i + 1}`,
        port: l.clients[i] ?? 0,
        monitorPort: l.monitors[i] ?? 0,
        cluster: { name, port, routes: l.routes },
        gateway: { name, port: l.gateways[i] ?? 0, gateways },
      }));
    });
    const nodes = await startNodes(specs);
    const sc = new NatsSuperCluster(names.map((name, c) => new NatsCluster(nodes.slice(c * size, (c + 1) * size), name)));
    try {
      await sc.waitMetaCurrent();
    } catch (err) {
      await sc.stop();
      throw err;
    }
    return sc;
  }

  /**
   * Waits until the JetStream meta leader sees every other node as a current peer. Every
   * node is healthy before that, but a stream placed in a cluster whose nodes the meta
   * leader has not heard from yet fails with "no suitable peers for placement".
   *
   * @throws Error after 30 s
   */
  async waitMetaCurrent(): Promise<void> {
    const deadline = performance.now() + META_READY_MS;
    const others = this.nodes.length - 1;
    for (;;) {
      for (const n of this.nodes) {
        const jsz = await n.monitor<JszMeta>("/jsz").catch(() => undefined);
        const meta = jsz?.meta_cluster;
        // Only the leader knows which peers are current.
        if (!meta || meta.leader !== n.name) continue;
        const current = (meta.replicas ?? []).filter((r) => r.current === true).length;
        if (current >= others) return;
      }
      if (performance.now() > deadline) throw new Error(`the JetStream meta leader did not see all ${others + 1} nodes current within ${META_READY_MS} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The cluster of that name. */
  cluster(name: string): NatsCluster | undefined {
    return this.clusters.find((c) => c.name === name);
  }

  /** The node of that server name (`server_name`, as stream and consumer leaders are reported). */
  node(name: string | undefined): NatsServer | undefined {
    return this.nodes.find((n) => name !== undefined && n.name === name);
  }

  /**
   * The node leading a stream's replicas, or a consumer's when `consumer` is given, as
   * the running nodes that hold a replica report it (monitoring, no client connection).
   * Undefined while no running node names a leader (an election under way).
   */
  async leader(stream: string, consumer?: string, account = "$G"): Promise<NatsServer | undefined> {
    for (const n of this.nodes) {
      if (!n.running) continue;
      let jsz: JszStreams;
      try {
        jsz = await n.monitor<JszStreams>(`/jsz?acc=${encodeURIComponent(account)}&accounts=true&streams=true&consumers=true`);
      } catch {
        continue;
      }
      for (const s of jsz.account_details?.flatMap((a) => a.stream_detail ?? []) ?? []) {
        if (s.name !== stream) continue;
        const name = consumer === undefined ? s.cluster?.leader : s.consumer_detail?.find((c) => c.name === consumer)?.cluster?.leader;
        const leader = this.node(name);
        if (leader?.running) return leader;
      }
    }
    return undefined;
  }

  /** Stops every node of every cluster and deletes their files. */
  async stop(): Promise<void> {
    await Promise.all(this.clusters.map((c) => c.stop()));
  }

  /** Same as {@link stop}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
