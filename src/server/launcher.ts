/**
 * Starts and controls a real nats-server process on loopback: a throwaway single
 * server or one node of a local cluster (super-clusters: `super-cluster.ts`). Used by
 * `cg demo` and by the tests. It never talks to a server it did not start.
 */
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const execFileAsync = promisify(execFile);

/** Where the project's tools script puts the server, relative to the package root. */
const TOOLS_SERVER = join(".tools", "nats-server", "nats-server");

function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg) && (JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name === "nats-pcgroups") return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error("cannot find the nats-pcgroups package root");
    dir = parent;
  }
}

/**
 * The nats-server binary to run: `$NATS_SERVER_BIN`, else the one the tools script installed.
 *
 * @throws Error that says how to install it, when there is none
 */
export function serverBinary(): string {
  const fromEnv = process.env["NATS_SERVER_BIN"];
  if (fromEnv) return fromEnv;
  const bin = join(packageRoot(), TOOLS_SERVER);
  if (!existsSync(bin)) {
    throw new Error(`no nats-server at ${bin}: run "npm run tools" (it needs Go), or set NATS_SERVER_BIN to a nats-server >= 2.14.3`);
  }
  return bin;
}

const versionCache = new Map<string, string>();

/**
 * The version a nats-server binary reports, e.g. `2.15.3`.
 */
export async function serverVersion(bin = serverBinary()): Promise<string> {
  const cached = versionCache.get(bin);
  if (cached) return cached;
  const { stdout } = await execFileAsync(bin, ["--version"]);
  const version = /v?(\d+\.\d+\.\d+)/.exec(stdout)?.[1];
  if (!version) throw new Error(`cannot read the version of ${bin} from "${stdout.trim()}"`);
  versionCache.set(bin, version);
  return version;
}

/** Compares dotted versions numerically. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split(".").map(Number);
  const pb = b.split(".").map(Number);
  for (let i = 0; i < 3; i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

/** A free TCP port on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const address = srv.address();
      srv.close(() => (typeof address === "object" && address ? resolve(address.port) : reject(new Error("no port"))));
    });
  });
}

/**
 * `count` distinct free TCP ports on 127.0.0.1: all are held open until every one is
 * chosen, so none is handed out twice (one {@link freePort} after another may return a
 * port just closed). Free when returned; another process may still take one first.
 */
export async function freePorts(count: number): Promise<number[]> {
  const servers = Array.from({ length: count }, () => createServer());
  try {
    return await Promise.all(
      servers.map(
        (srv) =>
          new Promise<number>((resolve, reject) => {
            srv.on("error", reject);
            srv.listen(0, "127.0.0.1", () => {
              const address = srv.address();
              if (typeof address === "object" && address) resolve(address.port);
              else reject(new Error("no port"));
            });
          }),
      ),
    );
  } finally {
    await Promise.all(servers.map((srv) => new Promise<void>((resolve) => (srv.listening ? srv.close(() => resolve()) : resolve()))));
  }
}

/** How to start one server. */
export interface ServerOptions {
  /** The binary; defaults to {@link serverBinary}. */
  bin?: string;
  /** The lowest version accepted; start fails loudly below it. Default 2.14.3. */
  minVersion?: string;
  /** Extra nats-server config text appended to the generated file (auth, TLS, accounts…). */
  extraConfig?: string;
  /** A JetStream domain for the server (`jetstream { domain }`). */
  jetstreamDomain?: string;
  /** A server name, for logs and cluster identity. */
  name?: string;
  /** Cluster membership: this node's cluster port and the cluster's route ports. */
  cluster?: { name: string; port: number; routes: number[] };
  /**
   * Gateways to other clusters (a super-cluster): this node's gateway port, and the
   * gateway ports of every cluster's nodes by cluster name. `name` must be the
   * node's cluster name; the list may name the node's own cluster too.
   */
  gateway?: GatewayOptions;
  /** Fixed client port (a free one is chosen otherwise). */
  port?: number;
  /** Fixed monitoring port (a free one is chosen otherwise). */
  monitorPort?: number;
  /** Seconds to wait for readiness. Default 20. */
  readyTimeoutSeconds?: number;
}

