/**
 * Least-privilege permission sets for one group: what a member, a read-only viewer
 * and an admin of that group may publish and subscribe to, each with its own inbox
 * prefix, narrowed as far as nats-server subject permissions can express. Pure: the
 * lists are built from names only (`cg … permissions` prints them, the isolation
 * tests give users exactly these).
 */
import { ConsumerGroupError } from "./errors.js";
import { assertValidGroupNames, assertValidName, bucketName, elasticConsumerName, staticConsumerName, workQueueStreamName } from "./names.js";
import type { GroupKind } from "./types.js";

/** The roles a permission set is built for. */
export const PERMISSION_ROLES = ["member", "viewer", "admin"] as const;
/** One of {@link PERMISSION_ROLES}. */
export type PermissionRole = (typeof PERMISSION_ROLES)[number];

/** The root token of every inbox prefix these sets give out (no default `_INBOX.>` user can read them). */
export const INBOX_ROOT = "_INBOX_PCG";

/** The KV bucket of the attempts ledger (elastic members with retries). */
const ATTEMPTS_BUCKET = "elastic-consumer-group-attempts";
/** The KV bucket of auto members' leases. */
const LEASES_BUCKET = "elastic-consumer-group-leases";

/** What a permission set is for. */
export interface PermissionRequest {
  /** `static` or `elastic`. */
  kind: GroupKind;
  /** `member`, `viewer` or `admin`. */
  role: PermissionRole;
  /** The source stream. */
  stream: string;
  /** The group. */
  group: string;
  /** The member (role `member` only; required there). */
  member?: string;
  /** The principal's name in its inbox prefix (roles `viewer` and `admin`; default `default`). */
  name?: string;
  /** Elastic member: it counts failed attempts (`retry`, a dead-letter subject, the `partition`/`key` modes). */
  retries?: boolean;
  /** Elastic member: an auto member (`autoJoin`, `consume --auto`), which writes its group's membership. */
  autoJoin?: boolean;
  /** Elastic member: it serves its group's lag (`consume --metrics-port`, `groupLag`). */
  lag?: boolean;
  /** Static admin and viewer: the members whose durables it may inspect (and, admin, unpin and delete); default every consumer of the stream (`*`). */
  members?: readonly string[];
  /** Elastic admin: it may run `repartition`. */
  repartition?: boolean;
}

/** A principal's permissions, as nats-server's `permissions { publish, subscribe, allow_responses }`. */
export interface PermissionSet {
  /** The role it was built for. */
  role: PermissionRole;
  /** The flavour. */
  kind: GroupKind;
  /** The source stream. */
  stream: string;
  /** The group. */
  group: string;
  /** The inbox prefix the principal must connect with (nats.js `inboxPrefix`); its subscribe list allows only that. */
  inboxPrefix: string;
  /** Subjects it may publish to. */
  publish: string[];
  /** Subjects it may subscribe to. */
  subscribe: string[];
  /** nats-server's `allow_responses`: it answers requests it received (elastic members answer presence requests). */
  allowResponses: boolean;
  /** What the server cannot narrow to this group: the remaining exposure, one sentence each. */
  exposures: string[];
}

/**
 * The inbox prefix of a principal: `_INBOX_PCG.<stream>.<group>.member.<member>`, or
 * `…viewer.<name>` / `…admin.<name>`. Each part is its own subject token, so no two
 * principals share a prefix (names may contain `_`, `-` and `=`, so any one-token
 * join such as `_INBOX_<stream>_<group>_<member>` can collide: stream `a_b` group `c`
 * and stream `a` group `b_c`).
 *
 * @param role - the role
 * @param stream - the source stream
 * @param group - the group
 * @param principal - the member (role `member`), or the viewer's or admin's name
 * @throws ConsumerGroupError `INVALID_NAME`
 */
export function inboxPrefixFor(role: PermissionRole, stream: string, group: string, principal: string): string {
  assertValidGroupNames(stream, group);
  assertValidName("member", principal);
  return `${INBOX_ROOT}.${stream}.${group}.${role}.${principal}`;
}

/**
 * Builds the permission set of one role for one group.
 *
 * @example
 * ```ts
 * const set = groupPermissions({ kind: "elastic", role: "member", stream: "orders", group: "shipping", member: "m1" });
 * // connect with { inboxPrefix: set.inboxPrefix } and give the user set.publish / set.subscribe
 * ```
 * @throws ConsumerGroupError `INVALID_NAME` for a bad name, `INVALID_ARGUMENT` for a member set without a member or an option of another role or flavour
 */
