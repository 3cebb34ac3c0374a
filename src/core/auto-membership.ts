/**
 * Auto-join membership: which members an elastic group's config should list, given
 * the members that joined by themselves (registered, with a lease) and the ones
 * that were added by hand. Pure: no NATS, no I/O.
 *
 * A member is *auto* when it has a registration or a live lease in the lease bucket
 * (see `elastic/auto-join/lease-store.ts`); every other member of the config is *manual* and is
 * never removed or remapped here.
 */
import { compareCodePoints, effectiveMembers } from "./assignment.js";
import { ConsumerGroupError } from "./errors.js";
import { stickyMappings } from "./sticky-assignment.js";
import type { ElasticConsumerGroupConfig, MemberMapping } from "./types.js";

/** How auto members share the partitions. */
export type AssignmentPolicy =
  /** Go's contiguous blocks (`members`): manual and auto members share all partitions. */
  | "balanced"
  /** `member_mappings` that move as few partitions as possible; manual mappings stay exactly as they are. */
  | "sticky";

/** What the lease bucket says about a group's auto members. */
export interface AutoView {
  /** Members registered as auto members (they joined by themselves at some point). */
  registered: ReadonlySet<string>;
  /** Members with at least one live lease that is not leaving. */
  live: ReadonlySet<string>;
  /** Members with a live lease that is leaving (a graceful stop in progress): auto, but not kept. */
  leaving?: ReadonlySet<string>;
}

/** A membership change to write, or none. */
export interface MembershipPlan {
  /** The config to write; the same object as the input when nothing changes. */
  config: ElasticConsumerGroupConfig;
  /** Auto members the change adds. */
  added: string[];
  /** Auto members the change removes. */
  removed: string[];
  /** Live auto members left without partitions (more members than free partitions): they idle. */
  idle: string[];
}

/** The members a config lists, balanced or mapped, in config order. */
export function listedMembers(config: Pick<ElasticConsumerGroupConfig, "members" | "member_mappings">): string[] {
  const members = config.members ?? [];
  if (members.length > 0) return [...new Set(members)];
  return [...new Set((config.member_mappings ?? []).map((m) => m.member))];
}

/** Whether the member is auto under `view`. */
export function isAutoMember(view: AutoView, member: string): boolean {
  return view.registered.has(member) || view.live.has(member) || (view.leaving?.has(member) ?? false);
}

const sorted = (names: Iterable<string>): string[] => [...names].sort(compareCodePoints);

/**
 * Plans the membership for `view`: manual members stay; live auto members are in;
 * auto members without a live lease (or leaving) are out.
 *
 * - `balanced`: `members` lists the manual members in their order, then the auto
 *   members already listed, then new ones in code-point order while there are fewer
 *   members than partitions (Go gives partitions to the first N in sorted order, so a
 *   member beyond N could push out one already there); the others wait, idle. A config
 *   in mapping mode is turned into a members list when every mapped member is an auto member.
 * - `sticky`: manual members' mappings stay exactly as they are; the auto members
 *   share the rest (see {@link stickyMappings}). A config with a `members` list is turned
 *   into mappings when every listed member is an auto member. When no auto member is
 *   live and manual mappings do not cover every partition, the auto mappings stay as
 *   they are (a mapping config must cover every partition): nothing is written. With
 *   neither, the group is left with no membership.
 *
 * @throws ConsumerGroupError `ASSIGNMENT_CONFLICT` when the policy would change the partitions of manual members
 */
