/**
 * `elasticConsume`: runs one instance of an elastic group's member.
 */
import type { ConsumerConfig, JetStreamClient, JetStreamManager, StreamInfo } from "@nats-io/jetstream";
import { elasticGetPartitionFilters, memberPartitions } from "../core/assignment.js";
import { sameElasticSettings, sameMembership } from "../core/codec.js";
import { ConsumerGroupError } from "../core/errors.js";
import { PRIORITY_GROUP, bucketName, configKey, elasticConsumerName, workQueueStreamName } from "../core/names.js";
import { msToNanos, pinnedTtlMs } from "../core/timing.js";
import type { ElasticConsumerGroupConfig } from "../core/types.js";
import { ELASTIC, openConfigBucket, readConfig } from "../nats/config-store.js";
import { checkConsumeOptions, modeConsumerSettings, type ConsumeOptions } from "../nats/consume-options.js";
import { elasticKeyExtractor, type SubjectKeyExtractor } from "../core/keys.js";
import { describeModeConflict } from "../nats/consumer-mode.js";
import { MIN_SERVER, managerOf, requireServer, streamExists, streamInfo } from "../nats/context.js";
import { startMember, type ConsumerGroupMember, type MemberDriver } from "../nats/member.js";
import type { MemberSettings } from "../nats/member-types.js";
import { ApiCode, apiErrorCode, isPermissionError, isTransientServerError, wrapServerError } from "../nats/server-errors.js";
import { configLayoutProblem, filtersForLayout, layoutMismatchError, readLayout, type StreamLayout } from "./layout.js";
import { coversSettings, CreateGate, type ConsumerSeen } from "./create-gate.js";
import { isReplacedCopy, type RepartitionRecord } from "../core/repartition.js";
import { AutoJoinedMember } from "./auto-join/auto-member.js";
import { AutoMembership, refuseAutoStart } from "./auto-join/auto-join.js";
import { NatsLeasePort } from "./auto-join/nats-lease-port.js";
import { defaultMemberName, resolveAutoJoin, type AutoJoinOptions } from "./auto-join/settings.js";
import { AttemptLedger } from "./attempt-ledger.js";
import { LEASE_BUCKET, openLeaseBucket } from "./auto-join/lease-store.js";
import { answerPresence } from "./presence.js";
import { connectionOf } from "../nats/client-seam.js";

/** How often a member checks a repartition in progress (gates to open, phase changes). */
const REPARTITION_POLL_MS = 250;
/**
 * How often a member reads its work-queue stream's layout when no repartition is known
 * to it: a repartition whose process died in the middle of its first switch leaves the
 * old source's copies behind, and the member must know the record to drop them when
 * the pause ends (after 30 s, well after this).
 */
const LAYOUT_CHECK_MS = 10_000;

