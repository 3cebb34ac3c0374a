/**
 * The Dispatcher's scheduling, without a server: messages are plain objects with
 * the JsMsg surface ConsumerGroupMessage uses (subject, seq, data, headers, info,
 * ack/nak/working/term/ackAck), recording how they were settled. Covers per-lane
 * order, redeliveries (in front, deduplicated, crossing an ack), maxInFlight, a
 * nak'ed message holding its lane, drain, retries with backoff, dead letters,
 * blocked lanes, and the acks of back-to-back handlers sharing a write.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import type { JsMsg } from "@nats-io/jetstream";
import { headers as createHeaders, type MsgHdrs } from "@nats-io/transport-node";
import { DeadLetterHeaders, type DeadLetter } from "../../src/nats/dead-letter.js";
import { BLOCKED_RETRY_CAP_MS, blockedRetryDelayMs, Dispatcher, type AttemptCounter, type DispatchEvents, type DispatchPolicy, type RetryPolicy } from "../../src/nats/dispatcher.js";
import type { ConsumerGroupMessage } from "../../src/nats/message.js";
import { WriteBatch } from "../../src/nats/write-batch.js";
import { waitFor } from "../helpers/nats.js";

const enc = new TextEncoder();
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One delivery of a stored message, recording what the dispatcher did with it. */
interface FakeMsg {
  readonly js: JsMsg;
  readonly seq: number;
  readonly key: string;
  readonly calls: string[];
}

/**
 * A delivery of stream sequence `seq`, stored as `<partition>.orders.<key>`.
 *
 * @param deliveryCount - the server's delivery count of this delivery
 */
function delivery(seq: number, key: string, partition = 0, deliveryCount = 1, hdrs?: MsgHdrs): FakeMsg {
  const calls: string[] = [];
  const subject = `${partition}.orders.${key}`;
  const js = {
    subject,
    seq,
    sid: 1,
    data: enc.encode(JSON.stringify({ key, seq })),
    headers: hdrs,
    redelivered: deliveryCount > 1,
    info: {
      domain: "",
      stream: "ORDERS",
      consumer: "g-m1",
      deliveryCount,
      streamSequence: seq,
      deliverySequence: seq,
      timestampNanos: 0,
      pending: 0,
      redelivered: deliveryCount > 1,
    },
    time: new Date(0),
    timestamp: new Date(0).toISOString(),
    timestampNanos: 0n,
    ack: () => void calls.push("ack"),
    nak: (ms?: number) => void calls.push(ms === undefined ? "nak" : `nak(${ms})`),
    working: () => void calls.push("working"),
    term: (reason?: string) => void calls.push(reason ? `term(${reason})` : "term"),
    ackAck: () => {
      calls.push("ackAck");
      return Promise.resolve(true);
    },
    next: () => undefined,
    string: () => JSON.stringify({ key, seq }),
    json: () => ({ key, seq }),
  } as unknown as JsMsg;
  return { js, seq, key, calls };
}

/** What the events reported. */
interface Recorded {
  handled: number[];
  errors: { seq: number; attempt: number }[];
  deadLettered: { seq: number; subject: string }[];
  blocked: { lane: string; seq: number }[];
  received: number[];
}

function recorder(): { events: DispatchEvents; log: Recorded } {
  const log: Recorded = { handled: [], errors: [], deadLettered: [], blocked: [], received: [] };
  return {
    log,
    events: {
      onHandlerError: (_e, msg, attempt) => void log.errors.push({ seq: msg.seq, attempt }),
      onDeadLettered: (msg, _e, subject) => void log.deadLettered.push({ seq: msg.seq, subject }),
      onBlocked: (lane, msg) => void log.blocked.push({ lane, seq: msg.seq }),
      onHandled: (msg) => void log.handled.push(msg.seq),
      onReceived: (msg) => void log.received.push(msg.seq),
    },
  };
}

const keyOf = (msg: ConsumerGroupMessage): string => msg.subject.split(".")[1] ?? "";

function policy(overrides: Partial<DispatchPolicy> = {}): DispatchPolicy {
  return { mode: "key", maxInFlight: 16, keyOf, workingIntervalMs: 0, ...overrides };
}

/** A handler whose runs are released by hand, recording starts and overlaps per key. */
class Gate {
  readonly started: number[] = [];
  readonly running = new Map<number, () => void>();
  maxRunning = 0;
  private readonly perKey = new Map<string, number>();
  overlaps = 0;

  readonly handler = async (msg: ConsumerGroupMessage): Promise<void> => {
    const key = keyOf(msg);
    this.started.push(msg.seq);
    this.perKey.set(key, (this.perKey.get(key) ?? 0) + 1);
    if ((this.perKey.get(key) ?? 0) > 1) this.overlaps += 1;
    this.maxRunning = Math.max(this.maxRunning, this.running.size + 1);
    await new Promise<void>((resolve) => this.running.set(msg.seq, resolve));
    this.perKey.set(key, (this.perKey.get(key) ?? 1) - 1);
  };

  /** Lets the handler of `seq` return (after it started). */
  async release(seq: number): Promise<void> {
    await waitFor(() => this.running.has(seq), 2000, `handler of seq ${seq} to start (started: ${this.started.join(",")})`, 1);
    const resolve = this.running.get(seq);
    this.running.delete(seq);
    resolve?.();
    await sleep(1);
  }
}

