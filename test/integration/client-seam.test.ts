/**
 * The one seam into nats.js internals (src/nats/client-seam.ts), checked on the
 * installed nats.js against a real server: every private field and method the
 * handoff and the local cap rely on is there with the shape the seam expects, the
 * pull gate really bounds what is pulled, the outbound flush can be held (and a run of
 * acks then leaves in one socket write), and server errors are recognised by shape.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { JetStreamApiError, jetstream, type ConsumerMessages } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { apiPrefix, checkClientShapes, checkConsumeShape, connectionOf, connectionWrites, consumeSubscription, gatePulls } from "../../src/nats/client-seam.js";
import { writeBatchOf } from "../../src/nats/write-batch.js";
import { deliveryNumbers, type DeliveryNumbers } from "../../src/nats/ack-subject.js";
import { ApiCode, apiErrorCode } from "../../src/nats/server-errors.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";

/**
 * Counts the socket writes of a connection (its transport's sends) that carry `subject`:
 * the connection's own traffic (a PONG to the server's first PING, which comes about 2 s
 * after connecting, so within a test when connecting was slow) is not the test's.
 */
function countWrites(nc: NatsConnection, subject: string): () => number {
  const transport = (nc as unknown as { protocol: { transport: { send(frame: Uint8Array): void } } }).protocol.transport;
  const send = transport.send.bind(transport);
  const needle = Buffer.from(` ${subject} `);
  let writes = 0;
  transport.send = (frame) => {
    if (Buffer.from(frame.buffer, frame.byteOffset, frame.byteLength).includes(needle)) writes += 1;
    send(frame);
  };
  return () => writes;
}

