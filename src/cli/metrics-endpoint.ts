/**
 * The opt-in Prometheus endpoint of `cg … consume --metrics-port`: an OpenTelemetry
 * SDK `MeterProvider` read by the Prometheus exporter, served on `/metrics` by an
 * HTTP server of our own (so `--metrics-port 0` picks a free port and a busy port
 * is reported as a CLI error instead of an OpenTelemetry diagnostic).
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { MeterProvider } from "@opentelemetry/sdk-metrics";
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

/** A serving endpoint. */
export interface MetricsEndpoint {
  /** The provider to pass to the consume call as `meterProvider`. */
  meterProvider: MeterProvider;
  /** `http://host:port/metrics`, with the port actually bound. */
  url: string;
  host: string;
  port: number;
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

/**
 * Starts serving `/metrics`.
 *
 * @throws CliError `METRICS_LISTEN_FAILED` when the address cannot be bound
 */
export async function startMetricsEndpoint(options: MetricsEndpointOptions): Promise<MetricsEndpoint> {
  // loaded on demand: every other command starts without the OpenTelemetry SDK
  const [{ PrometheusExporter }, { MeterProvider }] = await Promise.all([import("@opentelemetry/exporter-prometheus"), import("@opentelemetry/sdk-metrics")]);
  const exporter = new PrometheusExporter({ preventServerStart: true });
  const meterProvider = new MeterProvider({ readers: [exporter] });
  const server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    if (path === METRICS_PATH && (req.method === "GET" || req.method === "HEAD")) {
      exporter.getMetricsRequestHandler(req, res);
    } else if (path === "/") {
      res.writeHead(200, { "content-type": "text/plain; charset=utf-8" }).end(`cg consume: Prometheus metrics at ${METRICS_PATH}\n`);
    } else {
      res.writeHead(404, { "content-type": "text/plain; charset=utf-8" }).end(`not found: metrics are at ${METRICS_PATH}\n`);
    }
  });
  let address: AddressInfo;
  try {
    address = await listen(server, options);
  } catch (err) {
    await meterProvider.shutdown().catch(() => undefined);
    const detail = err instanceof Error ? err.message : String(err);
    const code = (err as NodeJS.ErrnoException).code;
    const hint = code === "EADDRINUSE" ? "; choose another --metrics-port (0 picks a free one)" : code === "EADDRNOTAVAIL" || code === "ENOTFOUND" ? "; --metrics-host must be an address of this machine" : "";
    throw new CliError("METRICS_LISTEN_FAILED", `cannot serve metrics on ${options.host}:${options.port}: ${detail}${hint}`, { cause: err });
  }
  const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
  let closing: Promise<void> | undefined;
  return {
    meterProvider,
    url: `http://${host}:${address.port}${METRICS_PATH}`,
    host: address.address,
    port: address.port,
    close() {
      closing ??= (async () => {
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
        await meterProvider.shutdown().catch(() => undefined);
      })();
      return closing;
    },
  };
}
