/**
 * The guided demo: an elastic group over 8 partitions on a stream of orders, three
 * members (one with a hot standby) in their own processes, keyed orders for 50
 * customers, a crash of the pinned instance, a fourth member joining, and a check
 * that every order was processed with per-customer order held. Every number it
 * prints is measured in this run.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager, type JetStreamClient } from "@nats-io/jetstream";
import { addMembers, createElastic, deleteElastic, partitionOf } from "../../index.js";
import { NatsServer } from "../../server/launcher.js";
import { redactUrls } from "../redact.js";
import { checkDelivery, type DeliveryReport, type HandledRecord } from "./delivery-check.js";

/** Demo settings. */
export interface DemoOptions {
  /** Use this server instead of starting an embedded one. */
  server?: string;
  customers: number;
  orders: number;
  handlerMs: number;
  /** Orders published per second. */
  rate: number;
  /** Where progress goes (stderr-like); the summary goes to `out`. */
  log: (line: string) => void;
  /** Redraw progress in place (a TTY). */
  live: boolean;
  /** Aborts the demo (Ctrl-C): it stops where it is and cleans up everything it started. */
  signal?: AbortSignal;
}

/** What the demo measured. */
export interface DemoResult {
  ok: boolean;
  serverVersion: string;
  report: DeliveryReport;
  failoverMs: number | undefined;
  rebalanceMs: number | undefined;
  perInstance: Record<string, number>;
  elapsedMs: number;
}

interface Instance {
  member: string;
  id: string;
  child: ChildProcess;
  handled: number;
  pinned: boolean;
  ready: Promise<void>;
  exited: Promise<void>;
}

const MEMBER_SCRIPT = fileURLToPath(new URL("./member-process.js", import.meta.url));
const now = (): number => performance.timeOrigin + performance.now();

