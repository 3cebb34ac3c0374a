/**
 * Helpers for the bad-input, old-server and security tests: a snapshot of
 * everything a call could have written on the server (streams, their message
 * counts and sequences, their consumers), raw KV writes for hand-edited configs,
 * and typed-error assertions.
 */
import assert from "node:assert/strict";
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import {
  ConsumerGroupError,
  ELASTIC_BUCKET,
  STATIC_BUCKET,
  addMembers,
  createElastic,
  createStatic,
  setMemberMappings,
  type ErrorCode,
  type PartitioningFilter,
} from "../../src/index.js";
import { NatsServer, connectTo, type Client } from "./nats.js";

/** One stream as the snapshot sees it. */
export interface StreamState {
  messages: number;
  lastSeq: number;
  consumers: string[];
}

/** Every stream of the account: a KV write moves its bucket's last sequence, a new stream or consumer shows up. */
export type ServerState = Record<string, StreamState>;

/**
 * Snapshots the account. Consumers of `KV_*` streams are left out: they are the
 * short-lived ordered consumers nats.js creates to read or list keys, not state.
 */
export async function serverState(jsm: JetStreamManager): Promise<ServerState> {
  const state: ServerState = {};
  for await (const si of jsm.streams.list()) {
    const consumers: string[] = [];
    if (!si.config.name.startsWith("KV_")) {
      for await (const ci of jsm.consumers.list(si.config.name)) consumers.push(ci.name);
    }
    state[si.config.name] = { messages: si.state.messages, lastSeq: si.state.last_seq, consumers: consumers.sort() };
  }
  return state;
}

/** Fails with what changed when the account differs from `before`. */
export async function assertUnchanged(jsm: JetStreamManager, before: ServerState, what: string): Promise<void> {
  const after = await serverState(jsm);
  const names = [...new Set([...Object.keys(before), ...Object.keys(after)])].sort();
  const changes: string[] = [];
  for (const name of names) {
    const a = before[name];
    const b = after[name];
    if (!a) changes.push(`stream "${name}" was created`);
    else if (!b) changes.push(`stream "${name}" was deleted`);
    else {
      if (a.lastSeq !== b.lastSeq || a.messages !== b.messages) changes.push(`stream "${name}" was written (seq ${a.lastSeq} → ${b.lastSeq}, ${a.messages} → ${b.messages} messages)`);
      const added = b.consumers.filter((c) => !a.consumers.includes(c));
      const removed = a.consumers.filter((c) => !b.consumers.includes(c));
      if (added.length > 0) changes.push(`consumers created on "${name}": ${added.join(", ")}`);
      if (removed.length > 0) changes.push(`consumers deleted on "${name}": ${removed.join(", ")}`);
    }
  }
  assert.deepEqual(changes, [], `${what} left state behind on the server`);
}

/**
 * Writes raw bytes as a group's config, as someone editing the bucket by hand
 * would (`nats kv put`). The bucket must exist.
 */
export async function putRawConfig(js: JetStreamClient, bucket: string, key: string, value: string): Promise<void> {
  const kv = await new Kvm(js).open(bucket);
  await kv.put(key, value);
}

/** Purges a group's config key (instead of deleting it, as the library does). */
export async function purgeRawConfig(js: JetStreamClient, bucket: string, key: string): Promise<void> {
  const kv = await new Kvm(js).open(bucket);
  await kv.purge(key);
}

/** Runs `fn` and returns what it threw (fails when it returns). Works for sync and async functions. */
export async function thrownBy(fn: () => unknown): Promise<unknown> {
  try {
    await fn();
  } catch (err) {
    return err;
  }
  assert.fail("expected the call to throw, but it returned");
}

/** Asserts a ConsumerGroupError with `code` and a message matching every pattern. */
export function assertTypedError(err: unknown, code: ErrorCode, ...patterns: RegExp[]): asserts err is ConsumerGroupError {
  assert.ok(err instanceof ConsumerGroupError, `expected a ConsumerGroupError ${code}, got ${err instanceof Error ? `${err.name}: ${err.message}` : String(err)}`);
  assert.equal(err.code, code, `expected code ${code}, got ${err.code}: ${err.message}`);
  for (const p of patterns) assert.match(err.message, p);
}

/** The streams of the bad-input catalogue: S4 and S3 are static sources partitioned into 4 and 3 (S1 into 1); EV is an elastic source; EVRUN feeds running members only. */
export const CATALOGUE = { S4: "S4", S3: "S3", S1: "S1", EV: "EV", EVRUN: "EVRUN", EMPTYS: "EMPTYS" } as const;

/** A server for the bad-input catalogue: two accounts, the main one with fixtures, and one with no group bucket at all. */
export interface CatalogueEnv {
  server: NatsServer;
  /** The MAIN account (also what a connection without credentials gets). */
  main: Client;
  /** The EMPTY account: JetStream, one partitioned stream EMPTYS, no consumer group bucket. */
  empty: Client;
  close(): Promise<void>;
}

