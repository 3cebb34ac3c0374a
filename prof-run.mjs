import { NatsServer } from "./dist/src/server/launcher.js";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { createStatic, staticConsume } from "./dist/src/index.js";
import { partitionedStream, publishKeyed } from "./dist/bench/lib/env.js";
const mode = process.argv[2] ?? "ours";
const N = 200000;
const server = await NatsServer.start();
const nc = await connect({ servers: server.url });
const js = jetstream(nc), jsm = await jetstreamManager(nc);
await partitionedStream(jsm, "s", 16);
await publishKeyed(js, "s", N, 1000);
const filters = Array.from({ length: 16 }, (_, p) => `${p}.>`);
let n = 0, first = 0, done; const fin = new Promise(r => done = r);
if (globalThis.gc) gc();
const { Session } = await import("node:inspector/promises");
const session = new Session(); session.connect();
await session.post("Profiler.enable"); await session.post("Profiler.start");
if (mode === "raw") {
  await jsm.consumers.add("s", { durable_name: "raw", ack_policy: "explicit", filter_subjects: filters, priority_groups: ["PCG"], priority_policy: "pinned_client", priority_timeout: 5e9, ack_wait: 5e9 });
  const c = await js.consumers.get("s", "raw");
  const it = await c.consume({ group: "PCG", expires: 2500, callback: (m) => { if (n === 0) first = performance.now(); m.ack(); if (++n === N) done(); } });
  await fin; await it.close();
} else {
  await createStatic(js, { stream: "s", group: "g", maxMembers: 16, members: ["m"] });
  const member = await staticConsume(js, { stream: "s", group: "g", member: "m", handler: () => { if (n === 0) first = performance.now(); if (++n === N) done(); } });
  await fin; await member.stop();
}
const rate = N / ((performance.now() - first) / 1000);
const { profile } = await session.post("Profiler.stop");
const fs = await import("node:fs"); fs.writeFileSync(`/tmp/prof/${mode}.cpuprofile`, JSON.stringify(profile));
console.log(mode, Math.round(rate), "msgs/s");
await nc.close(); await server.stop();
