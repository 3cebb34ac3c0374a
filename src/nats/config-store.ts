/**
 * The KV store of group configs: reads, compare-and-set writes and watches, with
 * every untouched field written back exactly as it was read.
 */
import type { JetStreamClient, JetStreamManager } from "@nats-io/jetstream";
import { Kvm, type KV, type KvEntry } from "@nats-io/kv";
import { decodeElasticConfig, decodeStaticConfig, encodeElasticConfig, encodeStaticConfig } from "../core/codec.js";
import { ConsumerGroupError } from "../core/errors.js";
import { bucketName, configKey, parseConfigKey } from "../core/names.js";
import type { ElasticConsumerGroupConfig, GroupKind, StaticConsumerGroupConfig } from "../core/types.js";
import { validateReadElasticConfig, validateStoredStaticConfig } from "../core/validation.js";
import { ApiCode, apiErrorCode, isNoResponders, wrapServerError } from "./server-errors.js";
import { SharedWatches, type RawWatch, type WatchLease } from "./shared-watch.js";

/** How one flavour's config is stored. */
export interface Flavour<C> {
  kind: GroupKind;
  decode(raw: Uint8Array | string): C;
  encode(config: C): string;
  /** The rules a stored config must meet; `group` names a static member's consumer (`<group>-<member>`). */
  validate(config: C, group?: string): void;
}

/** The static flavour's codec and rules. */
export const STATIC: Flavour<StaticConsumerGroupConfig> = {
  kind: "static",
  decode: decodeStaticConfig,
  encode: encodeStaticConfig,
  // Go's rules, and members that can have a consumer.
  validate: validateStoredStaticConfig,
};

/** The elastic flavour's codec and rules. */
export const ELASTIC: Flavour<ElasticConsumerGroupConfig> = {
  kind: "elastic",
  decode: decodeElasticConfig,
  encode: encodeElasticConfig,
  // Go's rules (a stored config Go accepts must be readable here: see validateStoredElasticConfig),
  // and members that can have a consumer.
  validate: validateReadElasticConfig,
};

/** A config with the KV revision it was read at. */
export interface StoredConfig<C> {
  config: C;
  revision: number;
}

/**
 * Binds the config bucket of a flavour, failing clearly when it does not exist
 * (nats.js `Kvm.open` would only fail on first use).
 *
 * @throws ConsumerGroupError `BUCKET_NOT_FOUND`
 */
export async function openConfigBucket(js: JetStreamClient, jsm: JetStreamManager, kind: GroupKind): Promise<KV> {
  const bucket = bucketName(kind);
  let direct: boolean;
  try {
    direct = (await jsm.streams.info(`KV_${bucket}`)).config.allow_direct === true;
  } catch (err) {
    if (apiErrorCode(err) === ApiCode.StreamNotFound) {
      throw new ConsumerGroupError("BUCKET_NOT_FOUND", `the ${kind} consumer group KV bucket "${bucket}" doesn't exist: no ${kind} group was ever created on this account (create one first)`, {
        cause: err,
      });
    }
    throw wrapServerError(err, `looking up the KV bucket "${bucket}"`);
  }
  // nats.js binds a bucket for STREAM.MSG.GET reads unless told it allows direct gets. Reading by direct get
  // (as nats.go does) lets a principal's permissions name the one key it reads:
  // $JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<stream>.<group>; MSG.GET names no key, so it reads every group's.
  return new Kvm(js).open(bucket, { allow_direct: direct });
}

/**
 * Binds the config bucket, creating it as Go does when missing: file storage,
 * history 1, and the given replicas (the source stream's).
 */
export async function ensureConfigBucket(js: JetStreamClient, jsm: JetStreamManager, kind: GroupKind, replicas: number): Promise<KV> {
  try {
    return await openConfigBucket(js, jsm, kind);
  } catch (err) {
    if (!(err instanceof ConsumerGroupError && err.code === "BUCKET_NOT_FOUND")) throw err;
  }
  try {
    return await new Kvm(js).create(bucketName(kind), { history: 1, replicas, storage: "file" });
  } catch (err) {
    throw wrapServerError(err, `creating the KV bucket "${bucketName(kind)}"`);
  }
}

/**
 * Decodes and validates a KV entry's value.
 *
 * @throws ConsumerGroupError `CONFIG_DECODE` or a validation code
 */
