/**
 * `cg static consume` / `cg elastic consume`: runs one member instance with Go
 * cg's consumer template, prints one line (or NDJSON object) per message before
 * acking it (an ack that fails is an `ack_failed` event of its own), and
 * reports the instance's status on stderr. Ctrl-C stops it gracefully: the
 * message in flight is finished and acked, the instance unpins so a standby takes
 * over at once, and the exit code is 130 (143 after SIGTERM).
 */
import { Option, type Command } from "commander";
import { AckPolicy, type ConsumerConfig, type JetStreamClient } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { defaultMemberName, elasticConsume, staticConsume, type AssignmentPolicy, type AutoJoinOptions, type ConcurrencyMode, type ConsumerGroupMember, type ConsumerGroupMessage, type GroupKind } from "../../index.js";
import { ExitRequest, UsageError } from "../errors.js";
import { LagCache } from "../lag-cache.js";
import { LAG_PATH, lagRoute, registerLagGauges } from "../lag-endpoint.js";
import { DEFAULT_METRICS_HOST, parseMetricsPort, startMetricsEndpoint, type MetricsEndpoint, type MetricsEndpointOptions } from "../metrics-endpoint.js";
import type { MessageDoc } from "../model.js";
import { parseDuration, parsePositiveInt } from "../parse.js";
import { memberEvent, renderEvent, renderMessage } from "../render.js";
import type { Session } from "../session.js";
import { exitCodeFor, onStopSignal, type StopSignal } from "../signals.js";
import { arg } from "./common.js";
import { lagForCli, lagPolicy, type LagPolicy } from "./lag-policy.js";

/** Go cg's consumer template: explicit acks, one message at a time, AckWait 2 s. */
export const CONSUMER_TEMPLATE: Partial<ConsumerConfig> = {
  ack_policy: AckPolicy.Explicit,
  max_ack_pending: 1,
  ack_wait: nanos(2000),
};

/** Default simulated processing time, as Go's `--sleep`. */
export const DEFAULT_SLEEP = "20ms";

/** The `--sleep` flag of a mode, as Go has it (a mode flag, used by `consume`). */
export function sleepOption(): Option {
  return new Option("--sleep <duration>", "simulated processing time per message, for consume").default(DEFAULT_SLEEP).argParser(arg((v) => (parseDuration(v, "--sleep"), v)));
}