describe("dispatcher - scheduling (no server)", () => {
  test("dispatcher - serial: one at a time in delivery order, each acked before the next starts", async () => {
    const { events, log } = recorder();
    const order: string[] = [];
    const msgs = [1, 2, 3, 4].map((s) => delivery(s, `k${s % 2}`));
    const d = new Dispatcher(
      async (msg) => {
        const m = msgs.find((x) => x.seq === msg.seq);
        order.push(`start ${msg.seq} (prev acked: ${msgs.filter((x) => x.seq < msg.seq).every((x) => x.calls.includes("ack"))})`);
        await sleep(2);
        assert.ok(m);
      },
      policy({ mode: "serial", maxInFlight: 1 }),
      events,
    );
    for (const m of msgs) d.push(m.js);
    assert.equal(d.running, 1, "one handler runs in serial mode");
    assert.equal(d.size, 4);
    await waitFor(() => log.handled.length === 4, 2000, "4 handled");
    assert.deepEqual(log.handled, [1, 2, 3, 4]);
    assert.deepEqual(order, [1, 2, 3, 4].map((s) => `start ${s} (prev acked: true)`));
    for (const m of msgs) assert.deepEqual(m.calls, ["ack"]);
    assert.deepEqual(log.received, [1, 2, 3, 4]);
    assert.equal(d.size, 0);
    assert.equal(await d.drain(100), true);
  });

  test("dispatcher - async handlers back to back: each starts after the previous ack was queued, and the run's acks share one write", async () => {
    const { events, log } = recorder();
    const trace: string[] = [];
    // Limits no loaded machine reaches between two promise reactions (the 1 ms default could be: write-batch.test.ts covers the limits).
    const batch = new WriteBatch({ suspend: () => void trace.push("suspend"), resume: () => void trace.push("resume (written)") }, { maxAcks: 256, maxMs: 60_000 });
    const msgs = [1, 2, 3, 4].map((s) => delivery(s, `k${s}`));
    for (const m of msgs) {
      const js = m.js as unknown as { ack: () => void };
      const ack = js.ack;
      js.ack = () => {
        trace.push(`ack ${m.seq}`);
        ack();
      };
    }
    const d = new Dispatcher(
      async (msg) => {
        trace.push(`start ${msg.seq}`);
        await Promise.resolve();
      },
      policy({ mode: "serial", maxInFlight: 1 }),
      events,
      { beforeAck: () => batch.hold() },
    );
    for (const m of msgs) d.push(m.js);
    await waitFor(() => log.handled.length === 4, 2000, "4 handled");
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(trace, ["start 1", "suspend", "ack 1", "start 2", "ack 2", "start 3", "ack 3", "start 4", "ack 4", "resume (written)"]);
    assert.equal(await d.drain(100), true);
  });

  test("dispatcher - pauseStarts: running handlers finish and are acked, nothing else starts, and the drain gives the rest back in stream order", async () => {
    const { events, log } = recorder();
    const running = new Map<number, () => void>();
    const d = new Dispatcher((msg) => new Promise<void>((resolve) => running.set(msg.seq, resolve)), policy({ mode: "partition", maxInFlight: 4 }), events);
    const msgs = [1, 2, 3, 4, 5].map((s) => delivery(s, "k", s % 2));
    for (const m of msgs.slice(0, 3)) d.push(m.js);
    await sleep(10);
    assert.deepEqual([...running.keys()], [1, 2], "one per partition lane");
    d.pauseStarts();
    for (const m of msgs.slice(3)) d.push(m.js);
    (running.get(1) as () => void)();
    (running.get(2) as () => void)();
    await sleep(20);
    assert.deepEqual(log.handled, [1, 2], "the running ones finished");
    assert.deepEqual([...running.keys()], [1, 2], "nothing started after the pause, also not behind a finished one");
    assert.equal(await d.drain(100), true);
    assert.deepEqual(msgs.map((m) => m.calls), [["ack"], ["ack"], ["nak"], ["nak"], ["nak"]]);
  });

  test("dispatcher - fenced (mayStart false): nothing starts, messages stay held and unsettled; they start in order once it may again", async () => {
    const { events, log } = recorder();
    let may = false;
    const msgs = [1, 2, 3].map((s) => delivery(s, "k"));
    const d = new Dispatcher(() => undefined, { ...policy({ mode: "partition", maxInFlight: 4 }), mayStart: () => may }, events);
    for (const m of msgs) d.push(m.js);
    await sleep(250);
    assert.equal(d.running, 0, "nothing runs while fenced");
    assert.deepEqual(log.handled, []);
    assert.equal(d.size, 3, "the messages stay held");
    for (const m of msgs) assert.deepEqual(m.calls, [], "nothing settled while fenced");
    may = true;
    await waitFor(() => log.handled.length === 3, 2000, "3 handled after the fence lifts");
    assert.deepEqual(log.handled, [1, 2, 3]);
    for (const m of msgs) assert.deepEqual(m.calls, ["ack"]);
    // Fenced again in the middle of a drain: the drain still gives everything back.
    may = false;
    const later = [4, 5].map((s) => delivery(s, "k"));
    for (const m of later) d.push(m.js);
    assert.equal(await d.drain(100), true);
    for (const m of later) assert.deepEqual(m.calls, ["nak"], "held messages go back on drain");
  });

  test("dispatcher - asks mayStart before every start: a synchronous handler that outlasts the proof stops the run at once (serial and key)", async () => {
    for (const mode of ["serial", "key"] as const) {
      const { events, log } = recorder();
      let may = false;
      // The first handler does synchronous work long enough for the pin's proof to run out meanwhile.
      const d = new Dispatcher(
        (msg) => {
          if (msg.seq === 1) may = false;
        },
        { ...policy({ mode, maxInFlight: 4 }), mayStart: () => may },
        events,
      );
      const msgs = [1, 2, 3].map((s) => delivery(s, mode === "key" ? `k${s}` : "k"));
      for (const m of msgs) d.push(m.js);
      may = true;
      d.wake(); // all three are ready: one pump would start them all
      assert.deepEqual(log.handled, [1], `${mode}: nothing starts after the handler that outlasted the proof`);
      may = true;
      d.wake();
      assert.deepEqual(log.handled, [1, 2, 3], `${mode}: the rest once proven again`);
      assert.equal(await d.drain(100), true);
    }
  });

  test("dispatcher - key: keys run in parallel, one key never overlaps itself, and each key keeps its order", async () => {
    const { events, log } = recorder();
    const gate = new Gate();
    const d = new Dispatcher(gate.handler, policy({ mode: "key", maxInFlight: 8 }), events);
    // k0: 1, 3, 5; k1: 2, 4; k2: 6
    const msgs = [delivery(1, "k0"), delivery(2, "k1"), delivery(3, "k0"), delivery(4, "k1"), delivery(5, "k0"), delivery(6, "k2")];
    for (const m of msgs) d.push(m.js);
    assert.deepEqual([...gate.started].sort((a, b) => a - b), [1, 2, 6], "the heads of the three keys start at once");
    await gate.release(2);
    assert.deepEqual(gate.started.slice(3), [4], "k1 moves on once its first message is done");
    await gate.release(1);
    await gate.release(4);
    await gate.release(3);
    await gate.release(6);
    await gate.release(5);
    await waitFor(() => log.handled.length === 6, 2000, "6 handled");
    assert.deepEqual(log.handled, [2, 1, 4, 3, 6, 5]);
    assert.equal(gate.overlaps, 0, "no two handlers of one key at once");
    for (const m of msgs) assert.deepEqual(m.calls, ["ack"]);
  });

  test("dispatcher - partition: lanes are partitions, whatever the key", async () => {
    const { events, log } = recorder();
    const started: number[] = [];
    const release = new Map<number, () => void>();
    const d = new Dispatcher(
      async (msg) => {
        started.push(msg.seq);
        await new Promise<void>((r) => release.set(msg.seq, r));
      },
      policy({ mode: "partition", maxInFlight: 8 }),
      events,
    );
    d.push(delivery(1, "a", 3).js);
    d.push(delivery(2, "b", 3).js); // same partition, other key: waits
    d.push(delivery(3, "a", 4).js); // other partition: runs
    assert.deepEqual(started, [1, 3]);
    release.get(1)?.();
    await waitFor(() => started.length === 3, 2000, "seq 2 to start");
    assert.deepEqual(started, [1, 3, 2]);
    release.get(2)?.();
    release.get(3)?.();
    await waitFor(() => log.handled.length === 3, 2000, "3 handled");
  });

  test("dispatcher - maxInFlight caps the handlers running at once, across lanes", async () => {
    const { events, log } = recorder();
    const gate = new Gate();
    const d = new Dispatcher(gate.handler, policy({ mode: "key", maxInFlight: 2 }), events);
    for (let s = 1; s <= 6; s++) d.push(delivery(s, `k${s}`).js);
    assert.equal(d.running, 2);
    assert.equal(d.size, 6);
    assert.deepEqual(gate.started, [1, 2]);
    for (let s = 1; s <= 6; s++) await gate.release(s);
    await waitFor(() => log.handled.length === 6, 2000, "6 handled");
    assert.equal(gate.maxRunning, 2, "never more than maxInFlight at once");
    assert.deepEqual(gate.started, [1, 2, 3, 4, 5, 6], "lanes start in the order they became ready");
  });

  test("dispatcher - a redelivered lower sequence goes in front of its lane's later messages", async () => {
    const { events, log } = recorder();
    const gate = new Gate();
    const d = new Dispatcher(gate.handler, policy({ mode: "key" }), events);
    d.push(delivery(5, "k").js); // runs
    d.push(delivery(7, "k").js);
    d.push(delivery(8, "k").js);
    d.push(delivery(6, "k", 0, 2).js); // e.g. redelivered after AckWait: belongs before 7
    await gate.release(5);
    await gate.release(6);
    await gate.release(7);
    await gate.release(8);
    await waitFor(() => log.handled.length === 4, 2000, "4 handled");
    assert.deepEqual(log.handled, [5, 6, 7, 8]);
  });

  test("dispatcher - redeliveries of a running or buffered message are not handled twice", async () => {
    const { events, log } = recorder();
    const gate = new Gate();
    const d = new Dispatcher(gate.handler, policy({ mode: "key" }), events);
    const first = delivery(1, "k");
    const queued = delivery(2, "k");
    d.push(first.js);
    d.push(queued.js);
    const runningAgain = delivery(1, "k", 0, 2);
    const queuedAgain = delivery(2, "k", 0, 2);
    d.push(runningAgain.js); // dropped: the running copy settles it
    d.push(queuedAgain.js); // replaces the buffered copy
    assert.equal(d.size, 2);
    await gate.release(1);
    await gate.release(2);
    await waitFor(() => log.handled.length === 2, 2000, "2 handled");
    assert.deepEqual(gate.started, [1, 2]);
    assert.deepEqual(first.calls, ["ack"]);
    assert.deepEqual(runningAgain.calls, []);
    assert.deepEqual(queued.calls, [], "the older buffered copy is superseded");
    assert.deepEqual(queuedAgain.calls, ["ack"], "the freshest copy is the one handled and acked");
  });

  test("dispatcher - a redelivery that crosses the ack is acked again, not handled again", async () => {
    const { events, log } = recorder();
    const gate = new Gate();
    const d = new Dispatcher(gate.handler, policy({ mode: "key" }), events);
    d.push(delivery(1, "k").js);
    d.push(delivery(2, "k").js);
    await gate.release(1);
    // seq 2 runs now; the server redelivers seq 1 (sent before our ack reached it)
    const late = delivery(1, "k", 0, 2);
    d.push(late.js);
    await gate.release(2);
    await waitFor(() => log.handled.length === 2, 2000, "2 handled");
    await sleep(10);
    assert.deepEqual(gate.started, [1, 2], "seq 1 is handled once");
    assert.deepEqual(late.calls, ["ack"], "the late copy is acked so the server stops redelivering it");
  });

  test("dispatcher - a message the handler nak'ed holds its lane until it is redelivered, then the lane goes on in order", async () => {
    const { events } = recorder();
    const starts: string[] = [];
    let nakOnce = true;
    const d = new Dispatcher(
      (msg) => {
        starts.push(`${keyOf(msg)}/${msg.seq}#${msg.info.deliveryCount}`);
        if (msg.seq === 1 && nakOnce) {
          nakOnce = false;
          msg.nak();
        }
      },
      policy({ mode: "key", workingIntervalMs: 5_000 }),
      events,
    );
    const first = delivery(1, "k");
    d.push(first.js);
    d.push(delivery(2, "k").js);
    d.push(delivery(3, "other").js);
    await waitFor(() => starts.length === 2, 2000, "k/1 and other/3 to run");
    await sleep(20);
    assert.deepEqual(starts, ["k/1#1", "other/3#1"], "k/2 waits for the redelivery of k/1");
    assert.deepEqual(first.calls, ["nak"]);
    assert.equal(d.size, 1, "k/2 is buffered");
    const again = delivery(1, "k", 0, 2);
    d.push(again.js);
    await waitFor(() => starts.length === 4, 2000, "k/1 again, then k/2");
    assert.deepEqual(starts, ["k/1#1", "other/3#1", "k/1#2", "k/2#1"]);
    assert.deepEqual(again.calls, ["ack"]);
    assert.equal(await d.drain(100), true);
  });

  test("dispatcher - a nak'ed message that never comes back releases its lane after the nak delay plus two AckWaits", async () => {
    const { events, log } = recorder();
    let t0 = 0;
    const d = new Dispatcher(
      (msg) => {
        if (msg.seq === 1) {
          t0 = performance.now();
          msg.nak(30);
        }
      },
      policy({ mode: "key", workingIntervalMs: 10 }), // AckWait 20 ms: released after 30 + 40 + 1000 ms
      events,
    );
    d.push(delivery(1, "k").js);
    d.push(delivery(2, "k").js);
    await waitFor(() => log.handled.includes(2), 5000, "k/2 to run after the hold");
    assert.ok(performance.now() - t0 >= 1000, "the lane was held");
    assert.equal(await d.drain(100), true);
  });

  test("dispatcher - working() is timed from the delivery and covers buffered messages: nothing held here reaches AckWait", async () => {
    const { events, log } = recorder();
    const gate = new Gate();
    const d = new Dispatcher(gate.handler, policy({ mode: "key", workingIntervalMs: 40 }), events);
    const first = delivery(1, "k");
    const waited = delivery(2, "k");
    d.push(first.js);
    d.push(waited.js);
    await sleep(100); // seq 2 waits in the lane longer than AckWait/2
    assert.ok(first.calls.filter((c) => c === "working").length >= 1, "the running message beats");
    assert.ok(waited.calls.filter((c) => c === "working").length >= 1, "a buffered message beats too, so it is not redelivered while it waits");
    await gate.release(1);
    await waitFor(() => gate.running.has(2), 1000, "seq 2 to start");
    await gate.release(2);
    await waitFor(() => log.handled.length === 2, 1000, "2 handled");
    assert.equal(waited.calls.at(-1), "ack");
  });

  test("dispatcher - serial without retries is Go's: a failure is nak'ed and the instance moves on", async () => {
    const { events, log } = recorder();
    const started: number[] = [];
    const d = new Dispatcher(
      (msg) => {
        started.push(msg.seq);
        if (msg.seq === 1) throw new Error("boom");
      },
      policy({ mode: "serial", maxInFlight: 1 }),
      events,
    );
    const one = delivery(1, "k");
    const two = delivery(2, "k");
    d.push(one.js);
    d.push(two.js);
    await waitFor(() => log.handled.length === 1, 2000, "seq 2 handled");
    assert.deepEqual(started, [1, 2]);
    assert.deepEqual(one.calls, ["nak"]);
    assert.deepEqual(two.calls, ["ack"]);
    assert.deepEqual(log.errors, [{ seq: 1, attempt: 1 }]);
  });

  test("dispatcher - retries in place with backoff and heartbeats, holding only the failing lane", async () => {
    const { events, log } = recorder();
    const attempts = new Map<number, number>();
    const backoffs: number[] = [];
    const retry: RetryPolicy = {
      maxDeliver: 5,
      backoffMs: (attempt) => {
        backoffs.push(attempt);
        return 30;
      },
    };
    const started: string[] = [];
    const d = new Dispatcher(
      (msg) => {
        const n = (attempts.get(msg.seq) ?? 0) + 1;
        attempts.set(msg.seq, n);
        started.push(`${msg.seq}#${n}`);
        if (msg.seq === 1 && n < 3) throw new Error(`fail ${n}`);
      },
      policy({ mode: "key", retry, workingIntervalMs: 10 }),
      events,
    );
    const one = delivery(1, "k");
    d.push(one.js);
    d.push(delivery(2, "k").js);
    d.push(delivery(3, "other").js);
    await waitFor(() => log.handled.length === 3, 3000, "3 handled");
    assert.deepEqual(log.handled, [3, 1, 2], "the other key is not held up by the retries");
    assert.deepEqual(started.filter((s) => !s.startsWith("3")), ["1#1", "1#2", "1#3", "2#1"]);
    assert.deepEqual(backoffs, [1, 2]);
    assert.deepEqual(log.errors, [
      { seq: 1, attempt: 1 },
      { seq: 1, attempt: 2 },
    ]);
    assert.ok(one.calls.includes("working"), "working() is sent while the message waits between attempts");
    assert.equal(one.calls.filter((c) => c !== "working").join(","), "ack", "acked once, never nak'ed");
  });

  test("dispatcher - after maxDeliver attempts the message is dead-lettered with its origin, terminated, and its key moves on", async () => {
    const { events, log } = recorder();
    const published: { subject: string; data: string; headers: MsgHdrs }[] = [];
    const retry: RetryPolicy = {
      maxDeliver: 3,
      backoffMs: () => 1,
      deadLetter: {
        subject: "dlq.orders",
        idPrefix: "pcg-dead-letter:ORDERS:g",
        publish: (subject, payload, h) => {
          published.push({ subject, data: new TextDecoder().decode(payload), headers: h });
          return Promise.resolve();
        },
      },
    };
    let calls = 0;
    const d = new Dispatcher(
      (msg) => {
        if (msg.seq === 1) {
          calls += 1;
          throw new Error("bad\nrecord");
        }
      },
      policy({ mode: "key", retry }),
      events,
    );
    const src = createHeaders();
    src.set("Nats-Stream-Source", "ORIGIN 42 orders.> 0.orders.k");
    const bad = delivery(1, "k", 7, 1, src);
    d.push(bad.js);
    d.push(delivery(2, "k", 7).js);
    await waitFor(() => log.handled.includes(2), 2000, "k/2 handled after the dead letter");
    assert.equal(calls, 3);
    assert.equal(published.length, 1);
    const dl = published[0];
    assert.ok(dl);
    assert.equal(dl.subject, "dlq.orders");
    assert.equal(dl.data, JSON.stringify({ key: "k", seq: 1 }));
    assert.equal(dl.headers.get("Pcg-Origin-Stream"), "ORIGIN");
    assert.equal(dl.headers.get("Pcg-Origin-Sequence"), "42");
    assert.equal(dl.headers.get("Pcg-Partition"), "7");
    assert.equal(dl.headers.get("Pcg-Key"), "k");
    assert.equal(dl.headers.get("Pcg-Delivery-Count"), "3", "the handler ran 3 times");
    assert.equal(dl.headers.get("Pcg-Error"), "bad record");
    assert.equal(dl.headers.get("Pcg-Subject"), "orders.k", "the subject without the partition token");
    assert.deepEqual(bad.calls, ["term(dead-lettered to dlq.orders)"]);
    assert.deepEqual(log.deadLettered, [{ seq: 1, subject: "dlq.orders" }]);
    // A late redelivery of the terminated message is terminated again, not handled.
    const late = delivery(1, "k", 7, 2);
    d.push(late.js);
    assert.deepEqual(late.calls, ["term"]);
    assert.equal(calls, 3);
  });

  test("dispatcher - a dead letter from a static group (no Nats-Stream-Source, but a pin header) names the consumer's stream and sequence", async () => {
    const { events } = recorder();
    const published: MsgHdrs[] = [];
    const retry: RetryPolicy = { maxDeliver: 1, backoffMs: () => 1, deadLetter: { subject: "dlq", idPrefix: "pcg-dead-letter:ORDERS:g", publish: (_s, _p, h) => Promise.resolve(void published.push(h)) } };
    const d = new Dispatcher(
      () => {
        throw new Error("no");
      },
      policy({ mode: "partition", retry }),
      events,
    );
    const pin = createHeaders();
    pin.set("Nats-Pin-Id", "abc");
    d.push(delivery(9, "k", 2, 4, pin).js);
    await waitFor(() => published.length === 1, 2000, "a dead letter");
    const h = published[0];
    assert.equal(h?.get("Pcg-Origin-Stream"), "ORDERS");
    assert.equal(h?.get("Pcg-Origin-Sequence"), "9");
    assert.equal(h?.get("Pcg-Partition"), "2");
    assert.equal(h?.get("Pcg-Key"), "k", "the key comes from keyOf outside key mode");
    assert.equal(h?.get("Pcg-Delivery-Count"), "4", "3 earlier deliveries plus 1 attempt");
  });

  test("dispatcher - without a dead-letter subject the key blocks (reported once) while other keys go on", async () => {
    const { events, log } = recorder();
    const retry: RetryPolicy = { maxDeliver: 2, backoffMs: () => 5 };
    let attempts = 0;
    const d = new Dispatcher(
      (msg) => {
        if (keyOf(msg) === "stuck") {
          attempts += 1;
          throw new Error("always");
        }
      },
      policy({ mode: "key", retry }),
      events,
    );
    const stuck = delivery(1, "stuck");
    d.push(stuck.js);
    d.push(delivery(2, "stuck").js);
    for (let s = 3; s <= 6; s++) d.push(delivery(s, `ok${s}`).js);
    await waitFor(() => log.handled.length === 4 && attempts >= 6, 3000, "other keys handled while stuck/1 retries");
    assert.deepEqual(log.blocked, [{ lane: "stuck", seq: 1 }], "blocked is reported once");
    assert.ok(!log.handled.includes(2), "the key's later message waits");
    assert.equal(d.size, 2);
    // Draining aborts the backoff: the blocked message and the one behind it are nak'ed.
    assert.equal(await d.drain(1000), true);
    assert.ok(stuck.calls.includes("nak"));
    assert.ok(!stuck.calls.includes("ack") && !stuck.calls.includes("term"));
  });

  test("dispatcher - drain: running handlers finish with a confirmed ack, buffered messages are nak'ed, later deliveries too", async () => {
    const { events, log } = recorder();
    const gate = new Gate();
    const d = new Dispatcher(gate.handler, policy({ mode: "key", maxInFlight: 1 }), events);
    const running = delivery(1, "a");
    const buffered = [delivery(2, "a"), delivery(3, "b")];
    d.push(running.js);
    for (const m of buffered) d.push(m.js);
    const drained = d.drain(5000);
    await sleep(20);
    assert.deepEqual(running.calls, [], "the running handler is waited for");
    for (const m of buffered) assert.deepEqual(m.calls, [], "buffered messages are nak'ed only once the running ones are done");
    const late = delivery(4, "c");
    d.push(late.js);
    assert.deepEqual(late.calls, [], "a delivery during the drain is held, not started");
    await gate.release(1);
    assert.equal(await drained, true);
    assert.deepEqual(running.calls, ["ackAck"], "the ack is confirmed: the consumer may be deleted right after");
    for (const m of [...buffered, late]) assert.deepEqual(m.calls, ["nak"]);
    assert.deepEqual(gate.started, [1], "nothing new starts while draining");
    assert.deepEqual(log.handled, [1]);
    const afterDrain = delivery(5, "c");
    d.push(afterDrain.js);
    assert.deepEqual(afterDrain.calls, ["nak"], "after the drain, a delivery is nak'ed at once");
  });

  test("dispatcher - drain gives everything back in stream order, late arrivals included, and re-acks late copies of acked messages", async () => {
    const { events } = recorder();
    const gate = new Gate();
    const naks: number[] = [];
    const d = new Dispatcher(gate.handler, policy({ mode: "key", maxInFlight: 1 }), events);
    const tracked = (seq: number, key: string, dc = 1): FakeMsg => {
      const m = delivery(seq, key, 0, dc);
      const js = m.js as unknown as { nak: () => void };
      const nak = js.nak;
      js.nak = () => {
        naks.push(seq);
        nak();
      };
      return m;
    };
    d.push(tracked(1, "k").js); // runs
    d.push(tracked(3, "k").js);
    d.push(tracked(2, "j").js);
    await waitFor(() => gate.running.has(1), 1000, "seq 1 to run");
    await gate.release(1);
    await waitFor(() => gate.running.has(2), 1000, "seq 2 to run");
    const drained = d.drain(5000);
    d.push(tracked(5, "k").js); // arrives while draining (e.g. already on the wire when the consume stopped)
    d.push(tracked(4, "j").js);
    const lateCopyOfAcked = tracked(1, "k", 2);
    d.push(lateCopyOfAcked.js);
    await gate.release(2);
    await drained;
    assert.deepEqual(naks, [3, 4, 5], "nak'ed in stream order, so the server redelivers them in order");
    assert.deepEqual(lateCopyOfAcked.calls, ["ack"], "a late copy of a message acked here is acked again, never given back");
  });

  test("dispatcher - drain timeout: the handler's signal aborts, the drain still waits for it, and it keeps beating", async () => {
    const { events } = recorder();
    const timeouts: { running: number; waitedMs: number }[] = [];
    let signal: AbortSignal | undefined;
    let finishSlow: (() => void) | undefined;
    const handler = async (msg: ConsumerGroupMessage): Promise<void> => {
      signal = msg.signal;
      await new Promise<void>((resolve) => (finishSlow = resolve));
    };
    const d = new Dispatcher(handler, policy({ mode: "key", workingIntervalMs: 20 }), { ...events, onDrainTimeout: (running, waitedMs) => void timeouts.push({ running, waitedMs }) });
    const slow = delivery(1, "a");
    const behind = delivery(2, "a");
    d.push(slow.js);
    d.push(behind.js);
    let drainedAt = 0;
    const drained = d.drain(30).then((finished) => {
      drainedAt = performance.now();
      return finished;
    });
    await waitFor(() => timeouts.length === 1, 1000, "the drain timeout to be reported");
    assert.equal(signal?.aborted, true, "msg.signal aborted at the drain timeout");
    assert.deepEqual(timeouts.map((t) => t.running), [1]);
    await sleep(100); // several AckWait/2 periods past the timeout: the drain must still wait, and the message beat
    assert.equal(drainedAt, 0, "the drain does not release the partition while the handler runs");
    assert.ok(slow.calls.filter((c) => c === "working").length >= 2, "working() goes on until the handler settles");
    assert.deepEqual(behind.calls.filter((c) => c !== "working"), [], "the message behind it is given back only after it settled");
    finishSlow?.();
    assert.equal(await drained, false, "it reports that the timeout was passed");
    assert.equal(slow.calls.at(-1), "ackAck", "the handler still settles its message when it ends");
    assert.deepEqual(behind.calls.filter((c) => c !== "working"), ["nak"]);
  });

  test("dispatcher - no handoff (timeout 0, Go's behaviour) does not wait for handlers", async () => {
    const { events } = recorder();
    const gate = new Gate();
    const d = new Dispatcher(gate.handler, policy({ mode: "key" }), events);
    d.push(delivery(1, "a").js);
    assert.equal(await d.drain(0), false);
    await gate.release(1);
  });

  test("dispatcher - a key function that throws is a failure of that message: failure policy, not a dead consume", async () => {
    const { events, log } = recorder();
    const stored: { subject: string; headers: MsgHdrs }[] = [];
    const retry: RetryPolicy = {
      maxDeliver: 2,
      backoffMs: () => 1,
      deadLetter: { subject: "dlq", idPrefix: "pcg-dead-letter:ORDERS:g", publish: (subject, _p, headers) => {
        stored.push({ subject, headers });
        return Promise.resolve();
      } },
    };
    const errors: unknown[] = [];
    const badKey = (msg: ConsumerGroupMessage): string => {
      if (msg.subject.endsWith("bad")) throw new Error("no key in this subject");
      return keyOf(msg);
    };
    const d = new Dispatcher(() => undefined, policy({ mode: "key", keyOf: badKey, retry }), { ...events, onHandlerError: (e, msg, attempt) => void (errors.push(e), log.errors.push({ seq: msg.seq, attempt })) });
    const bad = delivery(1, "bad");
    assert.doesNotThrow(() => d.push(bad.js), "push never throws for a bad key");
    d.push(delivery(2, "good").js);
    await waitFor(() => stored.length === 1 && log.handled.includes(2), 2000, "the bad message dead-lettered, the good one handled");
    assert.deepEqual(log.errors, [{ seq: 1, attempt: 1 }, { seq: 1, attempt: 2 }]);
    assert.equal((errors[0] as { code?: string }).code, "KEY_FAILED");
    assert.equal(stored[0]?.headers.get(DeadLetterHeaders.Key), "", "the dead letter's key is unknown");
    assert.ok(bad.calls.some((c) => c.startsWith("term")), "then terminated");
  });

  test("dispatcher - a key function that fails once: the message holds its partition, so its key never runs twice at once or out of order", async () => {
    const { events } = recorder();
    const gate = new Gate();
    const errors: { seq: number; code: string | undefined }[] = [];
    let flaky = true;
    const keyOfOnce = (msg: ConsumerGroupMessage): string => {
      if (msg.seq === 1 && flaky) {
        flaky = false;
        throw new Error("key service down");
      }
      return keyOf(msg);
    };
    const handler = async (msg: ConsumerGroupMessage): Promise<void> => {
      if (msg.seq === 6) throw new Error("the handler's own error");
      await gate.handler(msg);
    };
    const retry: RetryPolicy = { maxDeliver: 5, backoffMs: () => 1 };
    const d = new Dispatcher(handler, policy({ mode: "key", keyOf: keyOfOnce, retry }), {
      ...events,
      onHandlerError: (e, msg) => void errors.push({ seq: msg.seq, code: (e as { code?: string }).code }),
    });
    for (let seq = 1; seq <= 4; seq++) d.push(delivery(seq, "a").js);
    d.push(delivery(5, "b", 1).js); // another partition: not held
    await waitFor(() => gate.running.has(1), 1000, "seq 1 to run once its key answers");
    await waitFor(() => gate.running.has(5), 1000, "another partition's message runs meanwhile");
    await sleep(20);
    assert.deepEqual([...gate.running.keys()].sort(), [1, 5], "the key's later messages wait for it");
    assert.deepEqual(errors, [{ seq: 1, code: "KEY_FAILED" }], "the failed key is reported as the first attempt");
    await gate.release(1);
    for (const seq of [2, 3, 4]) await gate.release(seq);
    assert.deepEqual(gate.started.filter((s) => s <= 4), [1, 2, 3, 4], "in order");
    assert.equal(gate.overlaps, 0);
    d.push(delivery(6, "c").js);
    await waitFor(() => errors.length >= 2, 1000, "the handler's own error");
    assert.deepEqual(errors[1], { seq: 6, code: undefined }, "a handler's error is not a key failure");
    await gate.release(5);
    await d.drain(100);
  });

  test("dispatcher - messages whose key never answers block in their own lane, and then release their partition", async () => {
    const { events, log } = recorder();
    const noKey = (msg: ConsumerGroupMessage): string => {
      if (keyOf(msg) === "bad") throw new Error("no key");
      return keyOf(msg);
    };
    const d = new Dispatcher(() => undefined, policy({ mode: "key", keyOf: noKey, retry: { maxDeliver: 2, backoffMs: () => 5 } }), events);
    d.push(delivery(1, "bad").js);
    d.push(delivery(2, "good").js);
    d.push(delivery(3, "bad").js);
    d.push(delivery(4, "good").js);
    assert.deepEqual(log.handled, [], "while the first is retried, the partition waits");
    await waitFor(() => log.blocked.length === 1, 1000, "the first message without a key to block");
    await waitFor(() => log.handled.length === 2, 1000, "then the keyed messages of its partition go on");
    d.push(delivery(5, "bad").js); // behind the blocked one: it does not hold the partition again
    d.push(delivery(6, "good").js);
    await waitFor(() => log.handled.includes(6), 1000, "later keyed messages still flow");
    assert.deepEqual(log.handled, [2, 4, 6]);
    await d.drain(100);
  });

  test("dispatcher - keys backing off or blocked hold no handler slot: other keys keep flowing", async () => {
    const { events, log } = recorder();
    const retry: RetryPolicy = { maxDeliver: 3, backoffMs: () => 50 }; // no dead-letter subject: poison keys block
    const handler = (msg: ConsumerGroupMessage): void => {
      if (keyOf(msg).startsWith("poison")) throw new Error("poison");
    };
    const d = new Dispatcher(handler, policy({ mode: "key", maxInFlight: 2, retry }), events);
    d.push(delivery(1, "poison1").js);
    d.push(delivery(2, "poison2").js);
    for (let s = 3; s <= 7; s++) d.push(delivery(s, `good${s}`).js);
    await waitFor(() => log.handled.length === 5, 2000, "the 5 good messages handled while both poison keys retry");
    await waitFor(() => log.blocked.length === 2, 2000, "both poison keys blocked");
    d.push(delivery(8, "good8").js);
    await waitFor(() => log.handled.includes(8), 1000, "a later good message still flows past the blocked keys");
    assert.equal(await d.drain(100), true);
  });

  test("dispatcher - Go's serial mode nak's a failure with a delay that grows with the delivery count", async () => {
    const { events } = recorder();
    const d = new Dispatcher(
      () => {
        throw new Error("always");
      },
      policy({ mode: "serial", maxInFlight: 1, nakDelayMs: (dc) => [100, 500, 1000][Math.min(dc, 3) - 1] ?? 0 }),
      events,
    );
    const first = delivery(1, "a", 0, 1);
    const third = delivery(2, "b", 0, 3);
    d.push(first.js);
    d.push(third.js);
    await waitFor(() => third.calls.length > 0, 1000, "both nak'ed");
    assert.deepEqual(first.calls, ["nak(100)"]);
    assert.deepEqual(third.calls, ["nak(1000)"]);
  });

  test("dispatcher - held (mayStart false) while the previous owner's messages come back: nothing starts; wake() starts each key in order", () => {
    const { events, log } = recorder();
    let may = false;
    const d = new Dispatcher(() => undefined, { ...policy({ mode: "key" }), mayStart: () => may }, events);
    d.push(delivery(10, "a").js); // fresh, delivered to us while the previous owner's are still out
    d.push(delivery(11, "b").js);
    d.push(delivery(9, "a", 0, 2).js); // the dead owner's messages come back after their AckWait, in any order
    assert.equal(d.heldUpTo(9), 1, "what arrived after the consumer's state was read is not subtracted from it");
    assert.equal(d.heldUpTo(11), 3);
    d.push(delivery(8, "a", 0, 2).js);
    assert.deepEqual(log.handled, [], "nothing starts while held, redeliveries included");
    may = true;
    d.wake();
    assert.deepEqual([...log.handled].sort((x, y) => x - y), [8, 9, 10, 11], "then everything, at once");
    assert.deepEqual(log.handled.filter((seq) => seq !== 11), [8, 9, 10], "key a in stream order");
  });

  test("dispatcher - knows() a message held, running, or settled here, and not one it never had or gave back", async () => {
    const { events } = recorder();
    const gate = new Gate();
    let may = false;
    const d = new Dispatcher((msg) => gate.handler(msg), { ...policy({ mode: "key" }), mayStart: () => may }, events);
    d.push(delivery(3, "a").js);
    d.push(delivery(4, "a").js);
    assert.equal(d.knows(3), true, "held, not started");
    assert.equal(d.knows(5), false, "never delivered here");
    may = true;
    d.wake();
    await waitFor(() => gate.running.has(3), 1000, "3 to start");
    assert.equal(d.knows(3), true, "running");
    await gate.release(3);
    await waitFor(() => gate.running.has(4), 1000, "4 to start");
    assert.equal(d.knows(3), true, "acked here (its ack may not have reached the server)");
    await gate.release(4);
  });

  test("dispatcher - drain gives back a retry that is due but waits for a handler slot (it never hangs the drain)", { timeout: 10_000 }, async () => {
    const { events, log } = recorder();
    const gate = new Gate();
    let failures = 0;
    const handler = async (msg: ConsumerGroupMessage): Promise<void> => {
      if (keyOf(msg) === "poison") {
        failures += 1;
        throw new Error("poison");
      }
      await gate.handler(msg);
    };
    const d = new Dispatcher(handler, policy({ mode: "key", maxInFlight: 1, retry: { maxDeliver: 5, backoffMs: () => 1 } }), events);
    const poison = delivery(1, "poison");
    d.push(poison.js);
    await waitFor(() => failures === 1, 1000, "the first failure");
    d.push(delivery(2, "slow").js); // takes the only slot while poison backs off
    await waitFor(() => gate.running.has(2), 1000, "the slow handler to start");
    await sleep(20); // poison's 1 ms backoff is over: it is due, queued for the slot
    const drained = d.drain(5000);
    await sleep(5);
    assert.ok(poison.calls.includes("nak"), "the due retry went back at once");
    await gate.release(2);
    assert.equal(await drained, true, "the drain finished once the running handler did");
    assert.deepEqual(log.handled, [2]);
  });

  test("dispatcher - a poison message that earlier deliveries already tried is dead-lettered before the server's max_deliver drops it", async () => {
    const { events, log } = recorder();
    const ids: string[] = [];
    const retry: RetryPolicy = {
      maxDeliver: 3,
      backoffMs: () => 1,
      deadLetter: { subject: "dlq", idPrefix: "pcg-dead-letter:ORDERS:billing", publish: (_s, _p, _h, id) => Promise.resolve(void ids.push(id)) },
    };
    const d = new Dispatcher(
      () => {
        throw new Error("poison");
      },
      policy({ mode: "key", retry }),
      events,
    );
    d.push(delivery(7, "a", 0, 3).js); // given back twice by other instances (step-downs): third delivery
    await waitFor(() => log.deadLettered.length === 1, 1000, "the dead letter");
    assert.deepEqual(log.errors, [{ seq: 7, attempt: 1 }], "one failure here is the third run: dead-lettered at once");
    assert.deepEqual(ids, ["pcg-dead-letter:ORDERS:billing:ORDERS:7:0"], "its id names the group and the stored message");
  });

  test("dispatcher - losing the pin aborts the signal of handlers still running; later messages get a fresh signal", async () => {
    const { events } = recorder();
    const gate = new Gate();
    const signals: AbortSignal[] = [];
    const d = new Dispatcher(
      async (msg) => {
        signals.push(msg.signal);
        await gate.handler(msg);
      },
      policy({ mode: "key" }),
      events,
    );
    d.push(delivery(1, "a").js);
    await waitFor(() => signals.length === 1, 1000, "the handler to start");
    d.giveBackQueued();
    assert.equal(signals[0]?.aborted, true);
    await gate.release(1);
    d.push(delivery(2, "b").js); // pinned again
    await waitFor(() => signals.length === 2, 1000, "the next handler");
    assert.equal(signals[1]?.aborted, false);
    await gate.release(2);
  });

  test("dispatcher - after losing the pin nothing more starts; what has not started goes back in stream order", async () => {
    const { events } = recorder();
    const gate = new Gate();
    const d = new Dispatcher(gate.handler, policy({ mode: "key", maxInFlight: 1 }), events);
    const running = delivery(1, "a");
    const later = [delivery(4, "c"), delivery(2, "a"), delivery(3, "b")];
    d.push(running.js);
    for (const m of later) d.push(m.js);
    await waitFor(() => gate.running.has(1), 1000, "seq 1 to start");
    const naks: number[] = [];
    for (const m of later) m.calls.length = 0;
    d.giveBackQueued();
    for (const m of [...later].sort((a, b) => a.seq - b.seq)) if (m.calls.includes("nak")) naks.push(m.seq);
    assert.deepEqual(naks, [2, 3, 4]);
    await gate.release(1);
    await sleep(10);
    assert.deepEqual(gate.started, [1], "nothing else started");
    assert.equal(d.size, 0);
  });
});

