/**
 * The opt-in Prometheus endpoint of `cg … consume --metrics-port`: an OpenTelemetry
 * SDK `MeterProvider` read by the Prometheus exporter, served on `/metrics` by an
 * HTTP server of our own (so `--metrics-port 0` picks a free port and a busy port
 * is reported as a CLI error instead of an OpenTelemetry diagnostic).
 *
 * The SDK and the exporter are not dependencies of the package (a library user
 * should not install them): they are loaded here, on demand, and their absence is
 * a {@link CliError} `METRICS_DEPENDENCY_MISSING` that says what to install.
 */
import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { MeterProvider } from "@opentelemetry/api";
import { MetricNames } from "../index.js";
import { CliError, UsageError } from "./errors.js";

/** The default `--metrics-host`: loopback only. */
export const DEFAULT_METRICS_HOST = "127.0.0.1";
/** Where the metrics are served. */
export const METRICS_PATH = "/metrics";

/** Where to listen. */
export interface MetricsEndpointOptions {
  host: string;
  /** 0 picks a free port. */
  port: number;
}

/** A JSON route of the endpoint: answers GET with a status and a body to serialise. */
export type JsonRoute = () => Promise<{ status: number; body: unknown }>;

/** A serving endpoint. */
export interface MetricsEndpoint {
  /** The provider to pass to the consume call as `meterProvider`. */
  meterProvider: MeterProvider;
  /** `http://host:port/metrics`, with the port actually bound. */
  url: string;
  host: string;
  port: number;
  /** Serves `route` as JSON at `path` from now on (e.g. `/lag`). */
  addRoute(path: string, route: JsonRoute): void;
  /** Stops serving and shuts the provider down. Idempotent. */
  close(): Promise<void>;
}

/**
 * Parses `--metrics-port`: an integer from 0 (a free port) to 65535.
 *
 * @throws UsageError otherwise
 */
export function parseMetricsPort(value: string): number {
  const text = value.trim();
  const n = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!Number.isInteger(n) || n > 65535) throw new UsageError(`--metrics-port must be a port number from 0 to 65535 (0 picks a free port), got "${value}"`);
  return n;
}

function listen(server: Server, options: MetricsEndpointOptions): Promise<AddressInfo> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => reject(err);
    server.once("error", onError);
    server.listen({ host: options.host, port: options.port }, () => {
      server.removeListener("error", onError);
      resolve(server.address() as AddressInfo);
    });
  });
}

/** The packages `--metrics-port` loads, with the versions the project is tested with. */
export const METRICS_PACKAGES = ["@opentelemetry/api@^1.9.0", "@opentelemetry/sdk-metrics@^2.12.0", "@opentelemetry/exporter-prometheus@^0.223.0"] as const;

type Sdk = typeof import("@opentelemetry/sdk-metrics");
type Exporter = typeof import("@opentelemetry/exporter-prometheus");

/**
 * Loads the OpenTelemetry SDK and Prometheus exporter.
 *
 * @param load - how to import a module (a test seam; default: `import()`)
 * @throws CliError `METRICS_DEPENDENCY_MISSING`, naming the packages to install, when one cannot be loaded
 */
export async function loadMetricsSdk(load: (name: string) => Promise<unknown> = (name) => import(name)): Promise<{ sdk: Sdk; exporter: Exporter }> {
  try {
    const [sdk, exporter] = await Promise.all([load("@opentelemetry/sdk-metrics") as Promise<Sdk>, load("@opentelemetry/exporter-prometheus") as Promise<Exporter>]);
    return { sdk, exporter };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== "ERR_MODULE_NOT_FOUND" && code !== "MODULE_NOT_FOUND") throw err;
    throw new CliError(
      "METRICS_DEPENDENCY_MISSING",
      `--metrics-port needs the OpenTelemetry SDK and Prometheus exporter, which nats-pcgroups does not install (library users do not need them): ` +
        `npm install ${METRICS_PACKAGES.join(" ")} (next to nats-pcgroups; with a global cg, npm install -g them too). ${err instanceof Error ? err.message : String(err)}`,
      { cause: err },
    );
  }
}

/**
 * The Prometheus names of the instruments measured in seconds carry the unit, as the
 * OpenTelemetry-to-Prometheus translation asks (`messaging_process_duration_seconds`);
 * the exporter we use does not add it itself.
 */
function secondsViews(): { instrumentName: string; name: string }[] {
  return [{ instrumentName: MetricNames.processDuration, name: `${MetricNames.processDuration}_seconds` }];
}

/**
 * Starts serving `/metrics`.
 *
 * @throws CliError `METRICS_DEPENDENCY_MISSING` when the OpenTelemetry SDK or exporter is not installed
 * @throws CliError `METRICS_LISTEN_FAILED` when the address cannot be bound
 */
export async function startMetricsEndpoint(options: MetricsEndpointOptions): Promise<MetricsEndpoint> {
  // loaded on demand: every other command (and the library) runs without the OpenTelemetry SDK
  const { sdk, exporter: prometheus } = await loadMetricsSdk();
  const exporter = new prometheus.PrometheusExporter({ preventServerStart: true });
  const provider = new sdk.MeterProvider({ readers: [exporter], views: secondsViews() });
  const routes = new Map<string, JsonRoute>();
  const text = (res: ServerResponse, status: number, body: string): void => {
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8" }).end(body);
  };
  const serveJson = async (route: JsonRoute, res: ServerResponse): Promise<void> => {
    const { status, body } = await route();
    res.writeHead(status, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" }).end(`${JSON.stringify(body, null, 2)}\n`);
  };
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    const route = routes.get(path);
    const paths = [METRICS_PATH, ...routes.keys()].join(", ");
    if (path === METRICS_PATH && (req.method === "GET" || req.method === "HEAD")) {
      exporter.getMetricsRequestHandler(req, res);
    } else if (route && req.method === "GET") {
      serveJson(route, res).catch((err: unknown) => text(res, 500, `error: ${err instanceof Error ? err.message : String(err)}\n`));
    } else if (path === "/") {
      text(res, 200, `cg consume: Prometheus metrics at ${METRICS_PATH}${routes.size > 0 ? `; JSON at ${[...routes.keys()].join(", ")}` : ""}\n`);
    } else {
      text(res, 404, `not found: this endpoint serves ${paths}\n`);
    }
  });
  let address: AddressInfo;
  try {
    address = await listen(server, options);
  } catch (err) {
    await provider.shutdown().catch(() => undefined);
    const detail = err instanceof Error ? err.message : String(err);
    const code = (err as NodeJS.ErrnoException).code;
    const hint = code === "EADDRINUSE" ? "; choose another --metrics-port (0 picks a free one)" : code === "EADDRNOTAVAIL" || code === "ENOTFOUND" ? "; --metrics-host must be an address of this machine" : "";
    throw new CliError("METRICS_LISTEN_FAILED", `cannot serve metrics on ${options.host}:${options.port}: ${detail}${hint}`, { cause: err });
  }
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  let closing: Promise<void> | undefined;
  return {
    meterProvider: provider,
    url: `http://${host}:${address.port}${METRICS_PATH}`,
    host: address.address,
    port: address.port,
    addRoute(path, route) {
      routes.set(path, route);
    },
    close() {
      closing ??= (async () => {
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
        await provider.shutdown().catch(() => undefined);
      })();
      return closing;
    },
  };
}
