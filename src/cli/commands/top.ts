/**
 * `cg static top` / `cg elastic top`: a live view of a group, refreshed every
 * `--interval`. On a terminal it redraws one screen (alternate screen, cursor
 * hidden, `q` or Ctrl-C to leave); otherwise it prints one plain block per
 * refresh (NDJSON with `--json`) until SIGINT/SIGTERM.
 *
 * Rates come from successive refreshes: a member's "handled/s" is the change of
 * its consumer's settled deliveries (delivered consumer sequence minus ack
 * pending) over the time between the two reads; a partition's "backlog/s" is the
 * change of its pending + ack pending. The source lag is compared with the refresh
 * about {@link LAG_WINDOW_MS} earlier (the server refreshes it only every couple of
 * seconds while the buffer is full), for its rate and for SOURCE_LAG_GROWING.
 */
import { Option } from "commander";
import type { ConsumerInfo, JetStreamClient } from "@nats-io/jetstream";
import { ConsumerGroupError, workQueueStreamName, type GroupDescription, type GroupKind } from "../../index.js";
import { ExitRequest, UsageError } from "../errors.js";
import type { DescribeMemberDoc, TopFrameDoc, TopRatesDoc } from "../model.js";
import type { Styler } from "../output.js";
import { formatDuration, parseDuration } from "../parse.js";
import { list, table } from "../render.js";
import { withSession, type Session } from "../session.js";
import { exitCodeFor, onStopSignal } from "../signals.js";
import { arg } from "./common.js";
import { GROUP, STREAM, article, where } from "./shared-commands.js";
import { flavourOf, type CommandSpec } from "./spec.js";
import {
  ago,
  bufferLine,
  clockOf,
  describeDoc,
  describeForCli,
  findingLines,
  signed,
  stallAfterOption,
  standbysText,
} from "./describe.js";

/** The default `--interval`. */
export const DEFAULT_INTERVAL = "1s";
/** The shortest `--interval`: each refresh costs a few JetStream API calls per partition. */
export const MIN_INTERVAL_MS = 100;
/** How far back the source lag is compared. */
export const LAG_WINDOW_MS = 5000;

/** Parses `--interval`. */
export function parseInterval(value: string): number {
  const ms = parseDuration(value, "--interval");
  if (ms < MIN_INTERVAL_MS) throw new UsageError(`--interval must be at least ${MIN_INTERVAL_MS}ms, got "${value}"`);
  return ms;
}

/** One refresh: the description, and each member's settled deliveries when read. */
export interface TopSample {
  description: GroupDescription;
  /** Epoch ms when the counters were read. */
  readAt: number;
  /** Member → its consumer's delivered consumer sequence minus ack pending (undefined: no consumer). */
  settled: Map<string, number | undefined>;
}

/** Member → its consumer's settled deliveries (undefined: no consumer, or it could not be read). */
async function readSettled(js: JetStreamClient, d: GroupDescription): Promise<Map<string, number | undefined>> {
  const jsm = await js.jetstreamManager();
  const stream = d.kind === "static" ? d.stream : workQueueStreamName(d.stream, d.group);
  const infos = await Promise.all(d.members.map((m) => jsm.consumers.info(stream, m.consumer).catch(() => undefined)));
  return new Map(d.members.map((m, i) => [m.member, settledOf(infos[i])]));
}

/** Deliveries a consumer has settled: acked, or handed back for redelivery. */
export function settledOf(info: ConsumerInfo | undefined): number | undefined {
  return info ? info.delivered.consumer_seq - info.num_ack_pending : undefined;
}

const perSecond = (delta: number, ms: number): number => Math.round((delta / ms) * 10_000) / 10;

/**
 * The sample to compare the source lag with: the newest at least `windowMs` older
 * than `now`, else the oldest.
 */
export function lagBaseline(history: readonly TopSample[], now: number, windowMs = LAG_WINDOW_MS): TopSample | undefined {
  let baseline = history[0];
  for (const s of history) if (now - s.readAt >= windowMs) baseline = s;
  return baseline;
}

