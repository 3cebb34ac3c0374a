/**
 * Regression tests for issue 14, items 4 and 7: what a member does when something
 * it depends on goes away under it, on a real server.
 *
 * 4. a static member whose durable consumer is deleted never replays the stream: it
 *    stops with a typed `CONSUMER_LOST` and does not recreate the durable;
 * 7. the config watch never gives up while the connection is open: broken on purpose
 *    (a permissions reload removes its subscription), it is re-opened, the member
 *    keeps consuming and still follows later config changes.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  ELASTIC_BUCKET,
  STATIC_BUCKET,
  addMembers,
  createElastic,
  createStatic,
  deleteStatic,
  elasticConsume,
  isConsumerGroupError,
  memberPartitions,
  staticConsume,
  workQueueStreamName,
  type ConsumerGroupMember,
} from "../../src/index.js";
import { connectTo, startEnv, uniqueName, waitFor, type Client, type NatsServer, type TestEnv } from "../helpers/nats.js";
import { createLoadGroup, nanos } from "../helpers/load-scenario.js";
import { Published, keyNames, publishKeyed, sleep, type KeyedMessage } from "../helpers/load-harness.js";
import { keyOnPartition, recordStatus, within } from "../helpers/promises.js";
import { reloadPermissions, startWithPermissions, watchSubjects } from "../helpers/permission-reload.js";

describe("promises - a member whose consumer is lost (issue 14, item 4)", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];

  before(async () => {
    env = await startEnv();
  });
  afterEach(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
  });
  after(async () => {
    await env.close();
  });

  test("lost - item 4: a static member whose durable is deleted under it re-handles nothing and stops with CONSUMER_LOST", async () => {
    const stream = uniqueName("lost");
    const subjectOf = await createLoadGroup(env, "static", stream, "g", 4, ["m1"]);
    const published = await publishKeyed(env.js, subjectOf, keyNames(5), 10, new Published());
    const handled: string[] = [];
    const m = await staticConsume(env.js, {
      stream,
      group: "g",
      member: "m1",
      consumerConfig: { ack_wait: nanos(1000) },
      handler: (msg) => {
        const { key, seq } = msg.json<KeyedMessage>();
        handled.push(`${key}/${seq}`);
      },
    });
    running.push(m);
    const status = recordStatus(m);
    await waitFor(() => handled.length >= published.total, 10_000, "50 messages handled");
    await waitFor(
      async () => {
        const ci = await env.jsm.consumers.info(stream, "g-m1");
        return ci.num_pending === 0 && ci.num_ack_pending === 0;
      },
      10_000,
      "every message acked",
    );

    await env.jsm.consumers.delete(stream, "g-m1");
    const closedWith = await within(m.closed(), 10_000, "the instance to stop").catch((err: unknown) => err);
    await sleep(2000); // a window: a durable recreated from the start of the stream would replay it now

    const again = handled.length - published.total;
    assert.equal(again, 0, `${again} of ${published.total} messages were handled again after the durable was deleted`);
    assert.ok(isConsumerGroupError(closedWith) && closedWith.code === "CONSUMER_LOST", `closed() resolved to a CONSUMER_LOST error (got ${String(closedWith)})`);
    const stopped = status.of("stopped");
    assert.ok(stopped.length === 1 && isConsumerGroupError(stopped[0]?.error) && stopped[0]?.error.code === "CONSUMER_LOST", "a stopped event carries the CONSUMER_LOST error");
    const exists = await env.jsm.consumers.info(stream, "g-m1").then(
      () => true,
      () => false,
    );
    assert.equal(exists, false, "the durable was not recreated");
  });
});

describe("promises - the config watch never gives up while the connection is open (issue 14, item 7)", () => {
  let server: NatsServer;
  let admin: Client;
  const clients: Client[] = [];
  const running: ConsumerGroupMember[] = [];

  before(async () => {
    server = await startWithPermissions();
    admin = await connectTo(server);
    clients.push(admin);
  });
  afterEach(async () => {
    await Promise.allSettled(running.splice(0).map((m) => m.stop()));
    // Everything is allowed again for the next test.
    await reloadPermissions(server, ["nothing.is.denied"]);
  });
  after(async () => {
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await server.stop();
  });

  /** Removes the member's watch subscription with a permissions reload, and waits until the member noticed. */
  async function breakWatch(bucket: string, status: ReturnType<typeof recordStatus>): Promise<string> {
    const subjects = await waitFor(async () => {
      const s = await watchSubjects(admin.jsm, bucket);
      return s.length === 1 ? s : undefined;
    }, 10_000, "the member's config watch");
    const subject = subjects[0] ?? "";
    await reloadPermissions(server, [subject]);
    await status.waitFor(["watch_error", "watch_restarted", "stopped"], 10_000);
    return subject;
  }

  test("lost - item 7: an elastic member whose config watch breaks keeps consuming, re-opens the watch and still follows membership changes", async () => {
    const stream = uniqueName("watch");
    await admin.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], storage: "memory" });
    await createElastic(admin.js, { stream, group: "g", maxMembers: 4, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    await addMembers(admin.js, stream, "g", ["m1"]);
    const handled: string[] = [];
    const mc = await connectTo(server);
    clients.push(mc);
    const m = await elasticConsume(mc.js, {
      stream,
      group: "g",
      member: "m1",
      consumerConfig: { ack_wait: nanos(1000) },
      handler: (msg) => {
        const { key, seq } = msg.json<KeyedMessage>();
        handled.push(`${key}/${seq}`);
      },
    });
    running.push(m);
    const status = recordStatus(m);
    const keep = memberPartitions(["m1", "m2"], 4, null, "m1");
    const key = keyOnPartition(stream, 4, keep);
    await admin.js.publish(`${stream}.${key}`, JSON.stringify({ key, seq: 1 }));
    await waitFor(() => handled.includes(`${key}/1`), 10_000, "m1 to consume");

    const denied = await breakWatch(ELASTIC_BUCKET, status);
    await status.waitFor(["watch_restarted", "stopped"], 15_000).catch(() => undefined);
    const stopped = status.of("stopped")[0];
    assert.ok(stopped === undefined, `the member kept running when its watch on ${denied} was removed (it stopped: ${String(stopped?.error)})`);
    assert.ok(status.of("watch_restarted").length > 0, `a watch_restarted event (events: ${status.events.map((e) => e.type).join(", ")})`);

    await admin.js.publish(`${stream}.${key}`, JSON.stringify({ key, seq: 2 }));
    await waitFor(() => handled.includes(`${key}/2`), 10_000, "a message published after the watch restart to be handled");
    await addMembers(admin.js, stream, "g", ["m2"]);
    const changed = await status.waitFor("partitions_changed", 10_000);
    assert.deepEqual(changed.type === "partitions_changed" ? [...changed.partitions].sort() : [], [...keep].sort(), "the membership change after the restart moved m1's partitions");
    await waitFor(
      async () => {
        const ci = await admin.jsm.consumers.info(workQueueStreamName(stream, "g"), "m1");
        return (ci.config.filter_subjects ?? []).length === keep.length;
      },
      10_000,
      "m1's consumer with its new filters",
    );
  });

  test("lost - item 7: a static member whose config watch breaks keeps consuming, re-opens the watch and still stops when its group is deleted", async () => {
    const stream = uniqueName("swatch");
    await admin.jsm.streams.add({
      name: stream,
      subjects: [`${stream}.*`],
      storage: "memory",
      subject_transform: { src: `${stream}.*`, dest: `{{partition(2,1)}}.${stream}.{{wildcard(1)}}` },
    });
    await createStatic(admin.js, { stream, group: "g", maxMembers: 2, members: ["m1"] });
    const handled: string[] = [];
    const mc = await connectTo(server);
    clients.push(mc);
    const m = await staticConsume(mc.js, {
      stream,
      group: "g",
      member: "m1",
      handler: (msg) => {
        const { key, seq } = msg.json<KeyedMessage>();
        handled.push(`${key}/${seq}`);
      },
    });
    running.push(m);
    const status = recordStatus(m);
    await admin.js.publish(`${stream}.k`, JSON.stringify({ key: "k", seq: 1 }));
    await waitFor(() => handled.includes("k/1"), 10_000, "m1 to consume");

    const denied = await breakWatch(STATIC_BUCKET, status);
    await status.waitFor(["watch_restarted", "stopped"], 15_000).catch(() => undefined);
    const stopped = status.of("stopped")[0];
    assert.ok(stopped === undefined, `the member kept running when its watch on ${denied} was removed (it stopped: ${String(stopped?.error)})`);
    assert.ok(status.of("watch_restarted").length > 0, `a watch_restarted event (events: ${status.events.map((e) => e.type).join(", ")})`);

    await admin.js.publish(`${stream}.k`, JSON.stringify({ key: "k", seq: 2 }));
    await waitFor(() => handled.includes("k/2"), 10_000, "a message published after the watch restart to be handled");
    await deleteStatic(admin.js, stream, "g");
    const closedWith = await within(m.closed(), 10_000, "the member to stop once its group is deleted");
    assert.equal(closedWith, undefined, "deleting the group stops the member cleanly, through the re-opened watch");
  });
});
