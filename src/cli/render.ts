/**
 * Pure rendering: documents in, text out. The same documents are printed as-is
 * with `--json`. Texts follow Go's `cg` where they exist.
 */
import type { MemberMapping, MemberStatus } from "../index.js";
import type { CreatedDoc, DeletedDoc, GroupListDoc, InfoDoc, LagDoc, MappingsDoc, MemberEventDoc, MemberInfoDoc, MembersDoc, MessageDoc, PartitionRow, PubDoc, StepDownDoc } from "./model.js";
import type { Styler } from "./output.js";
import { SLOW_CONSUMER_BLOCK_MS, SLOW_CONSUMER_BUSY_SHARE } from "../nats/loop-lag.js";
import { formatDuration } from "./parse.js";

/** Go's `%v` of a string or number slice: `[a b c]`. */
export function list(items: readonly (string | number)[]): string {
  return `[${items.join(" ")}]`;
}

/** A mapping in the CLI's input syntax: `m1:0,1`. */
export function mapping(m: MemberMapping): string {
  return `${m.member}:${(m.partitions ?? []).join(",")}`;
}

// eslint-disable-next-line no-control-regex
const ANSI = /\u001b\[[0-9;]*m/g;
const width = (text: string): number => [...text.replace(ANSI, "")].length;

/**
 * Left-aligned columns with a bold header, two spaces apart.
 *
 * @param header - column titles
 * @param rows - cells, already styled if wanted
 */
export function table(header: readonly string[], rows: readonly (readonly string[])[], s: Styler): string {
  const widths = header.map((h, i) => Math.max(width(h), ...rows.map((r) => width(r[i] ?? ""))));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c + " ".repeat((widths[i] ?? 0) - width(c))))
      .join("  ")
      .trimEnd();
  return [s.bold(line(header)), ...rows.map(line)].join("\n");
}

/** `ls`: `static consumer groups: [g1 g2]`, as Go prints it. */
export function renderGroupList(doc: GroupListDoc): string {
  return `${doc.kind} consumer groups: ${list(doc.groups)}`;
}

/** Above this many partitions, `info` groups consecutive partitions of one member into ranges. */
export const PARTITION_ROWS_LIMIT = 32;

function partitionTable(rows: readonly PartitionRow[], s: Styler): string {
  const cells = (p: string, r: PartitionRow): string[] => [p, r.member ?? s.dim("-"), r.member === null ? "" : r.active ? s.green("yes") : s.yellow("no")];
  if (rows.length <= PARTITION_ROWS_LIMIT) return table(["PARTITION", "MEMBER", "ACTIVE"], rows.map((r) => cells(String(r.partition), r)), s);
  const runs: { from: number; to: number; row: PartitionRow }[] = [];
  for (const row of rows) {
    const last = runs[runs.length - 1];
    if (last && last.row.member === row.member && last.to === row.partition - 1) last.to = row.partition;
    else runs.push({ from: row.partition, to: row.partition, row });
  }
  return table(["PARTITIONS", "MEMBER", "ACTIVE"], runs.map((r) => cells(r.from === r.to ? String(r.from) : `${r.from}-${r.to}`, r.row)), s);
}

/** `info`: Go's lines, then the partition → member table. */
export function renderInfo(doc: InfoDoc, s: Styler): string {
  const lines: string[] = [];
  if (doc.kind === "static") {
    lines.push(`config: max members=${doc.config.max_members}, filters=${list(doc.config.filters ?? [])}`);
  } else {
    const c = doc.config;
    lines.push(`config: max members=${c.max_members}, max buffered msgs=${c.max_buffered_msg ?? 0}, max buffered bytes=${c.max_buffered_bytes ?? 0}`);
    const pfs = c.partitioning_filters ?? [];
    if (pfs.length === 0) lines.push("no partitioning filters defined (whole subject used)");
    for (const pf of pfs) {
      const w = pf.partitioning_wildcards ?? [];
      lines.push(`filter=${pf.filter}, partitioning wildcards ${list(w)}${w.length === 0 ? " (whole subject used)" : ""}`);
    }
  }
  const { members, member_mappings: mappings } = doc.config;
  if (members && members.length > 0) lines.push(`members: ${list(members)}`);
  else if (mappings && mappings.length > 0) lines.push(`member mappings: ${list(mappings.map(mapping))}`);
  else lines.push("no members or mappings defined");
  lines.push(`currently active members: ${list(doc.active_members)}`);
  lines.push("", partitionTable(doc.partitions, s));
  return lines.join("\n");
}

