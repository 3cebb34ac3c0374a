/**
 * Auto-join: an elastic member instance that adds its member to the group by itself,
 * keeps a lease alive while it runs, removes members whose last lease expired, and
 * takes its member out of the group when its last instance stops. Built on the lease
 * bucket (compare-and-set writes, per-message TTLs) and the config bucket; there is no
 * coordinator process: every live auto instance reconciles, and compare-and-set makes
 * the writes of several safe.
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { isAutoMember, listedMembers, planLeave, planMembership, type AssignmentPolicy, type AutoView } from "../../core/auto-membership.js";
import { ConsumerGroupError } from "../../core/errors.js";
import type { ElasticConsumerGroupConfig } from "../../core/types.js";
import type { MemberStatus } from "../../nats/member-types.js";
import { wrapServerError } from "../../nats/server-errors.js";
import { isCasConflict, type LeaseEvent, type LeaseValue } from "./lease-store.js";
import type { LeasePort, LeaseWatch } from "./lease-port.js";
import { LeaseView } from "./lease-view.js";
import { MembershipWriter } from "./membership-writer.js";
import type { AutoJoinSettings } from "./settings.js";
import type { AutoState, CloseReason, LeaseLostReason, LeaseState } from "./state.js";

export type { AutoState, CloseReason, LeaseLostReason, LeaseState } from "./state.js";

/** How long a burst of changes may postpone a reconcile, in settle periods. */
export const MAX_SETTLE_PERIODS = 3;
/** How soon a failed renewal is tried again. */
export const RENEW_RETRY_MS = 500;
/** How often a leaving instance reads whether the others took its member out. */
export const LEAVE_POLL_MS = 100;
/** The least a leaving instance with a sibling of its member waits for the sibling's leaving mark (siblings stopped together); a sibling that neither marks nor renews is waited for until its lease expires. */
export const SIBLING_MARKS_MS = 1000;
/** How long a leaving instance waits for the others beyond three settle periods before it writes the change itself. */
export const LEAVE_GRACE_MS = 2000;
/** How soon a failed lease watch is opened again. */
export const WATCH_RETRY_MS = 1000;

/** What the auto layer needs from the member it runs beside. */
export interface AutoMemberHooks {
  /** Publishes a status event on the member's status channel. */
  publish(event: MemberStatus): void;
  /** Reports an error as a `consumer_error` event and to onError. */
  reportError(error: ConsumerGroupError, retryInMs: number): void;
}

/** Options of {@link AutoMembership} for tests. */
export interface AutoMembershipOptions {
  /** The clock of lease validity and settle periods (ms, monotonic). Default: `performance.now()`. */
  now?: () => number;
  /** This instance's id (it names its lease). Default: 12 random hex digits. */
  instance?: string;
}

/**
 * One auto instance's lease, view of the group's leases, and reconciler. Its I/O goes
 * through a {@link LeasePort}; its lifecycle is {@link AutoState}.
 */
export class AutoMembership {
  readonly instance: string;
  private readonly leases: LeaseView;
  private readonly writer: MembershipWriter;
  private lifecycle: AutoState = { name: "starting" };
  /** Since when this instance's renewals have gone through without a failure (on {@link AutoMembership.now}). */
  private healthySince = Number.POSITIVE_INFINITY;
  private renewTimer: NodeJS.Timeout | undefined;
  private reconcileTimer: NodeJS.Timeout | undefined;
  private periodicTimer: NodeJS.Timeout | undefined;
  private firstPending: number | undefined;
  private watch: LeaseWatch | undefined;
  /** The renewal in progress, if any. */
  private renewing: Promise<void> = Promise.resolve();
  /** This member was last seen idle for want of a partition (said once per spell). */
  private reportedIdle = false;
  private reconciling: Promise<void> = Promise.resolve();
  private hooks: AutoMemberHooks | undefined;
  private readonly started = new Date().toISOString();
  private readonly now: () => number;

