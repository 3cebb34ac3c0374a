/**
 * Keeps secrets out of everything `cg` prints: URL credentials are masked
 * (`nats://alice:***@host`, `nats://***@host`), and the secrets of the resolved
 * connection (password, token, JWT, seed) are masked wherever they appear.
 * Pure: no `@nats-io` import.
 */

/** What a secret is replaced with. */
export const MASK = "***";

/** `scheme://userinfo@`: the userinfo of a URL, wherever it appears in some text. */
const URL_USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)([^\s/?#@"']+)@/gi;

/**
 * Masks the credentials of every URL in a text: `nats://alice:s3cret@h` becomes
 * `nats://alice:***@h`, and `nats://t0ken@h` (a token) becomes `nats://***@h`.
 *
 * @param text - any text: a URL, a list of URLs, an error message
 */
export function redactUrls(text: string): string {
  return text.replace(URL_USERINFO, (_all, scheme: string, info: string) => {
    const colon = info.indexOf(":");
    return colon === -1 ? `${scheme}${MASK}@` : `${scheme}${info.slice(0, colon)}:${MASK}@`;
  });
}

/**
 * Secrets shorter than this are not masked by value (masking "ab" everywhere would
 * garble the text); URL credentials are masked whatever their length.
 */
const MIN_SECRET_LENGTH = 3;

const secrets = new Set<string>();

/**
 * Remembers a secret of this process (a password, token, JWT or seed), so that
 * {@link redact} masks it wherever it appears.
 *
 * @param value - the secret; empty and very short values are ignored
 */
export function rememberSecret(value: string | undefined): void {
  if (value === undefined || value.length < MIN_SECRET_LENGTH) return;
  secrets.add(value);
  // the percent-encoded form is what a URL carries
  const encoded = encodeURIComponent(value);
  if (encoded !== value) secrets.add(encoded);
}

/**
 * Masks URL credentials and every remembered secret in a text: the last step
 * before an error, a warning or a document is printed.
 *
 * @param text - what is about to be printed
 */
export function redact(text: string): string {
  let out = redactUrls(text);
  // longest first, so a secret that contains another is masked whole
  for (const s of [...secrets].sort((a, b) => b.length - a.length)) out = out.split(s).join(MASK);
  return out;
}
