// CPU µs per message of this process: raw pinned 16-filter callback consume vs staticConsume.
import { NatsServer } from "/work/main/dist/src/server/launcher.js";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { createStatic, staticConsume } from "/work/main/dist/src/index.js";
import { partitionedStream, publishKeyed } from "/work/main/dist/bench/lib/env.js";
const N = 100000;
const server = await NatsServer.start();
const nc = await connect({ servers: server.url });
const transport = nc.protocol.transport; const send0 = transport.send.bind(transport); let writes = 0; transport.send = (f) => { writes++; send0(f); };
const js = jetstream(nc), jsm = await jetstreamManager(nc);
await partitionedStream(jsm, "s", 16);
await publishKeyed(js, "s", N, 1000);
const filters = Array.from({ length: 16 }, (_, p) => `${p}.>`);
async function run(mode, i) {
  let n = 0, done; const fin = new Promise(r => done = r);
  const c0 = process.cpuUsage(); const t0 = performance.now(); const w0 = writes;
  if (mode === "raw") {
    await jsm.consumers.add("s", { durable_name: "raw" + i, ack_policy: "explicit", filter_subjects: filters, priority_groups: ["PCG"], priority_policy: "pinned_client", priority_timeout: 5e9, ack_wait: 5e9 });
    const c = await js.consumers.get("s", "raw" + i);
    const it = await c.consume({ group: "PCG", expires: 2500, callback: (m) => { m.ack(); if (++n === N) done(); } });
    await fin; await it.close();
  } else {
    await createStatic(js, { stream: "s", group: "g" + i, maxMembers: 16, members: ["m"] });
    const member = await staticConsume(js, { stream: "s", group: "g" + i, member: "m", handler: () => { if (++n === N) done(); } });
    await fin; await member.stop();
  }
  const c = process.cpuUsage(c0); const ms = performance.now() - t0;
  return { cpu: (c.user + c.system) / N, rate: N / (ms / 1000), writes: writes - w0 };
}
const res = { raw: [], ours: [] };
for (let i = 0; i < +(process.argv[2] ?? 3); i++) for (const mode of ["raw", "ours"]) res[mode].push(await run(mode, i));
const med = (a) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)];
for (const m of ["raw", "ours"]) console.log(m, "cpu µs/msg", med(res[m].map(r => r.cpu)).toFixed(2), "rate", Math.round(med(res[m].map(r => r.rate))), "writes", med(res[m].map(r => r.writes)));
await nc.close(); await server.stop();