/** A shared attempt count held in memory, as the attempts bucket holds it. */
class MemoryCounter implements AttemptCounter {
  readonly counts = new Map<number, number>();
  readonly deleted: number[] = [];
  fail: Error | undefined = undefined;
  failed(msg: ConsumerGroupMessage, localRuns: number): Promise<number> {
    if (this.fail !== undefined) return Promise.reject(this.fail);
    const runs = Math.max(localRuns, (this.counts.get(msg.seq) ?? 0) + 1);
    this.counts.set(msg.seq, runs);
    return Promise.resolve(runs);
  }
  settled(seq: number): Promise<void> | undefined {
    if (!this.counts.delete(seq)) return undefined;
    this.deleted.push(seq);
    return Promise.resolve();
  }
}

describe("dispatcher - attempts counted across consumers (no server)", () => {
  const deadLetter = (ids: string[], counts: string[]): DeadLetter => ({
    subject: "dlq",
    idPrefix: "pcg-dead-letter:ORDERS:g",
    publish: (_s, _p, h, id) => {
      ids.push(id);
      counts.push(h.get(DeadLetterHeaders.DeliveryCount));
      return Promise.resolve();
    },
  });

  test("dispatcher - attempts made under an earlier consumer count: a message that failed twice elsewhere is dead-lettered on its first failure here (maxDeliver 3), with its count in the header", async () => {
    const counter = new MemoryCounter();
    counter.counts.set(5, 2); // two attempts failed under consumers a rebalance replaced
    const ids: string[] = [];
    const counts: string[] = [];
    const { events, log } = recorder();
    const d = new Dispatcher(
      () => {
        throw new Error("poison");
      },
      policy({ retry: { maxDeliver: 3, backoffMs: () => 1, attempts: counter, deadLetter: deadLetter(ids, counts) } }),
      events,
    );
    const m = delivery(5, "a"); // delivery count 1: a new consumer
    d.push(m.js);
    await waitFor(() => log.deadLettered.length === 1, 1000, "the dead letter");
    assert.deepEqual(log.errors, [{ seq: 5, attempt: 1 }], "one attempt here");
    assert.deepEqual(counts, ["3"], "the dead letter counts all three");
    assert.deepEqual(counter.deleted, [5], "the count is deleted once the message is terminated");
  });

  test("dispatcher - an attempt that fails during a drain is counted: the next owner sees it, and the last allowed one is dead-lettered instead of given back", async () => {
    const counter = new MemoryCounter();
    const ids: string[] = [];
    const counts: string[] = [];
    const gate = new Gate();
    let fail = (): void => undefined;
    const handler = async (msg: ConsumerGroupMessage): Promise<void> => {
      await new Promise<void>((_, reject) => {
        fail = () => reject(new Error("poison"));
        gate.started.push(msg.seq);
      });
    };
    const retry: RetryPolicy = { maxDeliver: 2, backoffMs: () => 1, attempts: counter, deadLetter: deadLetter(ids, counts) };
    // First owner: the attempt fails while it drains, and goes back.
    const first = recorder();
    const a = new Dispatcher(handler, policy({ retry }), first.events);
    const m1 = delivery(9, "a");
    a.push(m1.js);
    await waitFor(() => gate.started.length === 1, 1000, "the first attempt");
    const drainA = a.drain(5000);
    fail();
    assert.equal(await drainA, true);
    assert.deepEqual(m1.calls, ["nak"], "given back: one of two attempts left");
    assert.equal(counter.counts.get(9), 1, "counted although it failed during the drain");
    // Second owner (a new consumer: delivery count 1): its attempt is the last, failing during its drain too.
    const second = recorder();
    const b = new Dispatcher(handler, policy({ retry }), second.events);
    const m2 = delivery(9, "a");
    b.push(m2.js);
    await waitFor(() => gate.started.length === 2, 1000, "the second attempt");
    const drainB = b.drain(5000);
    fail();
    assert.equal(await drainB, true);
    assert.deepEqual(second.log.deadLettered, [{ seq: 9, subject: "dlq" }], "dead-lettered, not given back for a third attempt");
    assert.deepEqual(m2.calls, ["term(dead-lettered to dlq)"]);
    assert.deepEqual(counts, ["2"]);
  });

  test("dispatcher - when the shared count cannot be written, the attempts known here count and it is reported", async () => {
    const counter = new MemoryCounter();
    counter.fail = new Error("permission denied");
    const unrecorded: number[] = [];
    const { events, log } = recorder();
    const d = new Dispatcher(
      () => {
        throw new Error("poison");
      },
      policy({ retry: { maxDeliver: 2, backoffMs: () => 1, attempts: counter, deadLetter: deadLetter([], []) } }),
      { ...events, onAttemptsUnrecorded: (msg) => void unrecorded.push(msg.seq) },
    );
    d.push(delivery(3, "a").js);
    await waitFor(() => log.deadLettered.length === 1, 1000, "the dead letter after two local attempts");
    assert.deepEqual(unrecorded, [3, 3]);
    assert.deepEqual(log.errors, [
      { seq: 3, attempt: 1 },
      { seq: 3, attempt: 2 },
    ]);
  });

  test("dispatcher - a message that succeeds after failing deletes its count; one that never failed asks nothing", async () => {
    const counter = new MemoryCounter();
    let failedOnce = false;
    const { events, log } = recorder();
    const d = new Dispatcher(
      (msg) => {
        if (msg.seq === 1 && !failedOnce) {
          failedOnce = true;
          throw new Error("once");
        }
      },
      policy({ retry: { maxDeliver: 5, backoffMs: () => 1, attempts: counter } }),
      events,
    );
    d.push(delivery(1, "a").js);
    d.push(delivery(2, "b").js);
    await waitFor(() => log.handled.length === 2, 1000, "both handled");
    assert.deepEqual(counter.deleted, [1]);
    assert.equal(counter.counts.size, 0);
  });

  for (const recorded of [3, 1]) {
    test(`dispatcher - a redelivery whose recorded attempts are ${recorded === 3 ? "used up (an instance stalled before it dead-lettered it)" : "not used up"} is ${recorded === 3 ? "dead-lettered without running" : "run"} (maxDeliver 3)`, async () => {
      const counter = new MemoryCounter();
      counter.counts.set(5, recorded);
      const ids: string[] = [];
      const counts: string[] = [];
      const { events, log } = recorder();
      let runs = 0;
      const d = new Dispatcher(
        () => {
          runs += 1;
        },
        policy({ retry: { maxDeliver: 3, backoffMs: () => 1, attempts: Object.assign(counter, { recorded: (msg: ConsumerGroupMessage) => Promise.resolve(counter.counts.get(msg.seq) ?? 0) }), deadLetter: deadLetter(ids, counts) } }),
        events,
      );
      d.push(delivery(5, "a", 0, 2).js); // delivery count 2: redelivered after an AckWait
      if (recorded === 3) {
        await waitFor(() => log.deadLettered.length === 1, 1000, "the dead letter");
        assert.equal(runs, 0, "not run again");
        assert.deepEqual(counts, ["3"]);
      } else {
        await waitFor(() => log.handled.length === 1, 1000, "handled");
        assert.equal(runs, 1);
        assert.deepEqual(log.deadLettered, []);
      }
      await d.drain(1000);
    });
  }

  for (const confirmed of [true, false]) {
    test(`dispatcher - a dead letter whose terminate the server ${confirmed ? "confirms" : "does not confirm"} ${confirmed ? "deletes" : "keeps"} its attempt count (it may come back: dead-lettered again on its next failure, not after maxDeliver more)`, async () => {
      const counter = new MemoryCounter();
      const ids: string[] = [];
      const asked: string[] = [];
      const target: DeadLetter = {
        ...deadLetter(ids, []),
        request: (subject, payload) => {
          asked.push(`${subject} ${payload}`);
          return confirmed ? Promise.resolve() : Promise.reject(new Error("timeout: its consumer was deleted"));
        },
      };
      const { events, log } = recorder();
      const d = new Dispatcher(
        () => {
          throw new Error("poison");
        },
        policy({ retry: { maxDeliver: 1, backoffMs: () => 1, attempts: counter, deadLetter: target } }),
        events,
      );
      const m = delivery(5, "a");
      Object.assign(m.js, { reply: "$JS.ACK.ORDERS.g-m1.1.5.5.0.0" });
      d.push(m.js);
      await waitFor(() => log.deadLettered.length === 1, 1000, "the dead letter");
      assert.deepEqual(asked, ["$JS.ACK.ORDERS.g-m1.1.5.5.0.0 +TERM dead-lettered to dlq"], "the terminate went as a request");
      assert.ok(!m.calls.some((c) => c.startsWith("term")), "not also as a plain terminate");
      assert.deepEqual(counter.deleted, confirmed ? [5] : []);
      assert.equal(counter.counts.get(5), confirmed ? undefined : 1);
      await d.drain(1000);
    });
  }
});

