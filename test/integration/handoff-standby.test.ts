/**
 * Graceful stop with a hot standby (static groups): stop() lets the handler in
 * flight finish and acks its message, so the standby never gets it; and repeated
 * stops of the active instance under load hand over without losing, duplicating
 * or reordering anything (deliveries already on the wire are given back rather
 * than dropped, in stream order, and the new instance waits for them).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { staticConsume, type ConsumerGroupMember, type ConsumeOptions } from "../../src/index.js";
import { checkDelivery, type HandledRecord } from "../../src/cli/demo/delivery-check.js";
import { deferred, startEnv, uniqueName, waitFor, type Client, type TestEnv } from "../helpers/nats.js";
import { createLoadGroup, nanos } from "../helpers/load-scenario.js";
import { Published, keyNames, now, publishKeyed, sleep, type KeyedMessage } from "../helpers/load-harness.js";

describe("handoff - stop() with a hot standby", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    await env.close();
  });

  test("handoff - stop() waits for the handler in flight and acks its message: the standby never gets it, even past AckWait", async () => {
    const stream = uniqueName("sb");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    const seen: { who: string; key: string; seq: number; dc: number }[] = [];
    const slowStarted = deferred();
    let slowEnded = 0;
    const revokedA: { partitions: number[]; at: number }[] = [];
    const pinnedB: string[] = [];
    const options = (who: string): ConsumeOptions => ({
      stream,
      group: "g",
      member: "m1",
      concurrency: "key",
      consumerConfig: { ack_wait: nanos(1000) },
      // The default drain timeout is AckWait (1 s here); this handler outlives it.
      drainTimeoutMs: 10_000,
      handler: async (msg) => {
        const { key, seq } = msg.json<KeyedMessage>();
        seen.push({ who, key, seq, dc: msg.info.deliveryCount });
        if (key === "slow") {
          slowStarted.resolve();
          await sleep(1500); // longer than AckWait: only working() keeps it from being redelivered
          slowEnded = now();
        }
      },
    });
    const a = await staticConsume(env.js, { ...options("A"), onRevoked: (partitions) => void revokedA.push({ partitions, at: now() }) });
    running.push(a);
    await env.js.publish(subjectOf("warm"), JSON.stringify({ key: "warm", seq: 1 }));
    await waitFor(() => seen.some((s) => s.key === "warm"), 10_000, "A to take the pin");
    const c = await env.connect();
    const b = await staticConsume(c.js, { ...options("B"), onPinned: (id) => void pinnedB.push(id) });
    running.push(b);

    await env.js.publish(subjectOf("slow"), JSON.stringify({ key: "slow", seq: 1 }));
    await slowStarted.promise;
    await a.stop();
    const stoppedAt = now();
    assert.ok(slowEnded > 0 && slowEnded <= stoppedAt, "stop() resolved after the handler in flight finished");
    assert.deepEqual(revokedA.map((r) => r.partitions), [[0, 1, 2, 3]], "stop() revokes the instance's partitions");
    assert.ok((revokedA[0]?.at ?? 0) >= slowEnded, "onRevoked ran after the handler finished");

    await env.js.publish(subjectOf("after"), JSON.stringify({ key: "after", seq: 1 }));
    await waitFor(() => seen.some((s) => s.who === "B" && s.key === "after"), 15_000, "the standby to take over");
    assert.ok(pinnedB.length >= 1, "the standby was pinned");
    await sleep(1500); // past AckWait: a message left unacked would be redelivered to B now
    assert.deepEqual(
      seen.filter((s) => s.key === "slow").map((s) => `${s.who}#${s.dc}`),
      ["A#1"],
      "the slow message was handled once, by A, and never redelivered",
    );
    const ci = await env.jsm.consumers.info(stream, "g-m1");
    assert.equal(ci.num_ack_pending, 0);
    assert.equal(ci.num_redelivered, 0);
    await b.stop();
  });

  test("handoff - the active instance stopped 6 times under load: the standbys take over with nothing lost, duplicated or reordered", async () => {
    const stream = uniqueName("fo");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 8, ["m1"]);
    const published = await publishKeyed(env.js, subjectOf, keyNames(50), 100, new Published());
    const handled: HandledRecord[] = [];
    const start = async (): Promise<{ member: ConsumerGroupMember; client: Client }> => {
      const client = await env.connect();
      const member = await staticConsume(client.js, {
        stream,
        group: "g",
        member: "m1",
        concurrency: "key",
        consumerConfig: { ack_wait: nanos(5000) },
        handler: async (msg) => {
          const { key, seq } = msg.json<KeyedMessage>();
          handled.push({ key, seq, at: now() });
          await sleep(Math.random());
        },
      });
      running.push(member);
      return { member, client };
    };
    let active = await start();
    let standby = await start();
    for (let i = 0; i < 6; i++) {
      await waitFor(() => handled.length >= (i + 1) * 400, 30_000, `progress before stop ${i + 1}`);
      await active.member.stop();
      await active.client.nc.close();
      active = standby;
      standby = await start();
    }
    await waitFor(() => new Set(handled.map((h) => `${h.key}/${h.seq}`)).size >= published.total, 60_000, "everything handled");
    const report = checkDelivery(published.perKey, handled);
    console.log(`standby failover x6: ${report.handled} handled, ${report.duplicates} duplicates, ${report.lost.length} lost, ${report.outOfOrder.length} keys out of order`);
    assert.deepEqual(report.lost.slice(0, 5), []);
    assert.deepEqual(report.outOfOrder.slice(0, 5), [], "per key, first handlings follow the publish order across takeovers");
    assert.equal(report.duplicates, 0);
    await active.member.stop();
    await standby.member.stop();
  });
});