/** `member-info`, with Go's texts (they differ slightly between the flavours). */
export function renderMemberInfo(doc: MemberInfoDoc, s: Styler): string {
  const m = doc.member;
  if (!doc.in_membership) {
    return doc.kind === "static" ? `member ${m} is not part of the consumer group membership` : `member ${m} is not currently part of the consumer group membership`;
  }
  const lines: string[] = [];
  const warning = `${s.yellow("***Warning***")} member ${m} is part of the consumer group membership but has NO active instance`;
  if (doc.kind === "static") {
    lines.push(`member ${m} is part of the consumer group membership`);
    lines.push(doc.active ? `member ${m} is active` : warning);
  } else {
    lines.push(doc.active ? `member ${m} is part of the consumer group membership and is active` : `member ${m} is part of the consumer group membership`);
    if (!doc.active) lines.push(warning);
  }
  lines.push(doc.partitions.length > 0 ? `partitions: ${list(doc.partitions)}` : `member ${m} owns no partitions (more members than partitions?)`);
  return lines.join("\n");
}

/** `create`. */
export function renderCreated(doc: CreatedDoc): string {
  const c = doc.config;
  const who = c.members && c.members.length > 0 ? `members ${list(c.members)}` : c.member_mappings && c.member_mappings.length > 0 ? `member mappings ${list(c.member_mappings.map(mapping))}` : "no members yet";
  return `created ${doc.kind} consumer group ${doc.group} on stream ${doc.stream}: ${c.max_members} partitions, ${who}`;
}

/** `delete`. */
export function renderDeleted(doc: DeletedDoc): string {
  return `deleted ${doc.kind} consumer group ${doc.group} on stream ${doc.stream}`;
}

/** `step-down`: the text of Go's prompt mode. */
export function renderStepDown(doc: StepDownDoc): string {
  return `member ${doc.member} step down initiated`;
}

/** `add`: `added members: [<full list>]`, as Go prints it. */
export function renderAdded(doc: MembersDoc): string {
  return `added members: ${list(doc.members)}`;
}

/** `drop`: what was dropped, and what remains (Go prints only the latter, labelled "dropped"). */
export function renderDropped(doc: MembersDoc): string {
  return `dropped members: ${list(doc.dropped ?? [])}\nremaining members: ${list(doc.members)}`;
}

/** `create-mapping`. */
export function renderMappings(doc: MappingsDoc): string {
  return `member mappings: ${list(doc.member_mappings.map(mapping))}`;
}

/** `delete-mapping`. */
export function renderMappingsDeleted(doc: MappingsDoc): string {
  return `deleted the member mappings of elastic consumer group ${doc.group} on stream ${doc.stream}: it has no members now, so every member idles until members or mappings are set`;
}

/** The clock part of an ISO timestamp: `12:34:56.789`. */
const clock = (ts: string): string => ts.slice(11, 23);

/** One `consume` line, printed before the message is acked (a failed ack is an `ack_failed` event of its own). */
export function renderMessage(doc: MessageDoc, s: Styler): string {
  const redelivered = doc.delivered > 1 ? s.yellow(` delivered=${doc.delivered}`) : "";
  return `${s.dim(clock(doc.ts))} [${doc.member}] partition=${doc.partition} subject=${doc.subject} seq=${doc.stream_seq}${redelivered} pinnedID=${doc.pin_id ?? "-"}`;
}