/**
 * The rates between two samples.
 *
 * @param prev - the previous sample, if any
 * @param cur - this sample
 * @param lagBase - the sample the source lag is compared with (default: `prev`)
 */
export function ratesBetween(prev: TopSample | undefined, cur: TopSample, lagBase: TopSample | undefined = prev): TopRatesDoc {
  const d = cur.description;
  if (!prev) {
    return {
      interval_ms: null,
      handled_per_sec: null,
      members: Object.fromEntries(d.members.map((m) => [m.member, null])),
      partitions_backlog_per_sec: d.partitions.map(() => null),
      source_lag_per_sec: null,
    };
  }
  const dt = cur.readAt - prev.readAt;
  const members: Record<string, number | null> = {};
  let handled: number | null = null;
  for (const m of d.members) {
    const a = prev.settled.get(m.member);
    const b = cur.settled.get(m.member);
    // a recreated consumer starts over: no rate for that interval
    const rate = a !== undefined && b !== undefined && b >= a && dt > 0 ? perSecond(b - a, dt) : null;
    members[m.member] = rate;
    if (rate !== null) handled = (handled ?? 0) + rate;
  }
  const dd = Date.parse(d.at) - Date.parse(prev.description.at);
  const backlog = (p: { pending?: number; ackPending?: number } | undefined): number | undefined =>
    p?.pending === undefined ? undefined : p.pending + (p.ackPending ?? 0);
  const partitions = d.partitions.map((p) => {
    const a = backlog(prev.description.partitions[p.partition]);
    const b = backlog(p);
    return a !== undefined && b !== undefined && dd > 0 ? perSecond(b - a, dd) : null;
  });
  const lagA = lagBase?.description.sourceLag;
  const lagB = d.sourceLag;
  const lagMs = lagBase ? Date.parse(d.at) - Date.parse(lagBase.description.at) : 0;
  return {
    interval_ms: dt,
    handled_per_sec: handled === null ? null : Math.round(handled * 10) / 10,
    members,
    partitions_backlog_per_sec: partitions,
    source_lag_per_sec: lagA !== undefined && lagB !== undefined && lagMs > 0 ? perSecond(lagB - lagA, lagMs) : null,
  };
}

// --- rendering -------------------------------------------------------------------

/**
 * The marker of a member's instances: `*` pinned, `~` pulling but not pinned yet,
 * `!` no running instance, `-` over the cap; then `≤n`: at most n standbys.
 */
export function instanceMarker(m: DescribeMemberDoc): string {
  if (m.over_cap) return "-";
  if (!m.active) return m.partitions.length > 0 ? "!" : "";
  return `${m.pinned ? "*" : "~"}${m.standbys_max > 0 ? `≤${m.standbys_max}` : ""}`;
}

function instanceText(m: DescribeMemberDoc, s: Styler): string {
  if (m.over_cap) return s.dim("- over cap");
  if (!m.active) return m.partitions.length > 0 ? s.red("! none") : s.dim("none");
  const standbys = m.standbys_max > 0 ? `, ≤${m.standbys_max} standby${m.standbys_max === 1 ? "" : "s"}` : "";
  return m.pinned ? s.green(`* pinned${standbys}`) : s.cyan(`~ pulling${standbys}`);
}

const BAR_WIDTH = 12;

/** `[#####.......]`: `value` against `max`; at least one `#` for any value above 0. */
export function bar(value: number, max: number, width = BAR_WIDTH): string {
  const filled = value <= 0 || max <= 0 ? 0 : Math.max(1, Math.round((Math.min(value, max) / max) * width));
  return `[${"#".repeat(filled)}${".".repeat(width - filled)}]`;
}

const rate = (n: number | null | undefined): string => (n === null || n === undefined ? "-" : n.toFixed(1));

/** How the screen is drawn. */
export interface TopView {
  intervalMs: number;
  /** On a terminal: keys work, the header says so. */
  interactive: boolean;
  /** The last refresh failed with this, if it did. */
  error?: string;
}