  /**
   * @param port - the lease and config buckets of the group
   * @param member - the member this instance runs as
   */
  constructor(
    private readonly port: LeasePort,
    private readonly stream: string,
    private readonly group: string,
    readonly member: string,
    readonly settings: AutoJoinSettings,
    options: AutoMembershipOptions = {},
  ) {
    this.now = options.now ?? (() => performance.now());
    this.instance = options.instance ?? randomBytes(6).toString("hex");
    this.leases = new LeaseView(member, this.instance);
    this.writer = new MembershipWriter(port, settings, {
      view: () => this.view(),
      leftCleanly: (m) => this.leases.leftCleanly(m),
      healthyFor: () => this.now() - this.healthySince,
      recheckIn: (ms) => this.scheduleReconcile(ms),
      publish: (event) => this.hooks?.publish(event),
    });
  }

  /** Where this instance is now. */
  get state(): AutoState {
    return this.lifecycle;
  }

  /** This instance's lease, once one was written. */
  private get lease(): LeaseState | undefined {
    return this.lifecycle.name === "starting" ? undefined : this.lifecycle.lease;
  }

  private get closed(): boolean {
    return this.lifecycle.name === "closed";
  }

  /** Whether a leave has begun (the lease says so, and the member no longer counts as live here), closed since or not. */
  private get leaving(): boolean {
    return this.lifecycle.name === "leaving" || (this.lifecycle.name === "closed" && this.lifecycle.afterLeave);
  }

  private get lost(): boolean {
    return this.lease?.status === "lost";
  }

  /** Records a new lease state, in whatever phase the instance is (a first lease makes it live). */
  private setLease(lease: LeaseState): void {
    if (this.lifecycle.name === "starting") this.lifecycle = { name: "live", lease };
    else this.lifecycle = { ...this.lifecycle, lease };
  }

  /** The lease as held (valid until `validUntil`), from a write sent at `sent`. */
  private held(revision: number, sent: number): void {
    this.setLease({ status: "held", revision, validUntil: sent + this.settings.leaseTtlMs });
  }

  private loseLease(reason: LeaseLostReason, error: ConsumerGroupError): void {
    this.setLease({ status: "lost", reason, since: this.now(), error });
    this.hooks?.publish({ type: "lease_lost", error });
  }

  /** Whether handlers may start: this instance's lease is surely alive. */
  leaseValid(): boolean {
    const lease = this.lease;
    return lease?.status === "held" && this.now() < lease.validUntil;
  }

  /**
   * Checks the member name and the policy, registers the member, writes the first lease
   * and starts following the group's leases. The member joins the config after `settleMs`.
   *
   * @throws ConsumerGroupError `MEMBER_NOT_AUTO`, `AUTO_POLICY_CONFLICT`, `ASSIGNMENT_CONFLICT`, `SERVER_ERROR`
   */
  async start(config: ElasticConsumerGroupConfig): Promise<void> {
    const registration = await this.port.registration(this.member);
    refuseAutoStart(config, this.stream, this.group, this.member, this.settings.assignment, registration?.present === true);
    await this.ensurePolicy();
    // The lease first and renewed from then on: a start slower than the TTL must not lose it, and a
    // registration is never seen without its lease (a peer would take it for a member that left).
    await this.acquire();
    this.scheduleRenew();
    await this.register();
    void this.follow(await this.openWatch());
    this.periodicTimer = setInterval(() => this.scheduleReconcile(0), Math.max(this.settings.leaseTtlMs, 5000));
    this.periodicTimer.unref();
  }

  /** Connects the status hooks of the member instance (set once the instance exists). */
  attach(hooks: AutoMemberHooks): void {
    this.hooks = hooks;
  }

