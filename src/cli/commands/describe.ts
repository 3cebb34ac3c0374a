/**
 * `cg static describe` / `cg elastic describe`: a group's config, assignment,
 * members (active, pinned, standbys), per-partition backlog, the elastic buffer
 * and source lag, and health findings with what they mean, from the library's
 * `describeGroup`. One JSON document with `--json`.
 */
import { Option } from "commander";
import type { JetStreamClient } from "@nats-io/jetstream";
import {
  describeGroup,
  type ElasticConsumerGroupConfig,
  type GroupDescription,
  type GroupKind,
  type HealthFinding,
  type StaticConsumerGroupConfig,
} from "../../index.js";
import type { DescribeDoc, DescribeMemberDoc, DescribePartitionDoc, FindingDoc } from "../model.js";
import { parseDuration } from "../parse.js";
import { list, mapping, table } from "../render.js";
import { withSession } from "../session.js";
import type { Styler } from "../output.js";
import { arg, withListHint } from "./common.js";
import { GROUP, STREAM, article, where } from "./shared-commands.js";
import { flavourOf, type CommandSpec } from "./spec.js";

/** The default of `--stall-after`: the library's default. */
export const DEFAULT_STALL_AFTER = "30s";

/** `--stall-after <duration>`. */
export function stallAfterOption(): Option {
  return new Option("--stall-after <duration>", "report a partition as stalled when it has pending messages and no delivery for this long")
    .default(DEFAULT_STALL_AFTER)
    .argParser(arg((v) => (parseDuration(v, "--stall-after"), v)));
}

/**
 * At most how many standby instances a member has: its waiting pulls beyond one.
 * Each instance keeps at least one pull waiting, but nats.js refills a partly used
 * pull with another, so one instance may hold several (even while idle): the
 * server's count of waiting pulls bounds the instances from above only. 0 is exact.
 */
export function standbysMax(waitingPulls: number, active: boolean): number {
  return active ? Math.max(0, waitingPulls - 1) : 0;
}

/** `0`, or `≤n`. */
export function standbysText(max: number): string {
  return max === 0 ? "0" : `≤${max}`;
}

/**
 * What a finding means and what to do about it, in plain language.
 *
 * @param f - the finding
 * @param d - the description it comes from (for the command to run)
 */
export function explainFinding(f: HealthFinding, d: Pick<GroupDescription, "kind" | "stream" | "group">): string {
  switch (f.code) {
    case "NO_ACTIVE_INSTANCE":
      return `nothing consumes these partitions: start an instance (cg ${d.kind} consume ${d.stream} ${d.group} ${f.member ?? "<member>"}) or take the member out of the group so its partitions move to the others`;
    case "PARTITION_STALLED":
      return "the owner has messages to deliver but made no progress: its handler may be stuck, the unacked messages may fill max_ack_pending, or no instance pulls; check the owner's consume output and its ack pending";
    case "PARTITION_UNOWNED":
      return "no member is assigned this partition (no members yet, or mappings that leave it out), so its messages are never consumed: add members or mappings that cover it";
    case "BUFFER_FULL":
      return "the work-queue stream holds max buffered messages or bytes: the server stops sourcing from the stream until members ack; run more instances, speed up the handlers or raise the buffer limits";
    case "SOURCE_LAG_GROWING":
      return "messages arrive in the stream faster than the work queue takes them in (or sourcing is paused by a full buffer): nothing is lost, they wait in the source stream, but latency grows";
    case "SLOW_SERVER_RELEASE":
      return "releases before 2.14.10 match a consumer with many filter subjects against each stored message much more slowly than one with a single filter; the member consumer layout (one consumer per member, one filter per partition it owns) is fixed by the wire format Go members share, so the fix is the server: upgrade to 2.14.10 or newer, 2.15.x preferred";
    case "INVALID_CONFIG":
      return "the stored config breaks a rule a new one must meet (written by hand, by Go or by another port); members refuse to start on it: drop or rename what is wrong (cg elastic drop for a member), or delete the group and create it again";
    case "CONFIG_MISMATCH":
      return "messages are hashed by the stream's (static) or the work queue's (elastic) transform, not by the config: partitions are then consumed by nobody, or owned and never filled; members refuse to start: put back the value the group was created with, or delete and recreate it (change an elastic partition count only with cg elastic repartition)";
    case "DUPLICATE_MEMBERS":
      return "a repeated member name is counted once by Go and by this library, so nothing stalls; it only makes the config harder to read";
    case "MEMBER_OVER_CAP":
      return "a group has as many partitions as max members: extra members are hot spares that take over partitions when a member leaves";
    default:
      return "";
  }
}

