/**
 * The CLI's operations on groups, shared by the commands and the prompt: each
 * calls the public API and returns the document to print.
 */
import type { JetStreamClient } from "@nats-io/jetstream";
import {
  ConsumerGroupError,
  addMembers,
  createElastic,
  createStatic,
  deleteElastic,
  deleteMemberMappings,
  deleteMembers,
  deleteStatic,
  elasticIsInMembershipAndActive,
  elasticMemberStepDown,
  getElasticConsumerGroupConfig,
  getStaticConsumerGroupConfig,
  isInMembership,
  listElasticActiveMembers,
  listElasticConsumerGroups,
  listStaticActiveMembers,
  listStaticConsumerGroups,
  memberPartitions,
  partitionOwners,
  setMemberMappings,
  staticMemberStepDown,
  type ElasticConsumerGroupConfig,
  type GroupKind,
  type MemberMapping,
  type PartitioningFilter,
  type StaticConsumerGroupConfig,
} from "../index.js";
import type { CreatedDoc, DeletedDoc, GroupListDoc, InfoDoc, MappingsDoc, MemberInfoDoc, MembersDoc, PartitionRow, StepDownDoc } from "./model.js";

/** Adds what to do to "no such group" errors: list the groups that exist. */
async function hinted<T>(kind: GroupKind, stream: string, body: () => Promise<T>): Promise<T> {
  try {
    return await body();
  } catch (err) {
    if (err instanceof ConsumerGroupError && err.code === "GROUP_NOT_FOUND" && !/ ls |is running/.test(err.message)) {
      throw new ConsumerGroupError(err.code, `${err.message}; see the ${kind} groups of the stream with "cg ${kind} ls ${stream}"`, {
        cause: err,
        ...(err.serverCode === undefined ? {} : { serverCode: err.serverCode }),
      });
    }
    throw err;
  }
}

/** The groups of a stream. A stream (or account) that never had a group has none. */
export async function listGroups(js: JetStreamClient, kind: GroupKind, stream: string): Promise<GroupListDoc> {
  try {
    const groups = kind === "static" ? await listStaticConsumerGroups(js, stream) : await listElasticConsumerGroups(js, stream);
    return { kind, stream, groups };
  } catch (err) {
    if (err instanceof ConsumerGroupError && err.code === "BUCKET_NOT_FOUND") return { kind, stream, groups: [] };
    throw err;
  }
}

function partitionRows(config: StaticConsumerGroupConfig | ElasticConsumerGroupConfig, active: readonly string[]): PartitionRow[] {
  return partitionOwners(config).map((member, partition) => ({ partition, member: member ?? null, active: member !== undefined && active.includes(member) }));
}

/** A group's config, active members and partition table. */
export async function groupInfo(js: JetStreamClient, kind: GroupKind, stream: string, group: string): Promise<InfoDoc> {
  return hinted(kind, stream, async () => {
    if (kind === "static") {
      const config = await getStaticConsumerGroupConfig(js, stream, group);
      const active = await listStaticActiveMembers(js, stream, group);
      return { kind, stream, group, config, active_members: active, partitions: partitionRows(config, active) };
    }
    const config = await getElasticConsumerGroupConfig(js, stream, group);
    const active = await listElasticActiveMembers(js, stream, group);
    return { kind, stream, group, config, active_members: active, partitions: partitionRows(config, active) };
  });
}

/** Whether a member is in the membership, active, and which partitions it owns. */
export async function memberInfo(js: JetStreamClient, kind: GroupKind, stream: string, group: string, member: string): Promise<MemberInfoDoc> {
  return hinted(kind, stream, async () => {
    const config = kind === "static" ? await getStaticConsumerGroupConfig(js, stream, group) : await getElasticConsumerGroupConfig(js, stream, group);
    let active: boolean;
    let inMembership: boolean;
    if (kind === "static") {
      inMembership = isInMembership(config, member);
      active = inMembership && (await listStaticActiveMembers(js, stream, group)).includes(member);
    } else {
      const r = await elasticIsInMembershipAndActive(js, stream, group, member);
      inMembership = r.inMembership;
      active = r.active;
    }
    const partitions = inMembership ? memberPartitions(config.members, config.max_members, config.member_mappings, member) : [];
    return { kind, stream, group, member, in_membership: inMembership, active, partitions };
  });
}

