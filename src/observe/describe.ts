/**
 * `describeGroup`: a group's config, assignment, members, per-partition backlog and
 * health, as Kafka's `kafka-consumer-groups --describe` shows them.
 */
import { configLayoutProblem, layoutOf } from "../elastic/layout.js";
import { staticLayoutProblem } from "../core/layout-checks.js";
import type { ConsumerInfo, JetStreamClient } from "@nats-io/jetstream";
import { elasticGetPartitionFilters, memberRoster, partitionAssignment, partitionOwners, staticMemberFilters } from "../core/assignment.js";
import { ConsumerGroupError } from "../core/errors.js";
import { optionalTimerMs, optionsObject, quoted } from "../core/option-checks.js";
import { mapWithLimit } from "../core/parallel.js";
import { PRIORITY_GROUP, assertValidGroupNames, configKey, consumerNameProblem, elasticConsumerName, staticConsumerName, workQueueStreamName } from "../core/names.js";
import type { ElasticConsumerGroupConfig, GroupKind, StaticConsumerGroupConfig } from "../core/types.js";
import { ELASTIC, STATIC, openConfigBucket, readConfigUnchecked, type UncheckedConfig } from "../nats/config-store.js";
import { managerOf, serverVersionOf, streamInfo } from "../nats/context.js";
import { healthFindings, type HealthFinding } from "./health.js";
import { listParkedKeys, type ListedParkedKey } from "../elastic/parking.js";
import { connectionOf } from "../nats/client-seam.js";
import { REQUESTS_IN_FLIGHT, consumerInfoIfAny, countWithConsumer, countWithDirectGet, windowPartitionCounts } from "./counts.js";

/** One member of a described group. */
export interface MemberDescription {
  /** The member's name. */
  member: string;
  /** Its durable consumer's name. */
  consumer: string;
  /** The partitions it owns. */
  partitions: number[];
  /** Listed as a member but beyond the partition count: idle. */
  overCap: boolean;
  /** Some instance is pulling (the consumer exists and has waiting pulls). */
  active: boolean;
  /** The pinned instance's pin id, when one is pinned. */
  pinnedId?: string;
  /** Since when it is pinned, ISO-8601. */
  pinnedAt?: string;
  /**
   * Pull requests waiting on the consumer: the pinned instance's plus the standbys'. An
   * instance may hold more than one, so this bounds the number of instances from above.
   */
  waitingPulls: number;
  /** Delivered and not yet acked. */
  ackPending: number;
  /** Messages its consumer has redelivered. */
  redelivered: number;
  /** Not yet delivered: the consumer's `num_pending`, or, with no consumer yet, its partitions' backlog. */
  pending: number;
  /** Its consumer's last delivery, ISO-8601. */
  lastDelivery?: string;
}

/** One partition of a described group. */
export interface PartitionDescription {
  /** The partition number. */
  partition: number;
  /** The member that owns it, if any. */
  owner?: string;
  /** Messages not yet delivered to the owner. */
  pending?: number;
  /**
   * Delivered and not yet acked. Exact when the owner's consumer covers only this
   * partition or in elastic groups; otherwise the messages between the consumer's ack
   * floor and its last delivery (exact when acks arrive in order).
   */
  ackPending?: number;
  /** Redeliveries; known only when the owner's consumer covers only this partition. */
  redelivered?: number;
  /** The owner's last delivery. */
  lastActivity?: string;
}

