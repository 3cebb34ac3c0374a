/**
 * The least-privilege permission lists of docs/permissions.md, as code: what a
 * member instance needs and what an admin needs, for one group, and the
 * nats-server config text of a user restricted to them. The security tests give
 * users exactly these lists, so the document and the library cannot drift apart.
 */
import { ELASTIC_BUCKET, STATIC_BUCKET, elasticConsumerName, staticConsumerName, workQueueStreamName, type GroupKind } from "../../src/index.js";

/** A user's permissions, as nats-server's `permissions { publish, subscribe }`. */
export interface Permissions {
  publish: string[];
  subscribe: string[];
  /** nats-server's `allow_responses`: replies to requests the user received (elastic members answer presence requests). */
  allowResponses?: boolean;
}

/** One group. */
export interface GroupScope {
  kind: GroupKind;
  stream: string;
  group: string;
}

/** Reading one group's config and following it (every member, and admins reading it). `groupPermissions` narrows the same way. */
function configReader(kind: GroupKind, stream: string, group: string): string[] {
  const bucket = kind === "static" ? STATIC_BUCKET : ELASTIC_BUCKET;
  const key = `$KV.${bucket}.${stream}.${group}`;
  return [
    `$JS.API.STREAM.INFO.KV_${bucket}`,
    // KV get: by direct get (the library binds a bucket that allows them for direct gets), so one key only
    `$JS.API.DIRECT.GET.KV_${bucket}.${key}`,
    // the config watch: an ordered push consumer filtered on the group's key, its info on recovery, flow control
    // (no CONSUMER.DELETE: nats.js ignores a refused delete of the old consumer when it resets the watch)
    `$JS.API.CONSUMER.CREATE.KV_${bucket}.*.${key}`,
    `$JS.API.CONSUMER.INFO.KV_${bucket}.*`,
    `$JS.FC.KV_${bucket}.>`,
  ];
}

/**
 * What one member instance needs: read and watch its group's config, create, use
 * and delete its own consumer, pull, ack, and unpin on stop. Nothing that writes a config.
 *
 * @param inboxPrefix - the connection's `inboxPrefix` (default `_INBOX`)
 */
export function memberPermissions(scope: GroupScope & { member: string }, inboxPrefix = "_INBOX"): Permissions {
  const { kind, stream, group, member } = scope;
  const consumerStream = kind === "static" ? stream : workQueueStreamName(stream, group);
  const consumer = kind === "static" ? staticConsumerName(group, member) : elasticConsumerName(member);
  const c = `${consumerStream}.${consumer}`;
  return {
    publish: [
      `$JS.API.STREAM.INFO.${consumerStream}`,
      ...configReader(kind, stream, group),
      // creating the member's consumer: nats.js uses DURABLE.CREATE (static) or CREATE.<stream> (elastic,
      // several filter subjects); Go's nats.go uses CREATE.<stream>.<consumer>
      ...(kind === "static" ? [`$JS.API.CONSUMER.DURABLE.CREATE.${c}`] : [`$JS.API.CONSUMER.CREATE.${consumerStream}`]),
      `$JS.API.CONSUMER.CREATE.${c}`,
      `$JS.API.CONSUMER.CREATE.${c}.>`,
      `$JS.API.CONSUMER.INFO.${c}`,
      `$JS.API.CONSUMER.DELETE.${c}`,
      `$JS.API.CONSUMER.MSG.NEXT.${c}`,
      `$JS.API.CONSUMER.UNPIN.${c}`,
      `$JS.ACK.${c}.>`,
      // elastic: the skip check reads the lowest stored message of each of its filters
      ...(kind === "elastic" ? [`$JS.API.STREAM.MSG.GET.${consumerStream}`] : []),
      // elastic with retries: failed attempts are counted in the attempts bucket (created on the first failure)
      ...(kind === "elastic" ? attemptsBucketMember(stream, group) : []),
    ],
    // elastic: answering a repartition's presence request (serial consumers look like Go's)
    subscribe: [`${inboxPrefix}.>`, ...(kind === "elastic" ? [`$PCG.presence.${stream}.${group}`] : [])],
    ...(kind === "elastic" ? { allowResponses: true } : {}),
  };
}

/**
 * What an auto member (`autoJoin`) needs on top of the member's list: compare-and-set
 * writes of its group's config, and its group's part of the lease bucket (creating it).
 */
export function autoMemberPermissions(scope: Omit<GroupScope, "kind"> & { member: string }, inboxPrefix = "_INBOX"): Permissions {
  const base = memberPermissions({ kind: "elastic", ...scope }, inboxPrefix);
  const leases = "elastic-consumer-group-leases";
  return {
    ...base,
    publish: [
      ...base.publish,
      `$KV.elastic-consumer-groups.${scope.stream}.${scope.group}`,
      `$JS.API.STREAM.INFO.KV_${leases}`,
      `$JS.API.STREAM.CREATE.KV_${leases}`,
      `$KV.${leases}.${scope.stream}.${scope.group}.>`,
      `$JS.API.DIRECT.GET.KV_${leases}.>`,
      `$JS.API.STREAM.MSG.GET.KV_${leases}`,
      `$JS.API.CONSUMER.CREATE.KV_${leases}.*.>`,
      `$JS.API.CONSUMER.INFO.KV_${leases}.*`,
      `$JS.API.CONSUMER.DELETE.KV_${leases}.*`,
      `$JS.FC.KV_${leases}.>`,
    ],
  };
}

