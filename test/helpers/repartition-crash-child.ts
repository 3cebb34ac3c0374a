/**
 * A child process that runs `repartition` and kills itself (SIGKILL) right after the
 * server answered its Nth request on a subject containing `match`. Each source switch
 * makes three stream updates: the pause mark, the switch itself, and the mark's
 * removal. So with `STREAM.UPDATE` and N = 1 it dies with the cut's pause marked but
 * no consumer paused yet, with N = 2 between the cut's switch and its clean-up, with
 * N = 5 between the finish's. That request is sent `delayMs` late, so the old source
 * keeps storing messages after the switch's anchor meanwhile (the copies the
 * clean-up must delete). Argv: url stream group partitions match n delayMs.
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { repartition } from "../../src/index.js";

const [url = "", stream = "", group = "", partitions = "0", match = "STREAM.UPDATE", nth = "1", delayMs = "0"] = process.argv.slice(2);
const nc = await connect({ servers: url });
let seen = 0;
const request = nc.request.bind(nc);
nc.request = (async (subject: string, ...rest: Parameters<typeof nc.request> extends [string, ...infer R] ? R : never) => {
  const fatal = subject.includes(match) && ++seen >= Number(nth);
  if (fatal) await new Promise((resolve) => setTimeout(resolve, Number(delayMs)));
  const reply = await request(subject, ...rest);
  if (fatal) {
    process.stdout.write(`killed after ${subject} #${seen}\n`);
    process.kill(process.pid, "SIGKILL");
  }
  return reply;
});
await repartition(jetstream(nc), stream, group, Number(partitions), { pollMs: 50 });
process.stdout.write("finished without being killed\n");
process.exit(0);
