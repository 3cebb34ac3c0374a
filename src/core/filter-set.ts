/**
 * Whether a subject matches any of a consumer's filters. Filters are grouped by their
 * first token (a member's filters start with its partitions), so a delivery is matched
 * against its own partition's filters only. A partition number is looked up in an
 * array, without cutting the token out of the subject; `<token>.>` is that lookup alone.
 * Pure: no NATS import.
 */
import { parseFilter, subjectMatchesFilter } from "./subjects.js";

/** First tokens up to this are partition numbers looked up by index (a group has at most a few thousand). */
const MAX_INDEXED_TOKEN = 65_535;
const ZERO = 48;
const NINE = 57;

/** What the filters say about subjects with one first token. */
interface FirstTokenRule {
  /** A `<token>.>` filter: every subject with more tokens after it matches. */
  anyRest: boolean;
  /** The other filters with this first token, as tokens. */
  filters: string[][];
}

/** A consumer's filter subjects, ready to match delivered subjects against. */
export class FilterSet {
  /** Rules by first token, for first tokens that are partition numbers (decimal, no leading zero). */
  private readonly byPartition: (FirstTokenRule | undefined)[] = [];
  /** Rules by first token, for the other literal first tokens. */
  private readonly byFirst = new Map<string, FirstTokenRule>();
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
      if (first === undefined || first === "*" || first === ">") {
        this.others.push(tokens);
        continue;
      }
      const partition = partitionToken(first, 0, first.length);
      let rule = partition >= 0 ? this.byPartition[partition] : this.byFirst.get(first);
      if (rule === undefined) {
        rule = { anyRest: false, filters: [] };
        if (partition >= 0) this.byPartition[partition] = rule;
        else this.byFirst.set(first, rule);
      }
      if (tokens.length === 2 && tokens[1] === ">") rule.anyRest = true;
      else rule.filters.push(tokens);
    }
  }

  /** Whether `subject` (a literal subject) matches one of the filters. */
  matches(subject: string): boolean {
    if (this.everything) return true;
    let dot = subject.indexOf(".");
    if (dot === -1) dot = subject.length;
    const partition = partitionToken(subject, 0, dot);
    const rule = partition >= 0 ? this.byPartition[partition] : dot > 0 ? this.byFirst.get(subject.slice(0, dot)) : undefined;
    if (rule !== undefined) {
      if (rule.anyRest && dot < subject.length) return true;
      // Matched on the subject's text after its first token: an elastic member's filters (`<p>.<filter>`) come here for every delivery.
      for (const f of rule.filters) if (subjectMatchesFilter(subject, f, dot + 1, 1)) return true;
    }
    for (const f of this.others) if (subjectMatchesFilter(subject, f)) return true;
    return false;
  }
}

/**
 * The partition number that `text[start, end)` spells (decimal digits, no leading zero
 * but in "0", at most {@link MAX_INDEXED_TOKEN}); -1 when it spells none.
 */
function partitionToken(text: string, start: number, end: number): number {
  if (end <= start || end - start > 5) return -1;
  if (end - start > 1 && text.charCodeAt(start) === ZERO) return -1;
  let n = 0;
  for (let i = start; i < end; i++) {
    const code = text.charCodeAt(i);
    if (code < ZERO || code > NINE) return -1;
    n = n * 10 + (code - ZERO);
  }
  return n <= MAX_INDEXED_TOKEN ? n : -1;
}