/** A shared count that also counts attempts before they start (`retry.exactAttempts`), in memory. */
class CountingAheadCounter extends MemoryCounter {
  readonly begun: { seq: number; counted: number; limit: number }[] = [];
  failedCalls = 0;
  beginFails: Error | undefined = undefined;
  override failed(msg: ConsumerGroupMessage, localRuns: number): Promise<number> {
    this.failedCalls += 1;
    return super.failed(msg, localRuns);
  }
  begin(msg: ConsumerGroupMessage, earlierRuns: number, limit: number): Promise<{ counted: number; began: boolean }> {
    if (this.beginFails !== undefined) return Promise.reject(this.beginFails);
    const counted = Math.max(earlierRuns, this.counts.get(msg.seq) ?? 0);
    this.begun.push({ seq: msg.seq, counted, limit });
    if (counted >= limit) return Promise.resolve({ counted, began: false });
    this.counts.set(msg.seq, counted + 1);
    return Promise.resolve({ counted, began: true });
  }
  readonly uncounted: { seq: number; before: number }[] = [];
  uncount(msg: ConsumerGroupMessage, countedBefore: number): Promise<void> {
    this.uncounted.push({ seq: msg.seq, before: countedBefore });
    if (countedBefore === 0) this.counts.delete(msg.seq);
    else this.counts.set(msg.seq, countedBefore);
    return Promise.resolve();
  }
}