/** The `describe` document of a library description. */
export function describeDoc(d: GroupDescription, stallAfterMs: number): DescribeDoc {
  // A member's pending is its partitions' (exact, and known even when its consumer does not exist yet).
  const pendingOf = (m: GroupDescription["members"][number]): number =>
    m.partitions.length === 0 ? m.pending : m.partitions.reduce((n, p) => n + (d.partitions[p]?.pending ?? 0), 0);
  const members: DescribeMemberDoc[] = d.members.map((m) => ({
      member: m.member,
      consumer: m.consumer,
      partitions: m.partitions,
      over_cap: m.overCap,
      active: m.active,
      pinned: m.pinnedId !== undefined,
      pin_id: m.pinnedId ?? null,
      pinned_at: m.pinnedAt ?? null,
      waiting_pulls: m.waitingPulls,
      standbys_max: standbysMax(m.waitingPulls, m.active),
      pending: pendingOf(m),
      ack_pending: m.ackPending,
      redelivered: m.redelivered,
      last_delivery: m.lastDelivery ?? null,
  }));
  const partitions: DescribePartitionDoc[] = d.partitions.map((p) => ({
    partition: p.partition,
    owner: p.owner ?? null,
    pending: p.pending ?? null,
    ack_pending: p.ackPending ?? null,
    redelivered: p.redelivered ?? null,
    last_activity: p.lastActivity ?? null,
  }));
  const findings: FindingDoc[] = d.findings.map((f) => ({
    code: f.code,
    severity: f.severity,
    member: f.member ?? null,
    partition: f.partition ?? null,
    message: f.message,
    explanation: explainFinding(f, d),
  }));
  const sum = (values: (number | null)[]): number => values.reduce<number>((n, v) => n + (v ?? 0), 0);
  return {
    kind: d.kind,
    stream: d.stream,
    group: d.group,
    config: d.config,
    partition_count: d.partitionCount,
    assignment: d.assignment,
    summary: {
      members: members.length,
      active: members.filter((m) => m.active).length,
      pinned: members.filter((m) => m.active && m.pinned).length,
      standbys_max: sum(members.map((m) => m.standbys_max)),
      pending: sum(partitions.map((p) => p.pending)),
      ack_pending: sum(partitions.map((p) => p.ack_pending)),
      redelivered: sum(members.map((m) => m.redelivered)),
    },
    members,
    partitions,
    // the server says -1 for no limit; the CLI says 0, as `--max-buffered-msgs 0`
    buffer: d.buffer ? { messages: d.buffer.messages, bytes: d.buffer.bytes, max_messages: Math.max(0, d.buffer.maxMessages), max_bytes: Math.max(0, d.buffer.maxBytes) } : null,
    source_lag: d.sourceLag ?? null,
    stall_after_ms: stallAfterMs,
    findings,
    at: d.at,
  };
}

/** How long describe and top wait for the running instances to report their blocked keys. */
const ASK_INSTANCES_MS = 500;

/**
 * Describes a group, adding to "no such group" errors how to list the groups.
 *
 * @throws ConsumerGroupError as {@link describeGroup}
 */
export async function describeForCli(js: JetStreamClient, kind: GroupKind, stream: string, group: string, stallAfterMs: number, previous?: GroupDescription): Promise<GroupDescription> {
  try {
    return await describeGroup(js, kind, stream, group, { stallAfterMs, askInstancesMs: ASK_INSTANCES_MS, ...(previous ? { previous } : {}) });
  } catch (err) {
    throw withListHint(err, kind, stream);
  }
}

// --- rendering -------------------------------------------------------------------

/** `12:00:01.234` of an ISO timestamp. */
export const clockOf = (ts: string): string => ts.slice(11, 23);

/** How long before `at` a timestamp was: `0.4s`, `12s`, `5m`, `3h`, `2d`. */
export function ago(ts: string | null, at: string): string {
  if (ts === null) return "never";
  const ms = Math.max(0, Date.parse(at) - Date.parse(ts));
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)}s ago`;
  if (ms < 120_000) return `${Math.round(ms / 1000)}s ago`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)}m ago`;
  if (ms < 172_800_000) return `${Math.round(ms / 3_600_000)}h ago`;
  return `${Math.round(ms / 86_400_000)}d ago`;
}