/**
 * The event document of a member status notification.
 *
 * @param status - the notification
 * @param member - the member name
 * @param now - the timestamp
 */
export function memberEvent(status: MemberStatus, member: string, now: Date): MemberEventDoc {
  const base = { member, ts: now.toISOString() };
  switch (status.type) {
    case "joined":
      return { event: "joined", ...base, partitions: status.partitions };
    case "idle":
      return { event: "idle", ...base, reason: status.reason };
    case "partitions_changed":
      return { event: "partitions_changed", ...base, partitions: status.partitions, assigned: status.assigned, revoked: status.revoked };
    case "config_changed":
      return { event: "config_changed", ...base, revision: status.revision };
    case "consumer_refreshed":
      return { event: "consumer_refreshed", ...base, partitions: status.partitions };
    case "pinned":
      return { event: "pinned", ...base, pin_id: status.pinId };
    case "unpinned":
      return { event: "unpinned", ...base };
    case "handler_error":
      return { event: "handler_error", ...base, error: errorText(status.error), subject: status.subject, partition: status.partition, seq: status.seq };
    case "consumer_lost":
      return { event: "consumer_lost", ...base, reason: status.reason };
    case "consumer_error":
      return { event: "consumer_error", ...base, error: status.error.message, code: status.error.code, retry_in_ms: status.retryInMs };
    case "dead_lettered":
      return { event: "dead_lettered", ...base, error: errorText(status.error), subject: status.subject, partition: status.partition, seq: status.seq, dead_letter_subject: status.deadLetterSubject };
    case "blocked":
      return { event: "blocked", ...base, error: errorText(status.error), subject: status.subject, partition: status.partition, seq: status.seq, lane: status.lane };
    case "unblocked":
      return { event: "unblocked", ...base, subject: status.subject, partition: status.partition, seq: status.seq, lane: status.lane, outcome: status.outcome };
    case "parking_full":
      return { event: "parking_full", ...base, messages: status.messages, bytes: status.bytes };
    case "attempts_unrecorded":
      return { event: "attempts_unrecorded", ...base, error: errorText(status.error), subject: status.subject, partition: status.partition, seq: status.seq };
    case "ack_failed":
      return { event: "ack_failed", ...base, error: errorText(status.error), subject: status.subject, partition: status.partition, seq: status.seq };
    case "drain_timeout":
      return { event: "drain_timeout", ...base, running: status.running, waited_ms: status.waitedMs };
    case "watch_error":
      return { event: "watch_error", ...base, error: status.error.message, code: status.error.code, retry_in_ms: status.retryInMs };
    case "watch_restarted":
      return { event: "watch_restarted", ...base, revision: status.revision, attempts: status.attempts };
    case "starts_held":
      return { event: "starts_held", ...base, reason: status.reason, duration_ms: status.durationMs };
    case "slow_consumer":
      return { event: "slow_consumer", ...base, blocked_ms: status.blockedMs, busy_share: status.busyShare, asked_bytes: status.askedBytes };
    case "events_dropped":
      return { event: "events_dropped", ...base, count: status.count };
    case "membership_written":
      return { event: "membership_written", ...base, revision: status.revision, added: status.added, removed: status.removed };
    case "lease_lost":
      return { event: "lease_lost", ...base, error: status.error.message, code: status.error.code };
    case "lease_restored":
      return { event: "lease_restored", ...base };
    case "stopped":
      return status.error ? { event: "stopped", ...base, error: errorText(status.error) } : { event: "stopped", ...base };
    default: {
      // A new status type fails to compile here until it has a case above.
      const unreachable: never = status;
      return unreachable;
    }
  }
}

