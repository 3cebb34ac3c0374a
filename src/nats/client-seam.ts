/**
 * The one place that touches nats.js internals. The handoff and the pin keep-alive
 * need four things the public API does not give: the consume's subscription (to
 * drain deliveries in transit), the consume's pull function (to hold pulls while the
 * local buffer is full), the connection behind a JetStream client (for raw requests
 * and its status), and a message's reply subject (the ack subject). Ack coalescing
 * needs a fifth: the connection's outbound flush, to hold it while handlers run. The
 * byte budget needs the consume's first pull, which nats.js sends from inside
 * `consume()` (see {@link consumeWithBoundedFirstPull}), a delivery's size, and the
 * connection's inbox prefix (for the keep-alives' answers).
 *
 * {@link checkClientShapes} checks those shapes when an instance starts and throws
 * `CLIENT_UNSUPPORTED` when an installed nats.js lacks them, instead of silently
 * skipping the handoff. `test/integration/client-seam.test.ts` checks them on the installed
 * version; the peer dependency is pinned to the minor versions that passed.
 */
import type { ConsumerMessages, JetStreamClient, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { ConsumerGroupError } from "../core/errors.js";

/** The pull request options nats.js sends (wire names). */
export interface PullRequest {
  batch?: number;
  max_bytes?: number;
  expires?: number;
  idle_heartbeat?: number;
  id?: string;
  [key: string]: unknown;
}

/** The private surface of a nats.js `consume()` we rely on. */
interface ConsumeInternals {
  sub?: Subscription;
  pull?: (opts: PullRequest) => void;
  pullOptions?: () => PullRequest;
  pending?: { msgs: number; bytes: number; requests: number };
}

const internals = (messages: ConsumerMessages): ConsumeInternals => messages as unknown as ConsumeInternals;

function unsupported(what: string): ConsumerGroupError {
  return new ConsumerGroupError(
    "CLIENT_UNSUPPORTED",
    `the installed nats.js does not have ${what}, which the consumer group handoff needs; install @nats-io/jetstream and @nats-io/transport-node ~3.4.0 (the versions this library was tested with)`,
  );
}

/**
 * The connection behind a JetStream client.
 *
 * @throws ConsumerGroupError `CLIENT_UNSUPPORTED` when the client has none
 */
export function connectionOf(js: JetStreamClient): NatsConnection {
  const nc = (js as unknown as { nc?: NatsConnection }).nc;
  if (!nc || typeof nc.publish !== "function" || typeof nc.request !== "function" || typeof nc.status !== "function") {
    throw unsupported("a connection on the JetStream client (js.nc)");
  }
  return nc;
}

/** The version of the server behind a JetStream client, when the client knows it. */
export function serverVersion(js: JetStreamClient): string | undefined {
  return (js as unknown as { nc?: NatsConnection }).nc?.info?.version;
}

/**
 * The number of messages after this one that a direct batch get reports (the
 * `Nats-Num-Pending` header, which nats.js parses into a field it does not type).
 */
export function directGetPending(m: unknown): number {
  const pending = (m as { pending?: unknown }).pending;
  return typeof pending === "number" ? pending : 0;
}

/** The JetStream API prefix of a client (`$JS.API`, or the one of a domain or an import). */
export function apiPrefix(js: JetStreamClient): string {
  const prefix = (js as unknown as { prefix?: unknown }).prefix;
  if (typeof prefix !== "string" || prefix === "") throw unsupported("the JetStream client's API prefix (prefix)");
  return prefix;
}

/**
 * Checks that a running consume has the internals this library uses.
 *
 * @throws ConsumerGroupError `CLIENT_UNSUPPORTED`
 */
export function checkConsumeShape(messages: ConsumerMessages): void {
  const i = internals(messages);
  if (!i.sub || typeof i.sub.drain !== "function" || typeof i.sub.isClosed !== "function") throw unsupported("the consume's subscription (sub)");
  if (typeof i.pull !== "function" || typeof i.pullOptions !== "function" || !i.pending) throw unsupported("the consume's pull function (pull, pullOptions, pending)");
}

/**
 * Checks the client-level shapes at start.
 *
 * @throws ConsumerGroupError `CLIENT_UNSUPPORTED`
 */
export function checkClientShapes(js: JetStreamClient): void {
  protocolOf(connectionOf(js));
  apiPrefix(js);
}

/** The subscription of a consume (its deliveries), if it is still open. */
export function consumeSubscription(messages: ConsumerMessages): Subscription | undefined {
  const sub = internals(messages).sub;
  return sub && !sub.isClosed() && !sub.isDraining() ? sub : undefined;
}

/** What the gate in front of a consume's pulls lets the next pull ask for. */
export interface PullAllowance {
  /** Messages (0: no pull now). */
  batch: number;
  /** Bytes (the pull's `max_bytes`); absent: no byte limit on this pull. */
  maxBytes?: number;
}

/** The gate in front of a consume's pulls. */
export interface PullGate {
  /** Sends the pull the gate withheld, if it did, now that the allowance may have grown. */
  resume(): void;
  /** Sends a pull now if the allowance lets one go (nats.js waits for missed heartbeats after a pull that ran out of bytes). */
  refill(): void;
}

/**
 * Puts a gate in front of the consume's pulls: before each pull, `allowance(outstanding,
 * wanted)` says how many messages (at most `wanted`, what nats.js asks for) and bytes it
 * may ask for (a batch of 0: none now); the byte limit it gives is for that batch. A withheld
 * pull is sent by the returned `resume()` once the gate opens again.
 *
 * nats.js re-pulls from inside its delivery callback whenever fewer than a threshold
 * of messages are outstanding, however many the application still holds; the gate
 * is what bounds the messages and bytes held in the process and on their way to it.
 */
export function gatePulls(messages: ConsumerMessages, allowance: (outstanding: number, wanted: number) => PullAllowance): PullGate {
  const i = internals(messages);
  const original = i.pull?.bind(messages);
  const options = i.pullOptions?.bind(messages);
  if (!original || !options) throw unsupported("the consume's pull function (pull, pullOptions)");
  let withheld = false;
  i.pull = (opts: PullRequest) => {
    const allowed = allowance(i.pending?.msgs ?? 0, opts.batch ?? 0);
    const batch = Math.min(opts.batch ?? 0, allowed.batch);
    if (batch <= 0) {
      withheld = true;
      return;
    }
    withheld = false;
    // nats.js computes max_bytes from its own byte count (0 when the consume pulls by messages): only ours goes out.
    const { max_bytes: _ignored, ...rest } = opts;
    original(allowed.maxBytes !== undefined ? { ...rest, batch, max_bytes: allowed.maxBytes } : { ...rest, batch });
  };
  const pullNow = (): void => {
    const opts = options();
    if ((opts.batch ?? 0) > 0) i.pull?.(opts);
  };
  return {
    resume() {
      if (withheld) pullNow();
    },
    refill: pullNow,
  };
}

/**
 * Starts a consume whose first pull asks for at most `maxBytes`. nats.js sends that
 * pull from inside `consume()`, before a gate can be put in front of its pulls (see
 * {@link gatePulls}); without a byte limit, a batch of large messages would queue more
 * for this client on the server than its slow-consumer limit allows. The connection's
 * `publish` is shadowed on the instance while `consume()` runs (synchronously, in
 * nats.js 3.x), and only a pull request on `pullSubject` is changed.
 */
export async function consumeWithBoundedFirstPull(nc: NatsConnection, pullSubject: string, maxBytes: number, start: () => Promise<ConsumerMessages>): Promise<ConsumerMessages> {
  const own = Object.prototype.hasOwnProperty.call(nc, "publish");
  const publish = nc.publish.bind(nc);
  const original = own ? (nc as { publish: NatsConnection["publish"] }).publish : undefined;
  nc.publish = (subject, payload, options) => {
    if (subject === pullSubject && typeof payload === "string") {
      const request = JSON.parse(payload) as PullRequest;
      payload = JSON.stringify({ ...request, max_bytes: maxBytes });
    }
    publish(subject, payload, options);
  };
  let started: Promise<ConsumerMessages>;
  try {
    started = start();
  } finally {
    if (original) nc.publish = original;
    else delete (nc as { publish?: unknown }).publish;
  }
  return started;
}

/** The size of a delivery as nats.js counts it (subject, headers and payload), or its payload's when nats.js does not say. */
export function deliverySize(m: JsMsg): number {
  const size = (m as unknown as { msg?: { size?: () => number } }).msg?.size?.();
  return typeof size === "number" ? size : m.data.length;
}

/** The inbox prefix the connection was configured with (`_INBOX` unless set), for replies that must reach it under narrow permissions. */
export function inboxPrefixOf(nc: NatsConnection): string | undefined {
  const prefix = (nc as unknown as { options?: { inboxPrefix?: unknown } }).options?.inboxPrefix;
  return typeof prefix === "string" && prefix !== "" ? prefix : undefined;
}

/** The reply (ack) subject of a delivered message. */
export function replySubject(m: JsMsg): string | undefined {
  return (m as unknown as { reply?: string }).reply || undefined;
}

/** The connection's status events, as an iterator that can be stopped. */
export function connectionStatus(nc: NatsConnection): AsyncIterable<{ type: string; error?: unknown }> & { stop?: () => void } {
  return nc.status() as AsyncIterable<{ type: string; error?: unknown }> & { stop?: () => void };
}

/** The private surface of a nats.js connection's protocol handler we rely on. */
interface ProtocolInternals {
  flushPending?: () => void;
}

/** The protocol handler of a connection, and its outbound flush. */
function protocolOf(nc: NatsConnection): { protocol: ProtocolInternals; flush: () => void } {
  const protocol = (nc as unknown as { protocol?: ProtocolInternals }).protocol;
  const flush = protocol?.flushPending;
  if (!protocol || typeof flush !== "function") throw unsupported("the connection's outbound flush (protocol.flushPending)");
  return { protocol, flush };
}

/** Holds back a connection's socket writes; see {@link connectionWrites}. */
export interface HeldWrites {
  /** From now on, what is published is queued in the connection's outbound buffer but not written. */
  suspend(): void;
  /** Writes everything queued meanwhile, in one socket write, and lets writes go out again. */
  resume(): void;
}

/** One per connection: a second one made while the first holds would take its stand-in for the real flush. */
const heldWrites = new WeakMap<NatsConnection, HeldWrites>();

/**
 * The outbound flush of a connection. nats.js queues every command in an outbound
 * buffer and writes the buffer from a microtask queued by the first command after a
 * write (`protocol.flushPending`). Suspending replaces that method on the instance with
 * one that does nothing, so commands accumulate in order; resuming puts it back and
 * writes. A flush of the connection's own (`nc.flush()`, a reconnect) while suspended
 * waits for the resume like the rest; nothing is reordered or dropped.
 *
 * @throws ConsumerGroupError `CLIENT_UNSUPPORTED` when the connection has no such flush
 */
export function connectionWrites(nc: NatsConnection): HeldWrites {
  const known = heldWrites.get(nc);
  if (known) return known;
  const { protocol, flush } = protocolOf(nc);
  const shadowing = Object.prototype.hasOwnProperty.call(protocol, "flushPending");
  const idle = (): void => undefined;
  const writes: HeldWrites = {
    suspend() {
      protocol.flushPending = idle;
    },
    resume() {
      if (protocol.flushPending !== idle) return;
      if (shadowing) protocol.flushPending = flush;
      else delete protocol.flushPending;
      try {
        flush.call(protocol);
      } catch {
        // a failed write surfaces on the connection (nats.js ignores it here too): nothing to add
      }
    },
  };
  heldWrites.set(nc, writes);
  return writes;
}
