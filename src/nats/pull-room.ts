/**
 * How much the next pull may ask for, in messages and bytes: pure arithmetic over what
 * an instance holds, what it already asked for, and its budgets. No NATS import.
 *
 * A pull's `max_bytes` bounds what it brings, but the server answers every pull that
 * carries one and ends by its message count with a `409 Batch Completed` status
 * message, which costs the client and the server a message per pull. So a pull goes
 * without `max_bytes` when even the largest delivery the server can send could not
 * take the window (held, outstanding and this batch) past the byte budget.
 */

/** What {@link pullRoom} decides from. */
export interface PullRoomInput {
  /** The most messages the instance holds and asks for at once (its local buffer cap). */
  messageCap: number;
  /** The most bytes it holds and asks for at once (`maxBufferedBytes`). */
  byteBudget: number;
  /** The largest delivery seen so far (bytes, 0 before the first): it stands for every message held or asked for. */
  largestSeen: number;
  /** The largest delivery the server can send (its `max_payload` with room for subject and headers). */
  largestPossible: number;
  /** Messages held in the process. */
  held: number;
  /** Messages asked for and not yet delivered. */
  outstanding: number;
}

/** What the next pull may ask for. */
export interface PullRoom {
  /** Messages (0 or less: none fit). */
  batch: number;
  /** The pull's `max_bytes`; absent when no batch of this size could pass the byte budget. */
  maxBytes?: number;
}

/** The room for the next pull; see the module's comment for when it carries no byte limit. */
export function pullRoom(p: PullRoomInput): PullRoom {
  const window = p.held + p.outstanding;
  let batch = p.messageCap - window;
  const byteRoom = p.byteBudget - p.largestSeen * window;
  if (p.largestSeen > 0) batch = Math.min(batch, Math.floor(byteRoom / p.largestSeen));
  if (batch <= 0) return { batch };
  if ((window + batch) * p.largestPossible <= p.byteBudget) return { batch };
  return { batch, maxBytes: byteRoom };
}

/** Room for a subject, a reply subject and the headers the server adds, on top of its `max_payload`. */
export const DELIVERY_OVERHEAD_BYTES = 64 * 1024;

/** The server's default `max_payload`, for a connection that does not say. */
export const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/** The largest delivery a server with this `max_payload` can send (see {@link DELIVERY_OVERHEAD_BYTES}). */
export function largestPossibleDelivery(maxPayload: number | undefined): number {
  return (maxPayload !== undefined && maxPayload > 0 ? maxPayload : DEFAULT_MAX_PAYLOAD) + DELIVERY_OVERHEAD_BYTES;
}
