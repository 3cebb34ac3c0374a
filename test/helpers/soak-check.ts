/**
 * The soak test's checker. Pure: given what was published, every handler run the
 * member children recorded, when the parent killed which process, and what the
 * dead-letter stream holds, it says
 * - which non-poison messages were never handled successfully (lost);
 * - whether the first handling (first handler start) of each key's messages follows
 *   publish order (the project's delivery checker, poison messages included: key mode
 *   must try a poison message before the next message of its key);
 * - which messages ran more than once, and whether each repeat is attributable to a
 *   kill -9: its previous run started in a process that was killed before that run
 *   recorded its end (or recorded it so shortly before the kill that the ack, which
 *   follows the end, may not have left), and the repeat started after the kill;
 *   A repeat is also attributable to a SIGSTOP pulse long enough for the server to
 *   redeliver (half an AckWait or more) when the earlier run was in flight across it:
 *   a handler running when its instance lost the pin cannot be recalled. A run that
 *   *started* after its process was resumed is never excused: a resumed instance must
 *   start nothing before it proved its pin again. A link held half-open (a stall) is
 *   the same, except that the stalled instance may start runs for as long as its
 *   last proof of the pin, which came before the stall, is valid;
 * - whether two runs of one key ever overlapped in time (a killed run ends at the kill;
 *   the same exception for a run in flight across a long pause);
 * - whether every poison message is in the dead-letter stream exactly once, and
 *   nothing else is.
 */
import { checkDelivery } from "../../src/cli/demo/delivery-check.js";
import type { HandlerRun, SoakPayload } from "./soak-log.js";

/** Two runs of one key closer than this are not counted as overlapping (clocks of separate processes). */
export const OVERLAP_TOLERANCE_MS = 2;

/** What the checker needs. */
export interface SoakInput {
  /** Every message stored, poison included. */
  published: readonly SoakPayload[];
  runs: readonly HandlerRun[];
  /** pid → when the parent sent it SIGKILL. */
  kills: ReadonlyMap<number, number>;
  /** pid → when the process was seen to exit (any reason), to end the runs it never ended. */
  exits: ReadonlyMap<number, number>;
  /** `key/seq` of each message in the dead-letter stream, one entry per stored message. */
  deadLetters: readonly string[];
  /** A run that ended at most this long before its process was killed may not have had its ack sent. */
  ackGraceMs: number;
  /** SIGSTOP pulses long enough for the server to redeliver what the paused process held. */
  pauses?: readonly Pause[];
}

/** A process stopped with SIGSTOP from `from` to `to` (SIGCONT). */
export interface Pause {
  pid: number;
  from: number;
  to: number;
  /** `sigstop` (default): the process was suspended; `stall`: its link was held half-open while it ran on. */
  kind?: "sigstop" | "stall";
  /**
   * A run the instance started before this time counts as in flight across the pause
   * (default `from`). A stalled instance may start runs while its last proof of the
   * pin is young enough: that proof came before the stall.
   */
  startsExcusedUntil?: number;
}

/** A message that ran again after a previous run. */
export interface Duplicate {
  id: string;
  earlier: HandlerRun;
  later: HandlerRun;
  /**
   * `in-flight`: the earlier run never ended; `ack-window`: it ended within ackGraceMs of the kill;
   * `paused`: the earlier run was in flight (or had just ended) across a long pause; undefined: not attributable.
   */
  attributable: "in-flight" | "ack-window" | "paused" | undefined;
  /** Why it is not attributable, when it is not. */
  why?: string;
}

