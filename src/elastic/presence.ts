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
 *
 * The same subject carries the parked-key requests (see `parking.ts`): a request with
 * a JSON body asks each instance for its blocked keys, or asks the one that holds a
 * blocked message to release it. Anyone allowed to publish there may release keys:
 * give that to operators only.
 */
import type { Msg, NatsConnection, Subscription } from "@nats-io/nats-core";
import { ConsumerGroupError } from "../core/errors.js";
import type { ParkedKey } from "../nats/dispatcher.js";
import type { ReleaseOptions, ReleaseOutcome } from "../nats/member-types.js";

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
  /** The pin id the instance consumes under, while it holds its member's pin. */
  pin?: string;
}

/** A request on the presence subject: an empty body asks who runs; JSON bodies ask about parked keys. */
export type PresenceRequest =
  | { kind: "presence" }
  | { kind: "park_list" }
  | {
      kind: "park_release";
      seq: number;
      deadLetterSubject?: string;
      /** How long the requester waits for answers (ms): an outcome not known in half of it is answered `pending`. */
      waitMs?: number;
      /** When the requester stops waiting (epoch ms, its clock): an instance that reads the request later does nothing. */
      expiresAt?: number;
    };

/** The body of a parked-key request. */
export function presenceRequestBody(request: Exclude<PresenceRequest, { kind: "presence" }>): string {
  if (request.kind === "park_list") return JSON.stringify({ pcg: "park_list" });
  return JSON.stringify({
    pcg: "park_release",
    seq: request.seq,
    ...(request.deadLetterSubject !== undefined ? { dead_letter_subject: request.deadLetterSubject } : {}),
    ...(request.waitMs !== undefined ? { wait_ms: request.waitMs } : {}),
    ...(request.expiresAt !== undefined ? { expires_at: request.expiresAt } : {}),
  });
}

/** Reads a request body; anything that is not a parked-key request asks for presence. */
export function presenceRequestOf(body: string): PresenceRequest {
  if (body === "") return { kind: "presence" };
  try {
    const value = JSON.parse(body) as { pcg?: unknown; seq?: unknown; dead_letter_subject?: unknown; wait_ms?: unknown; expires_at?: unknown } | null;
    if (value?.pcg === "park_list") return { kind: "park_list" };
    if (value?.pcg === "park_release" && typeof value.seq === "number") {
      const finite = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
      return {
        kind: "park_release",
        seq: value.seq,
        ...(typeof value.dead_letter_subject === "string" ? { deadLetterSubject: value.dead_letter_subject } : {}),
        ...(finite(value.wait_ms) ? { waitMs: value.wait_ms } : {}),
        ...(finite(value.expires_at) ? { expiresAt: value.expires_at } : {}),
      };
    }
  } catch {
    // not JSON: a presence request
  }
  return { kind: "presence" };
}

/** What an instance lets the presence subject read and do: its pin, its parked keys. */
export interface ParkingControl {
  parkedKeys(): ParkedKey[];
  releaseParkedKey(seq: number, options?: ReleaseOptions): Promise<ReleaseOutcome>;
  /** The pin id it consumes under while it holds its member's pin. */
  currentPinId?(): string | undefined;
}

/** An instance's answer to a parked-key request, beyond its presence. */
export interface ParkingAnswer extends PresenceAnswer {
  /** To a list request: its blocked keys. */
  parked?: ParkedKey[];
  /** To a release request: what it did. */
  released?: ReleaseOutcome;
  /** To a release request that failed: why. */
  error?: { code: string; message: string };
}

/** Decodes an answer; undefined for anything that is not one. */
export function presenceAnswerOf(data: string): PresenceAnswer | undefined {
  try {
    const value = JSON.parse(data) as Partial<PresenceAnswer> | null;
    if (value === null || typeof value !== "object" || value.library !== "nats-pcgroups" || typeof value.member !== "string") return undefined;
    return { library: "nats-pcgroups", member: value.member, mode: typeof value.mode === "string" ? value.mode : "serial", ...(typeof value.pin === "string" && value.pin !== "" ? { pin: value.pin } : {}) };
  } catch {
    return undefined;
  }
}

/** One running instance's answers. */
interface Answerer {
  /** Its presence answer. */
  presence: PresenceAnswer;
  control: ParkingControl | undefined;
}

