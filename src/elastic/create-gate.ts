/**
 * When an instance may create its member's consumer. The server races a create of a
 * consumer against a delete of the same name (measured on 2.15.3: a create sent while
 * another client's delete is under way fails with `open …/obs/<name>/meta.inf.tmp: no
 * such file or directory` or `error creating store for consumer`, and what it leaves
 * can deliver past messages it never delivered). A member's consumer is deleted by the
 * instance that drained it (to recreate it with new filters), by a Go instance, or by
 * the server once it is inactive, so an instance never creates one it has not seen
 * absent for a moment: by then a delete that was under way has finished, and the
 * instance that deleted it (which creates at once) has made the new one.
 *
 * Pure: no NATS import, the clock is passed in.
 */

/** How long a consumer must have been seen absent before an instance that did not delete it creates it. */
export const ABSENT_BEFORE_CREATE_MS = 300;

/** What an instance does about its member's consumer now. */
export type CreateDecision =
  /** Create it (or update it to this instance's config). */
  | { kind: "create" }
  /** It exists with this instance's config: consume it as it is, without a create. */
  | { kind: "bind" }
  /** Not yet absent long enough: look again in `lookAgainInMs`. */
  | { kind: "wait"; why: "absent-too-briefly"; lookAgainInMs: number }
  /** An older consumer of the member exists: look again shortly. */
  | { kind: "wait"; why: "other-filters" };

/** What an instance saw of its member's consumer. */
export type ConsumerSeen =
  | { kind: "absent" }
  /** It exists; `sameFilters`: with this instance's filters; `sameConfig`: and every other setting this instance sets. */
  | { kind: "present"; sameFilters: boolean; sameConfig: boolean };

/** The create rule of one instance (see the module comment). */
export class CreateGate {
  private absentSince: number | undefined;
  private deletedHere = false;

  /** @param absentBeforeCreateMs - how long an absence must last before this instance creates */
  constructor(private readonly absentBeforeCreateMs = ABSENT_BEFORE_CREATE_MS) {}

  /** This instance deleted the consumer itself (the delete is over): its next create need not wait. */
  deleted(): void {
    this.deletedHere = true;
  }

  /** What to do, given what was seen at `now` (a monotonic clock, ms). */
  decide(seen: ConsumerSeen, now: number): CreateDecision {
    if (seen.kind === "present") {
      this.absentSince = undefined;
      // Another instance's consumer with older filters: it goes once drained (or when the server expires it).
      if (!seen.sameFilters) return { kind: "wait", why: "other-filters" };
      this.deletedHere = false;
      return seen.sameConfig ? { kind: "bind" } : { kind: "create" };
    }
    if (this.deletedHere) {
      this.deletedHere = false;
      this.absentSince = undefined;
      return { kind: "create" };
    }
    this.absentSince ??= now;
    const left = this.absentBeforeCreateMs - (now - this.absentSince);
    if (left > 0) return { kind: "wait", why: "absent-too-briefly", lookAgainInMs: left };
    this.absentSince = undefined;
    return { kind: "create" };
  }
}

/** The same list, in any order. */
function sameSet(a: readonly unknown[], b: readonly unknown[]): boolean {
  if (a.length !== b.length) return false;
  const keys = (xs: readonly unknown[]): string[] => xs.map((x) => JSON.stringify(x)).sort();
  const [x, y] = [keys(a), keys(b)];
  return x.every((v, i) => v === y[i]);
}

/**
 * Whether an existing consumer's config has every setting `ours` sets, with the same
 * value: lists in any order, metadata entry by entry (the server adds entries of its
 * own). A setting the server reports otherwise (or leaves out) counts as different.
 */
export function coversSettings(theirs: Readonly<Record<string, unknown>>, ours: Readonly<Record<string, unknown>>): boolean {
  for (const [key, mine] of Object.entries(ours)) {
    if (mine === undefined) continue;
    const other = theirs[key];
    if (Array.isArray(mine)) {
      if (!Array.isArray(other) || !sameSet(mine, other)) return false;
    } else if (key === "metadata" && typeof mine === "object" && mine !== null) {
      if (typeof other !== "object" || other === null) return false;
      for (const [k, v] of Object.entries(mine)) if ((other as Record<string, unknown>)[k] !== v) return false;
    } else if (JSON.stringify(other) !== JSON.stringify(mine)) return false;
  }
  return true;
}