  private async ensurePolicy(): Promise<void> {
    const wanted = this.settings.assignment;
    for (let attempt = 0; attempt < 5; attempt++) {
      const entry = await this.port.readPolicy();
      const stored = entry?.policy;
      if (stored === wanted) {
        this.leases.policy = wanted;
        return;
      }
      if (stored !== undefined && entry && !(await this.port.hasLiveLease())) {
        // Left by instances that are all gone (or by one that was refused): nobody follows it any more.
        try {
          await this.port.writePolicy(wanted, entry.revision);
          this.leases.policy = wanted;
          return;
        } catch (err) {
          if (!isCasConflict(err)) throw wrapServerError(err, `writing the auto-join policy of ${this.stream}.${this.group}`);
          continue;
        }
      }
      if (stored !== undefined) {
        throw new ConsumerGroupError(
          "AUTO_POLICY_CONFLICT",
          `the auto members of ${this.stream}.${this.group} use assignment "${stored}", this instance asks for "${wanted}": start it with assignment "${stored}", or stop every auto instance of the group first (a policy no running auto instance follows is replaced)`,
        );
      }
      try {
        await this.port.writePolicy(wanted, undefined);
        this.leases.policy = wanted;
        return;
      } catch (err) {
        if (!isCasConflict(err)) throw wrapServerError(err, `writing the auto-join policy of ${this.stream}.${this.group}`);
      }
    }
    throw new ConsumerGroupError("CONFIG_CONFLICT", `couldn't write the auto-join policy of ${this.stream}.${this.group}: it kept changing under this instance; try again`);
  }

  private async register(): Promise<void> {
    try {
      await this.port.createRegistration(this.member, { member: this.member, since: new Date().toISOString() });
    } catch (err) {
      if (!isCasConflict(err)) throw wrapServerError(err, `registering member "${this.member}" as an auto member`);
    }
  }

  private leaseValue(): LeaseValue {
    return { member: this.member, instance: this.instance, host: hostname(), pid: process.pid, started: this.started, ...(this.leaving ? { leaving: true } : {}) };
  }

  /** Writes a new lease (after a start, or after one was lost). */
  private async acquire(): Promise<void> {
    // The key names this instance alone: whatever is there (a marker, or our own write whose answer was lost) is replaced.
    const previous = await this.port.leaseRevision(this.member, this.instance);
    const sent = this.now();
    let revision: number;
    try {
      revision = await this.port.writeLease(this.member, this.instance, this.leaseValue(), this.settings.leaseTtlMs, previous);
    } catch (err) {
      throw wrapServerError(err, `writing the lease of member "${this.member}"`);
    }
    this.held(revision, sent);
    this.healthySince = Math.min(this.healthySince, sent);
  }

  /** When the next renewal is due: a third of the TTL after the last successful write was sent. */
  private renewDelay(): number {
    const lease = this.lease;
    const validUntil = lease?.status === "held" ? lease.validUntil : 0;
    return Math.max(0, validUntil - (2 * this.settings.leaseTtlMs) / 3 - this.now());
  }

  /**
   * Renews a third of the TTL after the last successful write was sent (not after its
   * answer came: on a slow link the round trip would stretch every period by itself).
   */
  private scheduleRenew(delayMs = this.renewDelay()): void {
    if (this.closed) return;
    clearTimeout(this.renewTimer);
    this.renewTimer = setTimeout(() => {
      this.renewing = this.renew();
    }, delayMs);
    this.renewTimer.unref();
  }

