/**
 * How much the next pull may ask for, in messages and bytes: pure arithmetic over what
 * an instance holds, what it already asked for, and its budgets. No NATS import.
 *
 * Every message slot of the window (the message cap) has an equal share of the byte
 * budget, and a pull's `max_bytes` is its batch's shares. A byte limit reserves its
 * bytes until the pull ends, however small its messages are, so giving one pull the
 * whole remaining room would leave none for the next while it is still running; with
 * shares, the pulls that can be live at once (a member pulls again each time half
 * of the window was delivered, and the server fills them in order) reserve at most
 * twice the budget together, and what is held counts against the budget at the size of
 * the largest message that may be among it.
 *
 * The server answers every pull that carries a byte limit and ends by its message count
 * with a `409 Batch Completed` status message, which costs the client and the server a
 * message per pull. So a pull goes without `max_bytes` when even the largest delivery
 * the server can send could not take the window (held, outstanding and this batch) past
 * the byte budget.
 */

/** What {@link pullRoom} decides from. */
export interface PullRoomInput {
  /** The most messages the instance holds and asks for at once (its local buffer cap). */
  messageCap: number;
  /** The most bytes it holds and asks for at once (`maxBufferedBytes`). */
  byteBudget: number;
  /** The largest delivery that may still be held (bytes; 0 when nothing was delivered since the instance last held nothing): it stands for every message held. */
  largestHeld: number;
  /** The largest delivery the server can send (its `max_payload` with room for subject and headers). */
  largestPossible: number;
  /** Messages held in the process. */
  held: number;
  /** Messages asked for and not yet delivered. */
  outstanding: number;
  /** The most this pull asks for (nats.js's batch); absent: as many as fit. */
  wanted?: number;
}

/** What the next pull may ask for. */
export interface PullRoom {
  /** Messages (0: none fit). */
  batch: number;
  /** The pull's `max_bytes`; absent when no batch of this size could pass the byte budget. */
  maxBytes?: number;
}

/** The byte share of one message slot of the window: the budget over the message cap (at least 1). */
export function slotShare(byteBudget: number, messageCap: number): number {
  return Math.max(1, Math.floor(byteBudget / Math.max(1, messageCap)));
}

/** The room for the next pull; see the module's comment for the rule. */
export function pullRoom(p: PullRoomInput): PullRoom {
  const window = p.held + p.outstanding;
  const share = slotShare(p.byteBudget, p.messageCap);
  const byteRoom = p.byteBudget - p.largestHeld * p.held - share * p.outstanding;
  const batch = Math.min(p.messageCap - window, Math.floor(byteRoom / share), p.wanted ?? Number.POSITIVE_INFINITY);
  if (batch <= 0) return { batch: 0 };
  if ((window + batch) * p.largestPossible <= p.byteBudget) return { batch };
  return { batch, maxBytes: batch * share };
}

/** Room for a subject, a reply subject and the headers the server adds, on top of its `max_payload`. */
export const DELIVERY_OVERHEAD_BYTES = 64 * 1024;

/** The server's default `max_payload`, for a connection that does not say. */
export const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/** The largest delivery a server with this `max_payload` can send (see {@link DELIVERY_OVERHEAD_BYTES}). */
export function largestPossibleDelivery(maxPayload: number | undefined): number {
  return (maxPayload !== undefined && maxPayload > 0 ? maxPayload : DEFAULT_MAX_PAYLOAD) + DELIVERY_OVERHEAD_BYTES;
}
