/**
 * Static groups: several instances of one member. Only the pinned instance
 * receives; a standby takes over after an abrupt connection close, a kill -9 of
 * the pinned process, a planned stop() and a step-down, and nothing is lost.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { Msg, Subscription } from "@nats-io/transport-node";
import { createStatic, staticConsume, staticMemberStepDown, type ConsumerGroupMember } from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type Client, type TestEnv } from "../helpers/nats.js";
import {
  createKeyedStream,
  keys,
  missing,
  orderViolations,
  publishKeyed,
  recordStatus,
  recordingHandler,
  within,
  type Handled,
  type KeyedPayload,
} from "../helpers/static-fixtures.js";

const NS = 1_000_000;
const CHILD = fileURLToPath(new URL("../helpers/static-member-child.js", import.meta.url));

interface Takeover {
  scenario: string;
  ackWaitMs: number;
  pinnedTtlMs: number;
  takeoverMs: number;
}

describe("static - behaviour: failover between instances of one member", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];
  const children: ChildProcess[] = [];
  const takeovers: Takeover[] = [];
  const track = (m: ConsumerGroupMember): ConsumerGroupMember => {
    running.push(m);
    return m;
  };

  before(async () => {
    env = await startEnv();
  });
  afterEach(async () => {
    for (const c of children.splice(0)) {
      if (c.exitCode === null && c.signalCode === null) {
        const exited = new Promise((r) => c.once("exit", r));
        c.kill("SIGKILL");
        await exited;
      }
    }
    await Promise.all(running.splice(0).map((m) => m.stop()));
  });
  after(async () => {
    for (const t of takeovers) {
      console.log(`static failover: ${t.scenario}: takeover ${t.takeoverMs} ms (AckWait ${t.ackWaitMs} ms, PinnedTTL ${t.pinnedTtlMs} ms)`);
    }
    await env.close();
  });

  /** A one-member group on a 4-partition stream, so every instance of m1 owns every partition. */
  async function group(): Promise<{ stream: string; prefix: string }> {
    const stream = uniqueName("fo");
    const prefix = await createKeyedStream(env.jsm, stream, 4, stream);
    await createStatic(env.js, { stream, group: "g", maxMembers: 4, members: ["m1"] });
    return { stream, prefix };
  }

  async function instance(client: Client, stream: string, who: string, sink: Handled[], ackWaitMs: number, delayMs = 0): Promise<ConsumerGroupMember> {
    return track(
      await staticConsume(client.js, {
        stream,
        group: "g",
        member: "m1",
        handler: recordingHandler(who, sink, { delayMs }),
        consumerConfig: { ack_wait: ackWaitMs * NS, max_ack_pending: 1 },
      }),
    );
  }

  /** Waits until `count` pull requests wait on the member's consumer (the pinned one's and the standby's). */
  async function waiting(stream: string, count: number): Promise<void> {
    await waitFor(async () => (await env.jsm.consumers.info(stream, "g-m1")).num_waiting >= count, 10_000, `${count} waiting pulls on g-m1`);
  }

  async function drained(stream: string): Promise<void> {
    await waitFor(
      async () => {
        const ci = await env.jsm.consumers.info(stream, "g-m1");
        return ci.num_pending === 0 && ci.num_ack_pending === 0;
      },
      15_000,
      "g-m1 to have nothing pending",
    );
  }

  const inPhase = (records: Handled[], firstSeq: number): Handled[] => records.filter((r) => r.seq >= firstSeq);
  const byTime = (records: Handled[]): Handled[] => [...records].sort((a, b) => a.at - b.at);

  /** Publishes phase 1 to the first instance alone, so it is the pinned one. */
  async function pinFirst(stream: string, prefix: string, sink: Handled[]): Promise<{ sent: KeyedPayload[]; pinId: string }> {
    const sent = await publishKeyed(env.js, prefix, keys(10), 3);
    await waitFor(() => missing(sent, sink).length === 0, 10_000, "phase 1 handled by the first instance");
    await drained(stream);
    const pins = new Set(sink.map((r) => r.pinId));
    assert.equal(pins.size, 1, "phase 1 was delivered under one pin");
    const pinId = [...pins][0];
    assert.ok(pinId, "messages carry Nats-Pin-Id");
    return { sent, pinId };
  }

  async function pinnedClientId(stream: string): Promise<string | undefined> {
    const ci = (await env.jsm.consumers.info(stream, "g-m1")) as unknown as { priority_groups?: { group: string; pinned_client_id?: string }[] };
    return ci.priority_groups?.find((g) => g.group === "PCG")?.pinned_client_id;
  }

  test("static - behaviour: only the pinned instance receives; an abrupt close hands over to the standby, nothing lost", async () => {
    const ackWaitMs = 2000;
    const { stream, prefix } = await group();
    const a: Handled[] = [];
    const b: Handled[] = [];
    const ca = await env.connect();
    const cb = await env.connect();
    const instA = await instance(ca, stream, "A", a, ackWaitMs, 3);
    const { sent: phase1, pinId } = await pinFirst(stream, prefix, a);
    assert.equal(await pinnedClientId(stream), pinId);
    const instB = await instance(cb, stream, "B", b, ackWaitMs);
    const statusB = recordStatus(instB);
    await waiting(stream, 2);

    const phase2 = await publishKeyed(env.js, prefix, keys(10), 30, 4);
    await waitFor(() => inPhase(a, 4).length >= 30, 10_000, "A to be part-way through phase 2");
    assert.equal(b.length, 0, "the standby received nothing while A was pinned");

    const closedAt = Date.now();
    await ca.nc.close();
    const stoppedWith = await within(instA.closed(), 10_000, "A to notice its connection closed");
    assert.ok(stoppedWith instanceof Error, "A stops with an error when its connection goes away");

    await waitFor(() => missing(phase2, [...a, ...b]).length === 0, 20_000, "every phase-2 message handled");
    await drained(stream);
    assert.deepEqual(missing([...phase1, ...phase2], [...a, ...b]), []);
    assert.ok(b.length > 0, "B took over");
    assert.ok(b.every((r) => r.at >= closedAt), "B handled nothing before A went away");
    const pinsB = new Set(b.map((r) => r.pinId));
    assert.equal(pinsB.size, 1);
    assert.notEqual([...pinsB][0], pinId, "B was pinned under a new pin id");
    assert.ok(statusB.events.some((e) => e.type === "pinned"), "B reported that it is pinned");
    assert.deepEqual(orderViolations(byTime([...a, ...b])), [], "per-key order of first deliveries holds across the takeover");
    const first = b[0];
    assert.ok(first);
    takeovers.push({ scenario: "abrupt nc.close() of the pinned instance", ackWaitMs, pinnedTtlMs: ackWaitMs, takeoverMs: first.at - closedAt });
    await env.jsm.streams.delete(stream);
  });

  test("static - behaviour: kill -9 of the pinned process hands over to the in-process standby, nothing lost", async () => {
    const ackWaitMs = 2000;
    const { stream, prefix } = await group();
    const a: Handled[] = [];
    const b: Handled[] = [];
    const child = spawn(process.execPath, [CHILD, JSON.stringify({ url: env.server.url, stream, group: "g", member: "m1", ackWaitMs, maxAckPending: 1, delayMs: 3 })], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    children.push(child);
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once("exit", (_code, signal) => resolve(signal)));
    let ready = false;
    const lines = createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      const o = JSON.parse(line) as { event: string; key?: string; seq?: number; partition?: number; pinId?: string; deliveryCount?: number };
      if (o.event === "ready") ready = true;
      if (o.event === "msg") {
        a.push({ who: "child", key: o.key ?? "", seq: o.seq ?? 0, partition: o.partition ?? -1, subject: "", pinId: o.pinId, deliveryCount: o.deliveryCount ?? 0, at: Date.now() });
      }
    });
    await waitFor(() => ready, 15_000, "the child member to start");
    const { sent: phase1, pinId } = await pinFirst(stream, prefix, a);
    const cb = await env.connect();
    await instance(cb, stream, "B", b, ackWaitMs);
    await waiting(stream, 2);

    const phase2 = await publishKeyed(env.js, prefix, keys(10), 30, 4);
    await waitFor(() => inPhase(a, 4).length >= 30, 10_000, "the child to be part-way through phase 2");
    assert.equal(b.length, 0, "the standby received nothing while the child was pinned");

    const killedAt = Date.now();
    child.kill("SIGKILL");
    assert.equal(await within(exited, 5000, "the child to die"), "SIGKILL");

    await waitFor(() => missing(phase2, [...a, ...b]).length === 0, 20_000, "every phase-2 message handled");
    await drained(stream);
    assert.deepEqual(missing([...phase1, ...phase2], [...a, ...b]), []);
    assert.ok(b.length > 0 && b.every((r) => r.at >= killedAt), "B took over only after the kill");
    assert.notEqual(b[0]?.pinId, pinId);
    assert.deepEqual(orderViolations(byTime([...a, ...b])), [], "per-key order of first deliveries holds across the crash");
    takeovers.push({ scenario: "kill -9 of the pinned process", ackWaitMs, pinnedTtlMs: ackWaitMs, takeoverMs: (b[0]?.at ?? 0) - killedAt });
    await env.jsm.streams.delete(stream);
  });

  test("static - behaviour: a planned stop() unpins, so the standby takes over before PinnedTTL could expire", async () => {
    const ackWaitMs = 5000; // PinnedTTL 5 s
    const { stream, prefix } = await group();
    const a: Handled[] = [];
    const b: Handled[] = [];
    const instA = await instance(await env.connect(), stream, "A", a, ackWaitMs, 3);
    const { sent: phase1, pinId } = await pinFirst(stream, prefix, a);
    const instB = await instance(await env.connect(), stream, "B", b, ackWaitMs);
    await waiting(stream, 2);
    const unpinned: { reason?: string; group?: string }[] = [];
    const advisories: Subscription = env.nc.subscribe(`$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.${stream}.g-m1`, {
      callback: (_err: Error | null, m: Msg) => {
        unpinned.push(m.json());
      },
    });
    await env.nc.flush();
    try {
      const phase2 = await publishKeyed(env.js, prefix, keys(10), 30, 4);
      await waitFor(() => inPhase(a, 4).length >= 30, 10_000, "A to be part-way through phase 2");
      assert.equal(b.length, 0);

      const stopCalledAt = Date.now();
      await instA.stop();
      const stoppedAt = Date.now();
      assert.equal(await instA.closed(), undefined);
      const handledByA = a.length;

      const first = await waitFor(() => b[0], 10_000, "B to handle a message");
      const takeoverMs = first.at - stoppedAt;
      assert.ok(takeoverMs < ackWaitMs, `B took over ${takeoverMs} ms after stop() returned, which is not before PinnedTTL (${ackWaitMs} ms) could expire`);
      await waitFor(() => unpinned.length > 0, 5000, "the unpinned advisory");
      assert.equal(unpinned[0]?.reason, "admin", "stop() unpinned through the API, not through the TTL");
      assert.equal(unpinned[0]?.group, "PCG");

      await waitFor(() => missing(phase2, [...a, ...b]).length === 0, 20_000, "every phase-2 message handled");
      await drained(stream);
      assert.equal(a.length, handledByA, "A handled nothing after stop() returned");
      assert.deepEqual(missing([...phase1, ...phase2], [...a, ...b]), []);
      assert.notEqual(first.pinId, pinId);
      assert.deepEqual(orderViolations(byTime([...a, ...b])), []);
      takeovers.push({ scenario: "planned stop() of the pinned instance (from stop() returning)", ackWaitMs, pinnedTtlMs: ackWaitMs, takeoverMs });
      takeovers.push({ scenario: "planned stop() of the pinned instance (from stop() called)", ackWaitMs, pinnedTtlMs: ackWaitMs, takeoverMs: first.at - stopCalledAt });
      await instB.stop();
    } finally {
      advisories.unsubscribe();
      await env.jsm.streams.delete(stream);
    }
  });

  test("static - behaviour: a planned stop() under load with the default max_ack_pending loses nothing and re-handles nothing", async () => {
    const ackWaitMs = 2000;
    const { stream, prefix } = await group();
    const a: Handled[] = [];
    const b: Handled[] = [];
    const template = { ack_wait: ackWaitMs * NS }; // max_ack_pending: the server's default (1000)
    const instA = track(await staticConsume((await env.connect()).js, { stream, group: "g", member: "m1", handler: recordingHandler("A", a, { delayMs: 1 }), consumerConfig: template }));
    await pinFirst(stream, prefix, a);
    track(await staticConsume((await env.connect()).js, { stream, group: "g", member: "m1", handler: recordingHandler("B", b), consumerConfig: template }));
    await waiting(stream, 2);

    // Keep publishing while A stops, so messages are buffered in A and in flight to it.
    const sent: KeyedPayload[] = [];
    let publishing = true;
    const publisher = (async () => {
      for (let s = 4; publishing || s < 20; s++) sent.push(...(await publishKeyed(env.js, prefix, keys(10), 1, s)));
    })();
    await waitFor(() => inPhase(a, 4).length >= 100, 10_000, "A to be part-way through the stream");
    await instA.stop();
    const stoppedAt = Date.now();
    await waitFor(() => b.length > 0, 10_000, "B to take over");
    publishing = false;
    await publisher;
    await waitFor(() => missing(sent, [...a, ...b]).length === 0, 20_000, "every message handled");
    await drained(stream);

    const handledByA = new Set(a.map((r) => `${r.key}/${r.seq}`));
    assert.deepEqual(
      b.filter((r) => handledByA.has(`${r.key}/${r.seq}`)).map((r) => `${r.key}/${r.seq}`),
      [],
      "B never re-handled what A handled (A's acks were confirmed before it let go)",
    );
    const stall = Math.max(0, ...b.slice(1).map((r, i) => r.at - (b[i]?.at ?? r.at)));
    console.log(
      `static failover: planned stop under load (max_ack_pending 1000, AckWait ${ackWaitMs} ms): ${sent.length} messages, ` +
        `B first handled ${(b[0]?.at ?? 0) - stoppedAt} ms after stop(), longest gap between B's messages ${stall} ms, ` +
        `per-key order violations ${orderViolations(byTime([...a, ...b])).length}`,
    );
    await env.jsm.streams.delete(stream);
  });

  test("static - behaviour: staticMemberStepDown moves the pin to the other instance", async () => {
    const ackWaitMs = 2000;
    const { stream, prefix } = await group();
    const a: Handled[] = [];
    const b: Handled[] = [];
    const instA = await instance(await env.connect(), stream, "A", a, ackWaitMs);
    const statusA = recordStatus(instA);
    const { pinId } = await pinFirst(stream, prefix, a);
    const instB = await instance(await env.connect(), stream, "B", b, ackWaitMs);
    const statusB = recordStatus(instB);
    await waiting(stream, 2);
    const handledByA = a.length;

    await staticMemberStepDown(env.js, stream, "g", "m1");
    const steppedAt = Date.now();
    const phase2 = await publishKeyed(env.js, prefix, keys(10), 5, 4);
    await waitFor(() => missing(phase2, b).length === 0, 15_000, "B to handle every message published after the step-down");
    await drained(stream);
    assert.equal(a.length, handledByA, "the stepped-down instance received none of the next messages");
    const pinB = b[0]?.pinId;
    assert.ok(pinB && pinB !== pinId, "B was pinned under a new pin id");
    assert.ok(b.every((r) => r.pinId === pinB));
    assert.equal(await pinnedClientId(stream), pinB, "the server's pinned client is B");
    await statusB.next("pinned", 1000);
    await statusA.next("unpinned", 5000);
    assert.deepEqual(orderViolations(b), []);
    takeovers.push({ scenario: "staticMemberStepDown (to the next message handled)", ackWaitMs, pinnedTtlMs: ackWaitMs, takeoverMs: (b[0]?.at ?? 0) - steppedAt });

    // And back: stepping down again pins A.
    await staticMemberStepDown(env.js, stream, "g", "m1");
    const phase3 = await publishKeyed(env.js, prefix, keys(10), 5, 9);
    await waitFor(() => missing(phase3, a).length === 0, 15_000, "A to handle every message published after the second step-down");
    assert.equal(missing(phase3, b).length, phase3.length, "B received none of them");
    await env.jsm.streams.delete(stream);
  });
});