/** The `--sleep` value in ms, from a command or its parents. */
export function sleepMs(cmd: Command): number {
  return parseDuration(cmd.optsWithGlobals<{ sleep?: string }>().sleep ?? DEFAULT_SLEEP, "--sleep");
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function ackFailure(err: unknown, seq: number): string {
  const detail = err instanceof Error ? err.message : String(err);
  return /no responders|503/i.test(detail)
    ? `message seq ${seq} can not be acknowledged (most likely because of a membership or pinned id change) it will be or may already have been re-delivered: ${detail}`
    : `message seq ${seq} can not be acknowledged!: ${detail}`;
}

/** What to consume. */
export interface ConsumeTarget {
  kind: GroupKind;
  stream: string;
  group: string;
  /** The member; may be left out with `autoJoin` (then `HOSTNAME`). */
  member: string | undefined;
  /** Simulated processing time per message, in ms. */
  sleepMs: number;
  /** Serve Prometheus metrics here while consuming. */
  metrics?: MetricsEndpointOptions;
  /** How handlers run (`--concurrency`, `--max-in-flight`); Go's serial mode when absent. */
  concurrency?: { mode: ConcurrencyMode; maxInFlight: number | undefined };
  /** Elastic with metrics: what the lag gauges and the `/lag` route recommend. */
  lag?: LagPolicy;
  /** Join the group with a lease (`--auto`, elastic only). */
  autoJoin?: AutoJoinOptions;
}

/** `--auto`, `--lease-ttl`, `--settle` and `--assignment` of `cg elastic consume`. */
export function autoJoinOptions(): Option[] {
  return [
    new Option("--auto", "join the group by itself: add the member with a lease, leave on Ctrl-C/SIGTERM; members whose lease expires are removed (member name: $HOSTNAME when not given)"),
    new Option("--lease-ttl <duration>", "with --auto: how long the lease lives without renewal (at least AckWait; default max(10s, AckWait))").argParser(arg((v) => parseDuration(v, "--lease-ttl"))),
    new Option("--settle <duration>", "with --auto: membership changes this close together are written as one (default 3s)").argParser(arg((v) => parseDuration(v, "--settle"))),
    new Option("--assignment <policy>", "with --auto: balanced (Go's contiguous blocks) or sticky (member mappings that move as few partitions as possible)").choices(["balanced", "sticky"]),
  ];
}

/**
 * The auto-join a consume command line asks for, if any.
 *
 * @throws UsageError for `--lease-ttl`, `--settle` or `--assignment` without `--auto`
 */
export function requestedAutoJoin(cmd: Command): AutoJoinOptions | undefined {
  const opts = cmd.opts<{ auto?: boolean; leaseTtl?: number; settle?: number; assignment?: AssignmentPolicy }>();
  if (!opts.auto) {
    for (const [flag, value] of [["--lease-ttl", opts.leaseTtl], ["--settle", opts.settle], ["--assignment", opts.assignment]] as const) {
      if (value !== undefined) throw new UsageError(`${flag} needs --auto`);
    }
    return undefined;
  }
  return {
    ...(opts.leaseTtl !== undefined ? { leaseTtlMs: opts.leaseTtl } : {}),
    ...(opts.settle !== undefined ? { settleMs: opts.settle } : {}),
    ...(opts.assignment !== undefined ? { assignment: opts.assignment } : {}),
  };
}

/** `--concurrency` and `--max-in-flight` of a consume command. */
export function concurrencyOptions(): Option[] {
  return [
    new Option("--concurrency <mode>", "serial (Go's: one message at a time), partition (parallel, never two of one partition) or key (parallel, never two of one key)").choices(["serial", "partition", "key"]).default("serial"),
    new Option("--max-in-flight <n>", "handlers at once in partition and key modes (default: 16)").argParser(arg((v) => parsePositiveInt(v, "--max-in-flight"))),
  ];
}

/**
 * The concurrency a consume command line asks for.
 *
 * @throws UsageError for `--max-in-flight` in serial mode
 */
export function requestedConcurrency(cmd: Command): { mode: ConcurrencyMode; maxInFlight: number | undefined } {
  const opts = cmd.opts<{ concurrency: ConcurrencyMode; maxInFlight?: number }>();
  if (opts.concurrency === "serial" && opts.maxInFlight !== undefined) throw new UsageError("--max-in-flight needs --concurrency partition or key");
  return { mode: opts.concurrency, maxInFlight: opts.maxInFlight };
}

/**
 * `--metrics-port` and `--metrics-host` of a consume command: with a port, {@link runConsume}
 * serves the member's metrics in the Prometheus text format.
 */
export function metricsOptions(kind?: GroupKind): Option[] {
  const lag = kind === "elastic" ? `, and the group's lag as JSON at ${LAG_PATH}` : "";
  return [
    new Option("--metrics-port <port>", `serve the member's metrics for Prometheus at http://<metrics-host>:<port>/metrics${lag} (0 picks a free port, printed on stderr)`).argParser(arg(parseMetricsPort)),
    new Option("--metrics-host <host>", "the address the metrics endpoint listens on").default(DEFAULT_METRICS_HOST),
  ];
}

/**
 * The metrics endpoint a consume command line asks for, if any.
 *
 * @param cmd - the consume command, after parsing
 * @throws UsageError for `--metrics-host` without `--metrics-port`
 */
export function requestedMetrics(cmd: Command): MetricsEndpointOptions | undefined {
  const opts = cmd.opts<{ metricsPort?: number; metricsHost: string }>();
  if (opts.metricsPort === undefined) {
    if (cmd.getOptionValueSource("metricsHost") === "cli") throw new UsageError("--metrics-host needs --metrics-port");
    return undefined;
  }
  return { port: opts.metricsPort, host: opts.metricsHost };
}

/** How long the first lag reading of the metrics endpoint watches the work queue, to measure a drain rate at once. */
export const LAG_ENDPOINT_SAMPLE_MS = 1000;

/**
 * The lag policy of an elastic consume command line (`--target-drain`, `--rate-per-member`).
 *
 * @param cmd - the consume command, after parsing
 * @param metrics - whether `--metrics-port` was given
 * @throws UsageError for a lag flag without `--metrics-port`
 */
export function requestedLagPolicy(cmd: Command, metrics: boolean): LagPolicy {
  if (!metrics) {
    for (const [key, flag] of [["targetDrain", "--target-drain"], ["ratePerMember", "--rate-per-member"]] as const) {
      if (cmd.getOptionValueSource(key) === "cli") throw new UsageError(`${flag} needs --metrics-port: it shapes the group lag the metrics endpoint serves`);
    }
  }
  return lagPolicy(cmd);
}

/**
 * Serves the group's lag on the metrics endpoint: gauges on `/metrics`, JSON on `/lag`.
 * The first reading starts at once (so a drain rate is known by the first scrape); a
 * reading that fails is reported on stderr, once per distinct error.
 */
function serveLag(session: Session, js: JetStreamClient, endpoint: MetricsEndpoint, target: ConsumeTarget, policy: LagPolicy, signal: AbortSignal): void {
  let lastError = "";
  const cache = new LagCache(async (previous) => {
    try {
      return await lagForCli(js, target.stream, target.group, policy, { signal, ...(previous ? { previous } : { sampleMs: LAG_ENDPOINT_SAMPLE_MS }) });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (message !== lastError && !signal.aborted) session.out.warn(`the metrics endpoint cannot read the group's lag (${LAG_PATH} answers 503 until it can): ${message}`);
      lastError = message;
      throw err;
    }
  });
  registerLagGauges(endpoint.meterProvider, cache, { stream: target.stream, group: target.group });
  endpoint.addRoute(LAG_PATH, lagRoute(cache));
  cache.get().catch(() => undefined); // reported above
}

/**
 * Runs a member instance until a signal or until it stops on its own.
 *
 * @throws ExitRequest with 130/143 after a signal; the instance's error when it stopped because of one
 */
export async function runConsume(session: Session, target: ConsumeTarget): Promise<void> {
  const metrics = target.metrics;
  // Listen first: a busy port fails the command before the member joins.
  const endpoint: MetricsEndpoint | undefined = metrics ? await startMetricsEndpoint(metrics) : undefined;
  try {
    await consumeUntilStopped(session, target, endpoint);
  } finally {
    await endpoint?.close();
  }
}

async function consumeUntilStopped(session: Session, target: ConsumeTarget, endpoint: MetricsEndpoint | undefined): Promise<void> {
  const { kind, stream, group, sleepMs } = target;
  const out = session.out;
  const js = await session.js();
  // With --auto and no name, the library's default (HOSTNAME) is the name the output shows.
  const member = target.member ?? (target.autoJoin ? defaultMemberName() : "");
  // Ends the lag endpoint's sample window when the member stops, so no reading outlives it.
  const lagReading = new AbortController();
  if (endpoint && kind === "elastic" && target.lag) serveLag(session, js, endpoint, target, target.lag, lagReading.signal);
  const handler = async (msg: ConsumerGroupMessage): Promise<void> => {
    const ts = new Date().toISOString();
    if (sleepMs > 0) await sleep(sleepMs);
    // The record is written before the ack is sent, so the output is an at-least-once
    // witness: every message the server has an ack for was printed (a kill -9 between
    // the ack and the print can no longer lose the record of an acked message).
    const doc: MessageDoc = {
      member,
      partition: msg.partition,
      subject: msg.subject,
      stream_seq: msg.seq,
      delivered: msg.info.deliveryCount,
      pin_id: msg.pinId ?? null,
      ts,
    };
    out.record(doc, renderMessage);
    try {
      await msg.ackAck();
    } catch (err) {
      out.event({ event: "ack_failed", member, ts: new Date().toISOString(), seq: msg.seq, error: ackFailure(err, msg.seq) }, renderEvent);
    }
  };
  const mode = target.concurrency ?? { mode: "serial", maxInFlight: undefined };
  const options = {
    stream,
    group,
    member,
    handler,
    consumerConfig: CONSUMER_TEMPLATE,
    concurrency: mode.mode,
    ...(mode.maxInFlight !== undefined ? { maxInFlight: mode.maxInFlight } : {}),
    ...(endpoint ? { meterProvider: endpoint.meterProvider } : {}),
  };
  let instance: ConsumerGroupMember;
  try {
    instance = kind === "static" ? await staticConsume(js, options) : await elasticConsume(js, { ...options, ...(target.autoJoin ? { autoJoin: target.autoJoin } : {}) });
  } catch (err) {
    lagReading.abort();
    throw err;
  }

  // Subscribe before yielding to the event loop, so no status is missed.
  const status = instance.status();
  const lagUrl = endpoint && kind === "elastic" && target.lag ? endpoint.url.replace(/\/metrics$/, LAG_PATH) : undefined;
  out.event(
    { event: "started", member, ts: new Date().toISOString(), kind, stream, group, partitions: instance.partitions(), sleep_ms: sleepMs, ...(endpoint ? { metrics_url: endpoint.url } : {}), ...(lagUrl ? { lag_url: lagUrl } : {}) },
    renderEvent,
  );
  const printed = (async () => {
    for await (const s of status) out.event(memberEvent(s, member, new Date()), renderEvent);
  })();

  let received: StopSignal | undefined;
  const restore = onStopSignal((signal) => {
    if (received) process.exit(exitCodeFor(signal)); // a second signal: stop waiting
    received = signal;
    out.event({ event: "stopping", member, ts: new Date().toISOString(), signal }, renderEvent);
    void instance.stop();
  });
  try {
    const error = await instance.closed();
    await printed;
    if (received) throw new ExitRequest(exitCodeFor(received));
    if (error) throw error;
    out.note(`the ${kind} consumer group ${group} on stream ${stream} was deleted: member ${member} stopped`);
  } finally {
    lagReading.abort();
    restore();
  }
}
