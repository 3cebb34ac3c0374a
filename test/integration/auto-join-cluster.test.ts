/**
 * Auto-join on a 3-node cluster with R3 streams and buckets: the node leading the
 * lease bucket is killed (-9) while three more instances join. Every config the group
 * goes through is recorded: no member is ever dropped, none is listed twice, and the
 * membership ends with all five.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm, type KvEntry } from "@nats-io/kv";
import { createElastic, elasticConsume, LEASE_BUCKET, type ConsumerGroupMember, type ElasticConsumerGroupConfig } from "../../src/index.js";
import { NatsCluster, connectTo, uniqueName, waitFor, type Client } from "../helpers/nats.js";

describe("auto-join - a 3-node cluster losing the lease bucket's leader", () => {
  let cluster: NatsCluster;
  const clients: Client[] = [];
  const members: ConsumerGroupMember[] = [];
  const open = async (): Promise<Client> => {
    const c = await connectTo(cluster, { maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    clients.push(c);
    return c;
  };
  before(async () => {
    cluster = await NatsCluster.start(3);
  });
  /** Ends the test's own config watch and poller, whatever happened (they keep the process alive). */
  let stopObserving = (): void => undefined;
  after(async () => {
    stopObserving();
    await Promise.allSettled(members.map((m) => m.stop()));
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await cluster.stop();
  });

  test("auto-join - cluster: the lease bucket's leader killed during a scale-up: no member dropped or listed twice, all five in", async () => {
    const admin = await open();
    const stream = uniqueName("ajc");
    // A cluster just started may still be placing its first R3 assets: retried until it takes them.
    await waitFor(
      async () => {
        try {
          await admin.jsm.streams.add({ name: stream, subjects: [`${stream}.*`], num_replicas: 3 });
          await createElastic(admin.js, { stream, group: "g", maxMembers: 10, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
          return true;
        } catch {
          return false;
        }
      },
      30_000,
      "the R3 stream and group created",
      250,
    );

    // Every config the group goes through, and what the instances report.
    const history: string[][] = [];
    const events: string[] = [];
    // A watch may miss revisions while its node is down, so the key is also read every 50 ms.
    const configs = await new Kvm(admin.js).open("elastic-consumer-groups");
    const seen = new Set<number>();
    const record = (e: KvEntry): void => {
      if (e.operation !== "PUT" || seen.has(e.revision)) return;
      seen.add(e.revision);
      const c = e.json<ElasticConsumerGroupConfig>();
      history.push(c.members ?? []);
      events.push(`${Math.round(performance.now())} config r${e.revision} ${JSON.stringify(c.members ?? [])}`);
    };
    const watch = await configs.watch({ key: `${stream}.g` });
    void (async () => {
      for await (const e of watch) record(e);
    })();
    let polling = true;
    stopObserving = () => {
      polling = false;
      watch.stop();
    };
    const poller = (async () => {
      while (polling) {
        const e = await configs.get(`${stream}.g`).catch(() => null);
        if (e) record(e);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();

    const start = async (member: string, client?: Client): Promise<void> => {
      const c = client ?? (await open());
      const m = await elasticConsume(c.js, {
          stream,
          group: "g",
          member,
          consumerConfig: { ack_wait: 2_000_000_000 },
          autoJoin: { leaseTtlMs: 6000, settleMs: 500 },
          handler: () => undefined,
        });
      members.push(m);
      void (async () => {
        for await (const e of m.status()) {
          const detail = "error" in e && e.error instanceof Error ? e.error.message : "partitions" in e ? JSON.stringify(e.partitions) : "";
          events.push(`${Math.round(performance.now())} ${member} ${e.type} ${detail}`);
        }
      })();
    };
    await start("a");
    await start("b");
    await waitFor(() => history.at(-1)?.length === 2, 20_000, "a and b in");
    const leases = await admin.jsm.streams.info(`KV_${LEASE_BUCKET}`);
    assert.equal(leases.config.num_replicas, 3, "the lease bucket has the config bucket's replicas");
    const leaderName = leases.cluster?.leader;
    const leader = cluster.nodes.find((n) => n.name === leaderName);
    assert.ok(leader, `the lease bucket's leader ${leaderName} is one of ours`);

    // Their connections are up before the kill (the test's own connect helper asks for account info).
    const joiners = await Promise.all(["c", "d", "e"].map(async (m) => ({ m, c: await open() })));
    const joining = Promise.all(joiners.map(({ m, c }) => start(m, c)));
    await leader.kill();
    const killedAt = performance.now();
    await joining;
    try {
      await waitFor(() => [...(history.at(-1) ?? [])].sort().join() === "a,b,c,d,e", 60_000, `all five in (last: ${JSON.stringify(history.at(-1))})`);
    } catch (err) {
      console.log(events.join("\n"));
      throw err;
    }
    console.log(`auto-join cluster: all five in ${Math.round(performance.now() - killedAt)} ms after the lease bucket's leader was killed; configs written: ${history.length}`);
    await leader.restart();
    await new Promise((r) => setTimeout(r, 3000));
    watch.stop();
    polling = false;
    await poller;
    // No instance of a and b ever gave its partitions up or idled (it would, had a config dropped it).
    assert.deepEqual(events.filter((e) => / (a|b) idle/.test(e)), []);
    console.log(events.join("\n"));
    const afterFirst = history.slice(history.findIndex((h) => h.length === 2));
    for (const members of afterFirst) {
      assert.equal(new Set(members).size, members.length, `nobody listed twice: ${members.join()}`);
      assert.ok(members.includes("a") && members.includes("b"), `a and b never dropped: ${members.join()}`);
    }
    assert.deepEqual([...(history.at(-1) ?? [])].sort(), ["a", "b", "c", "d", "e"], "still all five after the node came back");
  });
});