/** A node's `gateway` block: see {@link ServerOptions.gateway}. */
export interface GatewayOptions {
  /** The gateway name: the node's cluster name. */
  name: string;
  /** This node's gateway listen port. */
  port: number;
  /** Every cluster of the super-cluster: its name and its nodes' gateway ports. */
  gateways: { name: string; ports: number[] }[];
}

/** The `gateway { ... }` config block of {@link ServerOptions.gateway}. */
function gatewayBlock(gw: GatewayOptions): string {
  const remotes = gw.gateways.map((g) => `{ name: ${JSON.stringify(g.name)}, urls: [${g.ports.map((p) => `"nats://127.0.0.1:${p}"`).join(", ")}] }`);
  return `gateway { name: ${JSON.stringify(gw.name)}, listen: "127.0.0.1:${gw.port}", gateways: [${remotes.join(", ")}] }`;
}

/**
 * One running nats-server process with JetStream, on 127.0.0.1, with its own
 * temporary store directory. Survives {@link restart} with the same port and store.
 */
export class NatsServer {
  private child: ChildProcess | undefined;
  private stderrTail = "";

  private constructor(
    /** Client port. */
    readonly port: number,
    /** Monitoring port. */
    readonly monitorPort: number,
    /** JetStream store directory (deleted by {@link stop}). */
    readonly storeDir: string,
    /** The generated config file. */
    readonly configFile: string,
    /** The version of the binary. */
    readonly version: string,
    private readonly bin: string,
    private readonly readyTimeoutMs: number,
    private readonly workDir: string,
    /** The server name (`server_name`), as cluster leaders are reported. */
    readonly name: string,
  ) {}

  /** `nats://127.0.0.1:<port>`. */
  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  /** The process id, while running. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** True while the process runs. */
  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  /**
   * Starts a server and waits until JetStream is ready.
   *
   * @throws Error when the binary is missing or too old, or the server does not become ready
   */
  static async start(options: ServerOptions = {}): Promise<NatsServer> {
    const bin = options.bin ?? serverBinary();
    const version = await serverVersion(bin);
    const min = options.minVersion ?? "2.14.3";
    if (compareVersions(version, min) < 0) {
      throw new Error(`nats-server ${version} at ${bin} is older than the required ${min}: run "npm run tools" or fix NATS_SERVER_BIN`);
    }
    const workDir = await mkdtemp(join(tmpdir(), "pcg-nats-"));
    const storeDir = join(workDir, "js");
    await mkdir(storeDir);
    const port = options.port ?? (await freePort());
    const monitorPort = options.monitorPort ?? (await freePort());
    const lines = [
      `server_name: ${JSON.stringify(options.name ?? `pcg-${port}`)}`,
      `listen: "127.0.0.1:${port}"`,
      `http: "127.0.0.1:${monitorPort}"`,
      `jetstream { store_dir: ${JSON.stringify(storeDir)}, max_memory_store: 512MB, max_file_store: 8GB${options.jetstreamDomain ? `, domain: ${JSON.stringify(options.jetstreamDomain)}` : ""} }`,
    ];
    if (options.cluster) {
      const routes = options.cluster.routes.map((p) => `"nats-route://127.0.0.1:${p}"`).join(", ");
      lines.push(`cluster { name: ${JSON.stringify(options.cluster.name)}, listen: "127.0.0.1:${options.cluster.port}", routes: [${routes}] }`);
    }
    if (options.gateway) lines.push(gatewayBlock(options.gateway));
    if (options.extraConfig) lines.push(options.extraConfig);
    const configFile = join(workDir, "server.conf");
    await writeFile(configFile, lines.join("\n") + "\n");
    const name = options.name ?? `pcg-${port}`;
    const server = new NatsServer(port, monitorPort, storeDir, configFile, version, bin, (options.readyTimeoutSeconds ?? 20) * 1000, workDir, name);
    await server.launch(!options.cluster);
    return server;
  }

