/**
 * Helpers for the regression tests of issue 14 (the engine keeps its promises with
 * hot standbys, slow handlers and poison messages): recording a member's status
 * events and lifecycle callbacks, logging every handler run with its start and end,
 * following a consumer's creations and deletions on the server, and picking keys
 * that land on given partitions.
 */
import type { JetStreamManager } from "@nats-io/jetstream";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { partitionOf, type ConsumerGroupMember, type MemberStatus } from "../../src/index.js";
import { waitFor } from "./nats.js";
import { now } from "./load-harness.js";

/** Status events of one instance, with the time each was read. */
export interface StatusLog {
  readonly events: MemberStatus[];
  readonly at: number[];
  /** Events of one type. */
  of<T extends MemberStatus["type"]>(type: T): Extract<MemberStatus, { type: T }>[];
  /** When the first event of a type was seen (undefined: never). */
  firstAt(type: MemberStatus["type"]): number | undefined;
  /** Waits until an event of one of the types arrives; returns it. */
  waitFor(types: MemberStatus["type"] | MemberStatus["type"][], timeoutMs: number): Promise<MemberStatus>;
}

/** Reads `member.status()` in the background until the instance stops. */
export function recordStatus(member: ConsumerGroupMember): StatusLog {
  const events: MemberStatus[] = [];
  const at: number[] = [];
  void (async () => {
    for await (const e of member.status()) {
      events.push(e);
      at.push(now());
    }
  })();
  return {
    events,
    at,
    of: <T extends MemberStatus["type"]>(type: T) => events.filter((e): e is Extract<MemberStatus, { type: T }> => e.type === type),
    firstAt(type) {
      const i = events.findIndex((e) => e.type === type);
      return i === -1 ? undefined : at[i];
    },
    async waitFor(types, timeoutMs) {
      const wanted = Array.isArray(types) ? types : [types];
      return waitFor(() => events.find((e) => wanted.includes(e.type)), timeoutMs, `a ${wanted.join(" or ")} status event (seen: ${events.map((e) => e.type).join(", ")})`);
    },
  };
}

/** The lifecycle callbacks of one instance, each with the time it was called and returned. */
export interface LifecycleLog {
  readonly calls: { name: "assigned" | "revoked"; partitions: number[]; at: number; returnedAt?: number }[];
  /** Per partition: onAssigned calls minus onRevoked calls. Balanced: all zero. */
  balance(): Map<number, number>;
  /** The partitions whose callbacks do not balance, as `p<n>: +k`. */
  unbalanced(): string[];
  /** Callbacks to pass in the consume options. */
  readonly callbacks: { onAssigned: (p: number[]) => Promise<void>; onRevoked: (p: number[]) => Promise<void> };
}

/**
 * Records onAssigned and onRevoked. `assignDelayMs` makes onAssigned take that long
 * (the engine must await it).
 */
export function recordLifecycle(assignDelayMs = 0): LifecycleLog {
  const calls: LifecycleLog["calls"] = [];
  const balance = (): Map<number, number> => {
    const b = new Map<number, number>();
    for (const c of calls) for (const p of c.partitions) b.set(p, (b.get(p) ?? 0) + (c.name === "assigned" ? 1 : -1));
    return b;
  };
  return {
    calls,
    balance,
    unbalanced: () => [...balance()].filter(([, n]) => n !== 0).map(([p, n]) => `p${p}: ${n > 0 ? "+" : ""}${n}`),
    callbacks: {
      async onAssigned(partitions) {
        const call: LifecycleLog["calls"][number] = { name: "assigned", partitions: [...partitions], at: now() };
        calls.push(call);
        if (assignDelayMs > 0) await new Promise((r) => setTimeout(r, assignDelayMs));
        call.returnedAt = now();
      },
      onRevoked(partitions) {
        calls.push({ name: "revoked", partitions: [...partitions], at: now(), returnedAt: now() });
        return Promise.resolve();
      },
    },
  };
}

/** One run of a handler. */
export interface Run {
  who: string;
  /** The message, e.g. `k1/3`. */
  id: string;
  key: string;
  partition: number;
  seq: number;
  deliveryCount: number;
  start: number;
  /** Undefined while it runs. */
  end?: number;
  /** When its `msg.signal` aborted, if it did. */
  abortedAt?: number;
  /** False when the message had no `signal` (the engine before issue 14). */
  hadSignal: boolean;
}

/** Every handler run of a test, across instances and members. */
export class RunLog {
  readonly runs: Run[] = [];

  /** Records the start of a run; call the returned function when it ends. */
  begin(r: Omit<Run, "start" | "end" | "hadSignal" | "abortedAt">, signal?: AbortSignal): () => void {
    const run: Run = { ...r, start: now(), hadSignal: signal !== undefined };
    if (signal) {
      if (signal.aborted) run.abortedAt = run.start;
      else signal.addEventListener("abort", () => (run.abortedAt = now()), { once: true });
    }
    this.runs.push(run);
    return () => {
      run.end = now();
    };
  }

  of(id: string): Run[] {
    return this.runs.filter((r) => r.id === id);
  }

