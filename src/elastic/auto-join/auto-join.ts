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
import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { isAutoMember, listedMembers, planLeave, planMembership, type AssignmentPolicy, type AutoView, type MembershipPlan } from "../../core/auto-membership.js";
import { ConsumerGroupError } from "../../core/errors.js";
import { assertValidName, configKey } from "../../core/names.js";
import type { ElasticConsumerGroupConfig } from "../../core/types.js";
import { ELASTIC, readConfig } from "../../nats/config-store.js";
import type { MemberStatus } from "../../nats/member-types.js";
import { wrapServerError } from "../../nats/server-errors.js";
import { GroupLeaseKeys, isCasConflict, leaseOf, policyOf, watchGroupLeases, writeLease, type LeaseEvent, type LeaseValue } from "./lease-store.js";

/** Auto-join settings of {@link ElasticConsumeOptions.autoJoin}. */
export interface AutoJoinOptions {
  /**
   * How long a lease lives without renewal (ms, whole seconds on the server). When an
   * instance dies, its member leaves the group this long after its last renewal (plus
   * `settleMs`). At least the consumer's AckWait and 1 s. Default: max(10 s, AckWait).
   */
  leaseTtlMs?: number;
  /** Changes that arrive within this long of each other are written as one (ms). Default 3,000. */
  settleMs?: number;
  /**
   * `balanced` (default): Go's contiguous blocks over `members`. `sticky`: `member_mappings`
   * that move as few partitions as possible per change. One policy per group.
   */
  assignment?: AssignmentPolicy;
}

/** Resolved auto-join settings. */
export interface AutoJoinSettings {
  leaseTtlMs: number;
  settleMs: number;
  assignment: AssignmentPolicy;
}

const DEFAULT_LEASE_TTL_MS = 10_000;
/** The longest timer Node runs (2^31 - 1 ms); longer ones fire at once. */
const MAX_TIMER_MS = 2_147_483_647;
/** The longest settle period accepted. */
const MAX_SETTLE_MS = 600_000;
/** The options `autoJoin` takes. */
const AUTO_JOIN_KEYS = ["leaseTtlMs", "settleMs", "assignment"];
const DEFAULT_SETTLE_MS = 3000;
/** How long a burst of changes may postpone a reconcile, in settle periods. */
const MAX_SETTLE_PERIODS = 3;
/** How soon a failed renewal is tried again. */
const RENEW_RETRY_MS = 500;
/** Compare-and-set attempts of one membership write. */
const MAX_WRITE_ATTEMPTS = 20;
/** How often a leaving instance reads whether the others took its member out. */
const LEAVE_POLL_MS = 100;
/** How long a leaving instance with a sibling of its member waits for the sibling's leaving mark (siblings stopped together). */
const SIBLING_MARKS_MS = 1000;
/** How long a leaving instance waits for the others beyond three settle periods before it writes the change itself. */
const LEAVE_GRACE_MS = 2000;
/** How soon a failed lease watch is opened again. */
const WATCH_RETRY_MS = 1000;

/**
 * Checks the `autoJoin` option against the consumer's AckWait.
 *
 * @returns undefined when auto-join is off
 * @throws ConsumerGroupError `INVALID_ARGUMENT`
 */
