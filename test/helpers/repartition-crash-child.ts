/**
 * A child process that runs `repartition` and kills itself (SIGKILL) right after the
 * server answered the first request whose subject contains `match` and whose payload
 * contains `payload` (empty: any). Each source switch makes three stream updates: the
 * pause mark (its payload has `pcg_switch_pause`), the switch itself (the cut's is the
 * first with `pcg_repartition`; the finish's the first with `finishing`), and the
 * mark's removal. That request is sent `delayMs` late, so the old source keeps storing
 * messages after the switch's anchor meanwhile (the copies the clean-up must delete).
 * Argv: url stream group partitions match payload delayMs.
 */
import { connect } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { repartition } from "../../src/index.js";

const [url = "", stream = "", group = "", partitions = "0", match = "STREAM.UPDATE", payload = "", delayMs = "0"] = process.argv.slice(2);
const nc = await connect({ servers: url });
const request = nc.request.bind(nc);
const decoder = new TextDecoder();
nc.request = (async (subject: string, ...rest: Parameters<typeof nc.request> extends [string, ...infer R] ? R : never) => {
  const data = rest[0];
  const text = typeof data === "string" ? data : data instanceof Uint8Array ? decoder.decode(data) : "";
  const fatal = subject.includes(match) && text.includes(payload);
  if (fatal) await new Promise((resolve) => setTimeout(resolve, Number(delayMs)));
  const reply = await request(subject, ...rest);
  if (fatal) {
    process.stdout.write(`killed after ${subject} with "${payload}"\n`);
    process.kill(process.pid, "SIGKILL");
  }
  return reply;
});
await repartition(jetstream(nc), stream, group, Number(partitions), { pollMs: 50 });
process.stdout.write("finished without being killed\n");
process.exit(0);
