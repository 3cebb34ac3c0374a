/**
 * Live membership changes of elastic groups. Every write is a KV compare-and-set,
 * retried on conflict, and changes only `members` / `member_mappings`: every other
 * field is written back exactly as read, since Go members quit on any other change.
 */
import type { JetStreamClient } from "@nats-io/jetstream";
import { checkMembersAndMappings } from "../core/arguments.js";
import { ConsumerGroupError } from "../core/errors.js";
import { assertValidGroupNames, assertValidName, configKey, workQueueStreamName } from "../core/names.js";
import type { ElasticConsumerGroupConfig, MemberMapping } from "../core/types.js";
import { ELASTIC, openConfigBucket, updateConfig } from "../nats/config-store.js";
import { managerOf } from "../nats/context.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../nats/server-errors.js";
import { configLayoutProblem, layoutMismatchError } from "./layout.js";

/**
 * A membership edit, written only if the config agrees with its work-queue stream (read
 * once, before: membership edits do not change what it is compared on) and the result is
 * valid (see updateConfig, which lets an edit repair an invalid config).
 */
async function edit(
  js: JetStreamClient,
  stream: string,
  group: string,
  mutate: (config: ElasticConsumerGroupConfig) => ElasticConsumerGroupConfig,
): Promise<ElasticConsumerGroupConfig> {
  const jsm = await managerOf(js);
  const kv = await openConfigBucket(js, jsm, "elastic");
  const wq = workQueueStreamName(stream, group);
  // A group whose work-queue stream is gone (half deleted) has nothing to compare with: edited as before.
  const info = await jsm.streams.info(wq).catch((err: unknown) => {
    if (apiErrorCode(err) === ApiCode.StreamNotFound) return undefined;
    throw wrapServerError(err, `reading the work-queue stream "${wq}" to check the group config against it`);
  });
  return (
    await updateConfig(kv, ELASTIC, stream, group, (current) => {
      const problem = info && configLayoutProblem(info, current);
      if (problem) {
        throw layoutMismatchError(problem, configKey(stream, group), "Nothing was written: members refuse to start on this config, and a membership change would write over it as if it were valid");
      }
      return mutate(current);
    })
  ).config;
}

function checkMemberList(members: unknown, adding: boolean): asserts members is string[] {
  if (!Array.isArray(members) || members.length === 0) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", "invalid stream name or elastic consumer group name or no member names: pass at least one member name");
  }
  // A name being dropped need only be a string: dropping a stored member whose name cannot be
  // a consumer name (written by hand, Go or another port) is how that config is repaired.
  if (adding) checkMembersAndMappings(members, undefined);
  else if (members.some((m) => typeof m !== "string" || m === "")) throw new ConsumerGroupError("INVALID_NAME", "the member names to drop must be non-empty strings");
}

function withMembers(config: ElasticConsumerGroupConfig, members: string[]): ElasticConsumerGroupConfig {
  const next: ElasticConsumerGroupConfig = { ...config };
  if (members.length > 0) next.members = members;
  else delete next.members;
  return next;
}

/**
 * Adds members. Existing members keep their order and new ones are appended in the
 * order given (Go's order is random). Members beyond `maxMembers` are allowed; they
 * idle as standbys until a member leaves.
 *
 * @returns the complete member list after the change
 * @throws ConsumerGroupError `INVALID_NAME`, `INVALID_ARGUMENT`, `GROUP_USES_MAPPINGS`, `GROUP_NOT_FOUND`, `BUCKET_NOT_FOUND`;
 *   `CONFIG_MISMATCH` (the config disagrees with its work-queue stream) or a validation code (the stored config
 *   is invalid and this call does not repair it): nothing is written then
 */
export async function addMembers(js: JetStreamClient, stream: string, group: string, members: string[]): Promise<string[]> {
  assertValidGroupNames(stream, group);
  checkMemberList(members, true);
  const config = await edit(js, stream, group, (current) => {
    if ((current.member_mappings ?? []).length > 0) {
      throw new ConsumerGroupError("GROUP_USES_MAPPINGS", "can't add members to an elastic consumer group that uses member mappings: delete the mappings first, or set new mappings");
    }
    const existing = current.members ?? [];
    const added = [...new Set(members)].filter((m) => !existing.includes(m));
    return added.length === 0 ? current : withMembers(current, [...existing, ...added]);
  });
  return config.members ?? [];
}

/**
 * Drops members; names that are not members are ignored.
 *
 * @returns the remaining members, in their original order
 * @throws ConsumerGroupError `INVALID_NAME`, `INVALID_ARGUMENT`, `GROUP_USES_MAPPINGS`, `GROUP_NOT_FOUND`, `BUCKET_NOT_FOUND`;
 *   `CONFIG_MISMATCH` (the config disagrees with its work-queue stream) or a validation code (the stored config
 *   is invalid and this call does not repair it): nothing is written then
 */
export async function deleteMembers(js: JetStreamClient, stream: string, group: string, members: string[]): Promise<string[]> {
  assertValidGroupNames(stream, group);
  checkMemberList(members, false);
  const config = await edit(js, stream, group, (current) => {
    if ((current.member_mappings ?? []).length > 0) {
      throw new ConsumerGroupError("GROUP_USES_MAPPINGS", "can't drop members from a elastic consumer group that uses member mappings: delete the mappings first");
    }
    const existing = current.members ?? [];
    // Names that are not members are ignored, but only valid ones: a typo such as "m.1" is still an error.
    members.filter((m) => !existing.includes(m)).forEach((m) => assertValidName("member", m));
    const remaining = existing.filter((m) => !members.includes(m));
    return remaining.length === existing.length ? current : withMembers(current, remaining);
  });
  return config.members ?? [];
}

/**
 * Replaces the membership with explicit mappings (clearing `members`).
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `INVALID_ARGUMENT`, mapping validation codes, `GROUP_NOT_FOUND`,
 *   `CONFIG_MISMATCH` (the config disagrees with its work-queue stream: nothing is written)
 */
export async function setMemberMappings(js: JetStreamClient, stream: string, group: string, memberMappings: MemberMapping[]): Promise<void> {
  assertValidGroupNames(stream, group);
  if (!Array.isArray(memberMappings) || memberMappings.length === 0) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", "invalid stream name or elastic consumer group name or member mappings: pass at least one mapping");
  }
  checkMembersAndMappings(undefined, memberMappings);
  await edit(js, stream, group, (current) => {
    const next: ElasticConsumerGroupConfig = { ...current, member_mappings: memberMappings.map((m) => ({ member: m.member, partitions: [...m.partitions ?? []] })) };
    delete next.members;
    return next;
  });
}

/**
 * Removes the mappings. The group is left with no membership, so every member
 * idles until members or mappings are set again.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `GROUP_NOT_FOUND`, `BUCKET_NOT_FOUND`, `CONFIG_MISMATCH` (the config
 *   disagrees with its work-queue stream), a validation code (an invalid stored config this does not repair): nothing is written then
 */
export async function deleteMemberMappings(js: JetStreamClient, stream: string, group: string): Promise<void> {
  assertValidGroupNames(stream, group);
  await edit(js, stream, group, (current) => {
    if ((current.member_mappings ?? []).length === 0) return current;
    const next: ElasticConsumerGroupConfig = { ...current };
    delete next.member_mappings;
    return next;
  });
}
