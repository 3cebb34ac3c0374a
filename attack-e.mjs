// Attack e: elastic group, 1 MB payloads, 30 ms sync handler, addMembers/deleteMembers during the load.
import { startServer, conn, spawnWorker, check, slowConsumerLines, sleep, readEvents } from "./lib.mjs";
import { createElastic, addMembers, deleteMembers } from "/work/main/dist/src/index.js";
import { headers } from "@nats-io/transport-node";
const dir = `/tmp/review-pullroom/e-${Date.now()}`;
const { srv, log } = await startServer(dir);
const { nc, js, jsm } = await conn(srv.url);
const workers = [];
try {
  await jsm.streams.add({ name: "EV", subjects: ["EV.*"] });
  await createElastic(js, { stream: "EV", group: "g", maxMembers: 6, partitioningFilters: [{ filter: "EV.*", partitioning_wildcards: [1] }] });
  await addMembers(js, "EV", "g", ["m1", "m2"]);
  const files = [];
  const start = (member, inst) => { const out = `${dir}/${inst}.jsonl`; files.push(out); workers.push(spawnWorker({ url: srv.url, kind: "elastic", stream: "EV", group: "g", member, inst, out, sleepMs: 30, opts: { consumerConfig: { ack_wait: 2e9 } } })); };
  start("m1", "m1#1"); start("m1", "m1#2"); start("m2", "m2#1"); start("m3", "m3#1");
  await sleep(2500);
  const published = new Map();
  const big = new Uint8Array(1_000_000).fill(100);
  const N = 400;
  const pub = (async () => {
    for (let i = 0; i < N; i++) {
      const key = `k${i % 20}`; const s = (published.get(key) ?? 0) + 1; published.set(key, s);
      const h = headers(); h.set("k", key); h.set("s", String(s));
      await js.publish(`EV.${key}`, big, { headers: h, timeout: 30000 });
      if (i % 4 === 0) await sleep(20);
    }
  })();
  const changes = [];
  await sleep(1500); await addMembers(js, "EV", "g", ["m3"]); changes.push("add m3");
  await sleep(2000); await deleteMembers(js, "EV", "g", ["m1"]); changes.push("delete m1");
  await sleep(2000); await addMembers(js, "EV", "g", ["m1"]); changes.push("add m1");
  await sleep(1500); await deleteMembers(js, "EV", "g", ["m2"]); changes.push("delete m2");
  await pub;
  const dl = Date.now() + 100000; let r;
  while (Date.now() < dl) { r = check(files, published); if (r.lost === 0) break; await sleep(1500); }
  await sleep(3000);
  r = check(files, published);
  const sc = slowConsumerLines(log);
  const per = {}; for (const e of readEvents(files)) if (e.e === "start") per[e.inst] = (per[e.inst] ?? 0) + 1;
  console.log(JSON.stringify({ attack: "e", server: srv.version, N, changes, lost: r.lost, outOfOrder: r.outOfOrder, overlaps: r.overlaps, dups: r.dups, startsAfterOtherPinned: r.afterPin, slowConsumerCuts: sc.length, per, status: r.status }));
  for (const x of [...r.oooEx, ...r.ovEx.slice(0, 3), ...r.dupEx.slice(0, 5), ...r.apEx.slice(0, 3), ...r.errors.slice(0, 5)]) console.log("  ", x);
  if (r.lost) console.log("  lost e.g.", r.lostIds.join(","));
  if (sc.length) console.log("  server:", sc[0].slice(0, 200));
} finally { for (const w of workers) w.kill("SIGKILL"); await nc.close(); await srv.stop(); }
