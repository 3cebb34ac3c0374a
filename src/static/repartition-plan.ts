/**
 * Static groups partition with their stream's own subject transform, which belongs
 * to the user, so the library does not change it: it says how, with the exact
 * values of the group at hand.
 */
import type { JetStreamClient } from "@nats-io/jetstream";
import { ConsumerGroupError } from "../core/errors.js";
import { assertPartitionCount } from "../core/limits.js";
import { assertValidGroupNames } from "../core/names.js";
import { parsePartitionTransform } from "../core/transform.js";
import { managerOf, streamInfo } from "../nats/context.js";
import { getStaticConsumerGroupConfig } from "./admin.js";

/** The steps to repartition a static group, in order. */
export interface StaticRepartitionPlan {
  /** The group's stream. */
  stream: string;
  /** The group. */
  group: string;
  /** The partition count now. */
  from: number;
  /** The partition count asked for. */
  to: number;
  /** The stream's subject transform now. */
  transform: {
    /** The subjects it applies to. */
    src: string;
    /** What they become, with `{{partition(N,…)}}`. */
    dest: string;
  };
  /** The destination to set. */
  newDest: string;
  /** The stream's last sequence when the plan was made (a newer one is read again at step 3). */
  lastSeq: number;
  /** The steps, in order. */
  steps: {
    /** What to do, as a sentence. */
    what: string;
    /** The command that does it, where there is one. */
    command?: string;
  }[];
}

/**
 * The steps that repartition a static group from N to `partitions` partitions without
 * breaking per-key order and without replaying the stream: nothing is changed.
 *
 * @throws ConsumerGroupError `INVALID_NAME`, `INVALID_MAX_MEMBERS`, `GROUP_NOT_FOUND`, `BUCKET_NOT_FOUND`, `STREAM_NOT_FOUND`,
 *   `CONFIG_MISMATCH` (the stream has no partition transform)
 */
export async function staticRepartitionPlan(js: JetStreamClient, stream: string, group: string, partitions: number): Promise<StaticRepartitionPlan> {
  assertValidGroupNames(stream, group);
  assertPartitionCount(partitions, "the new partition count");
  const config = await getStaticConsumerGroupConfig(js, stream, group);
  const jsm = await managerOf(js);
  const info = await streamInfo(jsm, stream, "the static consumer group's stream", "create it first");
  const transform = info.config.subject_transform;
  const parsed = transform ? parsePartitionTransform(transform.dest) : undefined;
  if (!transform || !parsed) {
    throw new ConsumerGroupError("CONFIG_MISMATCH", `the stream "${stream}" has no {{partition(N,…)}} subject transform: there is nothing to repartition`);
  }
  if (partitions === config.max_members) {
    throw new ConsumerGroupError("INVALID_MAX_MEMBERS", `${stream}.${group} already has ${partitions} partitions`);
  }
  const args = [partitions, ...parsed.wildcards].join(",");
  const newDest = transform.dest.replace(/\{\{\s*[pP]artition\s*\(.*?\)\s*\}\}/, `{{partition(${args})}}`);
  const members = (config.members ?? []).join(" ");
  const filters = (config.filters ?? []).map((f) => ` --filter '${f}'`).join("");
  const recreate =
    (config.members ?? []).length > 0
      ? `cg static create balanced ${stream} ${group} ${partitions} ${members}${filters}`
      : `cg static create mapped ${stream} ${group} ${partitions} <member>:<partitions> ...   # new mappings that cover 0-${partitions - 1}`;
  return {
    stream,
    group,
    from: config.max_members,
    to: partitions,
    transform: { src: transform.src ?? "", dest: transform.dest },
    newDest,
    lastSeq: info.state.last_seq,
    steps: [
      { what: `Pause the publishers to "${stream}": a static stream cannot tell messages hashed into ${config.max_members} partitions from those hashed into ${partitions}, so the cut must happen with nothing in between.` },
      { what: "Wait until every member has handled everything: no member's durable has messages pending or unacknowledged.", command: `cg static describe ${stream} ${group}` },
      { what: "Note the stream's last sequence now (call it X); the new members start after it.", command: `nats stream info ${stream} --json | jq .state.last_seq` },
      { what: "Stop every member instance, then delete the group (its durables go; the stream's messages stay).", command: `cg static delete ${stream} ${group}` },
      { what: `Change the stream's transform to ${partitions} partitions.`, command: `nats stream edit ${stream} --transform-source '${transform.src ?? ""}' --transform-destination '${newDest}'` },
      { what: `Recreate the group with ${partitions} partitions.`, command: recreate },
      { what: `Start the members with a consumer template that starts after X, so nothing is replayed: { deliver_policy: "by_start_sequence", opt_start_seq: X + 1 }.` },
      { what: `Resume the publishers. (For a live repartition that needs no pause, use an elastic group: "cg elastic repartition".)` },
    ],
  };
}
