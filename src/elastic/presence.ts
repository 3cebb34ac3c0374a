/**
 * Presence: how a repartition tells this library's running members from Go's when
 * their consumers look alike. In `serial` mode a member's consumer config is exactly
 * Go's (so Go and TypeScript instances can share a member), so the consumer cannot
 * say whose it is. Every running elastic instance answers a request on
 * `$PCG.presence.<stream>.<group>` with its member name; Go instances do not.
 *
 * The answer needs the member's user to subscribe to that subject and to reply
 * (`allow_responses`); without them nothing breaks: the member just stays
 * unverified and a repartition asks for `force`.
 */
import type { Msg, NatsConnection, Subscription } from "@nats-io/nats-core";

/** The subject a group's running instances answer on. */
export function presenceSubject(stream: string, group: string): string {
  return `$PCG.presence.${stream}.${group}`;
}

/** What an instance answers. */
export interface PresenceAnswer {
  /** Always "nats-pcgroups": tells the answer apart from anything else on the subject. */
  library: "nats-pcgroups";
  /** The member the instance runs as. */
  member: string;
  /** The instance's concurrency mode. */
  mode: string;
}

/** Decodes an answer; undefined for anything that is not one. */
export function presenceAnswerOf(data: string): PresenceAnswer | undefined {
  try {
    const value = JSON.parse(data) as Partial<PresenceAnswer> | null;
    if (value === null || typeof value !== "object" || value.library !== "nats-pcgroups" || typeof value.member !== "string") return undefined;
    return { library: "nats-pcgroups", member: value.member, mode: typeof value.mode === "string" ? value.mode : "serial" };
  } catch {
    return undefined;
  }
}

/** One subscription per connection and group, answering for every instance registered on it. */
interface SharedAnswerer {
  sub: Subscription | undefined;
  /** One answer per running instance (instances of one member answer each). */
  answers: Set<{ text: string }>;
}

/** The answerers of each connection, by presence subject. */
const answerers = new WeakMap<NatsConnection, Map<string, SharedAnswerer>>();

/**
 * Answers presence requests for one instance until `stop()`. The instances of a group
 * on one connection share one subscription (a fleet on one connection adds one, not one
 * per instance), which sends one answer per instance. A subscription the server refuses
 * (no permission) ends quietly: the instance is then not counted as this library's,
 * which only makes a repartition ask for `force`.
 */
export function answerPresence(nc: NatsConnection, stream: string, group: string, member: string, mode: string): { stop(): void } {
  const entry = { text: JSON.stringify({ library: "nats-pcgroups", member, mode } satisfies PresenceAnswer) };
  const subject = presenceSubject(stream, group);
  let bySubject = answerers.get(nc);
  if (!bySubject) answerers.set(nc, (bySubject = new Map<string, SharedAnswerer>()));
  let shared = bySubject.get(subject);
  if (!shared) {
    const answers = new Set<{ text: string }>();
    shared = { sub: undefined, answers };
    try {
      shared.sub = nc.subscribe(subject, {
        callback: (err: Error | null, msg: Msg) => {
          if (err || !msg.reply) return;
          for (const answer of answers) msg.respond(answer.text);
        },
      });
    } catch {
      // A closed connection: the instance is stopping anyway.
    }
    bySubject.set(subject, shared);
  }
  shared.answers.add(entry);
  const owner = shared;
  return {
    stop: () => {
      if (!owner.answers.delete(entry) || owner.answers.size > 0) return;
      if (bySubject.get(subject) === owner) bySubject.delete(subject);
      try {
        owner.sub?.unsubscribe();
      } catch {
        // already closed with its connection
      }
    },
  };
}

/** How long a presence request collects answers. */
export const PRESENCE_WAIT_MS = 1000;

/**
 * The members of a group with a running instance of this library that answered
 * within `waitMs`. No answer at all (no responders, no permission to ask) is an
 * empty set: nothing is shown.
 *
 * @param enough - when it says the members that answered so far are enough, the wait ends early
 */
export async function askPresence(nc: NatsConnection, stream: string, group: string, waitMs = PRESENCE_WAIT_MS, enough?: (members: Set<string>) => boolean): Promise<Set<string>> {
  const members = new Set<string>();
  try {
    const replies = await nc.requestMany(presenceSubject(stream, group), "", { strategy: "timer", maxWait: waitMs });
    for await (const reply of replies) {
      const answer = presenceAnswerOf(reply.string());
      if (answer) members.add(answer.member);
      if (enough?.(members)) break;
    }
  } catch {
    // No responders, or a request this user may not send: nobody answered.
  }
  return members;
}