/** One subscription per connection and group, answering for every instance registered on it. */
interface SharedAnswerer {
  sub: Subscription | undefined;
  /** One per running instance (instances of one member answer each). */
  answers: Set<Answerer>;
}

/** An instance's answer to `request` (a promise for a release), or undefined when it has none. */
function answerOf(entry: Answerer, request: PresenceRequest): string | Promise<string> | undefined {
  const control = entry.control;
  if (request.kind === "presence") {
    const pin = control?.currentPinId?.();
    return JSON.stringify(pin ? { ...entry.presence, pin } : entry.presence);
  }
  if (!control) return undefined;
  if (request.kind === "park_list") return JSON.stringify({ ...entry.presence, parked: control.parkedKeys() } satisfies ParkingAnswer);
  // Read after its requester stopped waiting (this process was stalled, say): it was answered "not parked" already.
  if (request.expiresAt !== undefined && Date.now() > request.expiresAt) return undefined;
  const options = request.deadLetterSubject !== undefined ? { deadLetterSubject: request.deadLetterSubject } : {};
  const outcome = control.releaseParkedKey(request.seq, options).then(
    (released) => JSON.stringify({ ...entry.presence, released } satisfies ParkingAnswer),
    (err: unknown) => {
      const code = err instanceof ConsumerGroupError ? err.code : "SERVER_ERROR";
      return JSON.stringify({ ...entry.presence, error: { code, message: err instanceof Error ? err.message : String(err) } } satisfies ParkingAnswer);
    },
  );
  // A dead-letter release waits for the attempt running now, which may outlast the request: then it is answered pending.
  const pendingAfterMs = Math.max(1, (request.waitMs ?? 1000) / 2);
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<string>((resolve) => {
    timer = setTimeout(() => {
      const action = request.deadLetterSubject !== undefined ? "dead_letter" : "retry";
      resolve(JSON.stringify({ ...entry.presence, released: { member: entry.presence.member, seq: request.seq, action, released: true, result: "pending" } } satisfies ParkingAnswer));
    }, pendingAfterMs);
  });
  return Promise.race([outcome, pending]).finally(() => clearTimeout(timer));
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
export function answerPresence(nc: NatsConnection, stream: string, group: string, member: string, mode: string, control?: ParkingControl): { stop(): void } {
  const entry: Answerer = { presence: { library: "nats-pcgroups", member, mode }, control };
  const subject = presenceSubject(stream, group);
  let bySubject = answerers.get(nc);
  if (!bySubject) answerers.set(nc, (bySubject = new Map<string, SharedAnswerer>()));
  let shared = bySubject.get(subject);
  if (!shared) {
    const answers = new Set<Answerer>();
    shared = { sub: undefined, answers };
    try {
      shared.sub = nc.subscribe(subject, {
        callback: (err: Error | null, msg: Msg) => {
          if (err || !msg.reply) return;
          const request = presenceRequestOf(msg.string());
          for (const answerer of answers) {
            const answer = answerOf(answerer, request);
            if (typeof answer === "string") msg.respond(answer);
            else
              void answer?.then((text) => {
                try {
                  msg.respond(text);
                } catch {
                  // the connection closed meanwhile: the requester hears nothing from this instance
                }
              });
          }
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
  const pins = await askPresencePins(nc, stream, group, waitMs, enough ? (answered) => enough(new Set(answered.keys())) : undefined);
  return new Set(pins.keys());
}

/**
 * Like {@link askPresence}, with the pin ids the answering instances hold: member →
 * the pins its instances named (empty for a member none of whose instances is pinned).
 */
export async function askPresencePins(nc: NatsConnection, stream: string, group: string, waitMs = PRESENCE_WAIT_MS, enough?: (answered: Map<string, Set<string>>) => boolean): Promise<Map<string, Set<string>>> {
  const answered = new Map<string, Set<string>>();
  try {
    const replies = await nc.requestMany(presenceSubject(stream, group), "", { strategy: "timer", maxWait: waitMs });
    for await (const reply of replies) {
      const answer = presenceAnswerOf(reply.string());
      if (answer) {
        let pins = answered.get(answer.member);
        if (!pins) answered.set(answer.member, (pins = new Set()));
        if (answer.pin) pins.add(answer.pin);
      }
      if (enough?.(answered)) break;
    }
  } catch {
    // No responders, or a request this user may not send: nobody answered.
  }
  return answered;
}