/** What {@link describeGroup} returns. */
export interface GroupDescription {
  /** The group's flavour. */
  kind: GroupKind;
  /** The stream the group is on. */
  stream: string;
  /** The group's name. */
  group: string;
  /** The group's config, as stored. */
  config: StaticConsumerGroupConfig | ElasticConsumerGroupConfig;
  /** The number of partitions (max members). */
  partitionCount: number;
  /** Member → the partitions it owns. */
  assignment: Record<string, number[]>;
  /** One entry per member of the membership, in assignment order. */
  members: MemberDescription[];
  /** One entry per partition, 0 to `partitionCount` - 1. */
  partitions: PartitionDescription[];
  /** Elastic: the work-queue stream's fill. */
  buffer?: {
    /** Messages in the work-queue stream. */
    messages: number;
    /** Bytes in the work-queue stream. */
    bytes: number;
    /** The group's max buffered messages (0: no limit). */
    maxMessages: number;
    /** The group's max buffered bytes (0: no limit). */
    maxBytes: number;
  };
  /** Elastic: how many source messages the work-queue stream has not sourced yet. */
  sourceLag?: number;
  /** Elastic, when asked (`askInstancesMs`): the keys blocked in the running instances that answered. */
  parkedKeys?: ListedParkedKey[];
  /** Health findings: what looks wrong, in plain language. */
  findings: HealthFinding[];
  /** When it was described, ISO-8601. */
  at: string;
}

/** Options of {@link describeGroup}. */
export interface DescribeOptions {
  /** A partition with pending messages and no delivery for this long is reported stalled. Default 30 s. */
  stallAfterMs?: number;
  /** The previous description, to tell whether the source lag grows. */
  previous?: GroupDescription;
  /**
   * Elastic: also ask the running instances for their blocked keys (on the presence
   * subject, waiting this many ms for their answers, while the server is read):
   * `parkedKeys` and a `KEY_BLOCKED` finding each. Default: not asked.
   */
  askInstancesMs?: number;
}

/** The keys of {@link DescribeOptions}. */
const DESCRIBE_KEYS: readonly string[] = Object.keys({ stallAfterMs: true, previous: true, askInstancesMs: true } satisfies Record<keyof DescribeOptions, true>);

/** The options' types and ranges, before anything is read. */
function checkDescribeOptions(options: DescribeOptions): void {
  optionsObject(options, "describeGroup options", DESCRIBE_KEYS);
  const stall: unknown = options.stallAfterMs;
  if (stall !== undefined && (typeof stall !== "number" || !Number.isFinite(stall) || stall < 0)) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `stallAfterMs must be a number of ms >= 0 (how long a partition with pending messages may go without a delivery), got ${quoted(stall)}`);
  }
  optionalTimerMs(options.askInstancesMs, "askInstancesMs", 1);
  const previous: unknown = options.previous;
  if (previous !== undefined && (typeof previous !== "object" || previous === null || Array.isArray(previous))) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `previous must be an earlier describeGroup result, got ${quoted(previous)}`);
  }
  const lag = (previous as { sourceLag?: unknown } | undefined)?.sourceLag;
  if (lag !== undefined && (typeof lag !== "number" || !Number.isFinite(lag))) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `previous.sourceLag must be a number of messages (previous must be an earlier describeGroup result), got ${quoted(lag)}`);
  }
}

/** `last_active` is an RFC 3339 string on the wire, though nats.js types it as a number. */
function isoOrUndefined(v: unknown): string | undefined {
  if (typeof v === "string" && v !== "" && !v.startsWith("0001-")) return new Date(v).toISOString();
  return undefined;
}

type PriorityState = { priority_groups?: { group: string; pinned_client_id?: string; pinned_ts?: string }[] };

/**
 * Describes a static or elastic group: config, assignment, members with their pin
 * and standbys, per-partition backlog, the elastic source lag and buffer, and health findings.
 *
 * A stored config that is not valid (`INVALID_CONFIG`), that disagrees with the stream's
 * partition transform or the work queue's (`CONFIG_MISMATCH`), or that lists a member twice
 * (`DUPLICATE_MEMBERS`) is reported as a finding; only a value that is not a config at
 * all fails the call (`CONFIG_DECODE`). When the config breaks one of Go's rules, nothing
 * else is described (no assignment can be computed from it).
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND`, `STREAM_NOT_FOUND`, `CONFIG_DECODE`
 *
 * @example
 * ```ts
 * const d = await describeGroup(js, "elastic", "orders", "shipping");
 * for (const p of d.partitions) console.log(p.partition, p.owner, p.pending);
 * ```
 */