/**
 * The counter's answers held back until `answered` settles, as a slow attempts bucket (or a
 * process stopped across the request) holds them; the counting itself happens at once.
 */
function answeringAfter(counter: CountingAheadCounter, answered: Promise<void>, opts: { withRecorded: boolean }): AttemptCounter {
  const slow: AttemptCounter = {
    failed: (m, l) => counter.failed(m, l),
    settled: (seq) => counter.settled(seq),
    uncount: (m, before) => counter.uncount(m, before),
    begin: async (m, e, l) => {
      const r = await counter.begin(m, e, l);
      await answered;
      return r;
    },
  };
  if (!opts.withRecorded) return slow;
  return {
    ...slow,
    recorded: async (m) => {
      await answered;
      return counter.counts.get(m.seq) ?? 0;
    },
  };
}

describe("dispatcher - exactAttempts: attempts counted before they start (no server)", () => {
  const dlq = (counts: string[]): DeadLetter => ({
    subject: "dlq",
    idPrefix: "pcg-dead-letter:ORDERS:g",
    publish: (_s, _p, h) => {
      counts.push(h.get(DeadLetterHeaders.DeliveryCount));
      return Promise.resolve();
    },
  });

  test("dispatcher - exactAttempts: an attempt cut by a crash counts: the next owner (a new consumer, delivery count 1) does not run it past maxDeliver", async () => {
    const counter = new CountingAheadCounter();
    const counts: string[] = [];
    let starts = 0;
    let hang = false;
    const handler = (): Promise<void> => {
      starts += 1;
      // The first attempt fails; the second never returns (the process is killed during it).
      if (!hang) {
        hang = true;
        return Promise.reject(new Error("poison"));
      }
      return new Promise<void>(() => undefined);
    };
    const retry: RetryPolicy = { maxDeliver: 2, backoffMs: () => 1, attempts: counter, exact: true, deadLetter: dlq(counts) };
    const crashed = new Dispatcher(handler, policy({ retry }), recorder().events);
    crashed.push(delivery(9, "a").js);
    await waitFor(() => starts === 2, 1000, "two attempts, the second cut");
    assert.equal(counter.counts.get(9), 2, "the cut attempt was counted before it started");
    // A rebalance recreated the consumer: the message comes back with delivery count 1.
    const next = recorder();
    const d = new Dispatcher(handler, policy({ retry }), next.events);
    d.push(delivery(9, "a").js);
    await waitFor(() => next.log.deadLettered.length === 1, 1000, "dead-lettered without running");
    assert.equal(starts, 2, "maxDeliver 2: two handler starts in all");
    assert.deepEqual(counts, ["2"]);
    assert.equal(counter.failedCalls, 0, "a failure is not counted a second time");
    assert.deepEqual(counter.deleted, [9], "the count is deleted once the message is terminated");
    await d.drain(1000);
  });

  test("dispatcher - exactAttempts: each attempt is counted once, before it runs; maxDeliver 3 gives 3 starts and a dead letter counting 3", async () => {
    const counter = new CountingAheadCounter();
    const counts: string[] = [];
    const { events, log } = recorder();
    const d = new Dispatcher(
      () => {
        throw new Error("poison");
      },
      policy({ retry: { maxDeliver: 3, backoffMs: () => 1, attempts: counter, exact: true, deadLetter: dlq(counts) } }),
      events,
    );
    d.push(delivery(4, "a").js);
    await waitFor(() => log.deadLettered.length === 1, 1000, "the dead letter");
    assert.deepEqual(log.errors.map((e) => e.attempt), [1, 2, 3]);
    assert.deepEqual(counter.begun.map((b) => b.counted), [0, 1, 2], "counted ahead of each attempt");
    assert.deepEqual(counter.begun.map((b) => b.limit), [3, Infinity, Infinity], "only the first attempt here may be refused");
    assert.deepEqual(counts, ["3"]);
    assert.equal(counter.failedCalls, 0);
  });

  test("dispatcher - exactAttempts: a blocked key (no dead-letter subject) is still retried in place past maxDeliver, each retry counted", async () => {
    const counter = new CountingAheadCounter();
    const { events, log } = recorder();
    let runs = 0;
    const d = new Dispatcher(
      () => {
        runs += 1;
        if (runs <= 3) throw new Error("downstream down");
      },
      policy({ retry: { maxDeliver: 2, backoffMs: () => 1, attempts: counter, exact: true } }),
      events,
    );
    d.push(delivery(6, "a").js);
    await waitFor(() => log.handled.length === 1, 5000, "handled once downstream is back");
    assert.deepEqual(log.blocked, [{ lane: "a", seq: 6 }]);
    assert.equal(runs, 4, "blocked after 2, retried twice more, then handled");
    assert.deepEqual(counter.deleted, [6], "its count is deleted once handled");
  });

  for (const exact of [true, false]) {
    test(`dispatcher - ${exact ? "exactAttempts" : "a redelivery's count read"}: the fence closing while the count is awaited (a process stopped across the request) holds the start until it opens${exact ? ", and the attempt is not counted twice" : ""} (autoscale soak seed 13)`, async () => {
      const counter = new CountingAheadCounter();
      let open = true;
      let release!: () => void;
      const answered = new Promise<void>((r) => (release = r));
      const slow = answeringAfter(counter, answered, { withRecorded: true });
      const starts: number[] = [];
      const { events, log } = recorder();
      const d = new Dispatcher(
        (msg) => void starts.push(msg.seq),
        policy({ retry: { maxDeliver: 3, backoffMs: () => 1, attempts: slow, ...(exact ? { exact: true } : {}) }, mayStart: () => open }),
        events,
      );
      d.push(delivery(7, "a", 0, exact ? 1 : 2).js);
      await sleep(20);
      open = false; // the pin's proof ran out while the request was out
      release();
      await sleep(300);
      assert.deepEqual(starts, [], "nothing starts while fenced");
      open = true;
      await waitFor(() => log.handled.length === 1, 2000, "handled once the fence opens");
      assert.deepEqual(starts, [7]);
      if (exact) assert.deepEqual(counter.begun.map((b) => b.counted), [0], "counted once, before the first try to start");
      await d.drain(1000);
    });
  }

  for (const exact of [true, false]) {
    test(`dispatcher - ${exact ? "exactAttempts" : "a redelivery's count read"}: a blocked message that comes to a new owner with its attempts used up (no dead-letter subject) blocks there and is still retried, so a fix downstream unblocks it (review finding)`, async () => {
      const counter = new CountingAheadCounter();
      counter.counts.set(5, 8); // eight attempts failed on the member that had the partition before
      const withRecorded: AttemptCounter = Object.assign(counter, { recorded: (msg: ConsumerGroupMessage) => Promise.resolve(counter.counts.get(msg.seq) ?? 0) });
      const { events, log } = recorder();
      let fixed = false;
      let starts = 0;
      const startsWhenBlocked: number[] = [];
      const d = new Dispatcher(
        () => {
          starts += 1;
          if (!fixed) throw new Error("downstream down");
        },
        policy({ retry: { maxDeliver: 3, backoffMs: () => 1, attempts: withRecorded, ...(exact ? { exact: true } : {}) } }),
        {
          ...events,
          onBlocked: (lane, msg, error) => {
            startsWhenBlocked.push(starts);
            events.onBlocked(lane, msg, error);
          },
        },
      );
      d.push(delivery(5, "a", 0, exact ? 1 : 2).js);
      await waitFor(() => log.blocked.length === 1, 1000, "blocked on the new owner");
      assert.deepEqual(startsWhenBlocked, [0], "not run on arrival: its attempts were used up");
      fixed = true;
      await waitFor(() => log.handled.length === 1, 5000, "retried in place and handled once downstream is fixed");
      assert.ok(starts >= 1);
      await d.drain(1000);
    });
  }

  for (const how of ["a drain", "a give-back (pin lost)"] as const) {
    test(`dispatcher - exactAttempts: ${how} that begins while a count ahead is awaited (starts paused) gives the message back and finishes, instead of waiting for it forever (autoscale soak seed 411997871: 10 messages stuck behind a drain that never ended)`, { timeout: 5000 }, async () => {
      const counter = new CountingAheadCounter();
      let release!: () => void;
      const answered = new Promise<void>((r) => (release = r));
      const slow = answeringAfter(counter, answered, { withRecorded: false });
      let starts = 0;
      const d = new Dispatcher(() => void (starts += 1), policy({ retry: { maxDeliver: 3, backoffMs: () => 1, attempts: slow, exact: true } }), recorder().events);
      const m = delivery(7, "a");
      d.push(m.js);
      await sleep(20);
      d.pauseStarts(); // the member is about to give its partitions up
      if (how === "a drain") {
        const drained = d.drain(1000);
        release();
        assert.equal(await drained, true, "the drain finished");
      } else {
        d.giveBackQueued();
        release();
        await sleep(50);
        assert.equal(d.size, 0, "nothing held");
      }
      assert.equal(starts, 0, "not started");
      assert.deepEqual(m.calls, ["nak"], "given back");
      await waitFor(() => counter.uncounted.length === 1, 1000, "the count taken back");
      assert.deepEqual(counter.uncounted, [{ seq: 7, before: 0 }]);
      assert.equal(counter.counts.has(7), false, "an attempt that did not run is not counted");
    });
  }

  test("dispatcher - exactAttempts: a good message given back unstarted three times (delivery count 4, no record) runs and is handled, not dead-lettered (autoscale soak seed 101: two good messages dead-lettered without ever running)", async () => {
    const counter = new CountingAheadCounter();
    const counts: string[] = [];
    const { events, log } = recorder();
    let starts = 0;
    const d = new Dispatcher(() => void (starts += 1), policy({ retry: { maxDeliver: 3, backoffMs: () => 1, attempts: counter, exact: true, deadLetter: dlq(counts) } }), events);
    d.push(delivery(8, "a", 0, 4).js);
    await waitFor(() => log.handled.length === 1, 1000, "handled");
    assert.equal(starts, 1);
    assert.deepEqual(counts, [], "nothing dead-lettered");
    assert.deepEqual(counter.begun.map((b) => b.counted), [0], "give-backs are not attempts");
    await d.drain(1000);
  });

  test("dispatcher - exactAttempts: a failing message given back unstarted before (delivery count 4) still gets its maxDeliver 3 starts, then one dead letter counting 3", async () => {
    const counter = new CountingAheadCounter();
    const counts: string[] = [];
    const { events, log } = recorder();
    let starts = 0;
    const d = new Dispatcher(
      () => {
        starts += 1;
        throw new Error("poison");
      },
      policy({ retry: { maxDeliver: 3, backoffMs: () => 1, attempts: counter, exact: true, deadLetter: dlq(counts) } }),
      events,
    );
    d.push(delivery(9, "a", 0, 4).js);
    await waitFor(() => log.deadLettered.length === 1, 1000, "the dead letter");
    assert.equal(starts, 3);
    assert.deepEqual(counts, ["3"]);
  });

  test("dispatcher - exactAttempts: a message that succeeds has its count deleted; when counting ahead fails, it runs, is reported, and its failure is counted as without the option", async () => {
    const counter = new CountingAheadCounter();
    const unrecorded: number[] = [];
    const { events, log } = recorder();
    const d = new Dispatcher(
      (msg) => {
        if (msg.seq === 2) throw new Error("fails once counting ahead is down");
      },
      policy({ retry: { maxDeliver: 1, backoffMs: () => 1, attempts: counter, exact: true, deadLetter: dlq([]) } }),
      { ...events, onAttemptsUnrecorded: (msg) => void unrecorded.push(msg.seq) },
    );
    d.push(delivery(1, "a").js);
    await waitFor(() => log.handled.length === 1, 1000, "handled");
    assert.deepEqual(counter.deleted, [1], "counted ahead, then deleted on the ack");
    counter.beginFails = new Error("permission denied");
    d.push(delivery(2, "b").js);
    await waitFor(() => log.deadLettered.length === 1, 1000, "dead-lettered");
    assert.deepEqual(unrecorded, [2], "reported once");
    assert.equal(counter.failedCalls, 1, "its failure counted on failing instead");
    await d.drain(1000);
  });
});