/** Why starts were held, in words. */
/** Why a disconnect is taken for a slow-consumer cut, in words: the strongest of the signals. */
function slowConsumerWhy(doc: Record<string, unknown>): string {
  const blocked = Number(doc["blocked_ms"]);
  const busy = Number(doc["busy_share"]);
  if (blocked >= SLOW_CONSUMER_BLOCK_MS) return `right after the event loop was blocked for ${formatDuration(blocked)}`;
  if (busy >= SLOW_CONSUMER_BUSY_SHARE) return `right after the event loop was busy ${Math.round(busy * 100)} % of the time`;
  return `while its pulls could bring ${Math.round(Number(doc["asked_bytes"]) / (1024 * 1024))} MiB, more than the server queues for a client by default (64 MiB)`;
}

function holdWords(reason: string): string {
  switch (reason) {
    case "takeover":
      return "took the pin over: waited for what the previous instance left unacked";
    case "gap":
      return "deliveries were lost on the way: waited for their redelivery";
    case "redeliveries":
      return "waited for the server's redeliveries";
    case "fenced":
      return "no proof from the server that the pin was still ours";
    default:
      return reason;
  }
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** A member event for people (stderr). */
export function renderEvent(doc: MemberEventDoc, s: Styler): string {
  const head = `${s.dim(clock(doc.ts))} [${doc.member}]`;
  const nums = (key: string): string => list((doc[key] as number[] | undefined) ?? []);
  const words = (key: "added" | "removed"): string[] => ((doc[key] as string[] | undefined) ?? []).map((m) => `${key} ${m}`);
  switch (doc.event) {
    case "started":
      return `${head} ${s.cyan("consuming")} from ${String(doc["kind"])} group ${String(doc["group"])} on stream ${String(doc["stream"])}, partitions ${nums("partitions")}, processing time ${formatDuration(Number(doc["sleep_ms"]))}${typeof doc["metrics_url"] === "string" ? `, metrics at ${doc["metrics_url"]}` : ""}${typeof doc["lag_url"] === "string" ? `, lag at ${doc["lag_url"]}` : ""} (Ctrl-C to stop)`;
    case "joined":
      return `${head} joined, partitions ${nums("partitions")}`;
    case "idle":
      return `${head} ${s.yellow("idle")}: ${String(doc["reason"])}`;
    case "partitions_changed":
      return `${head} ${s.cyan("partitions changed")}: now ${nums("partitions")} (assigned ${nums("assigned")}, revoked ${nums("revoked")})`;
    case "config_changed":
      return `${head} group config changed (revision ${String(doc["revision"])}), partitions unchanged`;
    case "consumer_refreshed":
      return `${head} ${s.cyan("repartition")}: partitions ${nums("partitions")} may take new-layout messages now, rejoining with a consumer that has them`;
    case "pinned":
      return `${head} ${s.green("pinned")} (pin id ${String(doc["pin_id"])}): this instance is the active one`;
    case "unpinned":
      return `${head} ${s.yellow("unpinned")}: this instance is a standby now`;
    case "handler_error":
      return `${head} ${s.red("handler error")} on seq ${String(doc["seq"])}: ${String(doc["error"])}`;
    case "consumer_lost":
      return `${head} ${s.yellow("consumer lost")} (${String(doc["reason"])}), rejoining`;
    case "consumer_error":
      return `${head} ${s.red("error")}: ${String(doc["error"])}; retrying in ${formatDuration(Number(doc["retry_in_ms"]))}`;
    case "ack_failed":
      return `${head} ${s.red("ack failed")}${typeof doc["seq"] === "number" ? ` on seq ${doc["seq"]}` : ""}: ${String(doc["error"])}`;
    case "dead_lettered":
      return `${head} ${s.yellow("dead-lettered")} seq ${String(doc["seq"])} to ${String(doc["dead_letter_subject"])}: ${String(doc["error"])}`;
    case "blocked":
      return `${head} ${s.red("blocked")}: seq ${String(doc["seq"])} keeps failing and has no dead-letter subject; its key waits (${String(doc["error"])})`;
    case "unblocked":
      return `${head} ${s.green("unblocked")}: seq ${String(doc["seq"])} ${doc["outcome"] === "handled" ? "was handled" : doc["outcome"] === "dead_lettered" ? "was dead-lettered" : "was given back with its partition"}; its key goes on`;
    case "parking_full":
      return `${head} ${s.yellow("parking full")}: ${String(doc["messages"])} messages (${String(doc["bytes"])} bytes) wait behind blocked keys; later ones take buffer slots, and other keys may stall (release the blocked keys: cg elastic park ls)`;
    case "attempts_unrecorded":
      return `${head} ${s.yellow("attempt not counted")} for seq ${String(doc["seq"])} in the attempts bucket (counted from its delivery count alone: a rebalance may allow extra attempts): ${String(doc["error"])}`;
    case "drain_timeout":
      return `${head} ${s.yellow("drain timeout")}: ${String(doc["running"])} handler(s) still running after ${formatDuration(Number(doc["waited_ms"]))}; their signal is aborted, still waiting for them`;
    case "watch_error":
      return `${head} ${s.yellow("config watch failed")}: ${String(doc["error"])}; re-opening in ${formatDuration(Number(doc["retry_in_ms"]))} (still consuming)`;
    case "watch_restarted":
      return `${head} config watch re-opened at revision ${String(doc["revision"])} after ${String(doc["attempts"])} attempt(s)`;
    case "starts_held":
      return `${head} ${s.yellow("starts held")} ${formatDuration(Number(doc["duration_ms"]))} (${holdWords(String(doc["reason"]))}), consuming again`;
    case "slow_consumer":
      return `${head} ${s.red("slow consumer")}: the connection was lost ${slowConsumerWhy(doc)}; the server most likely cut it for reading too slowly. Lost deliveries come back after AckWait and starts wait for them. Keep handlers from blocking the event loop, or lower maxBufferedBytes`;
    case "events_dropped":
      return `${head} ${s.yellow(`${String(doc["count"])} status events dropped`)} (not read in time)`;
    case "membership_written":
      return `${head} ${s.cyan("membership written")} (revision ${String(doc["revision"])}): ${[...words("added"), ...words("removed")].join(", ")}`;
    case "lease_lost":
      return `${head} ${s.red("lease lost")}: ${String(doc["error"])}`;
    case "lease_restored":
      return `${head} ${s.green("lease restored")}: rejoining the group`;
    case "stopping":
      return `${head} ${String(doc["signal"])} received: finishing the message in flight, then stopping (again to force)`;
    case "stopped":
      return doc["error"] ? `${head} ${s.red("stopped")}: ${typeof doc["error"] === "string" ? doc["error"] : JSON.stringify(doc["error"])}` : `${head} stopped`;
    default: {
      // A new event fails to compile here until it has a case above.
      const unreachable: never = doc.event;
      return `${head} ${String(unreachable)}`;
    }
  }
}

/** The final `pub` summary. */
export function renderPubSummary(doc: PubDoc, s: Styler): string {
  const head = doc.interrupted ? s.yellow(`interrupted: published ${doc.published} of ${doc.requested} messages`) : `published ${doc.published} messages`;
  const where = doc.stream ? ` to stream ${doc.stream} (seq ${doc.first_seq ?? "?"}..${doc.last_seq ?? "?"})` : "";
  return `${head} on ${doc.keys} keys with subject ${doc.subject_template}${where} in ${formatDuration(doc.elapsed_ms)} (${Math.round(doc.msgs_per_sec)} msgs/s)`;
}

/** A one-line progress bar: `[#####.....]  50%  5000/10000  8123 msgs/s`. */
export function renderProgress(done: number, total: number, rate: number, barWidth = 30): string {
  const fraction = total > 0 ? Math.min(1, done / total) : 1;
  const filled = Math.round(fraction * barWidth);
  return `[${"#".repeat(filled)}${".".repeat(barWidth - filled)}] ${String(Math.floor(fraction * 100)).padStart(3)}%  ${done}/${total}  ${Math.round(rate)} msgs/s`;
}

/** Above this many partitions, `elastic lag` lists only the ones with the most pending messages. */
export const LAG_PARTITION_ROWS = 10;

/** A rate in messages per second: `250.0 msgs/s`. */
const perSec = (n: number): string => `${n.toFixed(1)} msgs/s`;

/** The rate line of `elastic lag`. */
function lagRateLine(doc: LagDoc): string {
  const r = doc.rate;
  const window = r.window_ms === null ? "" : `over ${formatDuration(r.window_ms)}: ${perSec(r.drained_per_sec ?? 0)} drained by ${r.active_members} active member${r.active_members === 1 ? "" : "s"}, ${perSec(r.inflow_per_sec ?? 0)} arriving`;
  if (r.source === "given") return `drain rate: ${perSec(r.per_member ?? 0)} per member (given)${window === "" ? "" : `; measured ${window}`}`;
  if (r.source === "measured") return `drain rate: ${perSec(r.per_member ?? 0)} per member, measured ${window}`;
  return `drain rate: unknown${window === "" ? " (no sample window)" : ` (measured ${window})`}`;
}

/** `elastic lag` for people: the backlog, the rate, the recommendation, then per member and per partition. */
export function renderLag(doc: LagDoc, s: Styler): string {
  const lines: string[] = [];
  lines.push(s.bold(`elastic consumer group ${doc.group} on stream ${doc.stream}`) + ` (at ${doc.at})`);
  lines.push(`backlog: ${doc.backlog} messages (${doc.pending} pending in ${doc.work_queue}, source lag ${doc.source_lag}${doc.source && !doc.source.active ? s.yellow(", source inactive") : ""})`);
  lines.push(lagRateLine(doc));
  const target = formatDuration(doc.target_drain_ms);
  const why =
    doc.basis === "rate"
      ? `drains the backlog within ${target}${doc.capped ? s.yellow(`; ${doc.needed_members} needed, capped at the ${doc.partition_count} partitions`) : ""}`
      : doc.basis === "hold"
        ? "no rate: keeps the current count, at least 1"
        : "nothing waiting";
  lines.push(s.bold(`recommended members: ${doc.recommended_members}`) + ` (${why}; the group has ${doc.member_count}, at most ${doc.partition_count} can work)`);
  lines.push("");
  if (doc.members.length === 0) lines.push(s.dim("no members"));
  else {
    lines.push(
      table(
        ["MEMBER", "PARTITIONS", "PENDING", "ACTIVE"],
        doc.members.map((m) => [m.member, m.over_cap ? s.dim("over cap") : list(m.partitions), String(m.pending), m.active ? s.green("yes") : m.over_cap ? s.dim("no") : s.yellow("no")]),
        s,
      ),
    );
  }
  lines.push("");
  const rows = doc.partitions.length <= PARTITION_ROWS_LIMIT ? doc.partitions : [...doc.partitions].sort((a, b) => b.pending - a.pending || a.partition - b.partition).slice(0, LAG_PARTITION_ROWS);
  lines.push(table(["PARTITION", "OWNER", "PENDING"], rows.map((p) => [String(p.partition), p.owner ?? s.dim("-"), String(p.pending)]), s));
  if (rows.length < doc.partitions.length) lines.push(s.dim(`(the ${rows.length} of ${doc.partitions.length} partitions with the most pending messages; --json lists all)`));
  if (doc.notes.length > 0) {
    lines.push("");
    for (const n of doc.notes) lines.push(`${s.yellow(n.code)}  ${n.message}`);
  }
  return lines.join("\n");
}