/** What the checker found. Every list must be empty for the run to pass. */
export interface SoakReport {
  published: number;
  poison: number;
  runs: number;
  okRuns: number;
  /** Distinct non-poison messages handled successfully. */
  handled: number;
  lost: string[];
  outOfOrder: { key: string; expected: number; got: number }[];
  /** Runs of messages that were never published. */
  unexpected: number;
  duplicates: Duplicate[];
  notAttributable: Duplicate[];
  keyOverlaps: { key: string; a: HandlerRun; b: HandlerRun }[];
  /** Non-poison runs that threw, or poison runs that returned (neither can happen with the soak handler). */
  wrongOutcome: HandlerRun[];
  deadLetters: number;
  dlqMissing: string[];
  dlqRepeated: { id: string; count: number }[];
  dlqNotPoison: string[];
}

const idOf = (x: { key: string; seq: number }): string => `${x.key}/${x.seq}`;

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

/** Checks a soak run. */
export function checkSoak(input: SoakInput): SoakReport {
  const poison = new Set(input.published.filter((p) => p.poison).map(idOf));
  const publishedIds = new Set(input.published.map(idOf));
  const perKey = new Map<string, number>();
  for (const p of input.published) perKey.set(p.key, Math.max(perKey.get(p.key) ?? 0, p.seq));

  const byId = new Map<string, HandlerRun[]>();
  const byKey = new Map<string, HandlerRun[]>();
  const wrongOutcome: HandlerRun[] = [];
  const ok = new Set<string>();
  let okRuns = 0;
  for (const r of input.runs) {
    const id = idOf(r);
    push(byId, id, r);
    push(byKey, r.key, r);
    if (r.ok) okRuns += 1;
    if (r.ok && !poison.has(id)) ok.add(id);
    if (r.ok !== undefined && r.ok === poison.has(id)) wrongOutcome.push(r);
  }

  const lost = [...publishedIds].filter((id) => !poison.has(id) && !ok.has(id));
  const order = checkDelivery(
    perKey,
    input.runs.map((r) => ({ key: r.key, seq: r.seq, at: r.start })),
  );

  const duplicates: Duplicate[] = [];
  for (const [id, runs] of byId) {
    if (poison.has(id) || !publishedIds.has(id)) continue;
    const sorted = [...runs].sort((a, b) => a.start - b.start);
    for (let i = 1; i < sorted.length; i++) {
      const earlier = sorted[i - 1] as HandlerRun;
      const later = sorted[i] as HandlerRun;
      duplicates.push({ id, earlier, later, ...attribute(earlier, later, input) });
    }
  }

  const keyOverlaps: SoakReport["keyOverlaps"] = [];
  for (const [key, runs] of byKey) {
    const sorted = [...runs].sort((a, b) => a.start - b.start);
    let open: { run: HandlerRun; end: number } | undefined;
    for (const r of sorted) {
      if (open && r.start < open.end - OVERLAP_TOLERANCE_MS && !pausedAcross(open.run, r, input)) keyOverlaps.push({ key, a: open.run, b: r });
      const end = r.end ?? input.exits.get(r.pid) ?? Infinity;
      if (!open || end > open.end) open = { run: r, end };
    }
  }

  const dlqCounts = new Map<string, number>();
  for (const id of input.deadLetters) dlqCounts.set(id, (dlqCounts.get(id) ?? 0) + 1);
  return {
    published: input.published.length,
    poison: poison.size,
    runs: input.runs.length,
    okRuns,
    handled: ok.size,
    lost,
    outOfOrder: order.outOfOrder,
    unexpected: order.unexpected,
    duplicates,
    notAttributable: duplicates.filter((d) => d.attributable === undefined),
    keyOverlaps,
    wrongOutcome,
    deadLetters: input.deadLetters.length,
    dlqMissing: [...poison].filter((id) => !dlqCounts.has(id)),
    dlqRepeated: [...dlqCounts].filter(([, count]) => count > 1).map(([id, count]) => ({ id, count })),
    dlqNotPoison: [...dlqCounts.keys()].filter((id) => !poison.has(id)),
  };
}