  private async launch(waitForJetStream: boolean): Promise<void> {
    const child = spawn(this.bin, ["-c", this.configFile], { stdio: ["ignore", "ignore", "pipe"] });
    this.child = child;
    this.stderrTail = "";
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => {
      this.stderrTail = (this.stderrTail + chunk).slice(-4000);
    });
    await this.waitReady(waitForJetStream);
  }

  /**
   * Waits until the server answers its health check. A single server is ready when
   * JetStream is; a cluster node is ready once it listens (the cluster needs its peers).
   */
  async waitReady(waitForJetStream = true): Promise<void> {
    const deadline = Date.now() + this.readyTimeoutMs;
    const path = waitForJetStream ? "/healthz" : "/healthz?js-enabled-only=true";
    while (Date.now() < deadline) {
      if (!this.running) {
        throw new Error(`nats-server exited during start-up (code ${String(this.child?.exitCode)}):\n${this.stderrTail}`);
      }
      try {
        const res = await fetch(`http://127.0.0.1:${this.monitorPort}${path}`);
        if (res.ok) return;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`nats-server on port ${this.port} was not ready after ${this.readyTimeoutMs} ms:\n${this.stderrTail}`);
  }

  /** Fetches a monitoring endpoint such as `/varz` or `/jsz`. */
  async monitor<T = unknown>(path: string): Promise<T> {
    const res = await fetch(`http://127.0.0.1:${this.monitorPort}${path}`);
    return (await res.json()) as T;
  }

  private async signal(sig: NodeJS.Signals): Promise<void> {
    const child = this.child;
    if (!child || !this.running) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill(sig);
    await exited;
  }

  /** Kills the process with SIGKILL (a crash), keeping the store for {@link restart}. */
  async kill(): Promise<void> {
    await this.signal("SIGKILL");
  }

  /** Stops the process gracefully (SIGTERM), keeping the store for {@link restart}. */
  async shutdown(): Promise<void> {
    await this.signal("SIGTERM");
  }

  /** Starts the process again on the same port with the same store. */
  async restart(waitForJetStream = true): Promise<void> {
    if (this.running) await this.shutdown();
    await this.launch(waitForJetStream);
  }

  /** Stops the process and deletes its files. Idempotent. */
  async stop(): Promise<void> {
    await this.signal("SIGKILL");
    await rm(this.workDir, { recursive: true, force: true });
  }

  /** Same as {@link stop}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}

/**
 * Starts servers one after the other (each only until it listens: a cluster needs its
 * peers before JetStream is healthy), then waits until every one reports JetStream
 * healthy. A failure stops all of them.
 *
 * @param specs - one server's options per node, with its cluster (and gateway) settings
 * @returns the nodes, in the order of `specs`
 * @throws Error when a node does not start or become healthy
 */
export async function startNodes(specs: ServerOptions[]): Promise<NatsServer[]> {
  const nodes: NatsServer[] = [];
  try {
    for (const spec of specs) nodes.push(await NatsServer.start(spec));
    await Promise.all(nodes.map((n) => n.waitReady(true)));
  } catch (err) {
    await Promise.all(nodes.map((n) => n.stop()));
    throw err;
  }
  return nodes;
}

/**
 * A 3-node (or n-node) JetStream cluster on loopback.
 */
export class NatsCluster {
  /**
   * Wraps running nodes; {@link NatsCluster.start} and `NatsSuperCluster.start` make them.
   *
   * @param nodes - the nodes, in start order
   * @param name - the cluster name (`cluster.name`, and the gateway name in a super-cluster)
   */
  constructor(
    /** The nodes, in start order. */
    readonly nodes: NatsServer[],
    /** The cluster name, as stream placement and stream info name it. */
    readonly name: string,
  ) {}

  /** Client URLs of all nodes, for a connection's `servers` option. */
  get urls(): string[] {
    return this.nodes.map((n) => n.url);
  }

  /**
   * Starts `size` nodes and waits until every node reports JetStream healthy.
   */
  static async start(size = 3, options: Omit<ServerOptions, "cluster" | "name" | "port" | "monitorPort" | "gateway"> = {}): Promise<NatsCluster> {
    const clusterPorts = await freePorts(size);
    const name = `pcg-${clusterPorts[0] ?? 0}`;
    const nodes = await startNodes(
      clusterPorts.map((port, i) => ({ ...options, name: `${name}-n${i + 1}`, cluster: { name, port, routes: clusterPorts } })),
    );
    return new NatsCluster(nodes, name);
  }

  /** Stops every node and deletes their files. */
  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }

  /** Same as {@link stop}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }
}