/** One macrotask later: any flush nats.js queued as a microtask has run. */
const nextMacrotask = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe("client seam - the installed nats.js", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  test("client seam - the stream sequence, delivery count and consumer sequence read from a real ack subject equal nats.js's delivery info, for first deliveries and redeliveries", async () => {
    const stream = uniqueName("acks");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    await env.jsm.consumers.add(stream, { durable_name: "c", ack_policy: "explicit" });
    for (let i = 0; i < 5; i++) await env.js.publish(`${stream}.x`, String(i));
    const consumer = await env.js.consumers.get(stream, "c");
    const seen: { numbers: DeliveryNumbers | undefined; info: DeliveryNumbers }[] = [];
    for (let round = 0; round < 3; round++) {
      const batch = await consumer.fetch({ max_messages: 5, expires: 2000 });
      for await (const m of batch) {
        seen.push({ numbers: deliveryNumbers((m as unknown as { reply: string }).reply), info: { streamSequence: m.info.streamSequence, deliveryCount: m.info.deliveryCount, consumerSequence: m.info.deliverySequence } });
        if (round < 2) m.nak();
        else m.ack();
      }
    }
    assert.equal(seen.length, 15);
    for (const { numbers, info } of seen) assert.deepEqual(numbers, info);
    assert.deepEqual(
      seen.map((s) => s.info.deliveryCount),
      [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3],
      "redeliveries were read too",
    );
    assert.deepEqual(
      seen.map((s) => s.numbers?.consumerSequence),
      Array.from({ length: 15 }, (_, i) => i + 1),
      "every delivery, redeliveries included, takes the next consumer sequence",
    );
  });

  test("client seam - the client shapes: connection, API prefix (also with a domain)", () => {
    assert.doesNotThrow(() => checkClientShapes(env.js));
    assert.equal(connectionOf(env.js), env.nc);
    assert.equal(apiPrefix(env.js), "$JS.API");
    assert.equal(apiPrefix(jetstream(env.nc, { domain: "hub" })), "$JS.hub.API");
  });

  test("client seam - a client without a connection, or a connection without its outbound flush, is refused with CLIENT_UNSUPPORTED", () => {
    assert.throws(() => checkClientShapes({} as never), (e: unknown) => (e as { code?: string }).code === "CLIENT_UNSUPPORTED" && /~3\.4\.0/.test(String((e as Error).message)));
    const noFlush = { nc: { publish() {}, request() {}, status() {} }, prefix: "$JS.API" };
    assert.throws(() => checkClientShapes(noFlush as never), (e: unknown) => (e as { code?: string }).code === "CLIENT_UNSUPPORTED" && /flushPending/.test(String((e as Error).message)));
  });

  test("client seam - a pinned consume has its subscription and pull function, and the gate bounds the pulls and keeps their pin id", async () => {
    const stream = uniqueName("seam");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    await env.jsm.consumers.add(stream, { durable_name: "c", ack_policy: "explicit", priority_groups: ["PCG"], priority_policy: "pinned_client", priority_timeout: 5_000_000_000 });
    for (let i = 0; i < 50; i++) await env.js.publish(`${stream}.x`, String(i));
    const consumer = await env.js.consumers.get(stream, "c");
    const got: number[] = [];
    const messages: ConsumerMessages = await consumer.consume({ group: "PCG", max_messages: 10, expires: 1000, callback: (m) => void got.push(m.seq) });
    assert.doesNotThrow(() => checkConsumeShape(messages));
    assert.ok(consumeSubscription(messages), "the consume's subscription");
    let open = 0;
    const asked: { maxBytes: number | undefined; pin: string | undefined }[] = [];
    const gate = gatePulls(messages, () => ({ batch: open, maxBytes: 1 << 20 }));
    const seen = messages.status();
    void (async () => {
      for await (const s of seen) {
        const options = s.type === "next" ? (s.options as { max_bytes?: number; id?: string }) : undefined;
        if (options) asked.push({ maxBytes: options.max_bytes, pin: options.id });
      }
    })();
    await waitFor(() => got.length >= 10, 5000, "the first pull's 10 messages");
    const before = got.length;
    // The first pull went out before the gate: it delivers at most its batch, then nothing more until the gate opens.
    await new Promise((r) => setTimeout(r, 1500)); // longer than a pull's expiry: a re-pull would have come by now
    assert.equal(got.length, before, `no pull past the gate (got ${got.length})`);
    assert.equal(before, 10);
    open = 5;
    gate.resume();
    await waitFor(() => got.length >= before + 5, 5000, "5 more once the gate lets 5 through");
    assert.ok(asked.length > 0 && asked.every((a) => a.maxBytes === 1 << 20), `every pull past the gate carries the gate's max_bytes (got ${JSON.stringify(asked)})`);
    assert.ok(asked.every((a) => typeof a.pin === "string" && a.pin.length > 0), `the gate keeps the pin id on every pull (got ${JSON.stringify(asked)})`);
    await messages.close();
  });

  test("client seam - the outbound flush: nothing is written while suspended, then everything in order in one write", async () => {
    const subject = uniqueName("held");
    const got: string[] = [];
    const sub = env.nc.subscribe(subject, { callback: (_err, m) => void got.push(m.string()) });
    await env.nc.flush();
    const { nc } = await env.connect();
    const socketWrites = countWrites(nc, subject);
    const writes = connectionWrites(nc);
    assert.equal(connectionWrites(nc), writes, "one per connection");
    writes.suspend();
    for (let i = 1; i <= 5; i++) {
      await Promise.resolve();
      nc.publish(subject, `m${i}`);
    }
    await nextMacrotask();
    assert.equal(socketWrites(), 0, "held while suspended");
    writes.resume();
    assert.equal(socketWrites(), 1, "written at once, together");
    await waitFor(() => got.length === 5, 5000, "the 5 messages");
    assert.deepEqual(got, ["m1", "m2", "m3", "m4", "m5"]);
    nc.publish(subject, "m6");
    await waitFor(() => got.length === 6, 5000, "a publish after the resume, written as usual");
    sub.unsubscribe();
  });

  test("client seam - acks one promise reaction apart: one write each, as nats.js flushes; one write for the run with a write batch", async () => {
    const subject = uniqueName("acks");
    const { nc } = await env.connect();
    const socketWrites = countWrites(nc, subject);
    const acks = writeBatchOf(connectionWrites(nc));
    const run = async (batched: boolean): Promise<number> => {
      const before = socketWrites();
      for (let i = 0; i < 10; i++) {
        await Promise.resolve();
        if (batched) acks.hold();
        nc.publish(subject, "+ACK");
      }
      await nextMacrotask();
      return socketWrites() - before;
    };
    assert.equal(await run(false), 10, "nats.js writes once per reaction: the premise of the write batch");
    assert.equal(await run(true), 1);
    await nc.flush();
  });

  test("client seam - server errors are recognised by shape, not instanceof", async () => {
    const err = await env.jsm.consumers.info("nope", "nope").catch((e: unknown) => e);
    assert.ok(err instanceof JetStreamApiError);
    assert.equal(apiErrorCode(err), ApiCode.StreamNotFound);
    // A copy from another nats.js install: same shape, another class.
    const foreign = { name: "JetStreamApiError", code: 10014, apiError: () => ({ err_code: 10014 }) };
    assert.equal(apiErrorCode(foreign), ApiCode.ConsumerNotFound);
    assert.equal(apiErrorCode(new Error("plain")), undefined);
  });
});