export function resolveAutoJoin(option: unknown, ackWaitMs: number): AutoJoinSettings | undefined {
  if (option === undefined || option === false) return undefined;
  if (option !== true && (typeof option !== "object" || option === null || Array.isArray(option))) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `autoJoin must be true or an object { leaseTtlMs, settleMs, assignment }, got ${JSON.stringify(option)}`);
  }
  const given = option === true ? {} : (option as Record<string, unknown>);
  const unknown = Object.keys(given).filter((k) => !AUTO_JOIN_KEYS.includes(k));
  if (unknown.length > 0) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `autoJoin has unknown option(s) ${unknown.map((k) => JSON.stringify(k)).join(", ")}: it takes ${AUTO_JOIN_KEYS.join(", ")}`);
  }
  const leaseTtlMs = given["leaseTtlMs"] ?? Math.max(DEFAULT_LEASE_TTL_MS, ackWaitMs);
  if (typeof leaseTtlMs !== "number" || !Number.isFinite(leaseTtlMs) || leaseTtlMs < 1000 || leaseTtlMs > MAX_TIMER_MS) {
    throw new ConsumerGroupError(
      "INVALID_ARGUMENT",
      `autoJoin.leaseTtlMs must be a number of ms from 1,000 (the server's TTLs are whole seconds) to ${MAX_TIMER_MS.toLocaleString("en")} (about 24.8 days, the longest timer), got ${JSON.stringify(given["leaseTtlMs"])}`,
    );
  }
  if (leaseTtlMs < ackWaitMs) {
    throw new ConsumerGroupError(
      "INVALID_ARGUMENT",
      `autoJoin.leaseTtlMs (${leaseTtlMs} ms) is below the consumer's AckWait (${ackWaitMs} ms): a member would leave the group while a message it holds is not yet due for redelivery, and its old consumer would still block the new owner; use a lease TTL of at least AckWait`,
    );
  }
  const settleMs = given["settleMs"] ?? DEFAULT_SETTLE_MS;
  if (typeof settleMs !== "number" || !Number.isFinite(settleMs) || settleMs < 0 || settleMs > MAX_SETTLE_MS) {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `autoJoin.settleMs must be a number of ms from 0 to ${MAX_SETTLE_MS.toLocaleString("en")} (10 minutes), got ${JSON.stringify(given["settleMs"])}`);
  }
  const assignment = given["assignment"] === undefined ? "balanced" : given["assignment"];
  if (assignment !== "balanced" && assignment !== "sticky") {
    throw new ConsumerGroupError("INVALID_ARGUMENT", `autoJoin.assignment must be "balanced" or "sticky", got ${JSON.stringify(given["assignment"])}`);
  }
  return { leaseTtlMs, settleMs, assignment };
}

/**
 * The member name an auto instance uses when none is given: `HOSTNAME` (the pod name on
 * Kubernetes), else the host name.
 *
 * @throws ConsumerGroupError `INVALID_NAME` when it is not a valid member name
 */
export function defaultMemberName(env: NodeJS.ProcessEnv = process.env): string {
  const name = env["HOSTNAME"] || hostname();
  try {
    assertValidName("member", name);
  } catch (err) {
    throw new ConsumerGroupError("INVALID_NAME", `the default member name "${name}" (from HOSTNAME or the host name) is not a valid member name: pass member explicitly`, { cause: err });
  }
  return name;
}

/** What the auto layer needs from the member it runs beside. */
export interface AutoMemberHooks {
  /** Publishes a status event on the member's status channel. */
  publish(event: MemberStatus): void;
  /** Reports an error as a `consumer_error` event and to onError. */
  reportError(error: ConsumerGroupError, retryInMs: number): void;
}

/**
 * One auto instance's lease, view of the group's leases, and reconciler.
 */
export class AutoMembership {
  readonly instance = randomBytes(6).toString("hex");
  private readonly keys: GroupLeaseKeys;
  /** Live leases per member: instance → lease. */
  private readonly leases = new Map<string, Map<string, LeaseValue>>();
  private readonly registered = new Set<string>();
  /** Members whose last lease was deleted by its instance (not expired): no grace keeps them. */
  private readonly leftCleanly = new Set<string>();
  private policy: AssignmentPolicy | undefined;
  private revision = 0;
  /** Since when this instance's renewals have gone through without a failure (performance.now()). */
  private healthySince = Number.POSITIVE_INFINITY;
  /** performance.now() until which this instance's lease is surely alive on the server. */
  private validUntil = 0;
  private lost = false;
  private renewTimer: NodeJS.Timeout | undefined;
  private reconcileTimer: NodeJS.Timeout | undefined;
  private periodicTimer: NodeJS.Timeout | undefined;
  private firstPending: number | undefined;
  private watch: { stop(): void } | undefined;
  /** The view holds the watch's first values (until then nothing is written from it). */
  private caughtUp = false;
  /** The renewal in progress, if any. */
  private renewing: Promise<void> = Promise.resolve();
  private closed = false;
  private leaving = false;
  /** This member was last seen idle for want of a partition (said once per spell). */
  private reportedIdle = false;
  private reconciling: Promise<void> = Promise.resolve();
  private hooks: AutoMemberHooks | undefined;
  private readonly started = new Date().toISOString();

  constructor(
    private readonly js: JetStreamClient,
    private readonly leaseKv: KV,
    private readonly configKv: KV,
    private readonly stream: string,
    private readonly group: string,
    readonly member: string,
    readonly settings: AutoJoinSettings,
    private readonly ensureBucket: () => Promise<unknown>,
  ) {
    this.keys = new GroupLeaseKeys(stream, group);
  }