  /** Pairs of runs, matching `same`, whose [start, end] intervals overlap (a run still going counts as open). */
  overlaps(same: (a: Run, b: Run) => boolean): string[] {
    const out: string[] = [];
    for (let i = 0; i < this.runs.length; i++) {
      for (let j = i + 1; j < this.runs.length; j++) {
        const a = this.runs[i];
        const b = this.runs[j];
        if (!a || !b || !same(a, b)) continue;
        const aEnd = a.end ?? Number.POSITIVE_INFINITY;
        const bEnd = b.end ?? Number.POSITIVE_INFINITY;
        if (a.start < bEnd && b.start < aEnd) out.push(`${a.who}:${a.id}#${a.deliveryCount} [${fmt(a.start)}, ${fmt(a.end)}] overlaps ${b.who}:${b.id}#${b.deliveryCount} [${fmt(b.start)}, ${fmt(b.end)}]`);
      }
    }
    return out;
  }
}

const fmt = (t: number | undefined): string => (t === undefined ? "running" : (t % 100_000).toFixed(0));

/** A key whose subject `<prefix>.<key>` lands on one of `partitions` (of `count`) under the filter `<prefix>.*`, wildcard 1. */
export function keyOnPartition(prefix: string, count: number, partitions: readonly number[], name = "k"): string {
  for (let i = 0; i < 10_000; i++) {
    const key = `${name}${i}`;
    if (partitions.includes(partitionOf(`${prefix}.${key}`, count, { filter: `${prefix}.*`, wildcards: [1] }))) return key;
  }
  throw new Error(`no key on partitions ${partitions.join(",")} of ${count}`);
}

/** A consumer's creations and deletions, from the server's advisories, in order. */
export class ConsumerAdvisories {
  readonly log: { action: "CREATED" | "DELETED"; at: number }[] = [];
  private constructor(private readonly sub: Subscription) {}

  static async start(nc: NatsConnection, stream: string, consumer: string): Promise<ConsumerAdvisories> {
    const holder: { self?: ConsumerAdvisories } = {};
    const sub = nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.*.${stream}.${consumer}`, {
      callback: (_err, m) => {
        const action = m.subject.split(".")[4];
        if (action === "CREATED" || action === "DELETED") holder.self?.log.push({ action, at: now() });
      },
    });
    const self = new ConsumerAdvisories(sub);
    holder.self = self;
    await nc.flush();
    return self;
  }

  /** Deletions after the first creation seen at or after `from`. */
  deletionsAfterRecreation(from = 0): number {
    const first = this.log.findIndex((e) => e.action === "CREATED" && e.at >= from);
    return first === -1 ? 0 : this.log.slice(first + 1).filter((e) => e.action === "DELETED").length;
  }

  describe(from = 0): string {
    return this.log
      .filter((e) => e.at >= from)
      .map((e) => `${e.action}@+${Math.round(e.at - from)}ms`)
      .join(" ");
  }

  stop(): void {
    this.sub.unsubscribe();
  }
}

/** Polls a consumer's `created` time and filters; remembers every distinct state. */
export class ConsumerStates {
  readonly states: { created: string | undefined; filters: string; at: number }[] = [];
  private timer: NodeJS.Timeout | undefined;
  private busy = false;

  constructor(
    private readonly jsm: JetStreamManager,
    private readonly stream: string,
    private readonly consumer: string,
  ) {}

  start(everyMs = 25): this {
    this.timer = setInterval(() => void this.poll(), everyMs);
    return this;
  }

  private async poll(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    try {
      let created: string | undefined;
      let filters = "";
      try {
        const ci = await this.jsm.consumers.info(this.stream, this.consumer);
        created = ci.created;
        filters = JSON.stringify(ci.config.filter_subjects ?? ci.config.filter_subject ?? []);
      } catch {
        created = undefined;
      }
      const last = this.states.at(-1);
      if (!last || last.created !== created || last.filters !== filters) this.states.push({ created, filters, at: now() });
    } finally {
      this.busy = false;
    }
  }

  /** Distinct `created` times seen with these filters. */
  createdWith(filters: string[]): string[] {
    const f = JSON.stringify(filters);
    return [...new Set(this.states.filter((s) => s.created !== undefined && s.filters === f).map((s) => s.created as string))];
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

/** Resolves to the promise's value, or rejects with a clear message after `ms`. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

/** The server's JetStream API audit advisories: every API request with its response. */
export class ApiAudit {
  readonly log: { subject: string; request: string; response: string; at: number }[] = [];
  private constructor(private readonly sub: Subscription) {}

  static async start(nc: NatsConnection): Promise<ApiAudit> {
    const holder: { self?: ApiAudit } = {};
    const sub = nc.subscribe("$JS.EVENT.ADVISORY.API", {
      callback: (_err, m) => {
        const a = m.json<{ subject?: string; request?: string; response?: string }>();
        holder.self?.log.push({ subject: a.subject ?? "", request: a.request ?? "", response: a.response ?? "", at: now() });
      },
    });
    const self = new ApiAudit(sub);
    holder.self = self;
    await nc.flush();
    return self;
  }

  /** Requests to create `consumer` on `stream` that the server refused with `errCode` (e.g. 10100). */
  refusedCreates(stream: string, consumer: string, errCode: number): number {
    // `$JS.API.CONSUMER.CREATE.<stream>[.<name>[.<filter>]]`: with several filters the name is only in the request.
    const prefix = `$JS.API.CONSUMER.CREATE.${stream}`;
    return this.log.filter((a) => {
      if (a.subject !== prefix && !a.subject.startsWith(`${prefix}.`)) return false;
      const config = (JSON.parse(a.request || "{}") as { config?: { name?: string; durable_name?: string } }).config;
      return (config?.name ?? config?.durable_name) === consumer && a.response.includes(`"err_code":${errCode}`);
    }).length;
  }

  stop(): void {
    this.sub.unsubscribe();
  }
}