export function decodeEntry<C>(flavour: Flavour<C>, entry: KvEntry): C {
  const config = flavour.decode(entry.value);
  const problem = configProblem(flavour, config, entry.key);
  if (problem) throw problem;
  return config;
}

/**
 * Why a decoded config is not valid, as the typed error reading it raises (naming its key), or undefined.
 *
 * @param key - the config's KV key, `<stream>.<group>`
 */
export function configProblem<C>(flavour: Flavour<C>, config: C, key: string): ConsumerGroupError | undefined {
  try {
    flavour.validate(config, parseConfigKey(key)?.group);
    return undefined;
  } catch (err) {
    if (err instanceof ConsumerGroupError) {
      return new ConsumerGroupError(err.code, `invalid ${flavour.kind} consumer group config "${key}": ${err.message}`, { cause: err });
    }
    throw err;
  }
}

/** A stored config as decoded, with why it is not valid when it is not. */
export interface UncheckedConfig<C> extends StoredConfig<C> {
  /** The validation error reading it would raise; undefined when it is valid. */
  problem: ConsumerGroupError | undefined;
}

/**
 * Reads a group's config without refusing an invalid one: for the calls that must see
 * it anyway (describe reports it, an edit may repair it, a delete cleans it up).
 *
 * @returns undefined when there is none
 * @throws ConsumerGroupError `CONFIG_DECODE` when it is not a config at all, and server errors
 */
export async function readConfigUnchecked<C>(kv: KV, flavour: Flavour<C>, stream: string, group: string): Promise<UncheckedConfig<C> | undefined> {
  const entry = await getEntry(kv, flavour, stream, group);
  if (!entry || entry.operation !== "PUT") return undefined;
  const config = flavour.decode(entry.value);
  return { config, revision: entry.revision, problem: configProblem(flavour, config, entry.key) };
}

/**
 * Reads a group's config, or undefined when there is none (never written, deleted or purged).
 */
export async function readConfigIfAny<C>(kv: KV, flavour: Flavour<C>, stream: string, group: string): Promise<StoredConfig<C> | undefined> {
  const entry = await getEntry(kv, flavour, stream, group);
  if (!entry || entry.operation !== "PUT") return undefined;
  return { config: decodeEntry(flavour, entry), revision: entry.revision };
}

async function getEntry<C>(kv: KV, flavour: Flavour<C>, stream: string, group: string): Promise<KvEntry | null> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await kv.get(configKey(stream, group));
    } catch (err) {
      // A bucket's replicas answer direct gets only once they are set up: right after the bucket was made
      // on a cluster, a get can find no responders. (A timeout is not retried here: it already took long.)
      if (attempt < CONFIG_READ_ATTEMPTS && isNoResponders(err)) {
        await new Promise((r) => setTimeout(r, 100 * 2 ** (attempt - 1)));
        continue;
      }
      throw wrapServerError(err, `getting the ${flavour.kind} consumer group's config`);
    }
  }
}

/** How often a config read that found no responders is tried in all (3.1 s of backoff). */
const CONFIG_READ_ATTEMPTS = 6;

/**
 * Reads a group's config.
 *
 * @throws ConsumerGroupError `GROUP_NOT_FOUND`, `CONFIG_DECODE` or a validation code
 */
export async function readConfig<C>(kv: KV, flavour: Flavour<C>, stream: string, group: string): Promise<StoredConfig<C>> {
  const found = await readConfigIfAny(kv, flavour, stream, group);
  if (!found) {
    throw new ConsumerGroupError("GROUP_NOT_FOUND", `error getting the ${flavour.kind} consumer group's config: not found (no group "${group}" on stream "${stream}")`);
  }
  return found;
}

/**
 * Reads an elastic group's config, for an operation that only elastic groups have.
 * When there is none (or no elastic group was ever created) but a static group of that
 * name exists, it says so instead of "not found".
 *
 * @param staticMessage - the `STATIC_GROUP` error's message: why the operation is elastic only, and what to do
 * @throws ConsumerGroupError `STATIC_GROUP`, `GROUP_NOT_FOUND`, `BUCKET_NOT_FOUND`, `CONFIG_DECODE` or a validation code
 */
