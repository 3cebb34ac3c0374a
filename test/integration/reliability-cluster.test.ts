/**
 * A 3-node JetStream cluster on loopback with replicated streams and config
 * buckets: kill -9 the stream leader, bring it back, then the same with the node
 * leading a member's consumer. Members carry on; the checker finds nothing lost
 * and per-key order kept.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { addMembers, createElastic, createStatic, elasticConsume, staticConsume, type ConsumerGroupMember } from "../../src/index.js";
import { HandledLog, startKeyedLoad } from "../helpers/keyed-load.js";
import { NatsCluster, connectTo, uniqueName, waitFor, type Client } from "../helpers/nats.js";

describe("reliability - a 3-node cluster losing its leaders", () => {
  let cluster: NatsCluster;
  const clients: Client[] = [];
  const open = async (): Promise<Client> => {
    const c = await connectTo(cluster, { maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    clients.push(c);
    return c;
  };
  before(async () => {
    cluster = await NatsCluster.start(3);
  });
  after(async () => {
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await cluster.stop();
  });

  const nodeNamed = (name: string | undefined) => cluster.nodes.find((n) => name !== undefined && n.name === name);

  for (const flavour of ["static", "elastic"] as const) {
    test(`reliability - ${flavour}: kill -9 of the stream leader and of the consumer leader, R3 everywhere`, async () => {
      const admin = await open();
      const stream = uniqueName(`cl_${flavour}`);
      const consumerStream = flavour === "static" ? stream : `${stream}-g`;
      if (flavour === "static") {
        await admin.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], num_replicas: 3, subject_transform: { src: `${stream}.*`, dest: `{{partition(4,1)}}.${stream}.{{wildcard(1)}}` } });
        await createStatic(admin.js, { stream, group: "g", maxMembers: 4, members: ["m1", "m2"], onWarning: () => undefined });
      } else {
        await admin.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], num_replicas: 3 });
        await createElastic(admin.js, { stream, group: "g", maxMembers: 4, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
        await addMembers(admin.js, stream, "g", ["m1", "m2"]);
      }
      const bucket = (await admin.jsm.streams.info(`KV_${flavour}-consumer-groups`)).config.num_replicas;
      assert.equal(bucket, 3, "the config bucket has the stream's replicas");

      const log = new HandledLog();
      const consume = flavour === "static" ? staticConsume : elasticConsume;
      const members: ConsumerGroupMember[] = [];
      for (const member of ["m1", "m2"]) {
        const c = await open();
        members.push(await consume(c.js, { stream, group: "g", member, handler: log.handler(), consumerConfig: { ack_policy: "explicit", ack_wait: 2_000_000_000 } }));
      }
      const publisher = await open();
      const load = startKeyedLoad(publisher.js, (key) => `${stream}.${key}`, { keys: 40, rate: 100, idPrefix: stream });
      try {
        await waitFor(() => log.unique() > 50, 30_000, "handling under way");
        for (const what of ["stream", "consumer"] as const) {
          const leader = await waitFor(async () => {
            const info = what === "stream" ? await admin.jsm.streams.info(consumerStream) : await admin.jsm.consumers.info(consumerStream, flavour === "static" ? "g-m1" : "m1");
            return nodeNamed(info.cluster?.leader);
          }, 20_000, `the ${what} leader`);
          await leader.kill();
          const afterKill = log.unique();
          await waitFor(() => log.unique() > afterKill + 50, 60_000, `handling to continue without the ${what} leader`);
          await leader.restart(true);
          const afterRestart = log.unique();
          await waitFor(() => log.unique() > afterRestart + 50, 60_000, `handling to continue after the ${what} leader came back`);
        }
        await load.stop();
        await waitFor(() => log.unique() >= load.total(), 90_000, "everything handled");
        const report = log.check(load.published);
        console.log(`reliability cluster ${flavour}: ${report.published} published, ${report.duplicates} duplicates`);
        assert.deepEqual(report.lost, []);
        assert.deepEqual(report.outOfOrder, []);
      } finally {
        await load.stop();
        await Promise.all(members.map((m) => m.stop()));
      }
    });
  }
});