export function groupPermissions(request: PermissionRequest): PermissionSet {
  const { kind, role, stream, group } = request;
  assertValidGroupNames(stream, group);
  checkOptions(request);
  const principal = role === "member" ? (request.member as string) : (request.name ?? "default");
  const inboxPrefix = inboxPrefixFor(role, stream, group, principal);
  const built = role === "member" ? memberLists(request, request.member as string) : role === "viewer" ? viewerLists(request) : adminLists(request, inboxPrefix);
  const subscribe = [`${inboxPrefix}.>`, ...built.subscribe];
  return {
    role,
    kind,
    stream,
    group,
    inboxPrefix,
    publish: unique(built.publish),
    subscribe: unique(subscribe),
    allowResponses: built.allowResponses,
    exposures: built.exposures,
  };
}

function checkOptions(r: PermissionRequest): void {
  const refuse = (message: string): never => {
    throw new ConsumerGroupError("INVALID_ARGUMENT", message);
  };
  if (!(PERMISSION_ROLES as readonly string[]).includes(r.role)) refuse(`unknown role "${String(r.role)}"; use member, viewer or admin`);
  if (r.role === "member") {
    if (r.member === undefined) refuse("a member's permissions need the member name");
    assertValidName("member", r.member);
    if (r.name !== undefined) refuse("a member's inbox prefix is named by the member; name is for viewers and admins");
  } else {
    if (r.member !== undefined) refuse(`member is for the member role; a ${r.role} is named with name`);
    if (r.name !== undefined) assertValidName("member", r.name);
  }
  const elasticMember = r.role === "member" && r.kind === "elastic";
  for (const [flag, on] of [["retries", r.retries], ["autoJoin", r.autoJoin], ["lag", r.lag]] as const) {
    if (on && !elasticMember) refuse(`${flag} applies to elastic members only`);
  }
  if (r.repartition && !(r.role === "admin" && r.kind === "elastic")) refuse("repartition applies to elastic admins only");
  if (r.members !== undefined) {
    if (r.kind !== "static" || r.role === "member") refuse("members applies to static admins and viewers only");
    for (const m of r.members) assertValidName("member", m);
  }
}

interface Lists {
  publish: string[];
  subscribe: string[];
  allowResponses: boolean;
  exposures: string[];
}

function unique(subjects: string[]): string[] {
  return [...new Set(subjects)];
}

/** The config key's subject. */
function keySubject(kind: GroupKind, stream: string, group: string): string {
  return `$KV.${bucketName(kind)}.${stream}.${group}`;
}

/**
 * Reading one group's config by direct get (nats.js reads a bucket that allows direct
 * gets, as both libraries make it, only that way) and following it with an ordered
 * consumer filtered on the key. No `STREAM.MSG.GET` on the bucket (its subject has no
 * key, so it would read every group's config) and no `CONSUMER.DELETE` on the bucket
 * (it would delete other groups' watches; nats.js's watch ignores a refused delete of
 * its old consumer when it resets, and the server removes that one when it goes idle).
 */
function configReader(kind: GroupKind, stream: string, group: string): string[] {
  const bucket = bucketName(kind);
  const key = keySubject(kind, stream, group);
  return [
    `$JS.API.STREAM.INFO.KV_${bucket}`,
    `$JS.API.DIRECT.GET.KV_${bucket}.${key}`,
    `$JS.API.CONSUMER.CREATE.KV_${bucket}.*.${key}`,
    `$JS.API.CONSUMER.INFO.KV_${bucket}.*`,
    `$JS.FC.KV_${bucket}.>`,
  ];
}

const CONFIG_EXPOSURE = (kind: GroupKind): string =>
  `$JS.API.CONSUMER.INFO.KV_${bucketName(kind)}.* and $JS.FC.KV_${bucketName(kind)}.> cannot be narrowed to this group's watch (its consumer name is random): whoever knows another group's watch consumer name can read that consumer's info (its filter and delivery subject, no payloads) and send it flow-control replies`;

