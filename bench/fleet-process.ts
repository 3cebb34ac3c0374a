/**
 * Many member instances in one process, on one shared connection, for the fleet
 * scenario. Reads its settings as JSON from argv[2] and commands as JSON lines on
 * stdin; prints JSON lines on stdout:
 *
 * - `ready` (every instance of `members` has started, with `at`);
 * - `partition` (the first message of a partition this process handled: `p`, `at`);
 * - `first` (an instance's first handled message: `member`, `at`);
 * - `started` (after a `start` command: `member`);
 * - `rss` (after an `rss` command: `rss`, `heap`, `instances`);
 * - `stopped`.
 *
 * Commands: `{"cmd":"start","member":"x"}` starts one more instance,
 * `{"cmd":"rss"}` samples memory. With FLEET_TRACE set, an elastic instance's join,
 * idle, partition and consumer-error events go to stderr as `TRACE <ms> <process> <member> <type>`
 * (the scenario then logs each add too), to see who held a slow add up. The process stops every instance and exits on
 * SIGTERM or when its stdin closes, so it never outlives the benchmark.
 */
import { createInterface } from "node:readline";
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { elasticConsume, staticConsume, type ConsumerGroupMember } from "../src/index.js";
import { clock } from "./lib/stats.js";

/** What the parent passes in argv[2]. */
export interface FleetProcessSettings {
  url: string;
  /** The connection's name (the scenario counts its subscriptions by it). */
  name: string;
  flavour: "static" | "elastic";
  stream: string;
  group: string;
  /** The instances to start at once (a name twice: a standby in the same process). */
  members: string[];
}

const settings = JSON.parse(process.argv[2] ?? "{}") as FleetProcessSettings;
const emit = (line: object): void => void process.stdout.write(JSON.stringify(line) + "\n");
const seenPartitions = new Set<number>();
const firstSeen = new Set<string>();
const instances: ConsumerGroupMember[] = [];

const nc = await connect({ servers: settings.url, name: settings.name, maxPingOut: 10 });
const js = jetstream(nc);
const consume = settings.flavour === "static" ? staticConsume : elasticConsume;

function startInstance(member: string): Promise<ConsumerGroupMember> {
  return consume(js, {
    stream: settings.stream,
    group: settings.group,
    member,
    handler: (m) => {
      if (!seenPartitions.has(m.partition)) {
        seenPartitions.add(m.partition);
        emit({ ev: "partition", p: m.partition, at: clock() });
      }
      if (!firstSeen.has(member)) {
        firstSeen.add(member);
        emit({ ev: "first", member, at: clock() });
      }
    },
  }).then((instance) => {
    instances.push(instance);
    if (process.env["FLEET_TRACE"] && settings.flavour === "elastic") {
      void (async () => {
        for await (const e of instance.status()) {
          if (e.type === "consumer_error" || e.type === "joined" || e.type === "partitions_changed" || e.type === "idle") {
            const detail = e.type === "consumer_error" ? e.error.message.slice(0, 160) : e.type === "partitions_changed" ? `${e.partitions.length}` : e.type === "joined" ? `${e.partitions.length}` : "";
            process.stderr.write(`TRACE ${Date.now()} ${settings.name} ${member} ${e.type} ${detail}\n`);
          }
        }
      })();
    }
    return instance;
  });
}

let stopping: Promise<void> | undefined;
function stop(): Promise<void> {
  stopping ??= (async () => {
    await Promise.allSettled(instances.map((i) => i.stop()));
    await nc.close();
    emit({ ev: "stopped" });
    process.exit(0);
  })();
  return stopping;
}
process.on("SIGTERM", () => void stop());
process.on("SIGINT", () => void stop());

const commands = createInterface({ input: process.stdin });
commands.on("close", () => void stop());
commands.on("line", (line) => {
  const command = JSON.parse(line) as { cmd: string; member?: string };
  if (command.cmd === "start" && command.member) {
    const member = command.member;
    void startInstance(member).then(
      () => emit({ ev: "started", member }),
      (err: unknown) => emit({ ev: "error", member, error: String(err) }),
    );
  } else if (command.cmd === "rss") {
    const usage = process.memoryUsage();
    emit({ ev: "rss", rss: usage.rss, heap: usage.heapUsed, instances: instances.length });
  }
});

try {
  await Promise.all(settings.members.map((m) => startInstance(m)));
  emit({ ev: "ready", at: clock() });
} catch (err) {
  emit({ ev: "error", error: String(err) });
  await stop();
}
