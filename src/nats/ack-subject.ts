/**
 * The three numbers a member needs from every delivery, read from its ack subject
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
  /** The consumer's delivery sequence: every delivery of the consumer, to any instance, takes the next one. */
  consumerSequence: number;
}

const DOT = 46;
const ZERO = 48;
const NINE = 57;

/**
 * Reads the delivery count, stream sequence and consumer sequence of an ack subject (one pass, one
 * object: it runs for every delivered message).
 *
 * @returns undefined when `reply` is not a JetStream ack subject (the caller falls back to nats.js)
 */
export function deliveryNumbers(reply: string): DeliveryNumbers | undefined {
  if (!reply.startsWith("$JS.ACK.")) return undefined;
  let dots = 0;
  for (let i = 0; i < reply.length; i++) if (reply.charCodeAt(i) === DOT) dots += 1;
  const tokens = dots + 1;
  if (tokens !== 9 && tokens < 11) return undefined;
  // Token index of the delivery count: 4 in the short form, 6 in the long one; the stream sequence follows it.
  const countToken = tokens === 9 ? 4 : 6;
  let at = 0;
  for (let seen = 0; seen < countToken; at++) if (reply.charCodeAt(at) === DOT) seen += 1;
  let deliveryCount = 0;
  let streamSequence = 0;
  let consumerSequence = 0;
  let digits = 0;
  for (let field = 0; field < 3; field++, at++) {
    digits = 0;
    for (; at < reply.length; at++, digits++) {
      const code = reply.charCodeAt(at);
      if (code === DOT) break;
      if (code < ZERO || code > NINE) return undefined;
      const digit = code - ZERO;
      if (field === 0) deliveryCount = deliveryCount * 10 + digit;
      else if (field === 1) streamSequence = streamSequence * 10 + digit;
      else consumerSequence = consumerSequence * 10 + digit;
    }
    if (digits === 0) return undefined;
  }
  return { deliveryCount, streamSequence, consumerSequence };
}
