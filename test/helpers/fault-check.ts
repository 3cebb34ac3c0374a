/**
 * The fault catalogue's checker (docs: ../shared/reference/fault-catalogue.md): every
 * handler run of one member, start and end, on every instance, and the promises
 * checked against what was published:
 * - nothing lost;
 * - per key, the order of FIRST handling is the publish order (a message never first
 *   starts before an earlier message of its key first started);
 * - no two runs of one key overlap in time, on any instances;
 * - no instance starts a message after another instance of its member took the pin:
 *   a start under a pin id older than one another instance already started under
 *   (an instance that regained the pin starts under a newer id, which is allowed);
 * - optionally, for an instance cut off by a fault: once another instance started
 *   anything after the fault began, it starts nothing until the fault is over.
 *
 * Times are `performance.timeOrigin + performance.now()` (ms since the epoch, sub-ms),
 * so runs reported by child processes compare with the test process's runs.
 */
import type { JetStreamClient } from "@nats-io/jetstream";
import type { ConsumerGroupMessage, MessageHandler } from "../../src/index.js";

/** Milliseconds since the epoch, sub-millisecond; comparable across processes. */
export const clock = (): number => performance.timeOrigin + performance.now();

/** What the publisher puts in each message. */
export interface FaultPayload {
  key: string;
  /** Per-key sequence, 1, 2, 3... */
  seq: number;
  /** Milliseconds a handler that honours it blocks synchronously (see the child member). */
  block?: number;
  /** Padding, to make the message large. */
  pad?: string;
}

/** One handler run. */
export interface FaultRun {
  /** The instance, e.g. `A`. All runs of a log belong to instances of one member. */
  who: string;
  key: string;
  seq: number;
  deliveryCount: number;
  /** The `Nats-Pin-Id` the message was delivered under. */
  pinId: string | undefined;
  start: number;
  /** Undefined while it runs (or when the instance never reported its end). */
  end?: number;
}

/** A window during which an instance was cut off by a fault. */
export interface Isolation {
  who: string;
  /** When the fault began. */
  from: number;
  /** When it was over. */
  until: number;
}

/** What the checker found. */
export interface FaultReport {
  published: number;
  starts: number;
  unique: number;
  /** Starts beyond the first of each message. */
  duplicates: number;
  /** Starts per instance. */
  startsBy: Record<string, number>;
  /** Messages published but never started, as `key/seq`. */
  lost: string[];
  /** Messages that first started before an earlier message of their key first started. */
  outOfOrder: string[];
  /** Keys with at least one message out of order. */
  keysOutOfOrder: number;
  /** Pairs of runs of one key whose [start, end] overlap. */
  overlaps: string[];
  /** Overlaps whose earlier run was in flight when its process stalled (see {@link CheckOptions.stalls}): the documented exception. */
  excusedOverlaps: string[];
  /** Starts under a pin id older than one another instance had already started under. */
  staleStarts: string[];
  /** Runs without a pin id (the stale-pin check cannot judge them). */
  withoutPinId: number;
  /** Per isolation window: when another instance first started after the fault began, and what the isolated one started after that. */
  isolated: { who: string; takeoverAt: number | undefined; startsAfter: string[] }[];
}

export interface CheckOptions {
  /** Windows during which an instance was cut off (its standby should take over). */
  isolations?: Isolation[];
  /**
   * Overlaps shorter than this are not counted: clocks of different processes agree
   * only to about a millisecond. 0 (the default) within one process.
   */
  toleranceMs?: number;
  /**
   * Times an instance's process stalled (an event-loop block, a SIGSTOP): a run that had
   * started there by `from` and was still going then cannot be recalled when the pin
   * moves, so an overlap with it is excused. A run that started after `from` never is.
   */
  stalls?: { who: string; from: number }[];
}

const id = (r: { key: string; seq: number }): string => `${r.key}/${r.seq}`;
const fmt = (t: number | undefined, t0: number): string => (t === undefined ? "open" : `+${Math.round(t - t0)}`);

/** Every handler run of one member, across its instances. */
export class FaultLog {
  readonly runs: FaultRun[] = [];

  /** @param t0 - times in reports are relative to it: by default the time the log was made */
  constructor(readonly t0 = clock()) {}

  /** Records a start; returns the run, to pass to {@link FaultLog.end}. */
  begin(run: Omit<FaultRun, "start" | "end">, at = clock()): FaultRun {
    const r: FaultRun = { ...run, start: at };
    this.runs.push(r);
    return r;
  }