  /** Whether handlers may start: this instance's lease is surely alive. */
  leaseValid(): boolean {
    return !this.lost && performance.now() < this.validUntil;
  }

  /**
   * Checks the member name and the policy, registers the member, writes the first lease
   * and starts following the group's leases. The member joins the config after `settleMs`.
   *
   * @throws ConsumerGroupError `MEMBER_NOT_AUTO`, `AUTO_POLICY_CONFLICT`, `ASSIGNMENT_CONFLICT`, `SERVER_ERROR`
   */
  async start(config: ElasticConsumerGroupConfig): Promise<void> {
    const registration = await this.get(this.keys.registration(this.member));
    if (listedMembers(config).includes(this.member) && registration?.operation !== "PUT") {
      throw new ConsumerGroupError(
        "MEMBER_NOT_AUTO",
        `member "${this.member}" of ${this.stream}.${this.group} was added by hand (or by Go, or the CLI), not by auto-join: auto instances never change such members; run it without autoJoin, or give the auto instances another member name`,
      );
    }
    // The plan must be possible with this config (manual members in the other mode make it
    // impossible), checked before the policy is written, so a refused instance leaves nothing behind.
    planMembership(config, { registered: new Set([this.member]), live: new Set([this.member]) }, this.settings.assignment);
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

  private async get(key: string): Promise<Awaited<ReturnType<KV["get"]>>> {
    try {
      return await this.leaseKv.get(key);
    } catch (err) {
      throw wrapServerError(err, `reading "${key}" in the lease bucket`);
    }
  }

  private async ensurePolicy(): Promise<void> {
    const key = this.keys.policy;
    const wanted = this.settings.assignment;
    for (let attempt = 0; attempt < 5; attempt++) {
      const entry = await this.get(key);
      const stored = entry ? policyOf(entry) : undefined;
      if (stored === wanted) {
        this.policy = wanted;
        return;
      }
      if (stored !== undefined && entry && !(await this.anyLiveLease())) {
        // Left by instances that are all gone (or by one that was refused): nobody follows it any more.
        try {
          await this.leaseKv.update(key, JSON.stringify({ assignment: wanted }), entry.revision);
          this.policy = wanted;
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
        await this.leaseKv.create(key, JSON.stringify({ assignment: wanted }));
        this.policy = wanted;
        return;
      } catch (err) {
        if (!isCasConflict(err)) throw wrapServerError(err, `writing the auto-join policy of ${this.stream}.${this.group}`);
      }
    }
    throw new ConsumerGroupError("CONFIG_CONFLICT", `couldn't write the auto-join policy of ${this.stream}.${this.group}: it kept changing under this instance; try again`);
  }

  private async register(): Promise<void> {
    try {
      await this.leaseKv.create(this.keys.registration(this.member), JSON.stringify({ member: this.member, since: new Date().toISOString() }));
    } catch (err) {
      if (!isCasConflict(err)) throw wrapServerError(err, `registering member "${this.member}" as an auto member`);
    }
  }

  private leaseValue(): LeaseValue {
    return { member: this.member, instance: this.instance, host: hostname(), pid: process.pid, started: this.started, ...(this.leaving ? { leaving: true } : {}) };
  }

  /** Writes a new lease (after a start, or after one was lost). */
  private async acquire(): Promise<void> {
    const key = this.keys.lease(this.member, this.instance);
    const existing = await this.get(key);
    // The key names this instance alone: whatever is there (a marker, or our own write whose answer was lost) is replaced.
    const previous = existing ? existing.revision : 0;
    const sent = performance.now();
    try {
      this.revision = await writeLease(this.js, key, this.leaseValue(), this.settings.leaseTtlMs, previous);
    } catch (err) {
      throw wrapServerError(err, `writing the lease of member "${this.member}"`);
    }
    this.validUntil = sent + this.settings.leaseTtlMs;
    this.lost = false;
    this.healthySince = Math.min(this.healthySince, sent);
  }

  /**
   * Renews a third of the TTL after the last successful write was sent (not after its
   * answer came: on a slow link the round trip would stretch every period by itself).
   */
  private scheduleRenew(delayMs = Math.max(0, this.validUntil - (2 * this.settings.leaseTtlMs) / 3 - performance.now())): void {
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
    const key = this.keys.lease(this.member, this.instance);
    const sent = performance.now();
    try {
      if (this.lost) {
        // The bucket may be gone (deleted, or lost with its stream): made again as on a first start.
        await this.ensureBucket();
        await this.acquire();
        await this.register();
        // A bucket made again lost the policy too.
        await this.ensurePolicy().catch((err: unknown) => this.hooks?.reportError(wrapServerError(err, `writing the auto-join policy again`), this.settings.settleMs));
        this.hooks?.publish({ type: "lease_restored" });
        this.scheduleReconcile(this.settings.settleMs);
      } else {
        this.revision = await writeLease(this.js, key, this.leaseValue(), this.settings.leaseTtlMs, this.revision);
        this.validUntil = sent + this.settings.leaseTtlMs;
        this.healthySince = Math.min(this.healthySince, sent);
      }
      this.scheduleRenew();
    } catch (err) {
      this.healthySince = Number.POSITIVE_INFINITY;
      if (!this.lost && isCasConflict(err)) {
        this.lost = true;
        const error = new ConsumerGroupError(
          "LEASE_LOST",
          `the lease of member "${this.member}" (instance ${this.instance}) expired before it was renewed (the process stalled, or lost the server for longer than the lease TTL of ${this.settings.leaseTtlMs} ms): the group may have removed the member; nothing starts here until a new lease is written`,
          { cause: err },
        );
        this.hooks?.publish({ type: "lease_lost", error });
        this.scheduleRenew(0);
        return;
      }
      const error = err instanceof ConsumerGroupError ? err : wrapServerError(err, `renewing the lease of member "${this.member}"`);
      if (!this.leaseValid() && !this.lost) {
        this.lost = true;
        this.hooks?.publish({ type: "lease_lost", error });
      }
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
      this.caughtUp = false;
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
    this.leases.clear();
    this.registered.clear();
    this.leftCleanly.clear();
    this.caughtUp = false;
    const watch = await watchGroupLeases(this.leaseKv, this.keys);
    this.watch = watch;
    if (watch.empty) this.caughtUp = true;
    return watch.events;
  }

  private apply(event: LeaseEvent): void {
    if (event.kind === "caught_up") {
      this.caughtUp = true;
      return this.scheduleReconcile(this.settings.settleMs);
    }
    if (event.kind === "policy") {
      this.policy = event.policy;
      return;
    }
    const before = this.signature();
    if (event.kind === "registration") {
      if (event.present) this.registered.add(event.member);
      else this.registered.delete(event.member);
      // Our own registration removed under us (a reconciler that saw no lease): write it again.
      if (!event.present && event.member === this.member && !this.closed && !this.leaving) {
        this.register().catch((err: unknown) => this.hooks?.reportError(wrapServerError(err, `registering member "${this.member}" again`), this.settings.settleMs));
      }
    } else {
      let instances = this.leases.get(event.member);
      if (event.value) {
        if (!instances) this.leases.set(event.member, (instances = new Map<string, LeaseValue>()));
        instances.set(event.instance, event.value);
        this.leftCleanly.delete(event.member);
      } else {
        instances?.delete(event.instance);
        if (instances?.size === 0) {
          this.leases.delete(event.member);
          // Its last instance deleted its lease itself (a stop): it is gone, whatever the store went through.
          if (!event.expired) this.leftCleanly.add(event.member);
        }
      }
    }
    // A renewal changes nothing: only a member joining, leaving or expiring starts (or extends) a settle period.
    if (this.signature() !== before) this.scheduleReconcile(this.settings.settleMs);
  }

  /** The auto membership the view calls for, as a string to compare. */
  private signature(): string {
    const view = this.view();
    return JSON.stringify([[...view.registered].sort(), [...view.live].sort(), [...(view.leaving ?? [])].sort()]);
  }

  /** The view of the group's auto members now. */
  view(): AutoView {
    const live = new Set<string>();
    const leaving = new Set<string>();
    for (const [member, instances] of this.leases) {
      if ([...instances.values()].some((l) => !l.leaving)) live.add(member);
      else leaving.add(member);
    }
    if (!this.leaving) live.add(this.member);
    return { registered: new Set(this.registered), live, leaving };
  }

  /** Other live instances of this instance's member. */
  otherInstances(): number {
    return [...(this.leases.get(this.member)?.entries() ?? [])].filter(([id, l]) => id !== this.instance && !l.leaving).length;
  }

  private scheduleReconcile(delayMs: number): void {
    if (this.closed || this.leaving) return;
    const now = performance.now();
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
    if (this.closed || this.leaving || !this.leaseValid() || !this.caughtUp) return;
    if (this.policy !== undefined && this.policy !== this.settings.assignment) {
      this.hooks?.reportError(new ConsumerGroupError("AUTO_POLICY_CONFLICT", `the group's auto-join policy is now "${this.policy}", this instance uses "${this.settings.assignment}": it stops writing the membership`), 0);
      return;
    }
    try {
      const plan = await this.write((config, view) => planMembership(config, view, this.settings.assignment));
      const idle = plan.idle.includes(this.member);
      if (idle && !this.reportedIdle) {
        this.hooks?.publish({ type: "idle", reason: `more auto members than partitions (${plan.config.max_members}): member "${this.member}" waits for a partition to become free` });
      }
      this.reportedIdle = idle;
      await this.forgetDeparted(this.view());
    } catch (err) {
      const error = err instanceof ConsumerGroupError ? err : wrapServerError(err, `writing the membership of ${this.stream}.${this.group}`);
      this.hooks?.reportError(error, this.settings.settleMs);
      this.scheduleReconcile(this.settings.settleMs);
    }
  }

  /**
   * The view, with every member it would remove checked against the bucket itself (a
   * watch that fell behind must not remove a live member). Until this instance's own
   * renewals have gone through for a whole lease TTL, members without a lease are kept:
   * while the bucket was unavailable (a cluster electing its leader) nobody could renew,
   * and leases that expired then say nothing about their instances.
   */
  private async checkedView(): Promise<AutoView> {
    const view = this.view();
    const gone = [...view.registered].filter((m) => !view.live.has(m) && !view.leaving?.has(m));
    if (gone.length === 0) return view;
    const live = new Set(view.live);
    const healthyFor = performance.now() - this.healthySince;
    let deferred = false;
    for (const member of gone) {
      const grace = healthyFor < this.settings.leaseTtlMs && !this.leftCleanly.has(member);
      deferred ||= grace;
      if (grace || (await this.hasLease(member))) live.add(member);
    }
    if (deferred) this.scheduleReconcile(this.settings.leaseTtlMs - healthyFor + 100);
    return { ...view, live };
  }

  /** Whether the bucket holds a live lease of `member` that is not leaving (listed keys include expired leases' markers: each is read). */
  private hasLease(member: string): Promise<boolean> {
    return this.liveLeaseUnder(this.keys.memberLeases(member), `member "${member}"`);
  }

  /** Whether any auto instance of the group holds a live lease that is not leaving. */
  private anyLiveLease(): Promise<boolean> {
    return this.liveLeaseUnder(this.keys.allLeases, `${this.stream}.${this.group}`);
  }

  private async liveLeaseUnder(filter: string, whose: string): Promise<boolean> {
    try {
      const keys: string[] = [];
      for await (const key of await this.leaseKv.keys(filter)) keys.push(key);
      for (const key of keys) {
        const entry = await this.leaseKv.get(key);
        const lease = entry ? leaseOf(entry) : undefined;
        if (lease && !lease.leaving) return true;
      }
      return false;
    } catch (err) {
      throw wrapServerError(err, `listing the leases of ${whose}`);
    }
  }

  /**
   * Whether `member` may be added: it holds a live lease that is not leaving and is
   * registered, read from the bucket now. A view that fell behind (a slow link, a
   * starved process) must never bring back a member that has left: with its
   * registration deleted it would look like a member added by hand, and stay.
   */
  private async mayAdd(member: string): Promise<boolean> {
    const registration = await this.get(this.keys.registration(member));
    return registration?.operation === "PUT" && (await this.hasLease(member));
  }

  /**
   * Compare-and-set of the config through `plan`, from a fresh config and a fresh view
   * on every attempt; members the plan would add are first checked against the bucket
   * (see {@link AutoMembership.mayAdd}) and left out when they do not hold up.
   *
   * @returns the plan written (or the plan for the current config when nothing changed)
   */
  private async write(plan: (config: ElasticConsumerGroupConfig, view: AutoView) => MembershipPlan): Promise<MembershipPlan> {
    for (let attempt = 1; attempt <= MAX_WRITE_ATTEMPTS; attempt++) {
      const stored = await readConfig(this.configKv, ELASTIC, this.stream, this.group);
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
        const revision = await this.configKv.update(configKey(this.stream, this.group), ELASTIC.encode(next.config), stored.revision);
        if (next.added.length > 0 || next.removed.length > 0) this.hooks?.publish({ type: "membership_written", revision, added: next.added, removed: next.removed });
        return next;
      } catch (err) {
        if (!isCasConflict(err)) throw wrapServerError(err, `putting the elastic consumer group's config in the bucket`);
        await new Promise((r) => setTimeout(r, Math.random() * 20 * attempt));
      }
    }
    throw new ConsumerGroupError("CONFIG_CONFLICT", `couldn't update the elastic consumer group's config: ${MAX_WRITE_ATTEMPTS} concurrent writers won in a row; retrying at the next reconcile`);
  }

  /** Registrations of auto members that have no lease and are no longer listed are deleted. */
  private async forgetDeparted(view: AutoView): Promise<void> {
    const current = await readConfig(this.configKv, ELASTIC, this.stream, this.group);
    const listed = listedMembers(current.config);
    for (const member of view.registered) {
      if (view.live.has(member) || view.leaving?.has(member) || listed.includes(member)) continue;
      const entry = await this.get(this.keys.registration(member));
      if (!entry || entry.operation !== "PUT") continue;
      try {
        await this.leaseKv.delete(this.keys.registration(member), { previousSeq: entry.revision });
      } catch (err) {
        if (!isCasConflict(err)) throw err;
      }
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
    this.leaving = true;
    clearTimeout(this.reconcileTimer);
    await this.reconciling;
    if (this.closed) return false;
    try {
      // No renewal may race the leaving mark (both compare-and-set on the same revision).
      clearTimeout(this.renewTimer);
      await this.renewing;
      if (this.lost) {
        // A lease lost (the process stalled) is written again, marked as leaving: the member still leaves cleanly.
        await this.acquire();
      } else {
        const sent = performance.now();
        this.revision = await writeLease(this.js, this.keys.lease(this.member, this.instance), this.leaseValue(), this.settings.leaseTtlMs, this.revision);
        this.validUntil = sent + this.settings.leaseTtlMs;
      }
      this.scheduleRenew();
      // Instances of one member stopped together (an orchestrator stopping every pod) see each
      // other's leases: each marks its own first and waits a moment for the others' marks, so the
      // member leaves when none of its instances stays, instead of each leaving it to the others.
      if (!(await this.lastOfMember(performance.now() + SIBLING_MARKS_MS))) return false;
      if (!(await this.listed())) return false;
      if (this.othersAlive() && (await this.removedByOthers(performance.now() + MAX_SETTLE_PERIODS * this.settings.settleMs + LEAVE_GRACE_MS))) {
        await released();
        return true;
      }
      if (!isAutoMember(this.view(), this.member)) return false;
      const plan = await this.write((config, view) => planLeave(config, view, this.settings.assignment, this.member));
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

  /** Waits until no other instance of this member holds a lease that is not leaving, or `deadline` (performance.now()): whether none does. */
  private async lastOfMember(deadline: number): Promise<boolean> {
    while (this.otherInstances() > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, LEAVE_POLL_MS));
    return this.otherInstances() === 0;
  }

  /** Whether the stored config lists this instance's member. */
  private async listed(): Promise<boolean> {
    return listedMembers((await readConfig(this.configKv, ELASTIC, this.stream, this.group)).config).includes(this.member);
  }

  /** Whether another auto instance (of any member) that is not leaving holds a lease. */
  private othersAlive(): boolean {
    for (const [member, instances] of this.leases) {
      for (const [id, lease] of instances) if (!lease.leaving && (member !== this.member || id !== this.instance)) return true;
    }
    return false;
  }

  /** Waits until the config no longer lists this member, or `deadline` (performance.now()). */
  private async removedByOthers(deadline: number): Promise<boolean> {
    while (performance.now() < deadline) {
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
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.renewTimer);
    clearTimeout(this.reconcileTimer);
    clearInterval(this.periodicTimer);
    this.watch?.stop();
    const last = this.otherInstances() === 0;
    try {
      await this.leaseKv.delete(this.keys.lease(this.member, this.instance));
      if (!last) return;
      const listed = listedMembers((await readConfig(this.configKv, ELASTIC, this.stream, this.group)).config);
      if (!listed.includes(this.member)) await this.leaseKv.delete(this.keys.registration(this.member));
    } catch (err) {
      // The lease expires by itself; a registration left behind is removed by the next reconcile.
      if (!(err instanceof ConsumerGroupError && err.code === "GROUP_NOT_FOUND")) this.hooks?.reportError(wrapServerError(err, `removing the lease of member "${this.member}"`), 0);
    }
  }


}