  /** Renews the lease by compare-and-set; a conflict means it expired (or the bucket was replaced): fenced until a new one is written. */
  private async renew(): Promise<void> {
    if (this.closed) return;
    const sent = this.now();
    try {
      const lease = this.lease;
      if (lease?.status !== "held") {
        // The bucket may be gone (deleted, or lost with its stream): made again as on a first start.
        await this.port.ensureBucket();
        await this.acquire();
        await this.register();
        // A bucket made again lost the policy too.
        await this.ensurePolicy().catch((err: unknown) => this.hooks?.reportError(wrapServerError(err, `writing the auto-join policy again`), this.settings.settleMs));
        this.hooks?.publish({ type: "lease_restored" });
        this.scheduleReconcile(this.settings.settleMs);
      } else {
        const revision = await this.port.writeLease(this.member, this.instance, this.leaseValue(), this.settings.leaseTtlMs, lease.revision);
        this.held(revision, sent);
        this.healthySince = Math.min(this.healthySince, sent);
      }
      this.scheduleRenew();
    } catch (err) {
      this.healthySince = Number.POSITIVE_INFINITY;
      if (!this.lost && isCasConflict(err)) {
        this.loseLease(
          "expired",
          new ConsumerGroupError(
            "LEASE_LOST",
            `the lease of member "${this.member}" (instance ${this.instance}) expired before it was renewed (the process stalled, or lost the server for longer than the lease TTL of ${this.settings.leaseTtlMs} ms): the group may have removed the member; nothing starts here until a new lease is written`,
            { cause: err },
          ),
        );
        this.scheduleRenew(0);
        return;
      }
      const error = err instanceof ConsumerGroupError ? err : wrapServerError(err, `renewing the lease of member "${this.member}"`);
      if (!this.leaseValid() && !this.lost) this.loseLease("renewal_failing", error);
      this.hooks?.reportError(error, RENEW_RETRY_MS);
      this.scheduleRenew(RENEW_RETRY_MS);
    }
  }

  /** Applies the watch's events; a watch that fails or ends (the bucket was replaced) is opened again and the view rebuilt. */
  private async follow(first: AsyncIterable<LeaseEvent>): Promise<void> {
    let events = first;
    while (!this.closed) {
      try {
        for await (const event of events) {
          if (this.closed) return;
          this.apply(event);
        }
      } catch {
        // the watch failed: opened again below
      }
      if (this.closed) return;
      this.leases.caughtUp = false;
      await new Promise((r) => setTimeout(r, WATCH_RETRY_MS));
      if (this.closed) return;
      try {
        events = await this.openWatch();
      } catch (err) {
        this.hooks?.reportError(wrapServerError(err, `watching the leases of ${this.stream}.${this.group}`), WATCH_RETRY_MS);
        events = (async function* () {})();
      }
    }
  }

  /** Opens a watch of the group's keys, with an empty view that fills from its first values. */
  private async openWatch(): Promise<AsyncIterable<LeaseEvent>> {
    this.watch?.stop();
    this.leases.reset();
    const watch = await this.port.watch();
    this.watch = watch;
    if (watch.empty) this.leases.caughtUp = true;
    return watch.events;
  }

  private apply(event: LeaseEvent): void {
    if (event.kind === "caught_up") {
      this.leases.caughtUp = true;
      return this.scheduleReconcile(this.settings.settleMs);
    }
    if (event.kind === "policy") {
      this.leases.policy = event.policy;
      return;
    }
    const before = this.leases.signature(!this.leaving);
    this.leases.apply(event);
    // Our own registration removed under us (a reconciler that saw no lease): write it again.
    if (event.kind === "registration" && !event.present && event.member === this.member && !this.closed && !this.leaving) {
      this.register().catch((err: unknown) => this.hooks?.reportError(wrapServerError(err, `registering member "${this.member}" again`), this.settings.settleMs));
    }
    // A renewal changes nothing: only a member joining, leaving or expiring starts (or extends) a settle period.
    if (this.leases.signature(!this.leaving) !== before) this.scheduleReconcile(this.settings.settleMs);
  }

  /** The view of the group's auto members now. */
  view(): AutoView {
    return this.leases.view(!this.leaving);
  }

  /** Other live instances of this instance's member. */
  otherInstances(): number {
    return this.leases.otherInstances();
  }

  private scheduleReconcile(delayMs: number): void {
    if (this.closed || this.leaving) return;
    const now = this.now();
    this.firstPending ??= now;
    const latest = this.firstPending + MAX_SETTLE_PERIODS * Math.max(this.settings.settleMs, 1);
    const at = Math.min(now + delayMs, latest);
    clearTimeout(this.reconcileTimer);
    this.reconcileTimer = setTimeout(() => {
      this.firstPending = undefined;
      this.reconciling = this.reconciling.then(() => this.reconcile());
    }, Math.max(0, at - now));
    this.reconcileTimer.unref();
  }

