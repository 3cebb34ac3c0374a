/**
 * Reads and updates of a group's work-queue stream shared by the repartition's steps.
 */
import type { ConsumerInfo, JetStreamManager, StreamConfig, StreamInfo, StreamSource } from "@nats-io/jetstream";
import { ConsumerGroupError } from "../../core/errors.js";
import { ApiCode, apiErrorCode, wrapServerError } from "../../nats/server-errors.js";

export async function workQueueInfo(jsm: JetStreamManager, wq: string): Promise<StreamInfo> {
  try {
    return await jsm.streams.info(wq);
  } catch (err) {
    if (apiErrorCode(err) === ApiCode.StreamNotFound) {
      throw new ConsumerGroupError("STREAM_NOT_FOUND", `the elastic consumer group's work-queue stream "${wq}" does not exist: recreate the group`, { cause: err });
    }
    throw wrapServerError(err, `reading the work-queue stream "${wq}"`);
  }
}

export async function listConsumers(jsm: JetStreamManager, wq: string): Promise<ConsumerInfo[]> {
  const found: ConsumerInfo[] = [];
  try {
    for await (const ci of jsm.consumers.list(wq)) found.push(ci);
  } catch (err) {
    throw wrapServerError(err, `listing the consumers of "${wq}"`);
  }
  return found;
}

/** A stream config to send back in an update: what was read, with `change` applied. */
export function updatedConfig(info: StreamInfo, change: (config: StreamConfig) => void): StreamConfig {
  const config = structuredClone(info.config);
  change(config);
  return config;
}

export async function updateStream(jsm: JetStreamManager, config: StreamConfig, what: string): Promise<void> {
  try {
    await jsm.streams.update(config.name, config);
  } catch (err) {
    throw wrapServerError(err, `updating the work-queue stream "${config.name}" (${what})`);
  }
}

/** A source that starts right after origin sequence `sourced` (or wherever the server chooses, when undefined). */
export function withStart(source: StreamSource, sourced: number | undefined): StreamSource {
  const next: StreamSource = { ...source };
  delete next.opt_start_seq;
  delete next.opt_start_time;
  if (sourced !== undefined) next.opt_start_seq = sourced + 1;
  return next;
}

export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done(): void {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}