export async function readElasticConfigNotStatic(
  js: JetStreamClient,
  jsm: JetStreamManager,
  stream: string,
  group: string,
  staticMessage: string,
): Promise<StoredConfig<ElasticConsumerGroupConfig>> {
  const refuseStatic = async (err: unknown): Promise<never> => {
    const kv = await openConfigBucket(js, jsm, "static").catch(() => undefined);
    const found = kv ? await readConfigIfAny(kv, STATIC, stream, group).catch(() => undefined) : undefined;
    if (found) throw new ConsumerGroupError("STATIC_GROUP", staticMessage, { cause: err });
    throw err;
  };
  let kv: KV;
  try {
    kv = await openConfigBucket(js, jsm, "elastic");
  } catch (err) {
    if (err instanceof ConsumerGroupError && err.code === "BUCKET_NOT_FOUND") return refuseStatic(err);
    throw err;
  }
  try {
    return await readConfig(kv, ELASTIC, stream, group);
  } catch (err) {
    if (err instanceof ConsumerGroupError && err.code === "GROUP_NOT_FOUND") return refuseStatic(err);
    throw err;
  }
}

/**
 * Writes a config only if the key does not exist (or was deleted).
 *
 * @returns the new revision, or undefined when someone else created it first
 */
export async function createConfig<C>(kv: KV, flavour: Flavour<C>, stream: string, group: string, config: C): Promise<number | undefined> {
  try {
    return await kv.create(configKey(stream, group), flavour.encode(config));
  } catch (err) {
    const code = apiErrorCode(err);
    if (code === ApiCode.WrongLastSequence || code === ApiCode.WrongLastSequenceUnknown) return undefined;
    throw wrapServerError(err, `putting the ${flavour.kind} consumer group's config in the bucket`);
  }
}

/**
 * Read-modify-write with compare-and-set, retried on conflict. `mutate` gets the
 * current config and returns the new one (or the same object for no change).
 *
 * The result is written only if it is valid. The current config need not be: an
 * edit that makes an invalid stored config valid (dropping a member whose name cannot
 * be a consumer name) is how it is repaired. An edit that leaves it invalid, or
 * changes nothing in it, is refused with its validation error.
 *
 * @throws ConsumerGroupError `CONFIG_CONFLICT` after too many conflicting writers; `GROUP_NOT_FOUND`,
 *   `CONFIG_DECODE`; a validation code when the result would be invalid (nothing is written)
 */
export async function updateConfig<C>(
  kv: KV,
  flavour: Flavour<C>,
  stream: string,
  group: string,
  mutate: (current: C) => C,
  maxAttempts = 20,
): Promise<StoredConfig<C>> {
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    const current = await readConfigUnchecked(kv, flavour, stream, group);
    if (!current) {
      throw new ConsumerGroupError("GROUP_NOT_FOUND", `error getting the ${flavour.kind} consumer group's config: not found (no group "${group}" on stream "${stream}")`);
    }
    const next = mutate(current.config);
    if (next === current.config) {
      if (current.problem) throw unwritten(current.problem, "the stored config is not valid and this call would not change that");
      return current;
    }
    if (current.problem) {
      const problem = configProblem(flavour, next, configKey(stream, group));
      if (problem) throw unwritten(problem, "the stored config is not valid, and would still not be after this change");
    } else {
      // A valid config made invalid by the edit's own arguments: Go's error, as before.
      flavour.validate(next, group);
    }
    try {
      const revision = await kv.update(configKey(stream, group), flavour.encode(next), current.revision);
      return { config: next, revision };
    } catch (err) {
      const code = apiErrorCode(err);
      if (code !== ApiCode.WrongLastSequence && code !== ApiCode.WrongLastSequenceUnknown) {
        throw wrapServerError(err, `putting the ${flavour.kind} consumer group's config in the bucket`);
      }
      await new Promise((r) => setTimeout(r, Math.random() * 20 * attempt));
    }
  }
  throw new ConsumerGroupError("CONFIG_CONFLICT", `couldn't update the ${flavour.kind} consumer group's config: ${maxAttempts} concurrent writers won in a row; try again`);
}

/** The error of an edit refused for leaving the config invalid: nothing was written, and how to repair it. */
function unwritten(problem: ConsumerGroupError, why: string): ConsumerGroupError {
  return new ConsumerGroupError(
    problem.code,
    `${problem.message}. Nothing was written: ${why}. Repair it by removing or renaming what is wrong (deleteMembers / "cg elastic drop" for a member, new mappings with setMemberMappings), by putting a corrected value under the key, or by deleting the group and creating it again`,
    { cause: problem },
  );
}