/**
 * Starts the catalogue's server and creates its fixtures in the MAIN account:
 * - static groups on S4: `sg` (members m1, m2); hand-edited configs `badjson`,
 *   `wrongtype` ("max_members":"x"), `notobject` ([4]), `badmapping` (partition 9 of 4)
 *   and `purged` (created, then purged instead of deleted);
 * - elastic groups on EV (filter EV.* on wildcard 1): `eg` (4 partitions, member m1),
 *   `egmap` (2 partitions, mappings m1:0 m2:1), and hand-edited `ebadjson`, `ewrongtype`
 *   ("members":"m1"), `ezero` (max_members 0) and `epurged`, each with its work-queue stream.
 */
export async function startCatalogue(): Promise<CatalogueEnv> {
  const { S4, S3, S1, EV, EVRUN, EMPTYS } = CATALOGUE;
  const server = await NatsServer.start({
    extraConfig: [
      "accounts {",
      "  MAIN: { jetstream: enabled, users: [ { user: main, password: main } ] }",
      "  EMPTY: { jetstream: enabled, users: [ { user: empty, password: empty } ] }",
      "}",
      "no_auth_user: main",
    ].join("\n"),
  });
  const clients: Client[] = [];
  const close = async (): Promise<void> => {
    await Promise.allSettled(clients.map((c) => c.nc.close()));
    await server.stop();
  };
  try {
    const main = await connectTo(server);
    clients.push(main);
    const empty = await connectTo(server, { user: "empty", pass: "empty" });
    clients.push(empty);
    const { js, jsm } = main;
    const partitioned = async (m: JetStreamManager, name: string, n: number): Promise<void> => {
      await m.streams.add({ name, subjects: [`${name}.*`], subject_transform: { src: `${name}.*`, dest: `{{partition(${n},1)}}.${name}.{{wildcard(1)}}` } });
    };
    await partitioned(jsm, S4, 4);
    await partitioned(jsm, S3, 3);
    await partitioned(jsm, S1, 1);
    await partitioned(empty.jsm, EMPTYS, 2);
    await jsm.streams.add({ name: EV, subjects: [`${EV}.>`] });
    await jsm.streams.add({ name: EVRUN, subjects: [`${EVRUN}.>`] });

    await createStatic(js, { stream: S4, group: "sg", maxMembers: 4, members: ["m1", "m2"] });
    const pfs: PartitioningFilter[] = [{ filter: `${EV}.*`, partitioning_wildcards: [1] }];
    await createElastic(js, { stream: EV, group: "eg", maxMembers: 4, partitioningFilters: pfs });
    await addMembers(js, EV, "eg", ["m1"]);
    await createElastic(js, { stream: EV, group: "egmap", maxMembers: 2, partitioningFilters: pfs });
    await setMemberMappings(js, EV, "egmap", [
      { member: "m1", partitions: [0] },
      { member: "m2", partitions: [1] },
    ]);

    // Configs edited by hand in the bucket (nats kv put / purge).
    await putRawConfig(js, STATIC_BUCKET, `${S4}.badjson`, '{"max_members":4,"members":["m1"');
    await putRawConfig(js, STATIC_BUCKET, `${S4}.wrongtype`, '{"max_members":"x","members":["m1"]}');
    await putRawConfig(js, STATIC_BUCKET, `${S4}.notobject`, "[4]");
    await putRawConfig(js, STATIC_BUCKET, `${S4}.badmapping`, '{"max_members":4,"member_mappings":[{"member":"m1","partitions":[0,1,2,9]}]}');
    await createStatic(js, { stream: S4, group: "purged", maxMembers: 4, members: ["m1"] });
    await purgeRawConfig(js, STATIC_BUCKET, `${S4}.purged`);
    for (const g of ["ebadjson", "ewrongtype", "ezero", "epurged"]) await createElastic(js, { stream: EV, group: g, maxMembers: 2, partitioningFilters: pfs });
    await putRawConfig(js, ELASTIC_BUCKET, `${EV}.ebadjson`, "not json at all");
    await putRawConfig(js, ELASTIC_BUCKET, `${EV}.ewrongtype`, `{"max_members":2,"partitioning_filters":[{"filter":"${EV}.*","partitioning_wildcards":[1]}],"members":"m1"}`);
    await putRawConfig(js, ELASTIC_BUCKET, `${EV}.ezero`, `{"max_members":0,"partitioning_filters":[{"filter":"${EV}.*","partitioning_wildcards":[1]}]}`);
    await purgeRawConfig(js, ELASTIC_BUCKET, `${EV}.epurged`);
    return { server, main, empty, close };
  } catch (err) {
    await close();
    throw err;
  }
}
