/**
 * `cg pub`: keyed test traffic. Message n (1-based) goes to key (n-1) mod keys, so
 * every key gets its own ordered sequence; publishes are pipelined with a bounded
 * window of outstanding JetStream acks.
 */
import { Option } from "commander";
import type { JetStreamPublishOptions, PubAck } from "@nats-io/jetstream";
import { CliError, ExitRequest, UsageError } from "../errors.js";
import type { PubDoc } from "../model.js";
import { parsePositiveInt } from "../parse.js";
import { renderProgress, renderPubSummary } from "../render.js";
import { withSession, type Session } from "../session.js";
import { exitCodeFor, onStopSignal, type StopSignal } from "../signals.js";
import { arg } from "./common.js";
import type { CommandSpec } from "./spec.js";

interface PubOptions {
  keys: number;
  count: number;
  rate?: number;
  stream?: string;
  window: number;
}

/** The subject of message `n` for key `key`. */
export function subjectFor(template: string, key: string, n: number): string {
  return template.replaceAll("{key}", key).replaceAll("{seq}", String(n));
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

function publishError(err: unknown, subject: string, stream: string | undefined): CliError {
  const detail = err instanceof Error ? err.message : String(err);
  let hint = "";
  // nats.js reports a publish nobody answered as "jetstream is not enabled"
  if (/no responders|503|not enabled/i.test(detail)) hint = `; no stream stores "${subject}" (or JetStream is off): create a stream whose subjects match it first (e.g. nats stream add)`;
  else if (stream && /expected stream/i.test(detail)) hint = `; "${subject}" is stored in another stream than ${stream}: fix --stream or the subject`;
  return new CliError("PUBLISH_FAILED", `publishing to "${subject}" failed: ${detail}${hint}`, { cause: err });
}

async function publish(session: Session, template: string, opts: PubOptions): Promise<void> {
  const out = session.out;
  const js = await session.js();
  const perKey = new Array<number>(opts.keys).fill(0);
  const options: Partial<JetStreamPublishOptions> = opts.stream ? { expect: { streamName: opts.stream } } : {};
  const inflight: Promise<void>[] = [];
  let published = 0;
  let firstSeq: number | null = null;
  let lastSeq: number | null = null;
  let stream: string | null = null;
  let failure: CliError | undefined;
  let interrupted: StopSignal | undefined;

  const restore = onStopSignal((signal) => {
    if (interrupted) process.exit(exitCodeFor(signal));
    interrupted = signal;
  });
  const start = performance.now();
  const rate = (): number => published / Math.max((performance.now() - start) / 1000, 1e-3);
  const showProgress = !out.json && process.stderr.isTTY === true;
  const progress = showProgress ? setInterval(() => process.stderr.write(`\r${renderProgress(published, opts.count, rate())}`), 100) : undefined;
  const onAck = (ack: PubAck): void => {
    published += 1;
    stream = ack.stream;
    firstSeq = firstSeq === null ? ack.seq : Math.min(firstSeq, ack.seq);
    lastSeq = lastSeq === null ? ack.seq : Math.max(lastSeq, ack.seq);
  };
  try {
    for (let n = 1; n <= opts.count && !interrupted && !failure; n++) {
      if (opts.rate !== undefined) {
        const wait = start + ((n - 1) * 1000) / opts.rate - performance.now();
        if (wait > 0) await sleep(wait);
      }
      const k = (n - 1) % opts.keys;
      const key = String(k);
      const seq = (perKey[k] ?? 0) + 1;
      perKey[k] = seq;
      const subject = subjectFor(template, key, n);
      const payload = JSON.stringify({ key, seq, n });
      inflight.push(
        js.publish(subject, payload, options).then(onAck, (err: unknown) => {
          failure ??= publishError(err, subject, opts.stream);
        }),
      );
      if (inflight.length >= opts.window) await inflight.shift();
    }
    await Promise.all(inflight);
  } finally {
    clearInterval(progress);
    if (showProgress) process.stderr.write("\r\u001b[K");
    restore();
  }
  if (failure) throw failure;
  const elapsed = performance.now() - start;
  const doc: PubDoc = {
    subject_template: template,
    keys: opts.keys,
    published,
    requested: opts.count,
    stream,
    first_seq: firstSeq,
    last_seq: lastSeq,
    elapsed_ms: Math.round(elapsed),
    msgs_per_sec: Math.round((published / Math.max(elapsed, 1)) * 1000),
    interrupted: interrupted !== undefined,
  };
  out.result(doc, renderPubSummary);
  if (interrupted) throw new ExitRequest(exitCodeFor(interrupted));
}

const positive = (name: string) => arg((v) => parsePositiveInt(v, name));

/** `cg pub <subject-template>`. */
export const pubCommand: CommandSpec = {
  name: "pub",
  description: "publish keyed test traffic with JetStream acks: message n goes to key (n-1) mod keys, payload {\"key\", \"seq\" (per key), \"n\" (global)}",
  args: [{ name: "subject-template", description: "the subject, with a {key} placeholder; {seq} is the global message number" }],
  options: () => [
    new Option("--keys <n>", "number of distinct keys").argParser(positive("--keys")).default(100),
    new Option("--count <n>", "number of messages").argParser(positive("--count")).default(10000),
    new Option("--rate <n>", "at most this many messages per second (default: as fast as the acks come)").argParser(positive("--rate")),
    new Option("--stream <name>", "expect every message to be stored in this stream (the server rejects it otherwise)"),
    new Option("--window <n>", "max publishes waiting for their ack").argParser(positive("--window")).default(256),
  ],
  examples: ["cg pub 'orders.{key}' --keys 100 --count 10000", "cg pub 'orders.{key}.created' --count 1000 --rate 200 --stream orders --json"],
  run: async ({ args: [template], opts, cmd }) => {
    const subject = template as string;
    if (!subject.includes("{key}")) throw new UsageError(`the subject template "${subject}" has no {key} placeholder: every message would go to one key, e.g. use "orders.{key}"`);
    await withSession(cmd, (s) => publish(s, subject, opts as unknown as PubOptions));
  },
};