/** The lines of one `top` screen (or plain block). */
export function renderTop(frame: TopFrameDoc, s: Styler, view: TopView): string[] {
  const lines: string[] = [];
  const keys = view.interactive ? "q to quit" : "Ctrl-C to stop";
  lines.push(`${s.bold(`cg top: ${frame.kind} group ${frame.group} on stream ${frame.stream}`)}  ${clockOf(frame.at).slice(0, 8)}  every ${formatDuration(view.intervalMs)}  ${s.dim(keys)}`);
  const sm = frame.summary;
  lines.push(
    `${frame.partition_count} partitions  ${sm.members} members: ${sm.active} active, ${sm.pinned} pinned, standbys ${standbysText(sm.standbys_max)}` +
      `  handled ${rate(frame.rates.handled_per_sec)}/s  pending ${sm.pending}  ack pending ${sm.ack_pending}  redelivered ${sm.redelivered}`,
  );
  const buffer = bufferLine(frame, s, frame.rates.source_lag_per_sec);
  if (buffer) lines.push(buffer);
  if (view.error) lines.push(s.red(`refresh failed: ${view.error}; retrying`));
  lines.push("");
  if (frame.members.length > 0) {
    const memberRows = frame.members.map((m) => [
      m.member,
      m.over_cap ? s.dim("-") : list(m.partitions),
      instanceText(m, s),
      rate(frame.rates.members[m.member]),
      String(m.pending),
      String(m.ack_pending),
      m.redelivered > 0 ? s.yellow(String(m.redelivered)) : "0",
      ago(m.last_delivery, frame.at),
    ]);
    lines.push(...table(["MEMBER", "PARTITIONS", "INSTANCES", "HANDLED/S", "PENDING", "ACK PENDING", "REDELIVERED", "LAST DELIVERY"], memberRows, s).split("\n"));
  } else {
    lines.push(s.dim("no members"));
  }
  lines.push("");
  const byName = new Map(frame.members.map((m) => [m.member, m]));
  const maxPending = Math.max(1, ...frame.partitions.map((p) => p.pending ?? 0));
  const partitionRows = frame.partitions.map((p) => {
    const owner = p.owner === null ? undefined : byName.get(p.owner);
    const marker = owner ? instanceMarker(owner) : "";
    const ownerText = p.owner === null ? s.dim("-") : `${p.owner}${marker ? ` ${marker}` : ""}`;
    const backlog = frame.rates.partitions_backlog_per_sec[p.partition];
    return [
      String(p.partition),
      owner && !owner.active && owner.partitions.length > 0 ? s.red(ownerText) : ownerText,
      p.pending === null ? "-" : String(p.pending),
      p.pending === null ? "" : bar(p.pending, maxPending),
      p.ack_pending === null ? "-" : String(p.ack_pending),
      p.redelivered === null ? "-" : p.redelivered > 0 ? s.yellow(String(p.redelivered)) : "0",
      backlog === null || backlog === undefined ? "-" : signed(backlog),
      ago(p.last_activity, frame.at),
    ];
  });
  lines.push(...table(["PARTITION", "OWNER", "PENDING", "", "ACK PENDING", "REDELIVERED", "BACKLOG/S", "LAST ACTIVITY"], partitionRows, s).split("\n"));
  lines.push("");
  lines.push(...findingLines(frame.findings, s, false));
  lines.push("");
  lines.push(s.dim(`* pinned instance  ~ pulling, not pinned yet  ! no running instance  ≤n at most n standbys  (cg ${frame.kind} describe explains findings)`));
  return lines;
}

