/**
 * The membership writes of auto-join: a compare-and-set of the group's config through a
 * plan, from a fresh config and a view checked against the lease bucket, and the
 * clean-up of registrations of members that left. Timer-free: a check that must wait
 * asks `AutoMembership` to reconcile again later.
 */
import { listedMembers, type AutoView, type MembershipPlan } from "../../core/auto-membership.js";
import { ConsumerGroupError } from "../../core/errors.js";
import type { ElasticConsumerGroupConfig } from "../../core/types.js";
import { ELASTIC } from "../../nats/config-store.js";
import type { MemberStatus } from "../../nats/member-types.js";
import { wrapServerError } from "../../nats/server-errors.js";
import { isCasConflict } from "./lease-store.js";
import type { LeasePort } from "./lease-port.js";
import type { AutoJoinSettings } from "./settings.js";

/** Compare-and-set attempts of one membership write. */
export const MAX_WRITE_ATTEMPTS = 20;

/** What the writer reads from the instance it writes for. */
export interface WriterContext {
  /** The instance's view of the group's auto members now. */
  view(): AutoView;
  /** Whether `member`'s last lease was deleted by its instance (a stop), not expired. */
  leftCleanly(member: string): boolean;
  /** How long this instance's own renewals have gone through without a failure (ms). */
  healthyFor(): number;
  /** Asks for a reconcile in `ms` (members kept for now are checked again then). */
  recheckIn(ms: number): void;
  /** Publishes a status event. */
  publish(event: MemberStatus): void;
}

/** Writes the membership the leases call for. */
export class MembershipWriter {
  constructor(
    private readonly port: LeasePort,
    private readonly settings: AutoJoinSettings,
    private readonly context: WriterContext,
  ) {}

  /**
   * The view, with every member it would remove checked against the bucket itself (a
   * watch that fell behind must not remove a live member). Until this instance's own
   * renewals have gone through for a whole lease TTL, members without a lease are kept:
   * while the bucket was unavailable (a cluster electing its leader) nobody could renew,
   * and leases that expired then say nothing about their instances.
   */
  private async checkedView(): Promise<AutoView> {
    const view = this.context.view();
    const gone = [...view.registered].filter((m) => !view.live.has(m) && !view.leaving?.has(m));
    if (gone.length === 0) return view;
    const live = new Set(view.live);
    const healthyFor = this.context.healthyFor();
    let deferred = false;
    for (const member of gone) {
      const grace = healthyFor < this.settings.leaseTtlMs && !this.context.leftCleanly(member);
      deferred ||= grace;
      if (grace || (await this.port.hasLiveLease(member))) live.add(member);
    }
    if (deferred) this.context.recheckIn(this.settings.leaseTtlMs - healthyFor + 100);
    return { ...view, live };
  }

  /**
   * Whether `member` may be added: it holds a live lease that is not leaving and is
   * registered, read from the bucket now. A view that fell behind (a slow link, a
   * starved process) must never bring back a member that has left: with its
   * registration deleted it would look like a member added by hand, and stay.
   */
  private async mayAdd(member: string): Promise<boolean> {
    const registration = await this.port.registration(member);
    return registration?.present === true && (await this.port.hasLiveLease(member));
  }

  /**
   * Compare-and-set of the config through `plan`, from a fresh config and a fresh view
   * on every attempt; members the plan would add are first checked against the bucket
   * (see {@link MembershipWriter.mayAdd}) and left out when they do not hold up.
   *
   * @returns the plan written (or the plan for the current config when nothing changed)
   */
  async write(plan: (config: ElasticConsumerGroupConfig, view: AutoView) => MembershipPlan): Promise<MembershipPlan> {
    for (let attempt = 1; attempt <= MAX_WRITE_ATTEMPTS; attempt++) {
      const stored = await this.port.readConfig();
      let view = await this.checkedView();
      let next = plan(stored.config, view);
      const unproven: string[] = [];
      for (const member of next.added) if (!(await this.mayAdd(member))) unproven.push(member);
      if (unproven.length > 0) {
        view = { ...view, live: new Set([...view.live].filter((m) => !unproven.includes(m))) };
        next = plan(stored.config, view);
      }
      if (next.config === stored.config) return next;
      ELASTIC.validate(next.config);
      try {
        const revision = await this.port.writeConfig(next.config, stored.revision);
        if (next.added.length > 0 || next.removed.length > 0) this.context.publish({ type: "membership_written", revision, added: next.added, removed: next.removed });
        return next;
      } catch (err) {
        if (!isCasConflict(err)) throw wrapServerError(err, `putting the elastic consumer group's config in the bucket`);
        await new Promise((r) => setTimeout(r, Math.random() * 20 * attempt));
      }
    }
    throw new ConsumerGroupError("CONFIG_CONFLICT", `couldn't update the elastic consumer group's config: ${MAX_WRITE_ATTEMPTS} concurrent writers won in a row; retrying at the next reconcile`);
  }

  /** Registrations of auto members that have no lease and are no longer listed are deleted. */
  async forgetDeparted(view: AutoView): Promise<void> {
    const current = await this.port.readConfig();
    const listed = listedMembers(current.config);
    for (const member of view.registered) {
      if (view.live.has(member) || view.leaving?.has(member) || listed.includes(member)) continue;
      const entry = await this.port.registration(member);
      if (!entry?.present) continue;
      try {
        await this.port.deleteRegistration(member, entry.revision);
      } catch (err) {
        if (!isCasConflict(err)) throw err;
      }
    }
  }
}
