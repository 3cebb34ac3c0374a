/**
 * What one auto instance knows of its group's lease bucket, built from the lease
 * watch's events: the live leases per member, the registrations, the members that left
 * cleanly, and the policy. Timer-free and I/O-free: `AutoMembership` feeds it and
 * decides what to do with what changed.
 */
import type { AssignmentPolicy, AutoView } from "../../core/auto-membership.js";
import type { LeaseEvent, LeaseValue } from "./lease-store.js";

/** The group's leases as one instance's watch saw them. */
export class LeaseView {
  /** Live leases per member: instance → lease. */
  private readonly leases = new Map<string, Map<string, LeaseValue>>();
  private readonly registered = new Set<string>();
  /** Writes seen of each live lease of this instance's member (instance → count): one that grows was renewed. */
  private readonly siblingWriteCounts = new Map<string, number>();
  /** Members whose last lease was deleted by its instance (not expired): no grace keeps them. */
  private readonly departed = new Set<string>();
  /** The group's policy, as last read or seen (kept across a new watch). */
  policy: AssignmentPolicy | undefined;
  /** The view holds the watch's first values (until then nothing is written from it). */
  caughtUp = false;

  /**
   * @param member - the member this instance runs as
   * @param instance - this instance's id
   */
  constructor(
    private readonly member: string,
    private readonly instance: string,
  ) {}

  /** Empties the view for a new watch, which fills it from its first values. */
  reset(): void {
    this.leases.clear();
    this.registered.clear();
    this.departed.clear();
    this.siblingWriteCounts.clear();
    this.caughtUp = false;
  }

  /** Applies a lease or registration event (`caught_up` and `policy` are the caller's). */
  apply(event: Extract<LeaseEvent, { kind: "lease" | "registration" }>): void {
    if (event.kind === "registration") {
      if (event.present) this.registered.add(event.member);
      else this.registered.delete(event.member);
      return;
    }
    let instances = this.leases.get(event.member);
    if (event.member === this.member && event.instance !== this.instance) {
      if (event.value) this.siblingWriteCounts.set(event.instance, (this.siblingWriteCounts.get(event.instance) ?? 0) + 1);
      else this.siblingWriteCounts.delete(event.instance);
    }
    if (event.value) {
      if (!instances) this.leases.set(event.member, (instances = new Map<string, LeaseValue>()));
      instances.set(event.instance, event.value);
      this.departed.delete(event.member);
    } else {
      instances?.delete(event.instance);
      if (instances?.size === 0) {
        this.leases.delete(event.member);
        // Its last instance deleted its lease itself (a stop): it is gone, whatever the store went through.
        if (!event.expired) this.departed.add(event.member);
      }
    }
  }

  /** Whether `member`'s last lease was deleted by its instance, rather than expired. */
  leftCleanly(member: string): boolean {
    return this.departed.has(member);
  }

  /**
   * The view of the group's auto members now.
   *
   * @param selfLive - whether this instance's member counts as live whatever its leases say (it is not leaving)
   */
  view(selfLive: boolean): AutoView {
    const live = new Set<string>();
    const leaving = new Set<string>();
    for (const [member, instances] of this.leases) {
      if ([...instances.values()].some((l) => !l.leaving)) live.add(member);
      else leaving.add(member);
    }
    if (selfLive) live.add(this.member);
    return { registered: new Set(this.registered), live, leaving };
  }

  /** The auto membership the view calls for, as a string to compare. */
  signature(selfLive: boolean): string {
    const view = this.view(selfLive);
    return JSON.stringify([[...view.registered].sort(), [...view.live].sort(), [...(view.leaving ?? [])].sort()]);
  }

  /** Other live instances of this instance's member. */
  otherInstances(): number {
    return [...(this.leases.get(this.member)?.entries() ?? [])].filter(([id, l]) => id !== this.instance && !l.leaving).length;
  }

  /**
   * How many writes the watch saw of each other instance's lease of this member that is
   * not leaving (a renewal is one): a count that grew since an earlier look proves that
   * instance alive and staying.
   */
  siblingWrites(): ReadonlyMap<string, number> {
    const live = this.leases.get(this.member);
    return new Map([...this.siblingWriteCounts].filter(([instance]) => live?.get(instance)?.leaving !== true));
  }

  /** Whether another auto instance (of any member) that is not leaving holds a lease. */
  othersAlive(): boolean {
    for (const [member, instances] of this.leases) {
      for (const [id, lease] of instances) if (!lease.leaving && (member !== this.member || id !== this.instance)) return true;
    }
    return false;
  }
}