describe("dispatcher - a blocked message is retried less and less often (no server, mock timers)", () => {
  test("dispatcher - blockedRetryDelayMs doubles the backoff per attempt since blocking, up to 30 s (or the backoff, when longer)", () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6, 7, 8, 40].map((n) => blockedRetryDelayMs(200, n)),
      [400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000],
    );
    assert.equal(blockedRetryDelayMs(60_000, 3), 60_000, "a backoff above the cap is kept");
    assert.equal(blockedRetryDelayMs(0, 1), 2, "a zero backoff still waits");
    assert.equal(BLOCKED_RETRY_CAP_MS, 30_000);
  });

  test("dispatcher - a key blocked with a 200 ms backoff runs 10 times in its first minute, not 300 (issue 25 item 3)", (t) => {
    t.mock.timers.enable({ apis: ["setTimeout"] });
    const { events, log } = recorder();
    const at: number[] = [];
    let clock = 0;
    const d = new Dispatcher(
      () => {
        at.push(clock);
        throw new Error("always");
      },
      policy({ mode: "key", retry: { maxDeliver: 2, backoffMs: () => 200 } }),
      events,
    );
    d.push(delivery(1, "stuck").js);
    while (clock < 60_000) {
      clock += 100;
      t.mock.timers.tick(100);
    }
    assert.deepEqual(log.blocked, [{ lane: "stuck", seq: 1 }]);
    assert.deepEqual(at, [0, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 51200], "2 attempts, then the backoff, then doubling waits");
  });
});