/** Whether `earlier` was in flight (or within the ack grace of its end) when its process was paused, and `later` started after the pause began. */
function pausedAcross(earlier: HandlerRun, later: HandlerRun, input: SoakInput): boolean {
  return (input.pauses ?? []).some(
    (p) => p.pid === earlier.pid && earlier.start < (p.startsExcusedUntil ?? p.from) && (earlier.end === undefined || earlier.end >= p.from - input.ackGraceMs) && later.start >= p.from,
  );
}

function attribute(earlier: HandlerRun, later: HandlerRun, input: SoakInput): Pick<Duplicate, "attributable" | "why"> {
  if (pausedAcross(earlier, later, input)) return { attributable: "paused" };
  const killedAt = input.kills.get(earlier.pid);
  if (killedAt === undefined) {
    return { attributable: undefined, why: `the earlier run's process ${earlier.pid} was not killed${earlier.end === undefined ? " (and the run never ended)" : ""}` };
  }
  if (earlier.start > killedAt) return { attributable: undefined, why: "the earlier run started after its process was killed (clock?)" };
  if (later.start < killedAt) return { attributable: undefined, why: `the repeat started ${(killedAt - later.start).toFixed(1)} ms before the kill, while the earlier run's process was alive` };
  if (earlier.end === undefined) return { attributable: "in-flight" };
  const before = killedAt - earlier.end;
  if (before <= input.ackGraceMs) return { attributable: "ack-window" };
  return { attributable: undefined, why: `the earlier run ended ${before.toFixed(0)} ms before its process was killed (its ack should have been sent)` };
}

/** One line describing a run, for failure messages; `who` names the process (e.g. its member). */
export function describeRun(r: HandlerRun, who: (pid: number) => string = String): string {
  const end = r.end === undefined ? "no end" : `${(r.end - r.start).toFixed(0)} ms, ${r.ok ? "ok" : "threw"}${r.aborted ? ", signal aborted" : ""}`;
  return `${r.key}/${r.seq} on ${who(r.pid)} run ${r.run} dc ${r.dc} at ${new Date(r.start).toISOString().slice(11)} (${end})`;
}

/**
 * What the report says went wrong, one paragraph per kind, with up to 10 examples each;
 * empty when the run passed. A reordered key is shown with the last kill before its
 * offending run, to help tell a crash-related reorder from a planned-change one.
 */
export function soakProblems(r: SoakReport, runs: readonly HandlerRun[], kills: ReadonlyMap<number, number>, who: (pid: number) => string = String): string[] {
  const first = <T>(items: readonly T[], show: (x: T) => string): string =>
    items.slice(0, 10).map((x) => `\n  ${show(x)}`).join("") + (items.length > 10 ? `\n  … and ${items.length - 10} more` : "");
  const run = (x: HandlerRun): string => describeRun(x, who);
  const problems: string[] = [];
  const add = (count: number, what: string, details = ""): void => void (count > 0 && problems.push(`${count} ${what}${details}`));
  add(r.lost.length, "good messages never handled successfully (lost):", first(r.lost, (id) => `${id}: ${runs.filter((x) => idOf(x) === id).map(run).join("; ") || "never ran"}`));
  const lastKillBefore = (at: number): string => {
    const before = [...kills].filter(([, k]) => k <= at).sort(([, a], [, b]) => b - a)[0];
    return before ? `last kill ${((at - before[1]) / 1000).toFixed(1)} s before, of ${who(before[0])}` : "no kill before";
  };
  const reordered = (o: SoakReport["outOfOrder"][number]): string => {
    const offending = runs.filter((x) => x.key === o.key && x.seq === o.got).sort((a, b) => a.start - b.start)[0];
    const skipped = runs.filter((x) => x.key === o.key && x.seq === o.expected).sort((a, b) => a.start - b.start)[0];
    if (!offending) return `${o.key}: expected ${o.expected}, got ${o.got}`;
    return `${o.key}: expected ${o.expected}, got ${o.got} (${lastKillBefore(offending.start)})\n    first ${run(offending)}\n    then  ${skipped ? run(skipped) : `${o.key}/${o.expected} never ran`}`;
  };
  add(r.outOfOrder.length, "keys whose first handlings left publish order:", first(r.outOfOrder, reordered));
  add(r.unexpected, "runs of messages never published");
  add(r.notAttributable.length, "duplicates no kill explains:", first(r.notAttributable, (d) => `${d.id}: ${d.why ?? ""}\n    earlier ${run(d.earlier)}\n    later   ${run(d.later)}`));
  add(r.keyOverlaps.length, "times two runs of one key overlapped:", first(r.keyOverlaps, (o) => `${run(o.a)}\n    and ${run(o.b)}`));
  add(r.wrongOutcome.length, "runs with the wrong outcome (a good message threw, or a poison one returned):", first(r.wrongOutcome, run));
  add(r.dlqMissing.length, "poison messages missing from the dead-letter stream:", first(r.dlqMissing, String));
  add(r.dlqRepeated.length, "poison messages dead-lettered more than once:", first(r.dlqRepeated, (d) => `${d.id} × ${d.count}`));
  add(r.dlqNotPoison.length, "good messages in the dead-letter stream:", first(r.dlqNotPoison, String));
  return problems;
}

