/** Subject token helpers shared by the partition maths and the validators. */
import { ConsumerGroupError } from "./errors.js";

const DOT = 46;

/**
 * Splits a subject into tokens, rejecting empty tokens and whitespace.
 *
 * @param subject - a subject or filter
 * @param what - how to name it in the error message
 * @throws ConsumerGroupError `INVALID_SUBJECT`
 */
export function tokenize(subject: string, what = "subject"): string[] {
  if (typeof subject !== "string" || subject.length === 0) {
    throw new ConsumerGroupError("INVALID_SUBJECT", `the ${what} must be a non-empty string`);
  }
  if (/\s/.test(subject)) {
    throw new ConsumerGroupError("INVALID_SUBJECT", `the ${what} "${subject}" contains whitespace, which NATS subjects cannot have`);
  }
  const tokens = subject.split(".");
  if (tokens.some((t) => t.length === 0)) {
    throw new ConsumerGroupError("INVALID_SUBJECT", `the ${what} "${subject}" has an empty token (a leading, trailing or doubled ".")`);
  }
  return tokens;
}

/**
 * Checks a filter: tokens are literals, `*`, or a final `>`.
 *
 * @throws ConsumerGroupError `INVALID_SUBJECT`
 */
export function parseFilter(filter: string): string[] {
  const tokens = tokenize(filter, "filter");
  tokens.forEach((t, i) => {
    if (t === ">" && i !== tokens.length - 1) {
      throw new ConsumerGroupError("INVALID_SUBJECT", `the filter "${filter}" has ">" before its last token; ">" may only end a filter`);
    }
    if (t !== "*" && t !== ">" && (t.includes("*") || t.includes(">"))) {
      throw new ConsumerGroupError("INVALID_SUBJECT", `the filter "${filter}" has a token "${t}" that mixes a wildcard with other characters`);
    }
  });
  return tokens;
}

/**
 * True when the literal subject tokens match the filter tokens.
 *
 * @param subjectTokens - tokens of a literal subject
 * @param filterTokens - tokens of a filter, possibly with `*` and a final `>`
 */
export function matchesFilter(subjectTokens: readonly string[], filterTokens: readonly string[]): boolean {
  for (let i = 0; i < filterTokens.length; i++) {
    const f = filterTokens[i];
    if (f === ">") return subjectTokens.length > i;
    if (i >= subjectTokens.length) return false;
    if (f !== "*" && f !== subjectTokens[i]) return false;
  }
  return subjectTokens.length === filterTokens.length;
}

/**
 * The same answer as {@link matchesFilter} for a literal subject given as text, without
 * splitting it: it runs for every delivered message (the foreign-delivery fence).
 *
 * @param subject - a literal subject (no empty tokens)
 * @param filterTokens - tokens of a filter, possibly with `*` and a final `>`
 * @param from - where in `subject` token `firstToken` starts (its length + 1 when the subject has no more tokens)
 * @param firstToken - the index of the filter token to match there: the tokens before it are known to match
 */
export function subjectMatchesFilter(subject: string, filterTokens: readonly string[], from = 0, firstToken = 0): boolean {
  /** Where the subject's next token starts. */
  let at = from;
  for (let i = firstToken; i < filterTokens.length; i++) {
    if (at >= subject.length) return false;
    const f = filterTokens[i] as string;
    if (f === ">") return true;
    if (f === "*") {
      const end = subject.indexOf(".", at);
      at = end === -1 ? subject.length + 1 : end + 1;
      continue;
    }
    // A literal: the token is `f` when the subject has `f` here and a dot (or its end) right after.
    const after = at + f.length;
    if (!subject.startsWith(f, at) || (after < subject.length && subject.charCodeAt(after) !== DOT)) return false;
    at = after + 1;
  }
  return at === subject.length + 1;
}

/**
 * True when some subject could match both filters (the server's `SubjectsCollide`).
 *
 * @param a - a filter
 * @param b - another filter
 */
export function filtersOverlap(a: string, b: string): boolean {
  const ta = a.split(".");
  const tb = b.split(".");
  for (let i = 0; ; i++) {
    const x = ta[i];
    const y = tb[i];
    if (x === ">" || y === ">") return x !== undefined && y !== undefined;
    if (x === undefined || y === undefined) return x === undefined && y === undefined;
    if (x !== "*" && y !== "*" && x !== y) return false;
  }
}