/** Deletes a group's config with a delete marker (not a purge: Go members treat a purge as bad JSON). */
export async function deleteConfig(kv: KV, kind: GroupKind, stream: string, group: string): Promise<void> {
  try {
    await kv.delete(configKey(stream, group));
  } catch (err) {
    throw wrapServerError(err, `deleting the ${kind} consumer groups' configs`);
  }
}

/** The groups of a stream, from the bucket's keys, sorted. */
export async function listGroupNames(kv: KV, kind: GroupKind, stream: string): Promise<string[]> {
  const groups: string[] = [];
  try {
    for await (const key of await kv.keys()) {
      const parsed = parseConfigKey(key);
      if (parsed && parsed.stream === stream) groups.push(parsed.group);
    }
  } catch (err) {
    throw wrapServerError(err, `creating a key lister on the ${kind} consumer groups' bucket`);
  }
  return groups.sort();
}

/** One thing the config watch saw. */
export type ConfigEvent<C> =
  | { kind: "put"; config: C; revision: number }
  | { kind: "deleted"; revision: number }
  | { kind: "invalid"; error: ConsumerGroupError; revision: number };

/** Where a watch may be shared: the connection it runs on and the JetStream API prefix it uses. */
export interface WatchSharing {
  /** The connection (instances on the same one share a watch). */
  connection: object;
  /** The JetStream API prefix (a domain or an import watches another bucket of the same name). */
  apiPrefix: string;
}

/** The config watches shared by the instances on one connection. */
const sharedConfigWatches = new SharedWatches<KvEntry>();

/** How many config watches are open on a connection (diagnostics and tests). */
export function openConfigWatches(connection: object): number {
  return sharedConfigWatches.openCount(connection);
}

/**
 * Watches a group's key from after `afterRevision`. Deletes, purges, bad JSON and
 * invalid configs are all reported as events, never thrown. With `sharing`, the
 * instances on one connection share one KV watcher of the key (see {@link SharedWatches}).
 */
export async function watchConfig<C>(
  kv: KV,
  flavour: Flavour<C>,
  stream: string,
  group: string,
  afterRevision: number,
  sharing?: WatchSharing,
): Promise<{ events: AsyncIterable<ConfigEvent<C>>; stop(): void; abandon?(): void }> {
  const key = configKey(stream, group);
  const open = async (after: number): Promise<RawWatch<KvEntry>> => {
    try {
      return await kv.watch({ key, resumeFromRevision: after + 1 });
    } catch (err) {
      throw wrapServerError(err, `starting the watch of the ${flavour.kind} consumer group's config "${key}"`);
    }
  };
  const lease: WatchLease<KvEntry> = sharing
    ? await sharedConfigWatches.join(sharing.connection, `${sharing.apiPrefix}\n${bucketName(flavour.kind)}\n${key}`, afterRevision, open)
    : await open(afterRevision).then((watcher) => ({ entries: watcher, stop: () => watcher.stop(), abandon: () => watcher.stop() }));
  async function* events(): AsyncIterable<ConfigEvent<C>> {
    for await (const entry of lease.entries) {
      yield configEvent(flavour, stream, group, entry);
    }
  }
  return { events: events(), stop: () => lease.stop(), abandon: () => lease.abandon() };
}

/** What a KV entry of a group's key means to a member. */
function configEvent<C>(flavour: Flavour<C>, stream: string, group: string, entry: KvEntry): ConfigEvent<C> {
  if (entry.operation === "DEL") return { kind: "deleted", revision: entry.revision };
  if (entry.operation === "PURGE") {
    return {
      kind: "invalid",
      revision: entry.revision,
      error: new ConsumerGroupError("CONFIG_DECODE", `${flavour.kind} consumer group ${stream}.${group} config watcher received a bad JSON message: the key was purged (delete groups with deleteStatic/deleteElastic, not a purge)`),
    };
  }
  try {
    return { kind: "put", config: decodeEntry(flavour, entry), revision: entry.revision };
  } catch (err) {
    const error = err instanceof ConsumerGroupError ? err : new ConsumerGroupError("CONFIG_DECODE", String(err));
    const prefix = error.code === "CONFIG_DECODE" ? "received a bad JSON message" : "received an invalid config";
    return {
      kind: "invalid",
      revision: entry.revision,
      error: new ConsumerGroupError(error.code, `${flavour.kind} consumer group ${stream}.${group} config watcher ${prefix}: ${error.message}`, { cause: error }),
    };
  }
}