export function planMembership(config: ElasticConsumerGroupConfig, view: AutoView, policy: AssignmentPolicy): MembershipPlan {
  const listed = listedMembers(config);
  const manual = listed.filter((m) => !isAutoMember(view, m));
  const usesMappings = (config.members ?? []).length === 0 && (config.member_mappings ?? []).length > 0;
  const live = sorted(view.live);
  const keptAuto = listed.filter((m) => isAutoMember(view, m) && view.live.has(m));
  const added = live.filter((m) => !listed.includes(m));
  const removed = listed.filter((m) => isAutoMember(view, m) && !view.live.has(m));
  if (policy === "balanced") {
    if (usesMappings && manual.length > 0) {
      throw new ConsumerGroupError(
        "ASSIGNMENT_CONFLICT",
        `the group uses member mappings with members added by hand (${manual.join(", ")}); balanced auto-join would change their partitions: use assignment "sticky", or replace the mappings with a members list first`,
      );
    }
    // Go gives partitions to the first N members in sorted order: an auto member listed beyond N
    // could push a member already there (a manual Go member, say) out. New ones wait for room.
    const room = Math.max(0, config.max_members - manual.length - keptAuto.length);
    const admitted = added.slice(0, room);
    const members = [...manual, ...keptAuto, ...admitted];
    const owning = new Set(effectiveMembers(members, config.max_members));
    const idle = live.filter((m) => !owning.has(m));
    const same = !usesMappings && members.length === (config.members ?? []).length && members.every((m, i) => m === config.members?.[i]);
    if (same) return { config, added: [], removed: [], idle };
    const next: ElasticConsumerGroupConfig = { ...config };
    delete next.member_mappings;
    if (members.length > 0) next.members = members;
    else delete next.members;
    return { config: next, added: admitted, removed, idle };
  }
  if (!usesMappings && manual.length > 0) {
    throw new ConsumerGroupError(
      "ASSIGNMENT_CONFLICT",
      `the group lists members added by hand (${manual.join(", ")}) in balanced mode; sticky auto-join would turn them into mappings and change their partitions: use assignment "balanced", or give them member mappings first`,
    );
  }
  const mappings = config.member_mappings ?? [];
  const fixed = mappings.filter((m) => manual.includes(m.member));
  if (live.length === 0 && fixed.length > 0 && fixed.flatMap((m) => m.partitions ?? []).length < config.max_members) {
    return { config, added: [], removed: [], idle: [] };
  }
  const previous = usesMappings ? mappings.filter((m) => !manual.includes(m.member)) : [];
  const auto = stickyMappings(config.max_members, previous, live, fixed);
  const next = [...fixed.map(copyMapping), ...auto];
  const idle = live.filter((m) => !auto.some((a) => a.member === m));
  if (usesMappings && sameMappings(mappings, next)) return { config, added: [], removed: [], idle };
  const result: ElasticConsumerGroupConfig = { ...config };
  delete result.members;
  if (next.length > 0) result.member_mappings = next;
  else delete result.member_mappings;
  return {
    config: result,
    added: added.filter((m) => auto.some((a) => a.member === m)),
    removed: [...removed, ...keptAuto.filter((m) => !auto.some((a) => a.member === m))],
    idle,
  };
}

const copyMapping = (m: MemberMapping): MemberMapping => ({ member: m.member, partitions: [...(m.partitions ?? [])] });

/** Same members with the same partitions, whatever the order. */
function sameMappings(a: readonly MemberMapping[], b: readonly MemberMapping[]): boolean {
  if (a.length !== b.length) return false;
  const key = (m: MemberMapping): string => `${m.member}\u0000${[...(m.partitions ?? [])].sort((x, y) => x - y).join(",")}`;
  const left = new Set(a.map(key));
  return b.every((m) => left.has(key(m)));
}

/**
 * The config without `member`, for a graceful leave: its partitions go to the listed
 * auto members that are live in `view` (and to manual members, by the same rules as
 * {@link planMembership}). Nobody is added, so leaves that run at the same time never
 * bring each other back; listed auto members that are not live go too, since a last
 * leaver leaves nobody behind to remove them.
 */
export function planLeave(config: ElasticConsumerGroupConfig, view: AutoView, policy: AssignmentPolicy, member: string): MembershipPlan {
  const listedAuto = listedMembers(config).filter((m) => isAutoMember(view, m));
  const live = new Set(listedAuto.filter((m) => m !== member && view.live.has(m)));
  return planMembership(config, { registered: new Set([...view.registered, ...listedAuto]), live, leaving: new Set([member]) }, policy);
}