/** A byte count for people: `512 B`, `1.5 KiB`, `3.2 MiB`. */
export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = -1;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u += 1;
  }
  return `${v.toFixed(1)} ${units[u] ?? ""}`;
}

/** The config lines, as `info` prints them. */
export function configLines(doc: Pick<DescribeDoc, "kind" | "config">): string[] {
  const lines: string[] = [];
  const c = doc.config;
  if (doc.kind === "static") {
    lines.push(`config: max members=${c.max_members}, filters=${list((c as StaticConsumerGroupConfig).filters ?? [])}`);
  } else {
    const e = c as ElasticConsumerGroupConfig;
    lines.push(`config: max members=${e.max_members}, max buffered msgs=${e.max_buffered_msg ?? 0}, max buffered bytes=${e.max_buffered_bytes ?? 0}`);
    const pfs = e.partitioning_filters ?? [];
    if (pfs.length === 0) lines.push("no partitioning filters defined (whole subject used)");
    for (const pf of pfs) {
      const w = pf.partitioning_wildcards ?? [];
      lines.push(`filter=${pf.filter}, partitioning wildcards ${list(w)}${w.length === 0 ? " (whole subject used)" : ""}`);
    }
  }
  if (c.members && c.members.length > 0) lines.push(`members: ${list(c.members)}`);
  else if (c.member_mappings && c.member_mappings.length > 0) lines.push(`member mappings: ${list(c.member_mappings.map(mapping))}`);
  else lines.push("no members or mappings defined");
  return lines;
}

/** `m1 → [0 1], m2 → [2 3]`. */
export function assignmentLine(doc: Pick<DescribeDoc, "assignment">): string {
  const entries = Object.entries(doc.assignment);
  return entries.length === 0 ? "assignment: none (no member owns a partition)" : `assignment: ${entries.map(([m, ps]) => `${m} → ${list(ps)}`).join(", ")}`;
}

/** A finding's severity, coloured. */
export function severityLabel(severity: FindingDoc["severity"], s: Styler): string {
  const text = severity.toUpperCase().padEnd(7);
  return severity === "error" ? s.red(text) : severity === "warning" ? s.yellow(text) : s.cyan(text);
}

/** The findings, each with its explanation on the next line, or that there are none. */
export function findingLines(findings: readonly FindingDoc[], s: Styler, withExplanation = true): string[] {
  if (findings.length === 0) return [s.green("health: no findings")];
  const lines = [s.bold(`health: ${findings.length} finding${findings.length === 1 ? "" : "s"}`)];
  const rank = { error: 0, warning: 1, info: 2 } as const;
  for (const f of [...findings].sort((a, b) => rank[a.severity] - rank[b.severity])) {
    lines.push(`  ${severityLabel(f.severity, s)}  ${s.bold(f.code)}  ${f.message}`);
    if (withExplanation && f.explanation !== "") lines.push(`           ${s.dim(`→ ${f.explanation}`)}`);
  }
  return lines;
}

/** The elastic buffer and source lag line. */
export function bufferLine(doc: Pick<DescribeDoc, "buffer" | "source_lag">, s: Styler, lagRate?: number | null): string | undefined {
  const b = doc.buffer;
  if (!b) return undefined;
  const full = (b.max_messages > 0 && b.messages >= b.max_messages) || (b.max_bytes > 0 && b.bytes >= b.max_bytes);
  const msgs = b.max_messages > 0 ? `${b.messages} of ${b.max_messages} messages (${Math.floor((100 * b.messages) / b.max_messages)}%)` : `${b.messages} messages (no limit)`;
  const byteText = b.max_bytes > 0 ? `${bytes(b.bytes)} of ${bytes(b.max_bytes)}` : `${bytes(b.bytes)} (no limit)`;
  const lag = doc.source_lag === null ? "unknown" : `${doc.source_lag} messages${lagRate === undefined || lagRate === null ? "" : ` (${signed(lagRate)}/s)`}`;
  const buffer = `buffer: ${msgs}, ${byteText}`;
  return `${full ? s.yellow(buffer) : buffer}; source lag: ${lag}`;
}