/** Asks the server to pin another instance of a member. */
export async function stepDown(js: JetStreamClient, kind: GroupKind, stream: string, group: string, member: string): Promise<StepDownDoc> {
  return hinted(kind, stream, async () => {
    if (kind === "static") await staticMemberStepDown(js, stream, group, member);
    else await elasticMemberStepDown(js, stream, group, member);
    return { kind, stream, group, member, stepped_down: true };
  });
}

/** Deletes a group. */
export async function deleteGroup(js: JetStreamClient, kind: GroupKind, stream: string, group: string): Promise<DeletedDoc> {
  return hinted(kind, stream, async () => {
    if (kind === "static") await deleteStatic(js, stream, group);
    else await deleteElastic(js, stream, group);
    return { kind, stream, group, deleted: true };
  });
}

/** What `static create` needs. */
export interface StaticSpec {
  stream: string;
  group: string;
  maxMembers: number;
  filters: string[];
  members?: string[];
  mappings?: MemberMapping[];
}

/** Creates a static group; warnings (e.g. no partition transform on the stream) are returned, not printed. */
export async function createStaticGroup(js: JetStreamClient, spec: StaticSpec): Promise<CreatedDoc> {
  const warnings: string[] = [];
  const config = await createStatic(js, {
    stream: spec.stream,
    group: spec.group,
    maxMembers: spec.maxMembers,
    filters: spec.filters,
    ...(spec.members ? { members: spec.members } : {}),
    ...(spec.mappings ? { memberMappings: spec.mappings } : {}),
    onWarning: (message) => warnings.push(message),
  });
  return { kind: "static", stream: spec.stream, group: spec.group, created: true, config, warnings };
}

/** What `elastic create` needs. */
export interface ElasticSpec {
  stream: string;
  group: string;
  maxMembers: number;
  /** null: the whole subject is partitioned. */
  filters: PartitioningFilter[] | null;
  maxBufferedMsgs: number;
  maxBufferedBytes: number;
}

/** Creates an elastic group and its work-queue stream. */
export async function createElasticGroup(js: JetStreamClient, spec: ElasticSpec): Promise<CreatedDoc> {
  const config = await createElastic(js, {
    stream: spec.stream,
    group: spec.group,
    maxMembers: spec.maxMembers,
    partitioningFilters: spec.filters,
    maxBufferedMsgs: spec.maxBufferedMsgs,
    maxBufferedBytes: spec.maxBufferedBytes,
  });
  return { kind: "elastic", stream: spec.stream, group: spec.group, created: true, config, warnings: [] };
}

/** Adds members to an elastic group. */
export async function addGroupMembers(js: JetStreamClient, stream: string, group: string, members: string[]): Promise<MembersDoc> {
  return hinted("elastic", stream, async () => {
    // An invalid stored config: addMembers says why nothing is written, and how to repair it.
    const before = await getElasticConsumerGroupConfig(js, stream, group).then((c) => c.members ?? [], (): string[] => []);
    const after = await addMembers(js, stream, group, members);
    return { kind: "elastic", stream, group, members: after, added: after.filter((m) => !before.includes(m)) };
  });
}

/** Drops members from an elastic group. */
export async function dropGroupMembers(js: JetStreamClient, stream: string, group: string, members: string[]): Promise<MembersDoc> {
  return hinted("elastic", stream, async () => {
    // An invalid stored config cannot be read, but dropping a member can repair it: then the names asked for are what went.
    const before = await getElasticConsumerGroupConfig(js, stream, group).then((c) => c.members ?? [], () => members);
    const after = await deleteMembers(js, stream, group, members);
    return { kind: "elastic", stream, group, members: after, dropped: before.filter((m) => !after.includes(m)) };
  });
}

/** Replaces an elastic group's membership with mappings. */
export async function setGroupMappings(js: JetStreamClient, stream: string, group: string, mappings: MemberMapping[]): Promise<MappingsDoc> {
  return hinted("elastic", stream, async () => {
    await setMemberMappings(js, stream, group, mappings);
    const config = await getElasticConsumerGroupConfig(js, stream, group);
    return { kind: "elastic", stream, group, member_mappings: config.member_mappings ?? [] };
  });
}

/** Removes an elastic group's mappings. */
export async function deleteGroupMappings(js: JetStreamClient, stream: string, group: string): Promise<MappingsDoc> {
  return hinted("elastic", stream, async () => {
    await deleteMemberMappings(js, stream, group);
    return { kind: "elastic", stream, group, member_mappings: [] };
  });
}