function elasticDriver(
  stream: string,
  group: string,
  member: string,
  template: Partial<ConsumerConfig>,
  ackWaitMs: number,
  mayJoin: () => boolean,
): MemberDriver<ElasticConsumerGroupConfig> {
  const wq = workQueueStreamName(stream, group);
  const consumerName = elasticConsumerName(member);
  /** The filters this instance last gave the consumer (a standby may have given the same). */
  let applied: string[] | undefined;
  /** Creates the consumer only when no delete of it can be under way (see create-gate.ts). */
  const createGate = new CreateGate();
  /** What the member's consumer looks like now, against the config this instance would create. */
  const look = async (jsm: JetStreamManager, config: Partial<ConsumerConfig>): Promise<{ seen: ConsumerSeen; created?: string }> => {
    try {
      const info = await jsm.consumers.info(wq, consumerName);
      const theirs = info.config as unknown as Record<string, unknown>;
      const ours = config as unknown as Record<string, unknown>;
      const sameFilters = coversSettings(theirs, { filter_subjects: config.filter_subjects });
      return { seen: { kind: "present", sameFilters, sameConfig: sameFilters && coversSettings(theirs, ours) }, created: info.created };
    } catch (err) {
      if (apiErrorCode(err) === ApiCode.ConsumerNotFound) return { seen: { kind: "absent" } };
      throw err;
    }
  };
  /** The repartition record and partitioning filters as last read (to recognise copies a source switch replaced). */
  let seen: { record: RepartitionRecord | undefined; filters: ElasticConsumerGroupConfig["partitioning_filters"] } = { record: undefined, filters: null };
  /** Deletes the consumer made at `created` if it never delivered a message and nobody is pinned to it. */
  const deleteIfUnused = async (jsm: JetStreamManager, created: string): Promise<void> => {
    try {
      const info = await jsm.consumers.info(wq, consumerName);
      const groups = (info as { priority_groups?: { pinned_client_id?: string }[] }).priority_groups ?? [];
      const pinned = groups.some((g) => !!g.pinned_client_id);
      if (info.created === created && info.delivered.consumer_seq === 0 && !pinned) await jsm.consumers.delete(wq, consumerName);
    } catch (err) {
      if (apiErrorCode(err) !== ApiCode.ConsumerNotFound) throw wrapServerError(err, `replacing the consumer "${consumerName}" made for an older reading of the repartition`);
    }
  };
  /**
   * While a source switch of a repartition holds the member consumers paused, a consumer
   * made meanwhile is paused too before anything pulls from it: the switch may not have
   * seen it. Should the switch be over by the time it is paused, it is resumed here, as
   * the switch resumes only what is paused when it ends.
   *
   * @returns false when it may not be paused (no permission to): the caller retries the join after the switch
   */
  const holdForSwitch = async (jsm: JetStreamManager, layout: StreamLayout): Promise<boolean> => {
    const until = layout.switchPausedUntil;
    if (!until || until.getTime() <= Date.now()) return true;
    try {
      await jsm.consumers.pause(wq, consumerName, until);
      if ((await readLayout(jsm, wq)).switchPausedUntil === undefined) await jsm.consumers.resume(wq, consumerName);
      return true;
    } catch (err) {
      if (apiErrorCode(err) === ApiCode.ConsumerNotFound) return true;
      if (isPermissionError(err)) return false;
      throw wrapServerError(err, `pausing "${consumerName}" while a repartition switches the source of "${wq}"`);
    }
  };
  return {
    kind: "elastic",
    flavour: ELASTIC,
    consumerStream: wq,
    consumerName,
    stopWhenConsumerLost: false,
    acksRemoveMessages: true,
    partitions: (config) => memberPartitions(config.members, config.max_members, config.member_mappings, member),
    consumerConfig(config) {
      const filters = elasticGetPartitionFilters(config, member);
      if (filters.length === 0) return undefined;
      const consumer: Partial<ConsumerConfig> = {
        ...template,
        name: consumerName,
        ack_wait: msToNanos(ackWaitMs),
        inactive_threshold: msToNanos(ackWaitMs),
        filter_subjects: filters,
        priority_groups: [PRIORITY_GROUP],
        priority_policy: "pinned_client",
        priority_timeout: msToNanos(pinnedTtlMs(ackWaitMs)),
      };
      delete consumer.durable_name;
      return consumer;
    },
    supersedes(older, newer) {
      return older.max_members === newer.max_members;
    },
    async classify(current, next, jsm) {
      const immutable = new ConsumerGroupError(
        "CONFIG_IMMUTABLE",
        `elastic consumer group config ${stream}.${group} watcher received a bad change in the configuration: max number of members, buffered messages, filter or partitioning wildcards changed (they are immutable: delete and recreate the group, or grow the partition count with repartition() / "cg elastic repartition")`,
      );
      if (next.max_members === current.max_members) {
        if (!sameElasticSettings(current, next)) return immutable;
        return sameMembership(current, next) ? "same" : "membership";
      }
      // Only a repartition changes the partition count: its record in the stream says to which.
      if (!sameElasticSettings(current, { ...next, max_members: current.max_members })) return immutable;
      const record = (await readLayout(jsm, wq)).record;
      return record && record.from === current.max_members && record.to === next.max_members ? "membership" : immutable;
    },
    async createConsumer(jsm, config, groupConfig) {
      // An auto instance whose lease may have run out does not take partitions: the group may have moved them.
      if (!mayJoin()) return "busy";
      const finalFilters = config.filter_subjects ?? [];
      const layout = await readLayout(jsm, wq);
      const filters = await filtersForLayout(jsm, wq, layout, groupConfig.max_members, finalFilters);
      config = { ...config, filter_subjects: filters };
      applied = filters;
      try {
        let existing = await look(jsm, config);
        let decision = createGate.decide(existing.seen, performance.now());
        // Absent: look again once the absence has lasted long enough (a join then takes at most that much longer).
        for (let looks = 0; decision.kind === "wait" && decision.why === "absent-too-briefly" && looks < 3; looks++) {
          const waitMs = decision.lookAgainInMs + 5;
          await new Promise((r) => setTimeout(r, waitMs));
          existing = await look(jsm, config);
          decision = createGate.decide(existing.seen, performance.now());
        }
        if (decision.kind === "wait") {
          // An older consumer of this member: a conflict of modes is an error now, not after a drain.
          if (decision.why === "other-filters") {
            const modes = await describeModeConflict(jsm, wq, consumerName, config);
            if (modes) throw new ConsumerGroupError("CONSUMER_CONFLICT", `the consumer "${consumerName}" of member "${member}" is in use with a different config: ${modes}`);
          }
          return "busy";
        }
        const created = decision.kind === "bind" && existing.created !== undefined ? { created: existing.created } : await jsm.consumers.add(wq, config);
        const after = await readLayout(jsm, wq);
        seen = { record: after.record, filters: groupConfig.partitioning_filters };
        if (!(await holdForSwitch(jsm, after))) {
          await deleteIfUnused(jsm, created.created);
          return "busy";
        }
        // A repartition may have moved on while the consumer was made from an older reading (a gate
        // opened, or it started finishing): nothing is pulled from it until the filters are read again
        // and still hold, or the repartition could finish past a consumer it never saw without them.
        if (!layout.record) return "ready";
        const now = await filtersForLayout(jsm, wq, after, groupConfig.max_members, finalFilters);
        if (now.length === filters.length && now.every((f, i) => f === filters[i])) return "ready";
        await deleteIfUnused(jsm, created.created);
        return "busy";
      } catch (err) {
        const code = apiErrorCode(err);
        // 10100: another member still holds some of these partitions until it has drained them.
        if (code === ApiCode.WorkQueueFilterNotUnique) return "busy";
        // 10148: it exists with other filters (a stale membership). Go deletes and recreates it; here
        // an instance deletes only the consumer it joined, after draining it. Any other copy is either
        // still in use (a pinned instance draining it, whose handlers may outlive the pin timer under
        // load) or abandoned, and the server itself removes an abandoned one after inactive_threshold,
        // counting acks and working() as activity: waiting for that is the one safe signal.
        if (code !== ApiCode.ConsumerAlreadyExists) throw err;
        const modes = await describeModeConflict(jsm, wq, consumerName, config);
        if (modes) throw new ConsumerGroupError("CONSUMER_CONFLICT", `the consumer "${consumerName}" of member "${member}" is in use with a different config: ${modes}`, { cause: err });
        return "busy";
      }
    },
    async refresh(jsm, groupConfig) {
      const finalFilters = elasticGetPartitionFilters(groupConfig, member);
      if (finalFilters.length === 0) return { recheckMs: undefined, rejoin: false };
      const layout = await readLayout(jsm, wq);
      seen = { record: layout.record, filters: groupConfig.partitioning_filters };
      const filters = await filtersForLayout(jsm, wq, layout, groupConfig.max_members, finalFilters);
      const recheckMs = layout.record || filters.length !== finalFilters.length ? REPARTITION_POLL_MS : LAYOUT_CHECK_MS;
      const have = new Set(applied ?? []);
      // Never widened in place: on 2.15.3 a work-queue consumer given an added filter keeps its
      // delivered sequence (and its delivery counts), and skips the added filter's stored messages
      // below it (measured: 4 of 5 never delivered). A rejoin drains it and makes a new one.
      if (filters.some((f) => !have.has(f))) return { recheckMs, rejoin: true };
      if (filters.length < have.size) {
        try {
          await jsm.consumers.update(wq, consumerName, { filter_subjects: filters });
          applied = filters;
        } catch (err) {
          // Gone: the consume ends and the instance rejoins with the layout of that moment.
          if (apiErrorCode(err) !== ApiCode.ConsumerNotFound) throw wrapServerError(err, `dropping the finished repartition's filters of "${consumerName}"`);
        }
      }
      return { recheckMs, rejoin: false };
    },
    async cleanup() {
      // The consumer is not durable: it goes away after inactive_threshold, as in Go.
    },
    consumerDeleted() {
      createGate.deleted();
    },
    replacedCopy(m) {
      // Most of the time there is no source switch to check against: the header is not even read.
      if (seen.record?.switchedAfterOrigin === undefined) return false;
      return isReplacedCopy(seen.record, m.headers?.get("Nats-Stream-Source"), seen.filters);
    },
  };
}

