/**
 * Instances of one member started together, as an orchestrator starts a Deployment's
 * replicas, while the membership changes every few hundred ms: each change makes the
 * pinned instance of a member drain, delete and recreate its consumer with new filters
 * while its siblings wait to create the same consumer. The server races a create
 * against a delete of one consumer name (`meta.inf.tmp: no such file or directory`,
 * `error creating store for consumer`), and what such a create leaves behind delivered
 * messages past others it never delivered (issue 25, item 1). Here: 3 members with 3
 * instances each on a file-stored work queue, keyed traffic throughout, and the
 * checker over every run: no create error, nothing lost, first handling in per-key
 * order, no key on two instances at once, no duplicate (every change is planned).
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { addMembers, createElastic, deleteMembers, elasticConsume, type ConsumerGroupMember } from "../../src/index.js";
import { FaultLog, KeyedPublisher, summary } from "../helpers/fault-check.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { sleep } from "../helpers/load-harness.js";
import { nanos } from "../helpers/load-scenario.js";

const MEMBERS = ["m1", "m2", "m3"];
const INSTANCES = 3;
const CHANGES = 24;
const CHANGE_EVERY_MS = 350;
/** What the server says when a create raced a delete of the same consumer. */
const CREATE_RACE = /meta\.inf|meta\.sum|creating store/i;

describe("consumer create race - instances of a member started together, membership changing", () => {
  let env: TestEnv;
  const members: ConsumerGroupMember[] = [];
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await Promise.allSettled(members.splice(0).map((m) => m.stop()));
    await env.close();
  });

  test("consumer create race - no create error, nothing lost, per-key order, no overlap, no duplicate", { timeout: 180_000 }, async () => {
    const stream = uniqueName("race");
    const group = "g";
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], storage: "file" });
    await createElastic(env.js, { stream, group, maxMembers: 8, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, stream, group, ["m1", "m2"]);
    const log = new FaultLog();
    const errors: string[] = [];
    const statuses = (who: string, member: ConsumerGroupMember): void =>
      void (async () => {
        for await (const e of member.status()) if (e.type === "consumer_error") errors.push(`${who}: ${e.error.message}`);
      })();
    // Every instance on a connection of its own, all started at the same moment.
    const starts = MEMBERS.flatMap((m) =>
      Array.from({ length: INSTANCES }, async (_, i) => {
        const who = `${m}#${i}`;
        const c = await env.connect();
        const member = await elasticConsume(c.js, {
          stream,
          group,
          member: m,
          concurrency: "key",
          consumerConfig: { ack_wait: nanos(1000) },
          handler: log.handler(who, () => sleep(5)),
        });
        members.push(member);
        statuses(who, member);
      }),
    );
    await Promise.all(starts);

    const publisher = new KeyedPublisher(env.js, (key) => `${stream}.${key}`, 40, stream);
    let publishing = true;
    const load = (async () => {
      while (publishing) {
        await publisher.publish(20);
        await sleep(50);
      }
    })();
    // m3 joins and leaves, m1 and m2 take turns leaving: partitions move on every step.
    for (let step = 0; step < CHANGES; step++) {
      await sleep(CHANGE_EVERY_MS);
      if (step % 2 === 0) await addMembers(env.js, stream, group, ["m3"]);
      else await deleteMembers(env.js, stream, group, ["m3"]);
      if (step % 6 === 3) await deleteMembers(env.js, stream, group, [step % 12 === 3 ? "m1" : "m2"]);
      if (step % 6 === 5) await addMembers(env.js, stream, group, ["m1", "m2"]);
    }
    await addMembers(env.js, stream, group, ["m1", "m2", "m3"]);
    publishing = false;
    await load;
    const total = publisher.total();
    await waitFor(() => log.unique() >= total && log.allEnded(), 60_000, `every one of ${total} messages handled (have ${log.unique()})`, 100);
    await sleep(2500); // past AckWait: a message whose ack was lost comes back now
    const report = log.check(publisher.published, { toleranceMs: 2 });
    console.log(`  ${summary("create race", report)}; consumer errors ${errors.length}${errors.length > 0 ? `: ${[...new Set(errors)].slice(0, 3).join(" | ")}` : ""}`);
    assert.deepEqual(errors.filter((e) => CREATE_RACE.test(e)), [], "no create raced a delete");
    assert.deepEqual(report.lost, [], "nothing lost");
    assert.deepEqual(report.outOfOrder, [], "first handling in per-key order");
    assert.deepEqual(report.overlaps, [], "no key on two instances at once");
    assert.equal(report.duplicates, 0, "no duplicate from planned changes");
  });
});
