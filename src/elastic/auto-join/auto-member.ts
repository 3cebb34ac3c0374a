/**
 * The handle of an auto-joined member instance: the member's own handle, with a stop
 * that first takes the member out of the group when this is its last instance.
 */
import type { ElasticConsumerGroupConfig } from "../../core/types.js";
import type { MemberController } from "../../nats/member-controller.js";
import type { ParkedKey } from "../../nats/dispatcher.js";
import type { ConsumerGroupMember, MemberStatus, ReleaseOptions, ReleaseOutcome } from "../../nats/member-types.js";
import type { AutoMembership } from "./auto-join.js";

/** How often a leaving instance looks whether it has handed its partitions over. */
const RELEASE_POLL_MS = 50;
/** How long a leaving instance waits for the handoff beyond its drain timeout. */
const RELEASE_GRACE_MS = 5000;

/** A member instance that joined its group by itself (see `elasticConsume`'s `autoJoin`). */
export class AutoJoinedMember implements ConsumerGroupMember {
  private stopping: Promise<void> | undefined;

  constructor(
    private readonly inner: MemberController<ElasticConsumerGroupConfig>,
    private readonly membership: AutoMembership,
    private readonly drainTimeoutMs: number,
  ) {
    // Stopped by itself (the group deleted, say): its lease goes, its membership is left to the others.
    void inner.closed().then(() => this.membership.close("member_closed"));
  }

  /** The source stream. */
  get stream(): string {
    return this.inner.stream;
  }

  /** The group. */
  get group(): string {
    return this.inner.group;
  }

  /** The member this instance runs as. */
  get member(): string {
    return this.inner.member;
  }

  /** This instance's auto-join instance id (it names its lease). */
  get instance(): string {
    return this.membership.instance;
  }

  /** The partitions the member owns under the current config. */
  partitions(): number[] {
    return this.inner.partitions();
  }

  /** The pin id this instance consumes under while it holds its member's pin. */
  currentPinId(): string | undefined {
    return this.inner.currentPinId();
  }

  /** The keys blocked here (see {@link ConsumerGroupMember.parkedKeys}). */
  parkedKeys(): ParkedKey[] {
    return this.inner.parkedKeys();
  }

  /** Releases a blocked message (see {@link ConsumerGroupMember.releaseParkedKey}). */
  releaseParkedKey(seq: number, options?: ReleaseOptions): Promise<ReleaseOutcome> {
    return this.inner.releaseParkedKey(seq, options);
  }

  /** Events from now on, until the instance stops (auto-join adds `membership_written`, `lease_lost`, `lease_restored`). */
  status(): AsyncIterable<MemberStatus> {
    return this.inner.status();
  }

  /** Resolves when the instance has stopped: to the error that stopped it, or undefined. Never rejects. */
  closed(): Promise<Error | undefined> {
    return this.inner.closed();
  }

  /**
   * Stops the instance. The member's last instance first takes the member out of the
   * group and hands its partitions over (handlers finish and are acked, the rest goes
   * back to the stream for the new owners); other instances stop as standbys do.
   * Idempotent.
   */
  stop(): Promise<void> {
    this.stopping ??= this.leaveAndStop();
    return this.stopping;
  }

  /** Same as {@link AutoJoinedMember.stop}. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private async leaveAndStop(): Promise<void> {
    await this.membership.leave(() => this.released());
    await this.membership.close("stopped");
    await this.inner.stop();
  }

  /** Resolves once the instance owns no partitions and has released its consumer (or stopped), or after the drain timeout and a grace period. */
  private async released(): Promise<void> {
    const deadline = performance.now() + this.drainTimeoutMs + RELEASE_GRACE_MS;
    while (performance.now() < deadline) {
      const state = this.inner.currentState.name;
      if (state === "stopped" || (state === "idle" && this.inner.partitions().length === 0)) return;
      await new Promise((r) => setTimeout(r, RELEASE_POLL_MS));
    }
  }
}