/** The attempts bucket's subjects of an elastic member: bind (or create) it, read and write its group's records, and remove them once settled. */
function attemptsBucketMember(stream: string, group: string): string[] {
  const bucket = "elastic-consumer-group-attempts";
  return [
    `$JS.API.STREAM.INFO.KV_${bucket}`,
    `$JS.API.STREAM.CREATE.KV_${bucket}`,
    `$KV.${bucket}.${stream}.${group}.>`,
    `$JS.API.DIRECT.GET.KV_${bucket}.$KV.${bucket}.${stream}.${group}.>`,
    `$JS.API.STREAM.MSG.GET.KV_${bucket}`,
    // A settled record is removed outright (the bucket this library makes allows it).
    `$JS.API.STREAM.MSG.DELETE.KV_${bucket}`,
  ];
}

/**
 * What an admin of one group needs: create it (and the bucket, the first time), read,
 * list, describe, change the membership (elastic), step members down and delete it.
 *
 * @param members - the member names whose consumers it may unpin, inspect and delete
 */
export function adminPermissions(scope: GroupScope & { members: string[] }, inboxPrefix = "_INBOX"): Permissions {
  const { kind, stream, group, members } = scope;
  const bucket = kind === "static" ? STATIC_BUCKET : ELASTIC_BUCKET;
  const common = [
    "$JS.API.INFO",
    `$JS.API.STREAM.INFO.${stream}`,
    `$JS.API.STREAM.CREATE.KV_${bucket}`,
    ...configReader(kind, stream, group),
    `$JS.API.DIRECT.GET.KV_${bucket}.>`,
    // writing the config: create, compare-and-set updates and the delete marker
    `$KV.${bucket}.${stream}.${group}`,
    // listing the groups of a stream: an ordered consumer on every key
    `$JS.API.CONSUMER.CREATE.KV_${bucket}.*.$KV.${bucket}.>`,
  ];
  if (kind === "static") {
    const consumers = members.map((m) => `${stream}.${staticConsumerName(group, m)}`);
    return {
      publish: [
        ...common,
        `$JS.API.CONSUMER.LIST.${stream}`,
        ...consumers.flatMap((c) => [`$JS.API.CONSUMER.INFO.${c}`, `$JS.API.CONSUMER.UNPIN.${c}`, `$JS.API.CONSUMER.DELETE.${c}`]),
        // describeGroup counts a partition's backlog with a short-lived consumer
        `$JS.API.CONSUMER.CREATE.${stream}`,
        `$JS.API.CONSUMER.DELETE.${stream}.*`,
      ],
      subscribe: [`${inboxPrefix}.>`],
    };
  }
  const wq = workQueueStreamName(stream, group);
  return {
    publish: [
      ...common,
      `$JS.API.STREAM.INFO.${wq}`,
      `$JS.API.STREAM.CREATE.${wq}`,
      `$JS.API.STREAM.DELETE.${wq}`,
      `$JS.API.CONSUMER.LIST.${wq}`,
      `$JS.API.CONSUMER.INFO.${wq}.*`,
      `$JS.API.CONSUMER.UNPIN.${wq}.*`,
      `$JS.API.DIRECT.GET.${wq}`,
    ],
    subscribe: [`${inboxPrefix}.>`],
  };
}

/**
 * What an elastic member (or any client) needs on top of its own lists to read its
 * group's lag (`groupLag`, the `/lag` route of `consume --metrics-port`): the other
 * members' consumer infos and the direct gets that count each partition.
 */
export function lagPermissions(scope: Omit<GroupScope, "kind">): Permissions {
  const wq = workQueueStreamName(scope.stream, scope.group);
  return { publish: [`$JS.API.CONSUMER.INFO.${wq}.*`, `$JS.API.DIRECT.GET.${wq}`], subscribe: [] };
}

/** Merges permission lists. */
export function mergePermissions(...lists: Permissions[]): Permissions {
  return {
    publish: [...new Set(lists.flatMap((l) => l.publish))],
    subscribe: [...new Set(lists.flatMap((l) => l.subscribe))],
    ...(lists.some((l) => l.allowResponses) ? { allowResponses: true } : {}),
  };
}

/** A copy of `perms` without the subjects `drop` matches. */
export function withoutPermission(perms: Permissions, drop: (subject: string) => boolean, from: "publish" | "subscribe" = "publish"): Permissions {
  return { ...perms, [from]: perms[from].filter((s) => !drop(s)) };
}

/** One user of an `authorization { users: [...] }` block, restricted to `perms` (`undefined`: everything). */
export function userEntry(user: string, password: string, perms?: Permissions): string {
  const auth = `user: ${JSON.stringify(user)}, password: ${JSON.stringify(password)}`;
  if (!perms) return `{ ${auth} }`;
  const list = (subjects: string[]): string => `[${subjects.map((s) => JSON.stringify(s)).join(", ")}]`;
  const responses = perms.allowResponses ? ", allow_responses: true" : "";
  return `{ ${auth}, permissions: { publish: { allow: ${list(perms.publish)} }, subscribe: { allow: ${list(perms.subscribe)} }${responses} } }`;
}
