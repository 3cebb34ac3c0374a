/**
 * Issue 16, item 2: per-key order of first handling across a kill -9 of the pinned
 * instance with a deep buffer. Each round publishes a burst, so the pinned instance of
 * m1 holds about 1,000 delivered, unacked messages when it is killed; its hot standby
 * takes over and must start the dead instance's redeliveries before anything newer of
 * their partition. Ten rounds per flavour and concurrency mode, then the delivery
 * checker: nothing lost, and the first handling of every key in publish order.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { HandledLog, type LoadPayload } from "../helpers/keyed-load.js";
import { createLoadGroup } from "../helpers/load-scenario.js";
import { startChildMember, type ChildMember, type ChildSettings } from "../helpers/member-process.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";

const ROUNDS = 10;
const ACK_WAIT_MS = 1000;
const DEPTH = 1000;
const KEYS = 50;
/** Per round, at least (and at most three times): about half of it is m1's, more than its buffer holds. */
const BURST = 2400;

describe("reliability - kill -9 of the pinned instance with 1,000 messages buffered (issue 16)", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  for (const flavour of ["static", "elastic"] as const) {
    for (const concurrency of ["serial", "partition", "key"] as const) {
      test(`reliability - ${flavour}, ${concurrency} mode, maxBuffered ${DEPTH}: ${ROUNDS} kills with the buffer full, nothing lost, per-key order of first handling kept`, async (t) => {
        const stream = uniqueName(`depth_${flavour}_${concurrency}`);
        await createLoadGroup(env, flavour, stream, "g", 4, ["m1", "m2"]);
        const [consumerStream, m1Consumer] = flavour === "static" ? [stream, "g-m1"] : [`${stream}-g`, "m1"];
        const log = new HandledLog();
        const settings: Omit<ChildSettings, "member"> = { url: env.server.url, flavour, stream, group: "g", ackWaitMs: ACK_WAIT_MS, handlerMs: concurrency === "serial" ? 1 : 4, concurrency, maxBuffered: DEPTH, maxInFlight: 4 };
        const m1: ChildMember[] = [startChildMember({ ...settings, member: "m1" }, log), startChildMember({ ...settings, member: "m1" }, log)];
        const m2 = startChildMember({ ...settings, member: "m2" }, log);
        const everyone = (): ChildMember[] => [...m1, m2];
        const published = new Map<string, number>();
        let next = 0;
        /** Publishes `count` keyed messages, at most one in flight per key, so each key's are stored in order. */
        const burst = async (count: number): Promise<void> => {
          const inFlight: Promise<unknown>[] = [];
          for (let i = 0; i < count; i++, next++) {
            const key = `k${next % KEYS}`;
            const seq = (published.get(key) ?? 0) + 1;
            published.set(key, seq);
            inFlight.push(env.js.publish(`${stream}.${key}`, JSON.stringify({ key, seq } satisfies LoadPayload), { msgID: `${stream}-${key}-${seq}`, timeout: 10_000 }));
            if (inFlight.length >= KEYS) await Promise.all(inFlight.splice(0));
          }
          await Promise.all(inFlight);
        };
        const depths: number[] = [];
        try {
          await Promise.all(everyone().map((m) => m.ready));
          for (let round = 0; round < ROUNDS; round++) {
            const since = performance.timeOrigin + performance.now();
            // Publishes until m1's pinned instance holds at least half its buffer unacked (however fast
            // it drains on this machine), or three bursts went out.
            let depth = 0;
            for (let sent = 0; sent < 3 * BURST && depth < DEPTH / 2; sent += BURST / 4) {
              await burst(BURST / 4);
              depth = (await env.jsm.consumers.info(consumerStream, m1Consumer)).num_ack_pending;
            }
            const pinned = await waitFor(() => m1.find((m) => m.handledSince(since)), 20_000, `round ${round}: an m1 instance handling messages`);
            depths.push(Math.max(depth, (await env.jsm.consumers.info(consumerStream, m1Consumer)).num_ack_pending));
            await pinned.kill();
            m1.splice(m1.indexOf(pinned), 1);
            const killedAt = performance.timeOrigin + performance.now();
            m1.push(startChildMember({ ...settings, member: "m1" }, log));
            // Something fresh for the standby too, should the killed instance have acked all it held.
            await burst(BURST / 8);
            await waitFor(() => m1.some((m) => m.handledSince(killedAt)), 20_000, `round ${round}: the standby taking over`);
          }
          const total = [...published.values()].reduce((a, b) => a + b, 0);
          await waitFor(() => log.unique() >= total, 120_000, `all ${total} messages handled (have ${log.unique()})`);
          const report = log.check(published);
          t.diagnostic(`${flavour} ${concurrency}: unacked at each kill ${depths.join(", ")}; ${report.published} published, ${report.handled} handled, ${report.duplicates} handled again (redeliveries of the killed instances' messages)`);
          assert.deepEqual(report.lost, [], "nothing lost");
          assert.deepEqual(report.outOfOrder, [], "order of first handling per key equals publish order");
          assert.equal(report.unexpected, 0);
          // The depth was there: most kills found the buffer nearly full.
          assert.ok(depths.filter((d) => d >= DEPTH / 2).length >= ROUNDS / 2, `the killed instance held at least ${DEPTH / 2} unacked messages in most rounds (${depths.join(", ")})`);
        } finally {
          await Promise.all(everyone().map((m) => m.stop()));
        }
      });
    }
  }
});