  end(run: FaultRun, at = clock()): void {
    run.end = at;
  }

  /** A handler for instance `who` that records its start and end around `work`. */
  handler(who: string, work?: (msg: ConsumerGroupMessage, payload: FaultPayload) => void | Promise<void>): MessageHandler {
    return async (msg) => {
      const payload = msg.json<FaultPayload>();
      const run = this.begin({ who, key: payload.key, seq: payload.seq, deliveryCount: msg.info.deliveryCount, pinId: msg.pinId });
      try {
        await work?.(msg, payload);
      } finally {
        this.end(run);
      }
    };
  }

  /** Distinct messages started. */
  unique(): number {
    return new Set(this.runs.map(id)).size;
  }

  /** True when every run started has ended. */
  allEnded(): boolean {
    return this.runs.every((r) => r.end !== undefined);
  }

  /** Starts by `who` at or after `since`. */
  startsBy(who: string, since = 0): number {
    return this.runs.filter((r) => r.who === who && r.start >= since).length;
  }

  /** First start by any instance but `who` at or after `since`. */
  firstStartByOther(who: string, since: number): number | undefined {
    let first: number | undefined;
    for (const r of this.runs) if (r.who !== who && r.start >= since && (first === undefined || r.start < first)) first = r.start;
    return first;
  }

  /**
   * The checker's verdict.
   *
   * @param published - per key, how many messages were published (sequences 1..n)
   */
  check(published: ReadonlyMap<string, number>, options: CheckOptions = {}): FaultReport {
    const tol = options.toleranceMs ?? 0;
    const t0 = this.t0;
    const byStart = [...this.runs].sort((a, b) => a.start - b.start);
    const startsBy: Record<string, number> = {};
    for (const r of byStart) startsBy[r.who] = (startsBy[r.who] ?? 0) + 1;

    // First start of every message.
    const first = new Map<string, FaultRun>();
    for (const r of byStart) if (!first.has(id(r))) first.set(id(r), r);
    const lost: string[] = [];
    const outOfOrder: string[] = [];
    const keysOut = new Set<string>();
    let total = 0;
    for (const [key, count] of published) {
      total += count;
      // The latest first start among the earlier messages of the key.
      let latest: FaultRun | undefined;
      for (let seq = 1; seq <= count; seq++) {
        const f = first.get(`${key}/${seq}`);
        if (!f) {
          lost.push(`${key}/${seq}`);
          continue;
        }
        if (latest && f.start < latest.start) {
          outOfOrder.push(`${key}/${seq} (${f.who}#${f.deliveryCount} ${fmt(f.start, t0)}) first started before ${id(latest)} (${latest.who}#${latest.deliveryCount} ${fmt(latest.start, t0)})`);
          keysOut.add(key);
        }
        if (!latest || f.start > latest.start) latest = f;
      }
    }

    // Overlaps of runs of one key (sorted by start: only later runs that start before one ends).
    const overlaps: string[] = [];
    const excusedOverlaps: string[] = [];
    const stalledRun = (r: FaultRun): boolean => (options.stalls ?? []).some((st) => st.who === r.who && r.start <= st.from + tol && (r.end ?? Number.POSITIVE_INFINITY) >= st.from);
    const byKey = new Map<string, FaultRun[]>();
    for (const r of byStart) {
      const list = byKey.get(r.key) ?? [];
      byKey.set(r.key, list);
      list.push(r);
    }
    for (const list of byKey.values()) {
      for (let i = 0; i < list.length; i++) {
        const a = list[i];
        if (!a) continue;
        const aEnd = a.end ?? Number.POSITIVE_INFINITY;
        for (let j = i + 1; j < list.length; j++) {
          const b = list[j];
          if (!b || b.start >= aEnd - tol) break;
          const line = `${a.who}:${id(a)}#${a.deliveryCount} [${fmt(a.start, t0)}, ${fmt(a.end, t0)}] overlaps ${b.who}:${id(b)}#${b.deliveryCount} [${fmt(b.start, t0)}, ${fmt(b.end, t0)}]`;
          (stalledRun(a) ? excusedOverlaps : overlaps).push(line);
        }
      }
    }

    // Pin epochs: the order in which pin ids first appear among the starts.
    const epoch = new Map<string, number>();
    for (const r of byStart) if (r.pinId !== undefined && !epoch.has(r.pinId)) epoch.set(r.pinId, epoch.size);
    const staleStarts: string[] = [];
    /** Per instance, the newest epoch it started under so far. */
    const newest = new Map<string, { epoch: number; run: FaultRun }>();
    for (const r of byStart) {
      const e = r.pinId === undefined ? undefined : epoch.get(r.pinId);
      if (e === undefined) continue;
      for (const [who, n] of newest) {
        if (who !== r.who && n.epoch > e && n.run.start < r.start - tol) {
          staleStarts.push(`${r.who}:${id(r)}#${r.deliveryCount} ${fmt(r.start, t0)} under pin #${e}, after ${who} started ${id(n.run)} under pin #${n.epoch} at ${fmt(n.run.start, t0)}`);
          break;
        }
      }
      const mine = newest.get(r.who);
      if (!mine || e > mine.epoch) newest.set(r.who, { epoch: e, run: r });
    }

    const isolated = (options.isolations ?? []).map((w) => {
      const takeoverAt = this.firstStartByOther(w.who, w.from);
      const startsAfter =
        takeoverAt === undefined || takeoverAt > w.until
          ? []
          : byStart.filter((r) => r.who === w.who && r.start > takeoverAt + tol && r.start <= w.until).map((r) => `${id(r)}#${r.deliveryCount} ${fmt(r.start, t0)}`);
      return { who: w.who, takeoverAt, startsAfter };
    });

    const unique = first.size;
    return {
      published: total,
      starts: byStart.length,
      unique,
      duplicates: byStart.length - unique,
      startsBy,
      lost,
      outOfOrder,
      keysOutOfOrder: keysOut.size,
      overlaps,
      excusedOverlaps,
      staleStarts,
      withoutPinId: byStart.filter((r) => r.pinId === undefined).length,
      isolated,
    };
  }
}