/** A poison message attempted more than `maxDeliver` times, and what explains the extra attempts. */
export interface OverAttempted {
  id: string;
  attempts: number;
  /** Its attempts a kill -9 cut: no end recorded, or an end within the ack grace before the kill (the failure may not have been counted). */
  cutByKill: number;
  /** Its attempts in flight across a SIGSTOP pulse (another instance could try it meanwhile). */
  acrossPause: number;
  /** Of those, the ones whose SIGSTOP outlasted AckWait: the server gave the message to another instance before their failure was counted. */
  acrossPausePastAckWait: number;
}

/** What {@link checkPoisonAttempts} found: `byKill` is a documented effect, `unexplained` is not. */
export interface PoisonAttempts {
  /** The most attempts any poison message had. */
  most: number;
  /** Over `maxDeliver`, every extra attempt explained by a kill -9 that cut one, or a SIGSTOP past AckWait during one. */
  byKill: OverAttempted[];
  /** Over `maxDeliver` by more than the attempts a kill cut (`acrossPause` says how many ran across a SIGSTOP, for the report). */
  unexplained: OverAttempted[];
}

/**
 * How often each poison message was attempted, against `maxDeliver` (with a dead-letter
 * subject: after that many it must be dead-lettered). An attempt that a kill -9 cut
 * counts no failure (see "Attempts" in docs/concurrency-and-failures.md; with `retry.exactAttempts` it does), so it may add one: one in flight at
 * the kill, or ended within the ack grace before it (or before the SIGSTOP the killed
 * process was in: it ran nothing after that). An attempt in flight across a SIGSTOP
 * longer than AckWait (`ackWaitMs`) is cut the same way for counting: its failure is
 * counted only once the process resumes, after the server gave the message to another
 * instance, which read the count without it; so it may add one too. A shorter SIGSTOP
 * is no excuse (the message stays with the stopped instance).
 */