function memberLists(r: PermissionRequest, member: string): Lists {
  const { kind, stream, group } = r;
  const cs = kind === "static" ? stream : workQueueStreamName(stream, group);
  const consumer = kind === "static" ? staticConsumerName(group, member) : elasticConsumerName(member);
  const c = `${cs}.${consumer}`;
  const publish = [
    `$JS.API.STREAM.INFO.${cs}`,
    ...configReader(kind, stream, group),
    // nats.js creates a static durable on DURABLE.CREATE and an elastic consumer (several filters) on CREATE.<stream>; nats.go names the consumer in the subject
    kind === "static" ? `$JS.API.CONSUMER.DURABLE.CREATE.${c}` : `$JS.API.CONSUMER.CREATE.${cs}`,
    `$JS.API.CONSUMER.CREATE.${c}`,
    `$JS.API.CONSUMER.CREATE.${c}.>`,
    `$JS.API.CONSUMER.INFO.${c}`,
    `$JS.API.CONSUMER.DELETE.${c}`,
    `$JS.API.CONSUMER.MSG.NEXT.${c}`,
    `$JS.API.CONSUMER.UNPIN.${c}`,
    `$JS.ACK.${c}.>`,
  ];
  const exposures = [CONFIG_EXPOSURE(kind)];
  const subscribe: string[] = [];
  if (kind === "elastic") {
    // paused while a repartition switches the source; the skip check reads the lowest stored message of each filter
    publish.push(`$JS.API.CONSUMER.PAUSE.${c}`, `$JS.API.STREAM.MSG.GET.${cs}`);
    subscribe.push(`$PCG.presence.${stream}.${group}`);
    exposures.push(
      `$JS.API.CONSUMER.CREATE.${cs} (nats.js creates a consumer with several filters there) names no consumer: the member can create other consumers on its own group's work-queue stream, never on another group's`,
    );
  }
  if (r.retries) {
    publish.push(
      `$JS.API.STREAM.INFO.KV_${ATTEMPTS_BUCKET}`,
      `$JS.API.STREAM.CREATE.KV_${ATTEMPTS_BUCKET}`,
      `$KV.${ATTEMPTS_BUCKET}.${stream}.${group}.>`,
      `$JS.API.DIRECT.GET.KV_${ATTEMPTS_BUCKET}.$KV.${ATTEMPTS_BUCKET}.${stream}.${group}.>`,
      `$JS.API.STREAM.MSG.GET.KV_${ATTEMPTS_BUCKET}`,
      `$JS.API.STREAM.MSG.DELETE.KV_${ATTEMPTS_BUCKET}`,
    );
    exposures.push(
      `$JS.API.STREAM.MSG.GET.KV_${ATTEMPTS_BUCKET} and $JS.API.STREAM.MSG.DELETE.KV_${ATTEMPTS_BUCKET} name no key: the member can read and remove other groups' attempt counts (their poison messages may then run up to maxDeliver more times); give each tenant its own account to close this`,
    );
  }
  if (r.lag) publish.push(`$JS.API.CONSUMER.INFO.${cs}.*`, `$JS.API.DIRECT.GET.${cs}`);
  if (r.autoJoin) {
    publish.push(
      keySubject(kind, stream, group),
      `$JS.API.STREAM.INFO.KV_${LEASES_BUCKET}`,
      `$JS.API.STREAM.CREATE.KV_${LEASES_BUCKET}`,
      `$KV.${LEASES_BUCKET}.${stream}.${group}.>`,
      `$JS.API.DIRECT.GET.KV_${LEASES_BUCKET}.>`,
      `$JS.API.STREAM.MSG.GET.KV_${LEASES_BUCKET}`,
      `$JS.API.CONSUMER.CREATE.KV_${LEASES_BUCKET}.*.>`,
      `$JS.API.CONSUMER.INFO.KV_${LEASES_BUCKET}.*`,
      `$JS.API.CONSUMER.DELETE.KV_${LEASES_BUCKET}.*`,
      `$JS.FC.KV_${LEASES_BUCKET}.>`,
    );
    exposures.push(
      `an auto member writes its group's config, and its lease-bucket subjects (the tested list, not narrowed yet) let it read other groups' leases and registrations and delete their lease watches; run auto members of different tenants in different accounts`,
    );
  }
  return { publish, subscribe, allowResponses: kind === "elastic", exposures };
}

function viewerLists(r: PermissionRequest): Lists {
  const { kind, stream, group } = r;
  const publish = [`$JS.API.STREAM.INFO.${stream}`, `$JS.API.STREAM.INFO.KV_${bucketName(kind)}`, `$JS.API.DIRECT.GET.KV_${bucketName(kind)}.${keySubject(kind, stream, group)}`];
  const exposures: string[] = [];
  if (kind === "elastic") {
    const wq = workQueueStreamName(stream, group);
    publish.push(`$JS.API.STREAM.INFO.${wq}`, `$JS.API.CONSUMER.LIST.${wq}`, `$JS.API.CONSUMER.INFO.${wq}.*`, `$JS.API.DIRECT.GET.${wq}`);
    exposures.push(
      `$JS.API.DIRECT.GET.${wq} reads the payloads of this group's work queue (describe and lag count partitions with it); it reads no other group's`,
      `no $PCG.presence.${stream}.${group}: whoever may publish there may release a blocked message, so describe shows no blocked keys for a viewer`,
    );
  } else {
    const consumers = r.members?.map((m) => `${stream}.${staticConsumerName(group, m)}`) ?? [`${stream}.*`];
    publish.push(`$JS.API.CONSUMER.LIST.${stream}`, ...consumers.map((c) => `$JS.API.CONSUMER.INFO.${c}`), `$JS.API.DIRECT.GET.${stream}`);
    exposures.push(
      `$JS.API.CONSUMER.LIST.${stream}${r.members ? "" : ` and $JS.API.CONSUMER.INFO.${stream}.*`} show every consumer of the source stream (other static groups' durables: names and state, no payloads); $JS.API.DIRECT.GET.${stream} reads the source stream, which every static group on it reads whole`,
      `on a source stream without allow_direct, describe counts backlogs with a short-lived consumer, which a viewer may not create: its counts are then missing`,
    );
  }
  exposures.push(`no ls: listing a stream's groups reads every group's config (an ordered consumer on $KV.${bucketName(kind)}.>); grant that to account-wide operators only`);
  return { publish, subscribe: [], allowResponses: false, exposures };
}

