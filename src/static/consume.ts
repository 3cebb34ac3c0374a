/**
 * `staticConsume`: runs one instance of a static group's member.
 */
import type { ConsumerConfig, JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { isInMembership, memberPartitions, staticMemberFilters } from "../core/assignment.js";
import { sameStaticConfig } from "../core/codec.js";
import { ConsumerGroupError } from "../core/errors.js";
import { PRIORITY_GROUP, configKey, staticConsumerName } from "../core/names.js";
import { staticLayoutProblem } from "../core/layout-checks.js";
import { msToNanos, pinnedTtlMs } from "../core/timing.js";
import type { StaticConsumerGroupConfig } from "../core/types.js";
import { STATIC, openConfigBucket, readConfig } from "../nats/config-store.js";
import { checkConsumeOptions, modeConsumerSettings, type ConsumeOptions } from "../nats/consume-options.js";
import { staticKeyExtractor, type SubjectKeyExtractor } from "../core/keys.js";
import { describeModeConflict } from "../nats/consumer-mode.js";
import { MIN_SERVER, managerOf, requireServer, streamInfo } from "../nats/context.js";
import { startMember, type ConsumerGroupMember, type MemberDriver } from "../nats/member.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../nats/server-errors.js";

function staticDriver(stream: string, group: string, member: string, template: Partial<ConsumerConfig>, ackWaitMs: number): MemberDriver<StaticConsumerGroupConfig> {
  const consumerName = staticConsumerName(group, member);
  return {
    kind: "static",
    flavour: STATIC,
    consumerStream: stream,
    consumerName,
    stopWhenConsumerLost: true,
    partitions: (config) => memberPartitions(config.members, config.max_members, config.member_mappings, member),
    consumerConfig(config) {
      const filters = staticMemberFilters(config, member);
      if (filters.length === 0) return undefined;
      return {
        ...template,
        // Go's template is a jetstream.ConsumerConfig whose zero AckPolicy is AckExplicitPolicy,
        // so an unset ack_policy means explicit there; the server would default it to none.
        ack_policy: template.ack_policy ?? "explicit",
        durable_name: consumerName,
        ack_wait: msToNanos(ackWaitMs),
        filter_subjects: filters,
        priority_groups: [PRIORITY_GROUP],
        priority_policy: "pinned_client",
        priority_timeout: msToNanos(pinnedTtlMs(ackWaitMs)),
      };
    },
    classify(current, next) {
      if (sameStaticConfig(current, next)) return "same";
      return new ConsumerGroupError(
        "CONFIG_CHANGED",
        `static consumer group config watcher received a change in the configuration, terminating: static groups are immutable; "${group}" on "${stream}" was changed, so member "${member}" stopped`,
      );
    },
    async createConsumer(jsm: JetStreamManager, config) {
      try {
        await jsm.consumers.add(stream, config);
        return "ready";
      } catch (err) {
        if (apiErrorCode(err) === ApiCode.ConsumerAlreadyExists) {
          const modes = await describeModeConflict(jsm, stream, consumerName, config);
          throw new ConsumerGroupError(
            "CONSUMER_CONFLICT",
            `error creating our member's consumer: "${consumerName}" already exists with a different config; ${modes ?? "every instance of a member (Go or TypeScript) must use the same consumer template"}`,
            { cause: err, serverCode: ApiCode.ConsumerAlreadyExists },
          );
        }
        throw wrapServerError(err, "creating our member's consumer");
      }
    },
    async cleanup(jsm) {
      try {
        await jsm.consumers.delete(stream, consumerName);
      } catch {
        // already gone, or the server is unreachable: the durable stays until deleteStatic
      }
    },
  };
}

/**
 * Runs an instance of a static group's member. The instance creates (or binds) the
 * member's durable consumer `<group>-<member>` on the stream and pulls from it with
 * priority group `PCG` and the `pinned_client` policy: of several instances of one
 * member, the server delivers to one and keeps the others as hot standbys.
 *
 * @returns a handle to stop the instance and follow its status
 * @throws ConsumerGroupError `INVALID_NAME` (also a stored member name that cannot be a consumer name), `INVALID_HANDLER`,
 *   `INVALID_CONSUMER_TEMPLATE`, `STREAM_NOT_FOUND`, `BUCKET_NOT_FOUND`, `GROUP_NOT_FOUND`, `NOT_IN_MEMBERSHIP`,
 *   `PARTITION_COUNT_MISMATCH` (the stored max_members is not the stream's partition transform's count), `CONSUMER_CONFLICT`, `SERVER_TOO_OLD`
 *
 * @example
 * ```ts
 * const member = await staticConsume(js, {
 *   stream: "orders", group: "billing", member: "m1",
 *   handler: async (msg) => { await bill(msg.json()); }, // acked when it returns
 * });
 * process.on("SIGTERM", () => void member.stop());
 * ```
 */
export async function staticConsume(js: JetStreamClient, options: ConsumeOptions): Promise<ConsumerGroupMember> {
  // The default key is read from the stream's partition transform, known once the stream is looked up.
  const keys: { extract?: SubjectKeyExtractor | undefined } = {};
  if (options && typeof options === "object" && (options as { autoJoin?: unknown }).autoJoin !== undefined && (options as { autoJoin?: unknown }).autoJoin !== false) {
    throw new ConsumerGroupError(
      "STATIC_GROUP",
      "autoJoin is for elastic groups: a static group's membership is fixed when it is created; use an elastic group (createElastic + elasticConsume with autoJoin), or list the members at createStatic",
    );
  }
  // `autoJoin: false` is let through: one options object may serve both flavours.
  const settings = checkConsumeOptions(js, options, (msg) => keys.extract?.(msg.subject) ?? `#${msg.partition}`, "staticConsume options", ["autoJoin"]);
  const { stream, group, member } = options;
  const jsm = await managerOf(js);
  requireServer(js, MIN_SERVER, "static consumer groups (priority groups with pinned_client)");
  const info = await streamInfo(jsm, stream, "the static consumer group's stream", "create the stream and the group first");
  keys.extract = staticKeyExtractor(info.config.subject_transform?.dest);
  const kv = await openConfigBucket(js, jsm, "static");
  const current = await readConfig(kv, STATIC, stream, group);
  const mismatch = staticLayoutProblem(current.config, info.config.subject_transform?.dest);
  if (mismatch) {
    throw new ConsumerGroupError(
      mismatch.code,
      `static consumer group config "${configKey(stream, group)}": ${mismatch.message}. Member "${member}" did not start. Static groups are immutable: ` +
        `delete the group and create it again with maxMembers equal to the stream's partition count (or put back the value it was created with)`,
    );
  }
  if (!isInMembership(current.config, member)) {
    throw new ConsumerGroupError("NOT_IN_MEMBERSHIP", `the member name is not in the current static consumer group membership: "${member}" is not a member of "${group}"`);
  }
  const template = { ...(options.consumerConfig ?? {}), ...modeConsumerSettings(options, settings) };
  const driver = staticDriver(stream, group, member, template, settings.ackWaitMs);
  return startMember(js, jsm, kv, driver, { stream, group, member }, current, settings, true);
}
