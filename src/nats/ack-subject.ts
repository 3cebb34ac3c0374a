/**
 * The two numbers a member needs from every delivery, read from its ack subject
 * without building the whole delivery info (nats.js parses that on first use; a
 * handler that asks for `msg.info` still gets it).
 *
 * An ack subject is `$JS.ACK.<stream>.<consumer>.<delivery count>.<stream seq>.…`
 * (9 tokens), or, from servers that add the domain and account hash,
 * `$JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivery count>.<stream seq>.…`
 * (11 or more tokens).
 */

/** What the dispatcher reads from a delivery. */
export interface DeliveryNumbers {
  /** The message's sequence in the stream. */
  streamSequence: number;
  /** 1 for a first delivery. */
  deliveryCount: number;
}

const DOT = 46;
const ZERO = 48;
const NINE = 57;

/**
 * Reads the delivery count and stream sequence of an ack subject.
 *
 * @returns undefined when `reply` is not a JetStream ack subject (the caller falls back to nats.js)
 */
export function deliveryNumbers(reply: string): DeliveryNumbers | undefined {
  if (!reply.startsWith("$JS.ACK.")) return undefined;
  let dots = 0;
  for (let i = 0; i < reply.length; i++) if (reply.charCodeAt(i) === DOT) dots += 1;
  const tokens = dots + 1;
  if (tokens !== 9 && tokens < 11) return undefined;
  // Token index of the delivery count: 4 in the short form, 6 in the long one.
  const countToken = tokens === 9 ? 4 : 6;
  let at = 0;
  for (let seen = 0; seen < countToken; at++) if (reply.charCodeAt(at) === DOT) seen += 1;
  const count = readNumber(reply, at);
  if (count === undefined) return undefined;
  const sequence = readNumber(reply, count.end + 1);
  if (sequence === undefined) return undefined;
  return { deliveryCount: count.value, streamSequence: sequence.value };
}

/** The decimal number at `from`, up to the next dot (or the end). */
function readNumber(subject: string, from: number): { value: number; end: number } | undefined {
  let value = 0;
  let at = from;
  for (; at < subject.length; at++) {
    const code = subject.charCodeAt(at);
    if (code === DOT) break;
    if (code < ZERO || code > NINE) return undefined;
    value = value * 10 + (code - ZERO);
  }
  return at === from ? undefined : { value, end: at };
}