// eslint-disable-next-line no-control-regex
const TOKENS = /\u001b\[[0-9;?]*[A-Za-z]|[\s\S]/gu;

/** Cuts a line to `cols` visible characters, keeping (and closing) its colour codes. */
export function clip(line: string, cols: number): string {
  if (!Number.isFinite(cols)) return line;
  let visible = 0;
  let result = "";
  let styled = false;
  let cut = false;
  for (const token of line.match(TOKENS) ?? []) {
    if (token.length > 1 && token.startsWith("\u001b[")) {
      result += token;
      styled = true;
    } else if (visible < cols) {
      result += token;
      visible += 1;
    } else cut = true;
  }
  return cut && styled ? `${result}\u001b[0m` : result;
}

/** Fits lines into a screen of `rows` x `cols`. */
export function fitScreen(lines: readonly string[], cols: number, rows: number): string[] {
  const shown = lines.length > rows ? [...lines.slice(0, Math.max(0, rows - 1)), `... ${lines.length - rows + 1} more lines: enlarge the terminal`] : [...lines];
  return shown.map((l) => clip(l, cols));
}

// --- the terminal --------------------------------------------------------------------

const ENTER = "\u001b[?1049h\u001b[?25l\u001b[H\u001b[2J";
const LEAVE = "\u001b[?25h\u001b[?1049l";

/** The alternate screen, a hidden cursor and raw keys, restored on {@link close} (and on process exit, just in case). */
class Screen {
  private open = false;
  private readonly onExit = (): void => this.close();

  constructor(
    private readonly out: NodeJS.WriteStream,
    private readonly input: NodeJS.ReadStream,
    private readonly onKey: (key: string) => void,
  ) {}

  private readonly onData = (data: Buffer | string): void => {
    for (const ch of String(data)) this.onKey(ch);
  };

  enter(): void {
    this.open = true;
    process.once("exit", this.onExit);
    this.out.write(ENTER);
    if (this.input.isTTY) {
      this.input.setRawMode(true);
      this.input.on("data", this.onData);
      this.input.resume();
    }
  }

  draw(lines: readonly string[]): void {
    const cols = this.out.columns > 0 ? this.out.columns : Infinity;
    const rows = this.out.rows > 0 ? this.out.rows : Infinity;
    // raw mode turns off the newline translation: \r\n, and clear each line's rest
    this.out.write(`\u001b[H${fitScreen(lines, cols, rows).join("\u001b[K\r\n")}\u001b[K\u001b[J`);
  }

  close(): void {
    if (!this.open) return;
    this.open = false;
    process.removeListener("exit", this.onExit);
    if (this.input.isTTY) {
      this.input.removeListener("data", this.onData);
      this.input.setRawMode(false);
      this.input.pause();
    }
    this.out.write(LEAVE);
  }
}

/** What `top` shows and how often. */
export interface TopTarget {
  kind: GroupKind;
  stream: string;
  group: string;
  intervalMs: number;
  stallAfterMs: number;
}

/**
 * Runs `top` until `q`, Ctrl-C or a signal.
 *
 * @throws ExitRequest with 130/143 after Ctrl-C or a signal; the first description's error (no such group…)
 */
export async function runTop(session: Session, target: TopTarget): Promise<void> {
  const { kind, stream, group, intervalMs, stallAfterMs } = target;
  const out = session.out;
  const js = await session.js();

  let exitCode: number | undefined;
  let wake: () => void = () => undefined;
  const stop = (code: number): void => {
    exitCode ??= code;
    wake();
  };
  const stopped = new Promise<void>((resolve) => {
    wake = resolve;
  });

  const sample = async (previous?: GroupDescription): Promise<TopSample> => {
    const description = await describeForCli(js, kind, stream, group, stallAfterMs, previous);
    const settled = await readSettled(js, description);
    return { description, settled, readAt: Date.now() };
  };

  const restoreSignals = onStopSignal((signal) => stop(exitCodeFor(signal)));
  // `cg … top | head`: the reader is gone, stop quietly (left installed: the exit flush may fail the same way)
  process.stdout.on("error", (err: NodeJS.ErrnoException) => stop(err.code === "EPIPE" ? 0 : 1));
  const interactive = !out.json && process.stdout.isTTY === true;
  const screen = interactive
    ? new Screen(process.stdout, process.stdin, (key) => {
        if (key === "q" || key === "Q") stop(0);
        else if (key === "\u0003") stop(exitCodeFor("SIGINT"));
      })
    : undefined;
  let lastLines: string[] = [];
  const redraw = (): void => screen?.draw(lastLines);
  try {
    let prev: TopSample | undefined;
    // refreshes start every intervalMs (or right after the previous one, when it took longer)
    let tick = Date.now();
    const first = await Promise.race([sample(), stopped.then(() => undefined)]);
    if (!first) throw new ExitRequest(exitCode ?? 0); // stopped before the first refresh
    let cur: TopSample = first;
    // the samples of the last LAG_WINDOW_MS or so, oldest first, and the one cur's source lag was compared with
    const history: TopSample[] = [first];
    let curBase: TopSample | undefined;
    screen?.enter();
    process.stdout.on("resize", redraw);
    let error: string | undefined;
    for (;;) {
      const frame: TopFrameDoc = { ...describeDoc(cur.description, stallAfterMs), rates: ratesBetween(prev, cur, curBase) };
      const view: TopView = { intervalMs, interactive, ...(error ? { error } : {}) };
      if (out.json) out.record(frame, () => "");
      else if (screen) {
        lastLines = renderTop(frame, out.out, view);
        redraw();
      } else {
        out.stdout.write(`${renderTop(frame, out.out, view).join("\n")}\n\n`);
      }
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([new Promise((resolve) => (timer = setTimeout(resolve, Math.max(0, tick + intervalMs - Date.now())))), stopped]);
      clearTimeout(timer);
      if (exitCode !== undefined) break;
      tick = Date.now();
      try {
        const base = lagBaseline(history, tick) ?? cur;
        const next: TopSample | undefined = await Promise.race([sample(base.description), stopped.then(() => undefined)]);
        if (!next || exitCode !== undefined) break;
        prev = cur;
        cur = next;
        curBase = base;
        history.push(next);
        while (history.length > 2 && cur.readAt - (history[1]?.readAt ?? 0) >= LAG_WINDOW_MS) history.shift();
        error = undefined;
      } catch (err) {
        // the group was deleted: nothing left to watch
        if (err instanceof ConsumerGroupError && (err.code === "GROUP_NOT_FOUND" || err.code === "STREAM_NOT_FOUND")) throw err;
        error = err instanceof Error ? err.message : String(err);
        if (!screen) out.warn(`refresh failed: ${error}; retrying`);
      }
    }
  } finally {
    process.stdout.removeListener("resize", redraw);
    screen?.close();
    restoreSignals();
  }
  if (exitCode !== undefined && exitCode !== 0) throw new ExitRequest(exitCode);
}

/** `static|elastic top <stream> <name> [--interval] [--stall-after]`. */
export const topCommand: CommandSpec = {
  name: "top",
  flavours: ["static", "elastic"],
  description: (kind) =>
    `live view of ${article(kind)} consumer group: partitions, owners with pinned and standby markers, backlog, handled/s, redeliveries, health findings; q or Ctrl-C to leave (plain blocks when stdout is not a terminal, NDJSON with --json)`,
  args: [STREAM, GROUP],
  options: () => [new Option("--interval <duration>", "time between refreshes").default(DEFAULT_INTERVAL).argParser(arg((v) => (parseInterval(v), v))), stallAfterOption()],
  examples: (kind) => [`cg ${kind} top ${where(kind)}`, `cg ${kind} top ${where(kind)} --interval 2s`, `cg ${kind} top ${where(kind)} | tee top.log    # one block per refresh`],
  run: async ({ kind, args: [stream, group], opts, cmd }) =>
    withSession(cmd, (s) =>
      runTop(s, {
        kind: flavourOf(kind),
        stream: stream as string,
        group: group as string,
        intervalMs: parseInterval(opts["interval"] as string),
        stallAfterMs: parseDuration(opts["stallAfter"] as string, "--stall-after"),
      }),
    ),
  prompt: { unavailable: (kind) => `top takes the whole screen: run "cg ${kind} top <stream> <group>" in another terminal` },
};