export async function describeGroup(js: JetStreamClient, kind: GroupKind, stream: string, group: string, options: DescribeOptions = {}): Promise<GroupDescription> {
  if (kind !== "static" && kind !== "elastic") throw new ConsumerGroupError("INVALID_ARGUMENT", `kind must be "static" or "elastic", got ${JSON.stringify(kind)}`);
  assertValidGroupNames(stream, group);
  checkDescribeOptions(options);
  // Asked first, so the instances' answers arrive while the server is read.
  const asked = kind === "elastic" && options.askInstancesMs !== undefined ? listParkedKeys(connectionOf(js), stream, group, { waitMs: options.askInstancesMs }).catch(() => undefined) : undefined;
  const jsm = await managerOf(js);
  const kv = await openConfigBucket(js, jsm, kind);
  const stored: UncheckedConfig<StaticConsumerGroupConfig | ElasticConsumerGroupConfig> | undefined =
    kind === "static" ? await readConfigUnchecked(kv, STATIC, stream, group) : await readConfigUnchecked(kv, ELASTIC, stream, group);
  if (!stored) {
    throw new ConsumerGroupError("GROUP_NOT_FOUND", `error getting the ${kind} consumer group's config: not found (no group "${group}" on stream "${stream}")`);
  }
  const config = stored.config;
  const configFindings: HealthFinding[] = [];
  if (stored.problem) {
    configFindings.push({ code: "INVALID_CONFIG", severity: "error", message: `${stored.problem.message} (${stored.problem.code})` });
    // Only a member name the server refuses leaves an assignment to describe; Go's rules broken leave none.
    if (stored.problem.code !== "INVALID_NAME") {
      return { kind, stream, group, config, partitionCount: config.max_members, assignment: {}, members: [], partitions: [], findings: configFindings, at: new Date().toISOString() };
    }
  }
  const listed = [...(config.members ?? []), ...(config.member_mappings ?? []).map((m) => m.member)];
  const twice = [...new Set(listed.filter((m, i) => listed.indexOf(m) !== i))];
  if (twice.length > 0) {
    configFindings.push({
      code: "DUPLICATE_MEMBERS",
      severity: "warning",
      message: `the config lists ${twice.map((m) => JSON.stringify(m)).join(", ")} more than once: Go and this library count each member once (the first time it is listed), so every partition still has one owner (drop the repeats when the group is next recreated)`,
    });
  }
  const consumerStream = kind === "static" ? stream : workQueueStreamName(stream, group);
  const wqInfo = await streamInfo(jsm, consumerStream, kind === "static" ? "the static consumer group's stream" : "the elastic consumer group's stream", "is the group half-deleted?");
  const mismatch = kind === "static" ? staticLayoutProblem(config, wqInfo.config.subject_transform?.dest) : configLayoutProblem(wqInfo, config as ElasticConsumerGroupConfig);
  if (mismatch) configFindings.push({ code: "CONFIG_MISMATCH", severity: "error", message: `${configKey(stream, group)}: ${mismatch.message}` });
  const assignment = partitionAssignment(config);
  const owners = partitionOwners(config);
  const roster = memberRoster(config);

  const infos = new Map<string, ConsumerInfo | undefined>();
  const members: MemberDescription[] = [];
  const consumerName = (member: string): string => (kind === "static" ? staticConsumerName(group, member) : elasticConsumerName(member));
  // A member whose consumer name the server refuses has no consumer to read (asking fails the request).
  const memberInfos = await mapWithLimit(roster, REQUESTS_IN_FLIGHT, ({ member }) =>
    consumerNameProblem(consumerName(member)) === undefined ? consumerInfoIfAny(jsm, consumerStream, consumerName(member)) : Promise.resolve(undefined),
  );
  for (const [i, { member, partitions: owned, overCap }] of roster.entries()) {
    const consumer = consumerName(member);
    const info = memberInfos[i];
    infos.set(member, info);
    const pin = (info as (ConsumerInfo & PriorityState) | undefined)?.priority_groups?.find((g) => g.group === PRIORITY_GROUP);
    members.push({
      member,
      consumer,
      partitions: owned,
      overCap,
      active: (info?.num_waiting ?? 0) > 0,
      ...(pin?.pinned_client_id ? { pinnedId: pin.pinned_client_id } : {}),
      ...(isoOrUndefined(pin?.pinned_ts) ? { pinnedAt: isoOrUndefined(pin?.pinned_ts) as string } : {}),
      waitingPulls: info?.num_waiting ?? 0,
      ackPending: info?.num_ack_pending ?? 0,
      redelivered: info?.num_redelivered ?? 0,
      pending: info?.num_pending ?? 0,
      ...(isoOrUndefined(info?.delivered.last_active) ? { lastDelivery: isoOrUndefined(info?.delivered.last_active) as string } : {}),
    });
  }

  // One direct get per count where the stream allows them (a work queue always does); a temporary consumer per count otherwise.
  const count = kind === "elastic" || wqInfo.config.allow_direct === true ? countWithDirectGet : countWithConsumer;
  // A static group's config filters narrow each partition to `<p>.<filter>` (balanced membership,
  // as its consumers are made; Go gives mapped members whole partitions): counted the same way.
  const staticConfig = kind === "static" ? (config as StaticConsumerGroupConfig) : undefined;
  const narrowedBy = staticConfig?.filters && staticConfig.filters.length > 0 && (staticConfig.members?.length ?? 0) > 0 ? staticConfig.filters : undefined;
  const filtersOfPartition = (p: number): string[] => (narrowedBy ? narrowedBy.map((f) => `${p}.${f}`) : [`${p}.>`]);
  const countPartition = async (p: number, fromSeq: number): Promise<number> => {
    let n = 0;
    for (const filter of filtersOfPartition(p)) n += await count(jsm, consumerStream, filter, fromSeq);
    return n;
  };
  // A static member's delivered-but-unacked window, read in one batch per member where the
  // stream allows direct gets and the window is narrow: it splits the in-flight count by partition.
  const windows = new Map<string, Map<number, number>>();
  if (kind === "static" && count === countWithDirectGet && !narrowedBy) {
    const inFlight = [...infos].filter(([member, info]) => info && info.num_ack_pending > 0 && (assignment.get(member) ?? []).length > 1);
    await mapWithLimit(inFlight, REQUESTS_IN_FLIGHT, async ([member, info]) => {
      const window = info && (await windowPartitionCounts(jsm, consumerStream, info.ack_floor.stream_seq + 1, info.delivered.stream_seq));
      if (window) windows.set(member, window);
    });
  }
  const partitionIndexes = Array.from({ length: config.max_members }, (_, p) => p);
  const usableTotals = new Map<string, boolean>();
  const totalsUsable = (owner: string, info: ConsumerInfo): boolean => {
    let usable = usableTotals.get(owner);
    if (usable === undefined) {
      const expected = kind === "static" ? staticMemberFilters(config, owner) : elasticGetPartitionFilters(config as ElasticConsumerGroupConfig, owner);
      usable = totalsCountPartitions(info, expected);
      usableTotals.set(owner, usable);
    }
    return usable;
  };
  const partitions = await mapWithLimit(partitionIndexes, REQUESTS_IN_FLIGHT, async (p): Promise<PartitionDescription> => {
    const owner = owners[p];
    const info = owner ? infos.get(owner) : undefined;
    const delivered = info?.delivered.stream_seq ?? 0;
    const ackFloor = info?.ack_floor.stream_seq ?? 0;
    const solo = owner !== undefined && (assignment.get(owner) ?? []).length === 1;
    // A count is a request the server answers by scanning the stream from the sequence on, so the
    // owner's consumer totals answer what they can: no pending messages at all, or none in flight.
    // Only while the consumer has exactly the filters the config gives its member (not in the middle of
    // a change): then they select the same messages as the partitions' counts.
    const totalsUsed = info !== undefined && owner !== undefined && totalsUsable(owner, info);
    const nothingPending = totalsUsed && info.num_pending === 0;
    const nothingInFlight = totalsUsed && info.num_ack_pending === 0;
    let pending: number;
    let ackPending: number | undefined;
    if (kind === "elastic") {
      // In a work queue, everything stored is unacked: what is past the last delivery is pending, the rest in flight.
      if (nothingPending) {
        pending = 0;
        ackPending = nothingInFlight ? 0 : await countPartition(p, 1);
      } else {
        const stored = await countPartition(p, 1);
        pending = info && !nothingInFlight ? await countPartition(p, delivered + 1) : stored;
        ackPending = stored - pending;
      }
    } else {
      pending = nothingPending ? 0 : await countPartition(p, delivered + 1);
      const window = owner !== undefined ? windows.get(owner) : undefined;
      if (solo || nothingInFlight) ackPending = info?.num_ack_pending ?? 0;
      else if (window) ackPending = window.get(p) ?? 0;
      else ackPending = info ? (await countPartition(p, ackFloor + 1)) - pending : 0;
    }
    return {
      partition: p,
      ...(owner ? { owner } : {}),
      pending,
      ackPending,
      ...(solo && info ? { redelivered: info.num_redelivered } : {}),
      ...(isoOrUndefined(info?.delivered.last_active) ? { lastActivity: isoOrUndefined(info?.delivered.last_active) as string } : {}),
    };
  });

  for (const m of members) {
    if (infos.get(m.member) === undefined) m.pending = partitions.filter((p) => p.owner === m.member).reduce((n, p) => n + (p.pending ?? 0), 0);
  }

  let buffer: GroupDescription["buffer"];
  let sourceLag: number | undefined;
  if (kind === "elastic") {
    buffer = { messages: wqInfo.state.messages, bytes: wqInfo.state.bytes, maxMessages: wqInfo.config.max_msgs, maxBytes: wqInfo.config.max_bytes };
    sourceLag = wqInfo.sources?.[0]?.lag;
  }
  // A record this version cannot read is a typed CONFIG_DECODE error that says to upgrade.
  const repartition = kind === "elastic" ? layoutOf(wqInfo).record : undefined;
  const parkedKeys = await asked;
  const findings = [...configFindings, ...healthFindings({
    ...(parkedKeys ? { parkedKeys, names: { stream, group } } : {}),
    now: Date.now(),
    stallAfterMs: options.stallAfterMs ?? 30_000,
    members,
    partitions: partitions.map((p) => ({ partition: p.partition, owner: p.owner, pending: p.pending, lastActivity: p.lastActivity })),
    ...(buffer ? { buffer } : {}),
    ...(sourceLag !== undefined ? { sourceLag } : {}),
    ...(options.previous?.sourceLag !== undefined ? { previousSourceLag: options.previous.sourceLag } : {}),
    ...(repartition ? { repartition } : {}),
    ...(serverVersionOf(js) !== undefined ? { serverVersion: serverVersionOf(js) as string } : {}),
  })];
  return {
    kind,
    stream,
    group,
    config,
    partitionCount: config.max_members,
    assignment: Object.fromEntries(assignment),
    members,
    partitions,
    ...(buffer ? { buffer } : {}),
    ...(sourceLag !== undefined ? { sourceLag } : {}),
    ...(parkedKeys ? { parkedKeys } : {}),
    findings,
    at: new Date().toISOString(),
  };
}

/**
 * Whether a consumer's totals (`num_pending`, `num_ack_pending`) are totals of its
 * member's partitions as describe counts them: its filters are exactly the member's
 * under the current config (describe counts each partition with those filters). Worked
 * out once per member.
 */
function totalsCountPartitions(info: ConsumerInfo, expected: string[]): boolean {
  const { filter_subject: one, filter_subjects: many } = info.config;
  const have = new Set(many && many.length > 0 ? many : one ? [one] : []);
  return have.size === expected.length && expected.every((f) => have.has(f));
}
