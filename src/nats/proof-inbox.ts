/**
 * Where the answers to the pin keep-alives arrive: one subscription per connection,
 * shared by every member instance on it (a fleet of instances in one process costs one
 * subscription, as the config watch does), under the connection's inbox prefix so that
 * narrow inbox permissions still let the answers in. Each instance gets its own reply
 * subjects, `<inbox>.<instance>.<token>`.
 */
import { createInbox, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { inboxPrefixOf } from "./client-seam.js";

/** What an instance hears on its part of the inbox. */
export interface ProofListener {
  /** An answer to the request sent with reply subject `reply(token)`. */
  answer(token: string, msg: Msg): void;
  /** The subscription failed (a permission violation): no answer will come. */
  failed(error: Error): void;
}

/** An instance's part of the shared inbox. */
export interface ProofInbox {
  /** The reply subject for the request named `token`. */
  reply(token: string): string;
  /** Stops listening; the last instance of a connection to close unsubscribes. */
  close(): void;
}

interface Shared {
  inbox: string;
  sub: Subscription;
  listeners: Map<string, ProofListener>;
  nextId: number;
}

const shared = new WeakMap<NatsConnection, Shared>();

/** Opens `listener`'s part of the connection's keep-alive inbox. */
export function openProofInbox(nc: NatsConnection, listener: ProofListener): ProofInbox {
  let s = shared.get(nc);
  if (!s) {
    const inbox = createInbox(inboxPrefixOf(nc));
    const listeners = new Map<string, ProofListener>();
    const sub = nc.subscribe(`${inbox}.*.*`, {
      callback: (err, msg) => {
        if (err) {
          shared.delete(nc);
          for (const l of listeners.values()) l.failed(err);
          return;
        }
        const rest = msg.subject.slice(inbox.length + 1);
        const dot = rest.indexOf(".");
        listeners.get(rest.slice(0, dot))?.answer(rest.slice(dot + 1), msg);
      },
    });
    s = { inbox, sub, listeners, nextId: 0 };
    shared.set(nc, s);
  }
  const mine = s;
  const id = String(++mine.nextId);
  mine.listeners.set(id, listener);
  return {
    reply: (token) => `${mine.inbox}.${id}.${token}`,
    close() {
      if (!mine.listeners.delete(id) || mine.listeners.size > 0) return;
      if (shared.get(nc) === mine) shared.delete(nc);
      if (!nc.isClosed()) mine.sub.unsubscribe();
    },
  };
}