/** One line of numbers for the test output. */
export function summary(name: string, r: FaultReport): string {
  const by = Object.entries(r.startsBy)
    .map(([w, n]) => `${w} ${n}`)
    .join(", ");
  const iso = r.isolated.map((i) => `${i.who} started ${i.startsAfter.length} after the takeover`).join("; ");
  return (
    `${name}: ${r.published} published, ${r.starts} starts (${by}), ${r.duplicates} duplicates, ${r.lost.length} lost, ` +
    `${r.outOfOrder.length} out of per-key order (${r.keysOutOfOrder} keys), ${r.overlaps.length} overlaps (${r.excusedOverlaps.length} more with a run in flight across a stall), ${r.staleStarts.length} starts under a superseded pin` +
    (iso ? `; ${iso}` : "")
  );
}

/** Publishes keyed messages round-robin over keys, each with its per-key sequence, stored once (`Nats-Msg-Id`). */
export class KeyedPublisher {
  /** Per key, how many messages were stored (sequences 1..n). */
  readonly published = new Map<string, number>();
  private next = 0;

  constructor(
    private readonly js: JetStreamClient,
    private readonly subjectOf: (key: string) => string,
    private readonly keys: number,
    private readonly idPrefix: string,
    /** Bytes of padding per message (0: none). */
    private readonly padBytes = 0,
  ) {}

  total(): number {
    let n = 0;
    for (const c of this.published.values()) n += c;
    return n;
  }

  /**
   * Publishes `count` messages one after the other (so each key's messages are stored
   * in sequence order), each retried with its `Nats-Msg-Id` until stored. `extra` adds
   * fields to the i-th message of this call.
   */
  async publish(count: number, extra?: (i: number, key: string, seq: number) => Partial<FaultPayload> | undefined): Promise<void> {
    const pad = this.padBytes > 0 ? "x".repeat(this.padBytes) : undefined;
    for (let i = 0; i < count; i++) {
      const key = `k${this.next % this.keys}`;
      const seq = (this.published.get(key) ?? 0) + 1;
      const payload: FaultPayload = { key, seq, ...(extra?.(i, key, seq) ?? {}), ...(pad ? { pad } : {}) };
      for (let attempt = 0; ; attempt++) {
        try {
          await this.js.publish(this.subjectOf(key), JSON.stringify(payload), { msgID: `${this.idPrefix}-${key}-${seq}`, timeout: 10_000 });
          break;
        } catch (err) {
          if (attempt >= 20) throw err;
          await new Promise((r) => setTimeout(r, 100));
        }
      }
      this.next += 1;
      this.published.set(key, seq);
    }
  }
}
