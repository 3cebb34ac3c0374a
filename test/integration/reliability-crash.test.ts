/**
 * Crashes under load: ten rounds of kill -9 of the pinned instance, for static and
 * elastic groups, with the delivery checker at the end (nothing lost, order of first
 * handling per key kept, duplicates counted).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { addMembers, createElastic, createStatic } from "../../src/index.js";
import { HandledLog, startKeyedLoad } from "../helpers/keyed-load.js";
import { startChildMember, type ChildMember } from "../helpers/member-process.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";

const ROUNDS = 10;
const ACK_WAIT_MS = 1000;

describe("reliability - kill -9 of pinned instances under load", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  for (const flavour of ["static", "elastic"] as const) {
    test(`reliability - ${flavour}: ${ROUNDS} rounds of kill -9, nothing lost, per-key order kept`, async () => {
      const stream = uniqueName(`crash_${flavour}`);
      if (flavour === "static") {
        await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], subject_transform: { src: `${stream}.*`, dest: `{{partition(4,1)}}.${stream}.{{wildcard(1)}}` } });
        await createStatic(env.js, { stream, group: "g", maxMembers: 4, members: ["m1", "m2"], onWarning: () => undefined });
      } else {
        await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`] });
        await createElastic(env.js, { stream, group: "g", maxMembers: 4, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
        await addMembers(env.js, stream, "g", ["m1", "m2"]);
      }
      const log = new HandledLog();
      const settings = { url: env.server.url, flavour, stream, group: "g", ackWaitMs: ACK_WAIT_MS };
      const m1: ChildMember[] = [startChildMember({ ...settings, member: "m1" }, log), startChildMember({ ...settings, member: "m1" }, log)];
      const m2 = startChildMember({ ...settings, member: "m2" }, log);
      const everyone = (): ChildMember[] => [...m1, m2];
      try {
        await Promise.all(everyone().map((m) => m.ready));
        const load = startKeyedLoad(env.js, (key) => `${stream}.${key}`, { keys: 50, rate: 150, idPrefix: stream });
        let killed = 0;
        for (let round = 0; round < ROUNDS; round++) {
          const since = performance.timeOrigin + performance.now();
          const pinned = await waitFor(() => m1.find((m) => m.handledSince(since)), 20_000, `round ${round}: an m1 instance handling messages`);
          await pinned.kill();
          killed += 1;
          m1.splice(m1.indexOf(pinned), 1);
          const survivor = m1[0];
          assert.ok(survivor);
          const killedAt = performance.timeOrigin + performance.now();
          m1.push(startChildMember({ ...settings, member: "m1" }, log));
          await waitFor(() => m1.some((m) => m.handledSince(killedAt)), 20_000, `round ${round}: another m1 instance taking over`);
        }
        await load.stop();
        await waitFor(() => log.unique() >= load.total(), 60_000, `all ${load.total()} messages handled (have ${log.unique()})`);
        const report = log.check(load.published);
        console.log(`reliability ${flavour} kill -9: ${killed} kills, ${report.published} published, ${report.handled} handled, ${report.duplicates} duplicates`);
        assert.deepEqual(report.lost, [], "nothing lost");
        assert.deepEqual(report.outOfOrder, [], "order of first handling per key equals publish order");
        assert.equal(report.unexpected, 0);
      } finally {
        await Promise.all(everyone().map((m) => m.stop()));
      }
    });
  }
});