/** How long an auto instance's start retries errors a cluster shows while it elects a leader. */
const START_RETRY_MS = 30_000;

/** Runs `action`, retrying it with backoff while it fails with a transient server error, for up to {@link START_RETRY_MS}. */
async function retryTransient<T>(action: () => Promise<T>): Promise<T> {
  const deadline = performance.now() + START_RETRY_MS;
  for (let attempt = 0; ; attempt++) {
    try {
      return await action();
    } catch (err) {
      if (!isTransientServerError(err) || performance.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, Math.min(2000, 250 * 2 ** attempt)));
    }
  }
}

/** Options of {@link elasticConsume}: those of `staticConsume`, plus auto-join. */
export interface ElasticConsumeOptions extends Omit<ConsumeOptions, "member"> {
  /**
   * The member this instance runs as; instances of one member are hot standbys. Required
   * without `autoJoin`; with it, the default is `HOSTNAME` (the pod name on Kubernetes),
   * else the host name.
   */
  member?: string;
  /**
   * Join the group by itself: the instance adds its member to the membership, keeps a
   * lease alive while it runs, and takes the member out when its last instance stops;
   * members whose last lease expires are removed by a live auto instance. Members
   * added by hand (or by Go, or the CLI) are never touched. See docs/auto-membership.md.
   */
  autoJoin?: boolean | AutoJoinOptions;
}