function adminLists(r: PermissionRequest, inboxPrefix: string): Lists {
  const { kind, stream, group } = r;
  const bucket = bucketName(kind);
  const publish = [
    // nats.js's bucket create asks the account info first
    "$JS.API.INFO",
    `$JS.API.STREAM.CREATE.KV_${bucket}`,
    `$JS.API.STREAM.INFO.${stream}`,
    ...configReader(kind, stream, group),
    keySubject(kind, stream, group),
  ];
  const exposures = [
    CONFIG_EXPOSURE(kind),
    `$JS.API.STREAM.CREATE.KV_${bucket} creates the bucket every group of the account shares (once); an existing bucket is not changed by it`,
    `no ls: listing a stream's groups reads every group's config (an ordered consumer on $KV.${bucket}.>); grant $JS.API.CONSUMER.CREATE.KV_${bucket}.*.$KV.${bucket}.> to account-wide operators only`,
  ];
  if (kind === "static") {
    const consumers = r.members?.map((m) => `${stream}.${staticConsumerName(group, m)}`) ?? [`${stream}.*`];
    publish.push(
      `$JS.API.CONSUMER.LIST.${stream}`,
      ...consumers.flatMap((c) => [`$JS.API.CONSUMER.INFO.${c}`, `$JS.API.CONSUMER.UNPIN.${c}`, `$JS.API.CONSUMER.DELETE.${c}`]),
      `$JS.API.DIRECT.GET.${stream}`,
    );
    if (!r.members) {
      exposures.push(
        `without members, $JS.API.CONSUMER.INFO/UNPIN/DELETE.${stream}.* reach every consumer of the source stream, other static groups' durables too: pass the member names to narrow them to <group>-<member>`,
      );
    }
    return { publish, subscribe: [], allowResponses: false, exposures };
  }
  const wq = workQueueStreamName(stream, group);
  publish.push(
    `$JS.API.STREAM.INFO.${wq}`,
    `$JS.API.STREAM.CREATE.${wq}`,
    `$JS.API.STREAM.DELETE.${wq}`,
    `$JS.API.CONSUMER.LIST.${wq}`,
    `$JS.API.CONSUMER.INFO.${wq}.*`,
    `$JS.API.CONSUMER.UNPIN.${wq}.*`,
    `$JS.API.CONSUMER.DELETE.${wq}.*`,
    `$JS.API.DIRECT.GET.${wq}`,
    `$PCG.presence.${stream}.${group}`,
  );
  if (r.repartition) {
    const lock = `$KV.${bucket}.pcg/repartition.${stream}.${group}`;
    publish.push(
      `$JS.API.STREAM.UPDATE.${wq}`,
      `$JS.API.STREAM.MSG.GET.${wq}`,
      `$JS.API.STREAM.MSG.DELETE.${wq}`,
      `$JS.API.CONSUMER.PAUSE.${wq}.*`,
      lock,
      `$JS.API.DIRECT.GET.KV_${bucket}.${lock}`,
      // asking another admin's run whether it still holds the lock (it answers under its own inbox prefix)
      `${inboxPrefix.split(".").slice(0, -1).join(".")}.*.pcg-repartition.*`,
      `$JS.API.STREAM.INFO.KV_${LEASES_BUCKET}`,
      `$JS.API.CONSUMER.CREATE.KV_${LEASES_BUCKET}.*.$KV.${LEASES_BUCKET}.${stream}.${group}.>`,
      `$JS.API.CONSUMER.INFO.KV_${LEASES_BUCKET}.*`,
      `$JS.FC.KV_${LEASES_BUCKET}.>`,
    );
    exposures.push(`the repartition subjects are read from the code; the isolation tests do not run a repartition`);
  }
  return { publish, subscribe: [], allowResponses: false, exposures };
}