export function checkPoisonAttempts(input: Pick<SoakInput, "published" | "runs" | "kills" | "pauses" | "ackGraceMs"> & { ackWaitMs: number }, maxDeliver: number): PoisonAttempts {
  const poison = new Set(input.published.filter((p) => p.poison).map(idOf));
  const byId = new Map<string, HandlerRun[]>();
  for (const r of input.runs) if (poison.has(idOf(r))) push(byId, idOf(r), r);
  const out: PoisonAttempts = { most: 0, byKill: [], unexplained: [] };
  for (const [id, runs] of byId) {
    out.most = Math.max(out.most, runs.length);
    if (runs.length <= maxDeliver) continue;
    const cut = (r: HandlerRun): boolean => {
      const killedAt = input.kills.get(r.pid);
      if (killedAt === undefined || r.start > killedAt) return false;
      // A process killed while stopped made no progress since its SIGSTOP: the failure's count had that long.
      const frozenAt = Math.min(killedAt, ...(input.pauses ?? []).filter((p) => p.pid === r.pid && p.kind !== "stall" && p.from <= killedAt && p.to >= killedAt).map((p) => p.from));
      return r.end === undefined || frozenAt - r.end <= input.ackGraceMs;
    };
    const paused = (r: HandlerRun): boolean =>
      (input.pauses ?? []).some((p) => p.pid === r.pid && r.start < (p.startsExcusedUntil ?? p.from) && (r.end === undefined || r.end >= p.from - input.ackGraceMs));
    const pausedPastAckWait = (r: HandlerRun): boolean =>
      (input.pauses ?? []).some((p) => p.pid === r.pid && p.kind !== "stall" && p.to - p.from > input.ackWaitMs && r.start < p.from && (r.end === undefined || r.end >= p.to));
    const cutByKill = runs.filter(cut).length;
    const acrossPause = runs.filter((r) => !cut(r) && paused(r)).length;
    const acrossPausePastAckWait = runs.filter((r) => !cut(r) && pausedPastAckWait(r)).length;
    const extra = runs.length - maxDeliver;
    const o: OverAttempted = { id, attempts: runs.length, cutByKill, acrossPause, acrossPausePastAckWait };
    if (extra <= cutByKill + acrossPausePastAckWait) out.byKill.push(o);
    else out.unexplained.push(o);
  }
  return out;
}

/** A message the members dead-lettered more than once (the dead-letter stream's Nats-Msg-Id keeps one copy within its duplicate window). */
export interface RepeatedDeadLetter {
  /** `<subject> seq <work-queue seq>`, as the member reported it. */
  message: string;
  by: { pid: number; at: number }[];
  /**
   * Every dead-lettering but the last was followed by a kill of its process within the
   * ack grace (or the process was stopped then and killed while stopped): the terminate
   * may not have left. Or every later one came from a process that was stopped (SIGSTOP)
   * while the first was sent: it finished an attempt made before the stop, and the
   * message did not run again (the dead-letter stream stores one copy).
   */
  excused: boolean;
}

/**
 * Messages dead-lettered by more than one `dead_lettered` event. A dead letter is
 * published, then its message terminated; a kill between the two is the documented
 * case (the message comes back and is dead-lettered again, stored once). Any other
 * repeat means a terminate that did not take effect, after which the message ran again.
 */
export function repeatedDeadLetters(
  events: readonly { pid: number; at: number; type: string; info?: string }[],
  input: Pick<SoakInput, "kills" | "pauses" | "ackGraceMs">,
): RepeatedDeadLetter[] {
  const byMessage = new Map<string, { pid: number; at: number }[]>();
  for (const e of events) if (e.type === "dead_lettered" && e.info !== undefined) push(byMessage, e.info, { pid: e.pid, at: e.at });
  const cutAfter = (pid: number, at: number): boolean => {
    const killedAt = input.kills.get(pid);
    if (killedAt === undefined || killedAt < at) return false;
    const frozenAt = Math.min(killedAt, ...(input.pauses ?? []).filter((p) => p.pid === pid && p.kind !== "stall" && p.from <= killedAt && p.to >= killedAt).map((p) => p.from));
    return frozenAt - at <= input.ackGraceMs;
  };
  return [...byMessage]
    .filter(([, by]) => by.length > 1)
    .map(([message, by]) => {
      const sorted = [...by].sort((a, b) => a.at - b.at);
      const first = sorted[0]?.at ?? 0;
      const stoppedAcross = (d: { pid: number; at: number }): boolean => (input.pauses ?? []).some((p) => p.pid === d.pid && p.kind !== "stall" && p.from <= first && p.to >= first && d.at >= p.to);
      const excused = sorted.slice(0, -1).every((d) => cutAfter(d.pid, d.at)) || sorted.slice(1).every(stoppedAcross);
      return { message, by: sorted, excused };
    });
}