/**
 * Runs an instance of an elastic group's member. The instance follows the group's
 * membership live: when its partitions change it recreates its consumer
 * `<member>` on the work-queue stream `<stream>-<group>` (the pinned instance
 * deletes it, the others give it a head start, exactly as Go does). A member not
 * in the membership idles and joins when it is added.
 *
 * The consumer template must use explicit acks (the default when `ack_policy` is omitted).
 *
 * @returns a handle to stop the instance and follow its status
 * @throws ConsumerGroupError `INVALID_NAME` (also a stored member name that cannot be a consumer name), `INVALID_HANDLER`,
 *   `INVALID_CONSUMER_TEMPLATE`, `STREAM_NOT_FOUND`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND`, `CONFIG_MISMATCH` (the stored
 *   config's partition count or partitioning filters disagree with the work-queue stream), `SERVER_TOO_OLD`; with `autoJoin` also `INVALID_ARGUMENT` (the
 *   auto-join options), `MEMBER_NOT_AUTO`, `ASSIGNMENT_CONFLICT`, `AUTO_POLICY_CONFLICT`
 *
 * @example
 * ```ts
 * const member = await elasticConsume(js, {
 *   stream: "orders", group: "shipping", member: "m1",
 *   consumerConfig: { ack_policy: "explicit", ack_wait: nanos(5000) },
 *   handler: async (msg) => { await ship(msg.json()); },
 * });
 * ```
 */