/** A rate with its sign: `+12.0`, `-3.5`, `0.0`. */
export function signed(n: number): string {
  return n > 0 ? `+${n.toFixed(1)}` : n.toFixed(1);
}

const num = (n: number | null): string => (n === null ? "-" : String(n));

/** `describe` for people. */
export function renderDescribe(doc: DescribeDoc, s: Styler): string {
  const lines: string[] = [];
  lines.push(s.bold(`${doc.kind} consumer group ${doc.group} on stream ${doc.stream}`) + ` (described at ${doc.at})`);
  lines.push(...configLines(doc));
  lines.push(assignmentLine(doc));
  const sm = doc.summary;
  lines.push(`members: ${sm.members} listed, ${sm.active} active, ${sm.pinned} pinned, standbys ${standbysText(sm.standbys_max)}; pending ${sm.pending}, ack pending ${sm.ack_pending}, redelivered ${sm.redelivered}`);
  const buffer = bufferLine(doc, s);
  if (buffer) lines.push(buffer);
  lines.push("");
  if (doc.members.length === 0) lines.push(s.dim("no members"));
  else {
    lines.push(
      table(
        ["MEMBER", "PARTITIONS", "ACTIVE", "PINNED", "PIN ID", "PULLS", "STANDBYS", "PENDING", "ACK PENDING", "REDELIVERED", "LAST DELIVERY"],
        doc.members.map((m) => [
          m.member,
          m.over_cap ? s.dim("over cap") : list(m.partitions),
          m.active ? s.green("yes") : m.over_cap || m.partitions.length === 0 ? s.dim("no") : s.red("no"),
          m.pinned ? (m.pinned_at ? `since ${clockOf(m.pinned_at)}` : "yes") : "no",
          m.pin_id ?? "-",
          String(m.waiting_pulls),
          standbysText(m.standbys_max),
          String(m.pending),
          String(m.ack_pending),
          m.redelivered > 0 ? s.yellow(String(m.redelivered)) : "0",
          m.last_delivery === null ? "never" : `${clockOf(m.last_delivery)} (${ago(m.last_delivery, doc.at)})`,
        ]),
        s,
      ),
    );
  }
  lines.push("");
  lines.push(
    table(
      ["PARTITION", "OWNER", "PENDING", "ACK PENDING", "REDELIVERED", "LAST ACTIVITY"],
      doc.partitions.map((p) => [
        String(p.partition),
        p.owner ?? s.dim("-"),
        num(p.pending),
        num(p.ack_pending),
        p.redelivered !== null && p.redelivered > 0 ? s.yellow(String(p.redelivered)) : num(p.redelivered),
        p.last_activity === null ? "never" : `${clockOf(p.last_activity)} (${ago(p.last_activity, doc.at)})`,
      ]),
      s,
    ),
  );
  lines.push("");
  lines.push(...findingLines(doc.findings, s));
  return lines.join("\n");
}

/** `static|elastic describe <stream> <name> [--stall-after]`. */
export const describeCommand: CommandSpec = {
  name: "describe",
  flavours: ["static", "elastic"],
  description: (kind) =>
    `describe ${article(kind)} consumer group: config, assignment, members with their pin and standbys, backlog per partition${kind === "elastic" ? ", buffer and source lag" : ""}, and health findings`,
  args: [STREAM, GROUP],
  options: () => [stallAfterOption()],
  examples: (kind) => [`cg ${kind} describe ${where(kind)}`, `cg ${kind} describe ${where(kind)} --stall-after 2m`, `cg ${kind} describe ${where(kind)} --json`],
  run: async ({ kind, args: [stream, group], opts, cmd }) =>
    withSession(cmd, async (s) => {
      const stallAfterMs = parseDuration(opts["stallAfter"] as string, "--stall-after");
      const d = await describeForCli(await s.js(), flavourOf(kind), stream as string, group as string, stallAfterMs);
      s.out.result(describeDoc(d, stallAfterMs), renderDescribe);
    }),
  prompt: {
    run: async (sh, args, kind) => {
      const { stream, group } = await sh.target(args);
      const stallAfterMs = parseDuration(DEFAULT_STALL_AFTER, "--stall-after");
      sh.print(renderDescribe(describeDoc(await describeForCli(await sh.session.js(), kind, stream, group, stallAfterMs), stallAfterMs), sh.session.out.out));
    },
  },
};