  /** Writes the membership the leases call for, if it differs from the stored one. */
  private async reconcile(): Promise<void> {
    // A view still filling from a new watch would see live members as gone.
    if (this.closed || this.leaving || !this.leaseValid() || !this.leases.caughtUp) return;
    const policy = this.leases.policy;
    if (policy !== undefined && policy !== this.settings.assignment) {
      this.hooks?.reportError(new ConsumerGroupError("AUTO_POLICY_CONFLICT", `the group's auto-join policy is now "${policy}", this instance uses "${this.settings.assignment}": it stops writing the membership`), 0);
      return;
    }
    try {
      const plan = await this.writer.write((config, view) => planMembership(config, view, this.settings.assignment));
      const idle = plan.idle.includes(this.member);
      if (idle && !this.reportedIdle) {
        this.hooks?.publish({ type: "idle", reason: `more auto members than partitions (${plan.config.max_members}): member "${this.member}" waits for a partition to become free` });
      }
      this.reportedIdle = idle;
      await this.writer.forgetDeparted(this.view());
    } catch (err) {
      const error = err instanceof ConsumerGroupError ? err : wrapServerError(err, `writing the membership of ${this.stream}.${this.group}`);
      this.hooks?.reportError(error, this.settings.settleMs);
      this.scheduleReconcile(this.settings.settleMs);
    }
  }

  /**
   * A graceful leave. It marks its lease as leaving; when no other instance of its
   * member stays (within a second, for instances stopped together), it is the member's
   * last instance: the other auto instances take the member out at their next reconcile, so
   * members leaving together (a scale-down) are written as one change after `settleMs`.
   * With no other auto instance alive, or if none has done it within three settle
   * periods, it takes the member out itself. Its partitions move by the handoff;
   * `released` waits for this instance to hand them over.
   *
   * @returns whether the member was taken out of the group
   */
  async leave(released: () => Promise<void>): Promise<boolean> {
    if (this.lifecycle.name === "live") this.lifecycle = { name: "leaving", lease: this.lifecycle.lease };
    clearTimeout(this.reconcileTimer);
    await this.reconciling;
    if (this.closed) return false;
    try {
      // No renewal may race the leaving mark (both compare-and-set on the same revision).
      clearTimeout(this.renewTimer);
      await this.renewing;
      const lease = this.lease;
      if (lease?.status !== "held") {
        // A lease lost (the process stalled) is written again, marked as leaving: the member still leaves cleanly.
        await this.acquire();
      } else {
        const sent = this.now();
        this.held(await this.port.writeLease(this.member, this.instance, this.leaseValue(), this.settings.leaseTtlMs, lease.revision), sent);
      }
      this.scheduleRenew();
      // Instances of one member stopped together (an orchestrator stopping every pod) see each
      // other's leases: each marks its own first and waits for the others' marks, so the member
      // leaves when none of its instances stays, instead of each leaving it to the others. A
      // sibling that neither marks nor renews (killed -9 meanwhile) is waited for until its lease
      // expires: otherwise, with no other member alive, nobody would ever take the member out.
      if (!(await this.lastOfMember())) return false;
      if (!(await this.listed())) return false;
      if (this.leases.othersAlive() && (await this.removedByOthers(this.now() + MAX_SETTLE_PERIODS * this.settings.settleMs + LEAVE_GRACE_MS))) {
        await released();
        return true;
      }
      if (!isAutoMember(this.view(), this.member)) return false;
      const plan = await this.writer.write((config, view) => planLeave(config, view, this.settings.assignment, this.member));
      if (listedMembers(plan.config).includes(this.member)) {
        this.hooks?.reportError(
          new ConsumerGroupError(
            "ASSIGNMENT_CONFLICT",
            `member "${this.member}" stays in ${this.stream}.${this.group}: it is the last auto member and the members mapped by hand do not cover every partition; its partitions wait for the next auto instance`,
          ),
          0,
        );
        return false;
      }
      await released();
      return true;
    } catch (err) {
      this.hooks?.reportError(err instanceof ConsumerGroupError ? err : wrapServerError(err, `taking member "${this.member}" out of the group`), 0);
      return false;
    }
  }