describe("dispatcher - parked keys (no server, issue 25 item 3)", () => {
  /** A key-mode dispatcher where "stuck" fails while `broken.on`, parking up to `maxMessages`. */
  function parking(maxMessages: number, maxBytes = 1 << 20): { d: Dispatcher; log: Recorded; broken: { on: boolean }; unblocked: string[]; full: number[]; rooms: { n: number } } {
    const { events, log } = recorder();
    const broken = { on: true };
    const unblocked: string[] = [];
    const full: number[] = [];
    const rooms = { n: 0 };
    const d = new Dispatcher(
      (msg) => {
        if (keyOf(msg).startsWith("stuck") && broken.on) throw new Error("downstream down");
      },
      policy({ mode: "key", retry: { maxDeliver: 2, backoffMs: () => 5 }, parking: { maxMessages, maxBytes } }),
      { ...events, onUnblocked: (lane, msg, outcome) => void unblocked.push(`${lane}/${msg.seq}:${outcome}`), onParkingFull: (messages) => void full.push(messages) },
      { onRoom: () => void (rooms.n += 1) },
    );
    return { d, log, broken, unblocked, full, rooms };
  }

  test("dispatcher - once a key blocks, the messages behind it hold no buffer slot (size), and later ones of the key park on arrival", async () => {
    const { d, log } = parking(100);
    d.push(delivery(1, "stuck").js);
    for (let s = 2; s <= 5; s++) d.push(delivery(s, "stuck").js);
    assert.equal(d.size, 5, "before it blocks, everything takes a slot");
    await waitFor(() => log.blocked.length === 1, 2000, "the key to block");
    assert.equal(d.size, 1, "only the blocked head takes a slot");
    assert.equal(d.parked, 4);
    assert.equal(d.held, 5, "all five are still held (delivered and unacked)");
    d.push(delivery(6, "stuck").js);
    d.push(delivery(7, "other").js);
    assert.equal(d.parked, 5, "a later message of the blocked key parks at once");
    await waitFor(() => log.handled.includes(7), 1000, "another key flows");
    const [key] = d.parkedKeys();
    assert.ok(key);
    assert.equal(key.key, "stuck");
    assert.equal(key.seq, 1);
    assert.equal(key.parkedMessages, 5);
    assert.ok(key.attempts >= 2);
    assert.equal(key.error, "downstream down");
    assert.equal(await d.drain(1000), true);
    assert.equal(d.parked, 0, "a drain gives them back");
    assert.equal(d.held, 0);
  });

  test("dispatcher - the parking limit: past it, later messages of blocked keys take slots again, reported once", async () => {
    const { d, log, full } = parking(3);
    d.push(delivery(1, "stuck").js);
    for (let s = 2; s <= 6; s++) d.push(delivery(s, "stuck").js);
    await waitFor(() => log.blocked.length === 1, 2000, "the key to block");
    assert.equal(d.parked, 3);
    assert.equal(d.size, 3, "the head and the two beyond the limit take slots");
    d.push(delivery(7, "stuck").js);
    assert.equal(d.size, 4);
    assert.deepEqual(full, [3], "parking_full reported once");
    await d.drain(1000);
  });

  test("dispatcher - the parking byte limit counts payload bytes", async () => {
    const one = delivery(2, "stuck").js.data.length;
    const { d, log } = parking(100, 2 * one);
    d.push(delivery(1, "stuck").js);
    for (let s = 2; s <= 4; s++) d.push(delivery(s, "stuck").js);
    await waitFor(() => log.blocked.length === 1, 2000, "the key to block");
    assert.equal(d.parked, 2);
    await d.drain(1000);
  });

  test("dispatcher - release (retry) after the fix: the head runs now and the key's parked messages follow in order, taking slots again", async () => {
    const { d, log, broken, unblocked } = parking(100);
    d.push(delivery(1, "stuck").js);
    for (let s = 2; s <= 4; s++) d.push(delivery(s, "stuck").js);
    await waitFor(() => log.blocked.length === 1, 2000, "the key to block");
    broken.on = false;
    assert.equal(await d.release(99, { kind: "retry" }), undefined, "nothing is blocked on seq 99");
    assert.equal(await d.release(1, { kind: "retry" }), "retrying");
    await waitFor(() => log.handled.length === 4, 1000, "the key's four messages handled");
    assert.deepEqual(log.handled, [1, 2, 3, 4]);
    assert.deepEqual(unblocked, ["stuck/1:handled"]);
    assert.equal(d.parked, 0);
    assert.equal(d.held, 0);
    assert.deepEqual(d.parkedKeys(), []);
    await d.drain(1000);
  });

  test("dispatcher - release to a dead-letter subject: the head is published there and terminated, the rest of the key is handled in order", async () => {
    const { d, log, unblocked } = parking(100);
    const stuck = delivery(1, "stuck");
    d.push(stuck.js);
    d.push(delivery(2, "other").js);
    await waitFor(() => log.blocked.length === 1, 2000, "the key to block");
    const published: string[] = [];
    const target = { subject: "dlq.ops", idPrefix: "p", publish: (to: string) => Promise.resolve(void published.push(to)) };
    assert.equal(await d.release(1, { kind: "dead_letter", target }), "dead_lettered");
    assert.deepEqual(published, ["dlq.ops"]);
    assert.deepEqual(log.deadLettered, [{ seq: 1, subject: "dlq.ops" }]);
    assert.ok(stuck.calls.some((c) => c.startsWith("term")), stuck.calls.join(","));
    assert.deepEqual(unblocked, ["stuck/1:dead_lettered"]);
    await d.drain(1000);
  });

  test("dispatcher - a dead-letter release whose publish fails throws, and the key stays blocked", async () => {
    const { d, log } = parking(100);
    d.push(delivery(1, "stuck").js);
    d.push(delivery(2, "stuck").js);
    await waitFor(() => log.blocked.length === 1, 2000, "the key to block");
    const target = { subject: "nowhere", idPrefix: "p", publish: () => Promise.reject(new Error("no stream stores nowhere")) };
    await assert.rejects(d.release(1, { kind: "dead_letter", target }), /no stream stores nowhere/);
    assert.equal(d.parkedKeys().length, 1);
    assert.equal(d.parked, 1);
    await d.drain(1000);
  });

  /** A key-mode dispatcher whose handler waits for the test to let each attempt end, failing or not. */
  function gated(): { d: Dispatcher; log: Recorded; gate: Gate; outcome: { fail: boolean } } {
    const { events, log } = recorder();
    const gate = new Gate();
    const outcome = { fail: true };
    const d = new Dispatcher(
      async (msg) => {
        await gate.handler(msg);
        if (outcome.fail) throw new Error("still down");
      },
      policy({ mode: "key", retry: { maxDeliver: 1, backoffMs: () => 60_000 }, parking: { maxMessages: 10, maxBytes: 1 << 20 } }),
      events,
    );
    return { d, log, gate, outcome };
  }

  test("dispatcher - a dead-letter release while the head's attempt runs waits for it: it fails, so it goes to the subject", async () => {
    const { d, log, gate } = gated();
    d.push(delivery(1, "stuck").js);
    await gate.release(1); // first attempt fails: blocked, next one in 60 s
    await waitFor(() => log.blocked.length === 1, 1000, "the key to block");
    assert.equal(await d.release(1, { kind: "retry" }), "retrying");
    await waitFor(() => gate.running.has(1), 1000, "the retry to start at once");
    const published: string[] = [];
    const target = { subject: "dlq.ops", idPrefix: "p", publish: (to: string) => Promise.resolve(void published.push(to)) };
    const released = d.release(1, { kind: "dead_letter", target });
    await gate.release(1);
    assert.equal(await released, "dead_lettered", "settled by the running attempt's failure");
    assert.deepEqual(published, ["dlq.ops"]);
    assert.deepEqual(log.deadLettered, [{ seq: 1, subject: "dlq.ops" }]);
    await d.drain(1000);
  });

  test("dispatcher - a dead-letter release while the attempt runs, to a subject nobody stores: it rejects with the publish's error and the key stays blocked", async () => {
    const { d, log, gate } = gated();
    d.push(delivery(1, "stuck").js);
    d.push(delivery(2, "stuck").js);
    await gate.release(1);
    await waitFor(() => log.blocked.length === 1, 1000, "the key to block");
    await d.release(1, { kind: "retry" });
    await waitFor(() => gate.running.has(1), 1000, "the retry to start");
    const target = { subject: "nowhere", idPrefix: "p", publish: () => Promise.reject(new Error("no stream stores nowhere")) };
    const failure = d.release(1, { kind: "dead_letter", target }).then(
      () => undefined,
      (error: unknown) => error,
    );
    await gate.release(1);
    assert.match(String(await failure), /no stream stores nowhere/);
    assert.equal(d.parkedKeys().length, 1, "still blocked");
    assert.equal(d.parkedKeys()[0]?.parkedMessages, 1);
    await d.drain(1000);
  });

  test("dispatcher - a dead-letter release while the attempt runs, and the attempt succeeds: handled, nothing dead-lettered", async () => {
    const { d, log, gate, outcome } = gated();
    d.push(delivery(1, "stuck").js);
    await gate.release(1);
    await waitFor(() => log.blocked.length === 1, 1000, "the key to block");
    await d.release(1, { kind: "retry" });
    await waitFor(() => gate.running.has(1), 1000, "the retry to start");
    const target = { subject: "dlq.ops", idPrefix: "p", publish: () => assert.fail("not dead-lettered") };
    const released = d.release(1, { kind: "dead_letter", target });
    outcome.fail = false;
    await gate.release(1);
    assert.equal(await released, "handled");
    assert.deepEqual(log.handled, [1]);
    await d.drain(1000);
  });

  test("dispatcher - a retry release while the attempt runs: if it fails, the next attempt starts at once, not after the doubled backoff", async () => {
    const { d, log, gate } = gated();
    d.push(delivery(1, "stuck").js);
    await gate.release(1);
    await waitFor(() => log.blocked.length === 1, 1000, "the key to block");
    await d.release(1, { kind: "retry" });
    await waitFor(() => gate.running.has(1), 1000, "the first retry to start");
    assert.equal(await d.release(1, { kind: "retry" }), "retrying", "asked while it runs");
    await gate.release(1);
    await waitFor(() => gate.running.has(1), 1000, "the next attempt to start at once (its backoff is 60 s)");
    await gate.release(1);
    await d.drain(1000);
  });

  test("dispatcher - once parking has room again, blocked keys' messages that took buffer slots while it was full are parked (review F1)", async () => {
    const { d, log } = parking(3);
    d.push(delivery(1, "stuck-a").js);
    d.push(delivery(2, "stuck-b").js);
    await waitFor(() => log.blocked.length === 2, 2000, "a and b to block");
    for (let s = 3; s <= 5; s++) d.push(delivery(s, "stuck-a").js); // a parks 3: parking is full
    d.push(delivery(6, "stuck-b").js);
    d.push(delivery(7, "stuck-b").js); // b's take buffer slots
    assert.equal(d.parked, 3);
    assert.equal(d.size, 4, "two blocked heads and b's two messages");
    // a's head is dead-lettered: its 3 messages take slots again, and b's 2 are parked in the room they left.
    const target = { subject: "dlq.ops", idPrefix: "p", publish: () => Promise.resolve() };
    assert.equal(await d.release(1, { kind: "dead_letter", target }), "dead_lettered");
    assert.equal(d.parked, 2, "b's two messages are parked now");
    await d.drain(1000);
  });

  test("dispatcher - losing the pin gives a parked key back in stream order and reports it unblocked (given back)", async () => {
    const { d, log, unblocked } = parking(100);
    const msgs = [1, 2, 3].map((s) => delivery(s, "stuck"));
    for (const m of msgs) d.push(m.js);
    await waitFor(() => log.blocked.length === 1, 2000, "the key to block");
    await waitFor(() => (d.parkedKeys()[0]?.attempts ?? 0) >= 2, 1000, "counted");
    d.giveBackQueued();
    assert.equal(d.parked, 0);
    assert.equal(d.held, 0);
    assert.ok(msgs.every((m) => m.calls.includes("nak")), "all three given back");
    assert.deepEqual(unblocked, ["stuck/1:given_back"]);
    await d.drain(1000);
  });
});

