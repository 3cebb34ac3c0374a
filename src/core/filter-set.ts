/**
 * Whether a subject matches any of a consumer's filters. Filters are grouped by their
 * first token (a member's filters start with its partitions), so a delivery is matched
 * against its own partition's filters only; `<token>.>` is one set lookup.
 * Pure: no NATS import.
 */
import { parseFilter, subjectMatchesFilter } from "./subjects.js";

/** A consumer's filter subjects, ready to match delivered subjects against. */
export class FilterSet {
  /** First tokens of `<token>.>` filters. */
  private readonly prefixes = new Set<string>();
  /** Filters with a literal first token, by that token, as tokens. */
  private readonly byFirst = new Map<string, string[][]>();
  /** Filters starting with a wildcard, as tokens. */
  private readonly others: string[][] = [];
  /** No filter: the consumer takes the whole stream. */
  private readonly everything: boolean;

  /** @param filters - the consumer's filter subjects (none: the whole stream) */
  constructor(filters: readonly string[]) {
    this.everything = filters.length === 0;
    for (const filter of filters) {
      const tokens = parseFilter(filter);
      const first = tokens[0];
      if (first === undefined || first === "*" || first === ">") this.others.push(tokens);
      else if (tokens.length === 2 && tokens[1] === ">") this.prefixes.add(first);
      else this.byFirst.set(first, [...(this.byFirst.get(first) ?? []), tokens]);
    }
  }

  /** Whether `subject` (a literal subject) matches one of the filters. */
  matches(subject: string): boolean {
    if (this.everything) return true;
    const dot = subject.indexOf(".");
    const first = dot > 0 ? subject.slice(0, dot) : subject;
    if (dot > 0 && this.prefixes.has(first)) return true;
    // Matched on the subject's text, not its tokens: an elastic member's filters (`<p>.<filter>`) come here for every delivery.
    const candidates = this.byFirst.get(first);
    if (candidates !== undefined) for (const f of candidates) if (subjectMatchesFilter(subject, f)) return true;
    for (const f of this.others) if (subjectMatchesFilter(subject, f)) return true;
    return false;
  }
}