  /**
   * Whether this is the last instance of its member: waits until no other instance holds
   * a lease that is not leaving (each marked its own, or its lease was deleted or expired),
   * and answers false as soon as one of them renews its lease (it stays). A sibling that
   * does neither has died: its lease expires within a TTL, so the wait ends by then.
   */
  private async lastOfMember(): Promise<boolean> {
    const before = this.leases.siblingWrites();
    const renewed = (): boolean => [...this.leases.siblingWrites()].some(([instance, writes]) => writes > (before.get(instance) ?? 0));
    const deadline = this.now() + Math.max(SIBLING_MARKS_MS, this.settings.leaseTtlMs + LEAVE_GRACE_MS);
    while (this.otherInstances() > 0 && this.now() < deadline) {
      if (renewed()) return false;
      await new Promise((r) => setTimeout(r, LEAVE_POLL_MS));
    }
    return this.otherInstances() === 0;
  }

  /** Whether the stored config lists this instance's member. */
  private async listed(): Promise<boolean> {
    return listedMembers((await this.port.readConfig()).config).includes(this.member);
  }

  /** Waits until the config no longer lists this member, or `deadline` (on {@link AutoMembership.now}). */
  private async removedByOthers(deadline: number): Promise<boolean> {
    while (this.now() < deadline) {
      await new Promise((r) => setTimeout(r, LEAVE_POLL_MS));
      if (!(await this.listed())) return true;
    }
    return false;
  }

  /**
   * Stops renewing and deletes this instance's lease. The member's last instance also
   * deletes the member's registration once the member is no longer listed (a
   * reconciler never adds a member without a live lease, so nothing can bring it back
   * as a manual one). The group's policy stays; an instance that finds it with no live
   * auto instance replaces it.
   *
   * @param reason - why it closes (kept in {@link AutoMembership.state})
   */
  async close(reason: CloseReason = "stopped"): Promise<void> {
    if (this.closed) return;
    this.lifecycle = { name: "closed", reason, lease: this.lease, afterLeave: this.leaving };
    clearTimeout(this.renewTimer);
    clearTimeout(this.reconcileTimer);
    clearInterval(this.periodicTimer);
    this.watch?.stop();
    const last = this.otherInstances() === 0;
    try {
      await this.port.deleteLease(this.member, this.instance);
      if (!last) return;
      const listed = listedMembers((await this.port.readConfig()).config);
      if (!listed.includes(this.member)) await this.port.deleteRegistration(this.member);
    } catch (err) {
      // The lease expires by itself; a registration left behind is removed by the next reconcile.
      if (!(err instanceof ConsumerGroupError && err.code === "GROUP_NOT_FOUND")) this.hooks?.reportError(wrapServerError(err, `removing the lease of member "${this.member}"`), 0);
    }
  }
}

/**
 * The refusals of an auto instance's start that only need the config: a member added by
 * hand, or a policy this config makes impossible (manual members in the other mode).
 * Checked before anything is written, so a refused instance leaves nothing behind; an
 * instance that finds no lease bucket checks them before it creates one.
 *
 * @param registered - whether the member is registered as an auto member
 * @throws ConsumerGroupError `MEMBER_NOT_AUTO`, `ASSIGNMENT_CONFLICT`
 */
export function refuseAutoStart(config: ElasticConsumerGroupConfig, stream: string, group: string, member: string, assignment: AssignmentPolicy, registered: boolean): void {
  if (listedMembers(config).includes(member) && !registered) {
    throw new ConsumerGroupError(
      "MEMBER_NOT_AUTO",
      `member "${member}" of ${stream}.${group} was added by hand (or by Go, or the CLI), not by auto-join: auto instances never change such members; run it without autoJoin, or give the auto instances another member name`,
    );
  }
  planMembership(config, { registered: new Set([member]), live: new Set([member]) }, assignment);
}