export async function elasticConsume(js: JetStreamClient, options: ElasticConsumeOptions): Promise<ConsumerGroupMember> {
  const keys: { extract?: SubjectKeyExtractor | undefined } = {};
  const autoOption = options && typeof options === "object" ? options.autoJoin : undefined;
  if (options && typeof options === "object" && options.member === undefined && !autoOption) {
    throw new ConsumerGroupError("INVALID_NAME", "invalid member name: a member name is required (or pass autoJoin, which names the member after HOSTNAME)");
  }
  const withMember = options && typeof options === "object" && options.member === undefined && autoOption ? { ...options, member: defaultMemberName() } : options;
  const checked = checkConsumeOptions(js, withMember as ConsumeOptions, (msg) => keys.extract?.(msg.subject) ?? `#${msg.partition}`, "elasticConsume options", ["autoJoin"]);
  const auto = resolveAutoJoin(autoOption, checked.ackWaitMs);
  const template = options.consumerConfig ?? {};
  if (template.ack_policy !== undefined && template.ack_policy !== "explicit") {
    throw new ConsumerGroupError(
      "INVALID_CONSUMER_TEMPLATE",
      `the ack policy when consuming from elastic consumer groups must be explicit (got "${template.ack_policy}"): work-queue streams require it`,
    );
  }
  const { stream, group, member } = withMember as ConsumeOptions;
  const jsm = await managerOf(js);
  requireServer(js, MIN_SERVER, "elastic consumer groups (priority groups with pinned_client)");
  const ledger = new AttemptLedger(js, jsm, stream, group);
  const settings = countingAttempts(checked, ledger);
  if (settings.dispatch.retry?.exact) await ledger.requireRemovableRecords();
  // An auto instance (a pod starting) waits through a cluster electing a leader; a hand-run member fails at once.
  const patiently = auto ? retryTransient : <T>(action: () => Promise<T>): Promise<T> => action();
  const readWorkQueue = (): Promise<StreamInfo> =>
    patiently(() => streamInfo(jsm, workQueueStreamName(stream, group), "the elastic consumer group's stream", `create the group first with createElastic(js, { stream: "${stream}", group: "${group}", ... })`));
  const wqInfo = await readWorkQueue();
  const kv = await patiently(() => openConfigBucket(js, jsm, "elastic"));
  const current = await patiently(() => readConfig(kv, ELASTIC, stream, group));
  // Read again before refusing: a repartition may have changed both between the two readings.
  if (configLayoutProblem(wqInfo, current.config)) {
    const problem = configLayoutProblem(await readWorkQueue(), current.config);
    if (problem) throw layoutMismatchError(problem, configKey(stream, group), `Member "${member}" did not start: its partitions would not be the ones the work queue fills`);
  }
  keys.extract = elasticKeyExtractor(current.config.partitioning_filters);
  const consumerTemplate = { ...template, ack_policy: "explicit" as const, ...modeConsumerSettings(withMember as ConsumeOptions, settings) };
  if (!auto) {
    const driver = elasticDriver(stream, group, member, consumerTemplate, settings.ackWaitMs, () => true);
    return answeringPresence(js, await startMember(js, jsm, kv, driver, { stream, group, member }, current, settings, false), settings.dispatch.mode);
  }
  // With no lease bucket the member cannot be registered: what start() would refuse is refused before the bucket is made.
  if (!(await retryTransient(() => streamExists(jsm, `KV_${LEASE_BUCKET}`)))) refuseAutoStart(current.config, stream, group, member, auto.assignment, false);
  const replicas = (await retryTransient(() => streamInfo(jsm, `KV_${bucketName("elastic")}`, "the elastic config bucket", ""))).config.num_replicas;
  const leases = await retryTransient(() => openLeaseBucket(js, jsm, replicas));
  const port = new NatsLeasePort(js, leases, kv, stream, group, () => openLeaseBucket(js, jsm, replicas));
  const membership = new AutoMembership(port, stream, group, member, auto);
  const fenced = { ...settings, dispatch: { ...settings.dispatch, mayStart: () => membership.leaseValid() } };
  const driver = elasticDriver(stream, group, member, consumerTemplate, settings.ackWaitMs, () => membership.leaseValid());
  await retryTransient(() => membership.start(current.config));
  let controller: Awaited<ReturnType<typeof startMember<ElasticConsumerGroupConfig>>>;
  try {
    controller = await startMember(js, jsm, kv, driver, { stream, group, member }, current, fenced, false);
  } catch (err) {
    await membership.close("start_failed");
    throw err;
  }
  membership.attach(controller);
  return answeringPresence(js, new AutoJoinedMember(controller, membership, settings.drainTimeoutMs), settings.dispatch.mode);
}

/**
 * Counts the attempts of a retry policy in the attempts bucket: a rebalance recreates the
 * consumer (its delivery counts start over) and gives back what waits for a retry.
 */
function countingAttempts(settings: MemberSettings, ledger: AttemptLedger): MemberSettings {
  const retry = settings.dispatch.retry;
  if (!retry) return settings;
  return { ...settings, dispatch: { ...settings.dispatch, retry: { ...retry, attempts: ledger } } };
}

/** Answers presence requests (see presence.ts) while the instance runs. */
function answeringPresence<M extends ConsumerGroupMember & { currentPinId(): string | undefined }>(js: JetStreamClient, instance: M, mode: string): M {
  const presence = answerPresence(connectionOf(js), instance.stream, instance.group, instance.member, mode, instance);
  void instance.closed().then(() => presence.stop());
  return instance;
}