describe("dispatcher - a pin lost while stopped past AckWait (no server)", () => {
  for (const stalledPastAckWait of [true, false]) {
    test(`dispatcher - the last allowed attempt fails after the pin was lost${stalledPastAckWait ? " and the process was stalled past AckWait: it is left to the newly pinned instance (no dead letter, no nak, its count kept), not terminated under it (autoscale soak seed 505)" : " within AckWait (a step-down): it is dead-lettered here, as the message is still this instance's"}`, async () => {
      const counter = new MemoryCounter();
      const letters: string[] = [];
      const deadLetter: DeadLetter = {
        subject: "dlq",
        idPrefix: "p",
        publish: (_s, _p, _h, id) => {
          letters.push(id);
          return Promise.resolve();
        },
      };
      const { events, log } = recorder();
      let release!: () => void;
      const running = new Promise<void>((r) => (release = r));
      const d = new Dispatcher(
        async () => {
          await running;
          if (stalledPastAckWait) {
            const until = performance.now() + 250; // SIGSTOP: no beat for more than AckWait (100 ms)
            while (performance.now() < until);
          }
          throw new Error("poison");
        },
        policy({
          workingIntervalMs: 50,
          retry: { maxDeliver: 1, backoffMs: () => 1, attempts: counter, deadLetter },
        }),
        events,
      );
      const m = delivery(3, "a");
      d.push(m.js);
      await sleep(20);
      d.giveBackQueued(); // the pin moved to another instance of the member
      release();
      await waitFor(() => log.errors.length === 1, 2000, "the attempt failed");
      await sleep(50);
      if (stalledPastAckWait) {
        assert.equal(counter.counts.get(3), 1, "its failure is counted, for the next owner");
        assert.deepEqual(letters, [], "not dead-lettered here");
        assert.deepEqual(log.deadLettered, []);
        assert.deepEqual(m.calls.filter((c) => c !== "working"), [], "neither terminated nor nak'ed");
        assert.equal(d.size, 0, "not held");
      } else {
        assert.equal(letters.length, 1, "dead-lettered by the instance that ran it");
        assert.ok(m.calls.some((c) => c.startsWith("term")), m.calls.join(", "));
        assert.deepEqual(counter.deleted, [3], "its count is deleted once it is terminated");
      }
      await d.drain(1000);
    });
  }
});

describe("dispatcher - a failure after an AckWait lapse while fenced (no server)", () => {
  for (const outcome of ["the fence opens with the pin kept", "the pin moved"] as const) {
    test(`dispatcher - the last allowed attempt fails after a stall past AckWait while the instance is fenced: nothing is settled until the pin is known; ${outcome === "the pin moved" ? "the pin moved: it is left to the newly pinned instance (autoscale soak seed 13: dead-lettered under it, 6 attempts)" : "the pin was kept: it is dead-lettered then"}`, async () => {
      const counter = new MemoryCounter();
      const letters: string[] = [];
      const deadLetter: DeadLetter = {
        subject: "dlq",
        idPrefix: "p",
        publish: (_s, _p, _h, id) => {
          letters.push(id);
          return Promise.resolve();
        },
      };
      const { events, log } = recorder();
      let open = true;
      const d = new Dispatcher(
        async () => {
          await sleep(10);
          const until = performance.now() + 250; // SIGSTOP: no beat for more than AckWait (100 ms)
          while (performance.now() < until);
          open = false; // the lease ran out meanwhile: the fence closes
          throw new Error("poison");
        },
        policy({ workingIntervalMs: 50, mayStart: () => open, retry: { maxDeliver: 1, backoffMs: () => 1, attempts: counter, deadLetter } }),
        events,
      );
      const m = delivery(4, "a");
      d.push(m.js);
      await waitFor(() => log.errors.length === 1, 2000, "the attempt failed");
      await sleep(100);
      assert.deepEqual(letters, [], "not settled while fenced");
      assert.deepEqual(m.calls.filter((c) => c !== "working"), []);
      assert.equal(counter.counts.get(4), 1, "its failure is counted");
      if (outcome === "the pin moved") {
        d.giveBackQueued();
        open = true;
        await sleep(100);
        assert.deepEqual(letters, [], "left to the newly pinned instance");
        assert.deepEqual(m.calls.filter((c) => c !== "working"), [], "neither terminated nor nak'ed");
        assert.equal(d.size, 0);
      } else {
        open = true;
        await waitFor(() => letters.length === 1, 2000, "dead-lettered once the fence opens");
        assert.ok(m.calls.some((c) => c.startsWith("term")));
      }
      await d.drain(1000);
    });
  }
});

describe("dispatcher - a drain that outlasts AckWait during the last attempt (no server)", () => {
  test("dispatcher - the member is removed while its last allowed attempt runs, then the process stalls past AckWait: the failure is counted and left to the partition's next owner, not dead-lettered here (review finding: dead-lettered twice, 5 starts without exactAttempts)", async () => {
    const counter = new MemoryCounter();
    const letters: string[] = [];
    const deadLetter: DeadLetter = {
      subject: "dlq",
      idPrefix: "p",
      publish: (_s, _p, _h, id) => {
        letters.push(id);
        return Promise.resolve();
      },
    };
    const { events, log } = recorder();
    let release!: () => void;
    const running = new Promise<void>((r) => (release = r));
    const d = new Dispatcher(
      async () => {
        await running;
        const until = performance.now() + 250; // SIGSTOP: no beat for more than AckWait (100 ms)
        while (performance.now() < until);
        throw new Error("poison");
      },
      policy({ workingIntervalMs: 50, retry: { maxDeliver: 1, backoffMs: () => 1, attempts: counter, deadLetter } }),
      events,
    );
    const m = delivery(5, "a");
    d.push(m.js);
    await sleep(20);
    const drained = d.drain(5000); // the member was removed: its partitions go to another member
    release();
    assert.equal(await drained, true);
    assert.equal(log.errors.length, 1);
    assert.deepEqual(letters, [], "not dead-lettered by the draining instance");
    assert.deepEqual(m.calls.filter((c) => c !== "working"), [], "neither terminated nor nak'ed");
    assert.equal(counter.counts.get(5), 1, "its failure is counted, for the next owner");
  });
});