/** Runs the demo; resolves with what was measured. Cleans up everything it started. */
export async function runDemo(options: DemoOptions): Promise<DemoResult> {
  const started = now();
  const { log } = options;
  const embedded = options.server ? undefined : await NatsServer.start();
  const url = options.server ?? embedded?.url ?? "";
  const suffix = Math.random().toString(36).slice(2, 7);
  const stream = `ORDERS_${suffix}`;
  const group = "fulfilment";
  const instances: Instance[] = [];
  const handled: HandledRecord[] = [];
  let nc: NatsConnection | undefined;
  let groupCreated = false;
  try {
    nc = await connect({ servers: url, name: "cg-demo" });
    const js = jetstream(nc);
    const jsm = await jetstreamManager(nc);
    const serverVersion = nc.info?.version ?? "unknown";
    log(`1. ${embedded ? `started an embedded nats-server ${serverVersion} on ${url}` : `using nats-server ${serverVersion} at ${redactUrls(url)}`}`);

    await jsm.streams.add({ name: stream, subjects: [`${stream}.>`], storage: "file" });
    await createElastic(js, { stream, group, maxMembers: 8, partitioningFilters: [{ filter: `${stream}.*.*`, partitioning_wildcards: [1] }] });
    groupCreated = true;
    await addMembers(js, stream, group, ["m1", "m2", "m3"]);
    log(`2. created stream ${stream} (subjects ${stream}.<customer>.<action>) and elastic group "${group}": 8 partitions keyed by customer`);

    const events = { onHandled: (_i: Instance) => {} };
    const spawnInstance = (member: string, id: string): Instance => {
      const child = spawn(process.execPath, [MEMBER_SCRIPT, url, stream, group, member, id, String(options.handlerMs)], { stdio: ["ignore", "pipe", "inherit"] });
      let markReady!: () => void;
      const instance: Instance = {
        member,
        id,
        child,
        handled: 0,
        pinned: false,
        ready: new Promise<void>((resolve) => (markReady = resolve)),
        exited: new Promise<void>((resolve) => child.once("exit", () => resolve())),
      };
      createInterface({ input: child.stdout }).on("line", (line) => {
        const ev = JSON.parse(line) as { ev: string; type?: string; key?: string; seq?: number; at?: number };
        if (ev.ev === "ready") markReady();
        else if (ev.ev === "msg") {
          instance.handled += 1;
          handled.push({ key: ev.key ?? "", seq: ev.seq ?? 0, at: ev.at ?? 0 });
          events.onHandled(instance);
        } else if (ev.ev === "status" && (ev.type === "pinned" || ev.type === "unpinned")) {
          instance.pinned = ev.type === "pinned";
        }
      });
      instances.push(instance);
      return instance;
    };

    for (const [member, id] of [["m1", "m1#1"], ["m1", "m1#2"], ["m2", "m2#1"], ["m3", "m3#1"]] as const) spawnInstance(member, id);
    await Promise.all(instances.map((i) => i.ready));
    log("3. started members m1, m2, m3 in their own processes, plus a hot standby instance of m1 (m1#2)");

    const published = new Map<string, number>();
    const customers = Array.from({ length: options.customers }, (_, i) => `c${String(i + 1).padStart(2, "0")}`);
    const partitionsOf = new Map(customers.map((c) => [c, partitionOf(`${stream}.${c}.created`, 8, { filter: `${stream}.*.*`, wildcards: [1] })]));
    log(`4. publishing ${options.orders} orders for ${options.customers} customers at ~${options.rate}/s (customer c01 → partition ${partitionsOf.get("c01")}, c02 → ${partitionsOf.get("c02")}, …)`);
    const publishing = publish(js, stream, customers, options.orders, options.rate, published, options.signal);
    publishing.catch(() => undefined); // awaited below; an interruption is reported there

    const progress = startProgress(instances, () => handled.length, options);
    const handledAtLeast = (fraction: number): Promise<void> =>
      new Promise((resolve, reject) => {
        const check = (): void => {
          if (options.signal?.aborted) reject(new Error("the demo was interrupted"));
          else if (handled.length >= options.orders * fraction) resolve();
          else setTimeout(check, 50);
        };
        check();
      });

    // 6. crash the pinned instance of m1
    await handledAtLeast(0.25);
    const m1 = instances.filter((i) => i.member === "m1");
    const victim = m1.find((i) => i.pinned) ?? m1[0];
    const standby = m1.find((i) => i !== victim);
    let failoverMs: number | undefined;
    if (victim && standby) {
      const before = standby.handled;
      const killedAt = now();
      victim.child.kill("SIGKILL");
      progress.note(`6. killed ${victim.id} (the pinned instance of m1) with SIGKILL`);
      failoverMs = await firstHandled(events, (i) => i === standby && i.handled > before, killedAt, 20_000);
      progress.note(
        failoverMs === undefined
          ? `   ${standby.id} did not take over within 20 s`
          : `   ${standby.id} took over and handled its first order ${(failoverMs / 1000).toFixed(2)} s later (PinnedTTL is 2 s: AckWait 2 s)`,
      );
    }

    // 7. a fourth member joins
    await handledAtLeast(0.55);
    const m4 = spawnInstance("m4", "m4#1");
    await m4.ready;
    const addedAt = now();
    await addMembers(js, stream, group, ["m4"]);
    progress.note("7. added member m4: partitions are rebalanced over 4 members");
    const rebalanceMs = await firstHandled(events, (i) => i === m4, addedAt, 20_000);
    progress.note(rebalanceMs === undefined ? "   m4 handled nothing within 20 s" : `   m4 handled its first order ${(rebalanceMs / 1000).toFixed(2)} s after addMembers returned`);

    await publishing;
    const deadline = now() + 60_000;
    while (new Set(handled.map((h) => `${h.key}/${h.seq}`)).size < options.orders && now() < deadline) {
      if (options.signal?.aborted) throw new Error("the demo was interrupted");
      await sleep(100);
    }
    progress.stop();

    const report = checkDelivery(published, handled);
    const ok = report.lost.length === 0 && report.outOfOrder.length === 0 && report.unexpected === 0;
    const perInstance = Object.fromEntries(instances.map((i) => [i.id, i.handled]));
    return { ok, serverVersion, report, failoverMs, rebalanceMs, perInstance, elapsedMs: now() - started };
  } finally {
    await Promise.all(
      instances.map(async (i) => {
        if (i.child.exitCode === null && i.child.signalCode === null) i.child.kill("SIGTERM");
        await Promise.race([i.exited, sleep(5000).then(() => i.child.kill("SIGKILL"))]);
      }),
    );
    if (nc && !nc.isClosed()) {
      if (groupCreated) await deleteElastic(jetstream(nc), stream, group).catch(() => undefined);
      await (await jetstreamManager(nc)).streams.delete(stream).catch(() => undefined);
      await nc.close();
    }
    await embedded?.stop();
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function publish(js: JetStreamClient, stream: string, customers: string[], total: number, rate: number, published: Map<string, number>, signal?: AbortSignal): Promise<void> {
  const actions = ["created", "paid", "packed", "shipped"];
  const startedAt = now();
  for (let n = 0; n < total; n++) {
    if (signal?.aborted) throw new Error("the demo was interrupted");
    const customer = customers[Math.floor(Math.random() * customers.length)] ?? "c01";
    const seq = (published.get(customer) ?? 0) + 1;
    published.set(customer, seq);
    await js.publish(`${stream}.${customer}.${actions[(seq - 1) % actions.length] ?? "created"}`, JSON.stringify({ customer, seq }));
    const due = startedAt + ((n + 1) * 1000) / rate;
    const wait = due - now();
    if (wait > 0) await sleep(wait);
  }
}

function firstHandled(events: { onHandled: (i: Instance) => void }, match: (i: Instance) => boolean, since: number, timeoutMs: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const previous = events.onHandled;
    const timer = setTimeout(() => {
      events.onHandled = previous;
      resolve(undefined);
    }, timeoutMs);
    events.onHandled = (i) => {
      previous(i);
      if (match(i)) {
        clearTimeout(timer);
        events.onHandled = previous;
        resolve(now() - since);
      }
    };
  });
}

function startProgress(instances: Instance[], handledCount: () => number, options: DemoOptions): { note(line: string): void; stop(): void } {
  let drawn = 0;
  const render = (): string[] => {
    const rows = instances.map((i) => {
      const state = i.child.exitCode !== null || i.child.signalCode !== null ? "killed " : i.pinned ? "pinned " : "standby";
      const bar = "█".repeat(Math.min(40, Math.round((i.handled / Math.max(1, options.orders)) * 80)));
      return `   ${i.id.padEnd(5)} ${state} ${String(i.handled).padStart(5)} ${bar}`;
    });
    return [`5. progress: ${handledCount()} handled of ${options.orders} published`, ...rows];
  };
  const draw = (): void => {
    const lines = render();
    if (options.live) {
      if (drawn > 0) process.stderr.write(`\x1b[${drawn}A`);
      for (const l of lines) process.stderr.write(`\x1b[2K${l}\n`);
      drawn = lines.length;
    } else {
      options.log(lines.join("\n"));
    }
  };
  const timer = setInterval(draw, options.live ? 200 : 1500);
  draw();
  return {
    note(line) {
      if (options.live && drawn > 0) {
        process.stderr.write(`\x1b[${drawn}A\x1b[J`);
        drawn = 0;
      }
      options.log(line);
      draw();
    },
    stop() {
      clearInterval(timer);
      draw();
    },
  };
}
