/**
 * A seeded fuzz of the public API's options against a real nats-server. Each call gets
 * valid options with one to three mutations (unknown keys, wrong types, null, NaN,
 * Infinity, negative and huge numbers, BigInts, names with spaces, wildcards or dots,
 * nested garbage, arrays where objects belong) and must either be taken or throw a
 * ConsumerGroupError: never a TypeError, a hang or an unhandled rejection. What the
 * options' contract refuses must be refused before anything reaches the server, and a
 * call that throws must leave the streams, the consumers and every KV key (with its
 * revision) as they were.
 *
 * The seed is printed; `FUZZ_SEED=<n>` repeats a run, `FUZZ_CALLS=<n>` changes its length.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  ConsumerGroupError,
  addMembers,
  createElastic,
  createStatic,
  deleteElastic,
  deleteStatic,
  describeGroup,
  elasticConsume,
  groupLag,
  listParkedKeys,
  releaseParkedKey,
  repartition,
  staticConsume,
  type ConsumerGroupMember,
} from "../../src/index.js";
import { startEnv, uniqueName, type TestEnv } from "../helpers/nats.js";
import {
  ARGUMENT_CODES,
  Random,
  fullState,
  fuzzSeed,
  mutate,
  rules,
  stateChanges,
  type FullState,
  type Mutation,
  type NestedSpec,
  type Rule,
} from "../helpers/fuzz.js";

const SEED = fuzzSeed();
const CALLS = Number(process.env["FUZZ_CALLS"] ?? "1200");
/** The run stops early past this, so that a loaded machine still ends in time (the tally says how many ran). */
const BUDGET_MS = 40_000;
/** A call that takes longer than this counts as hung. */
const CALL_TIMEOUT_MS = 15_000;
const FS = "FZS";
const FE = "FZE";
const MAX_TIMER_MS = 2 ** 31 - 1;
const noop = (): void => undefined;

/** One public function under fuzz. */
interface ApiSpec {
  name: string;
  keys: Record<string, Rule>;
  nested: Record<string, NestedSpec>;
  /** Whether the options object may be left out. */
  optional: boolean;
  base: () => Record<string, unknown>;
  call: (options: unknown) => Promise<unknown>;
}

const retryNested: NestedSpec = {
  base: () => ({ maxDeliver: 3 }),
  keys: { maxDeliver: rules.optionalInteger(1), backoffMs: rules.optionalDelays, exactAttempts: rules.optionalBoolean },
};
const templateNested: NestedSpec = {
  base: () => ({ ack_wait: 5_000_000_000 }),
  keys: {
    ack_wait: (v) => (v === undefined ? "valid" : typeof v === "number" && Number.isFinite(v) && v >= 0 ? "either" : "invalid"),
    filter_subject: (v) => (v === undefined || v === "" ? "valid" : "invalid"),
    max_ack_pending: rules.any,
    description: rules.any,
  },
  // The server defines a consumer config's fields; this library passes them on.
  closed: false,
};

function consumeKeys(elastic: boolean): Record<string, Rule> {
  return {
    stream: rules.name,
    group: rules.name,
    member: elastic ? (v) => (v === undefined ? "either" : rules.name(v)) : rules.name,
    handler: (v) => (typeof v === "function" ? "valid" : "invalid"),
    consumerConfig: rules.optionalObject,
    drainTimeoutMs: rules.optionalNumber(0, MAX_TIMER_MS, true),
    pullBatch: rules.optionalIntegerEither(1),
    concurrency: (v) => (v === undefined || v === "serial" || v === "partition" || v === "key" ? "valid" : "invalid"),
    maxInFlight: rules.optionalIntegerEither(1),
    keyOf: rules.optionalFunction,
    maxBuffered: rules.optionalIntegerEither(1),
    maxBufferedBytes: rules.optionalInteger(1024),
    maxParked: rules.optionalIntegerEither(0),
    retry: (v) => (v === undefined || v === false ? "valid" : typeof v === "object" && v !== null && !Array.isArray(v) ? "either" : "invalid"),
    nakBackoffMs: rules.optionalDelays,
    deadLetterSubject: rules.optionalLiteralSubject,
    handoff: rules.optionalBoolean,
    meterProvider: (v) => (v === undefined ? "valid" : typeof v === "object" && v !== null && typeof (v as { getMeter?: unknown }).getMeter === "function" ? "either" : "invalid"),
    onAssigned: rules.optionalFunction,
    onRevoked: rules.optionalFunction,
    onPinned: rules.optionalFunction,
    onUnpinned: rules.optionalFunction,
    onError: rules.optionalFunction,
    autoJoin: elastic ? (v) => (v === undefined || v === false ? "valid" : v === true || rules.optionalObject(v) !== "invalid" ? "either" : "invalid") : rules.oneOf(undefined, false),
  };
}

function specs(env: TestEnv, started: ConsumerGroupMember[], random: Random): ApiSpec[] {
  const { js, nc } = env;
  const consume = (elastic: boolean): ApiSpec => ({
    name: elastic ? "elasticConsume" : "staticConsume",
    keys: consumeKeys(elastic),
    nested: {
      retry: retryNested,
      consumerConfig: templateNested,
      ...(elastic
        ? {
            autoJoin: {
              base: () => ({ settleMs: 100 }),
              keys: { leaseTtlMs: rules.optionalNumber(1000, MAX_TIMER_MS), settleMs: rules.optionalNumber(0, 600_000), assignment: rules.oneOf(undefined, "balanced", "sticky") },
            },
          }
        : {}),
    },
    optional: false,
    base: () => ({ stream: elastic ? FE : FS, group: elastic ? "eg" : "sg", member: "m1", handler: noop }),
    call: async (options) => {
      const member = elastic ? await elasticConsume(js, options as never) : await staticConsume(js, options as never);
      started.push(member);
      return member;
    },
  });
  return [
    {
      name: "createStatic",
      keys: {
        stream: rules.name,
        group: rules.name,
        maxMembers: rules.optionalIntegerEither(1),
        filters: rules.optionalArray,
        members: rules.optionalArray,
        memberMappings: rules.optionalArray,
        onWarning: rules.optionalFunction,
      },
      nested: {
        memberMappings: { base: () => ({ member: "m1", partitions: [0, 1] }), keys: { member: rules.name, partitions: rules.optionalArray }, inArray: true },
      },
      optional: false,
      // Half the calls repeat the existing group (a no-op when taken), half create a new one.
      base: () => ({ stream: FS, group: random.below(2) === 0 ? "sg" : uniqueName("fs"), maxMembers: 2, members: ["m1", "m2"] }),
      call: (options) => createStatic(js, options as never),
    },
    {
      name: "createElastic",
      keys: {
        stream: rules.name,
        group: rules.name,
        maxMembers: rules.optionalIntegerEither(1),
        partitioningFilters: (v) => (v === undefined || v === null ? "valid" : Array.isArray(v) ? "either" : "invalid"),
        // Taken by the client; the server may still refuse a cap past the account's storage (nothing may stay behind then).
        maxBufferedMsgs: (v) => (v === undefined ? "valid" : typeof v === "number" && Number.isSafeInteger(v) && v >= -1 ? "either" : "invalid"),
        maxBufferedBytes: (v) => (v === undefined ? "valid" : typeof v === "number" && Number.isSafeInteger(v) && v >= -1 ? "either" : "invalid"),
      },
      nested: {
        partitioningFilters: {
          base: () => ({ filter: `${FE}.*`, partitioning_wildcards: [1] }),
          keys: { filter: (v) => (typeof v === "string" ? "either" : "invalid"), partitioning_wildcards: (v) => (v === undefined || v === null || Array.isArray(v) ? "either" : "invalid") },
          inArray: true,
        },
      },
      optional: false,
      base: () => ({ stream: FE, group: random.below(2) === 0 ? "eg" : uniqueName("fe"), maxMembers: 2, partitioningFilters: [{ filter: `${FE}.*`, partitioning_wildcards: [1] }] }),
      call: (options) => createElastic(js, options as never),
    },
    consume(false),
    consume(true),
    {
      name: "repartition",
      keys: { onProgress: rules.optionalFunction, force: rules.optionalBoolean, pollMs: rules.optionalNumber(0, MAX_TIMER_MS, true), signal: (v) => (v === undefined || v instanceof AbortSignal ? "valid" : "invalid"), onRetry: rules.optionalFunction },
      nested: {},
      optional: true,
      base: () => ({ pollMs: 50 }),
      // A group that does not exist: options that pass their checks end in GROUP_NOT_FOUND, writing nothing.
      call: (options) => repartition(js, FE, "nogroup", 4, options as never),
    },
    {
      name: "describeGroup",
      keys: { stallAfterMs: rules.optionalNumber(0, Number.MAX_VALUE), previous: rules.optionalObject, askInstancesMs: rules.optionalNumber(0, MAX_TIMER_MS, true) },
      nested: {},
      optional: true,
      base: () => ({ stallAfterMs: 1000 }),
      call: (options) => describeGroup(js, random.below(2) === 0 ? "static" : "elastic", random.below(2) === 0 ? FS : FE, random.below(2) === 0 ? "sg" : "eg", options as never),
    },
    {
      name: "groupLag",
      keys: {
        targetDrainMs: rules.optionalNumber(0, Number.MAX_VALUE, true),
        ratePerMember: rules.optionalNumber(0, Number.MAX_VALUE, true),
        sampleMs: rules.optionalNumber(0, 60_000),
        previous: (v) => (v === undefined ? "valid" : "invalid"),
        signal: (v) => (v === undefined || v instanceof AbortSignal ? "valid" : "invalid"),
      },
      nested: {},
      optional: true,
      base: () => ({ sampleMs: 0 }),
      call: (options) => groupLag(js, FE, "eg", options as never),
    },
    {
      name: "listParkedKeys",
      keys: { waitMs: rules.optionalNumber(0, MAX_TIMER_MS, true) },
      nested: {},
      optional: true,
      base: () => ({ waitMs: 20 }),
      call: (options) => listParkedKeys(nc, FE, "eg", options as never),
    },
    {
      name: "releaseParkedKey",
      keys: { waitMs: rules.optionalNumber(0, MAX_TIMER_MS, true), deadLetterSubject: rules.optionalLiteralSubject },
      nested: {},
      optional: true,
      base: () => ({ waitMs: 20 }),
      call: (options) => releaseParkedKey(nc, FE, "eg", 1, options as never),
    },
  ];
}

/** Values that would make a valid call wait a long time: kept out of the waits, as the contract allows them. */
function slowWait(spec: ApiSpec, m: Mutation): boolean {
  const o = m.options as Record<string, unknown> | undefined;
  if (typeof o !== "object" || o === null) return spec.optional && o === undefined && (spec.name === "listParkedKeys" || spec.name === "releaseParkedKey" || spec.name === "groupLag");
  const wait = (k: string): boolean => {
    const v = o[k];
    return typeof v === "number" && v > 2000 && v <= MAX_TIMER_MS;
  };
  return wait("waitMs") || wait("askInstancesMs") || wait("sampleMs");
}

type Outcome = { kind: "refused"; error: ConsumerGroupError } | { kind: "accepted"; error?: ConsumerGroupError } | { kind: "crashed"; error: unknown };

async function run(spec: ApiSpec, options: unknown): Promise<Outcome> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`hung for ${CALL_TIMEOUT_MS} ms`)), CALL_TIMEOUT_MS);
  });
  try {
    await Promise.race([spec.call(options), hang]);
    return { kind: "accepted" };
  } catch (err) {
    if (!(err instanceof ConsumerGroupError)) return { kind: "crashed", error: err };
    return ARGUMENT_CODES.includes(err.code) ? { kind: "refused", error: err } : { kind: "accepted", error: err };
  } finally {
    clearTimeout(timer);
  }
}

/** Undoes what a taken call made: stops members, deletes the groups, streams and consumers it created. */
async function restore(env: TestEnv, baseline: FullState, started: ConsumerGroupMember[]): Promise<void> {
  for (const m of started.splice(0)) await m.stop();
  const now = await fullState(env.jsm);
  for (const key of Object.keys(now.keys)) {
    if (baseline.keys[key] !== undefined) continue;
    const m = /^\$KV\.(static|elastic)-consumer-groups\.([^.]+)\.([^.]+)$/.exec(key);
    if (!m || !now.keys[key]?.includes("PUT")) continue;
    const [, kind, stream, group] = m as unknown as [string, string, string, string];
    if (kind === "static") await deleteStatic(env.js, stream, group).catch(() => undefined);
    else await deleteElastic(env.js, stream, group).catch(() => undefined);
  }
  for (const [name, s] of Object.entries((await fullState(env.jsm)).streams)) {
    const was = baseline.streams[name];
    if (!was && !name.startsWith("KV_")) {
      await env.jsm.streams.delete(name).catch(() => undefined);
      continue;
    }
    for (const c of s.consumers.filter((c) => !was?.consumers.includes(c))) await env.jsm.consumers.delete(name, c).catch(() => undefined);
  }
}

describe("fuzz - public API options", { timeout: 120_000 }, () => {
  let env: TestEnv;
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown): void => {
    unhandled.push(err);
  };

  before(async () => {
    process.on("unhandledRejection", onUnhandled);
    env = await startEnv();
    await env.jsm.streams.add({ name: FS, subjects: [`${FS}.*`], subject_transform: { src: `${FS}.*`, dest: `{{partition(2,1)}}.${FS}.{{wildcard(1)}}` } });
    await env.jsm.streams.add({ name: FE, subjects: [`${FE}.>`] });
    await createStatic(env.js, { stream: FS, group: "sg", maxMembers: 2, members: ["m1", "m2"] });
    await createElastic(env.js, { stream: FE, group: "eg", maxMembers: 2, partitioningFilters: [{ filter: `${FE}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, FE, "eg", ["m1"]);
  });

  after(async () => {
    process.off("unhandledRejection", onUnhandled);
    await env?.close();
  });

  test("fuzz - every call is taken or refused with a ConsumerGroupError, what its contract refuses is refused, and a refused call writes nothing", { timeout: 120_000 }, async (t) => {
    t.diagnostic(`FUZZ_SEED=${SEED} (repeat with FUZZ_SEED=${SEED} node --test dist/test/integration/fuzz-inputs.test.js)`);
    console.log(`fuzz seed: FUZZ_SEED=${SEED}`);
    const random = new Random(SEED);
    const started: ConsumerGroupMember[] = [];
    const apis = specs(env, started, random);
    const tally = { tried: 0, typed: 0, accepted: 0, wronglyAccepted: 0, crashed: 0, wrote: 0 };
    const failures: string[] = [];
    const deadline = performance.now() + BUDGET_MS;
    let baseline = await fullState(env.jsm);
    for (let i = 0; i < CALLS && performance.now() < deadline; i++) {
      const spec = apis[random.below(apis.length)] as ApiSpec;
      const mutation = mutate(random, spec.base, spec.keys, spec.nested, spec.optional);
      if (slowWait(spec, mutation)) continue;
      tally.tried += 1;
      const label = `#${i} ${spec.name}(${mutation.what})`;
      const outcome = await run(spec, mutation.options);
      if (outcome.kind === "crashed") {
        tally.crashed += 1;
        const e = outcome.error;
        failures.push(`${label}: crashed with ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}`);
      } else if (outcome.kind === "refused") {
        tally.typed += 1;
      } else {
        tally.accepted += 1;
        if (mutation.verdict === "invalid") {
          tally.wronglyAccepted += 1;
          failures.push(`${label}: accepted (${outcome.error ? `${outcome.error.code}: ${outcome.error.message}` : "succeeded"}) though its options must be refused`);
        }
      }
      if (outcome.kind === "accepted" && !outcome.error) {
        // Taken: undo what it made, so the next calls start from the fixtures.
        await restore(env, baseline, started);
        baseline = await fullState(env.jsm);
        continue;
      }
      const changes = stateChanges(baseline, await fullState(env.jsm));
      if (changes.length > 0) {
        tally.wrote += 1;
        failures.push(`${label}: threw ${outcome.error instanceof Error ? outcome.error.message : String(outcome.error)}, yet left: ${changes.join("; ")}`);
        await restore(env, baseline, started);
        baseline = await fullState(env.jsm);
      }
    }
    const line = `fuzz tally (seed ${SEED}): tried ${tally.tried} / typed error ${tally.typed} / accepted ${tally.accepted} / wrongly accepted ${tally.wronglyAccepted} / crashed ${tally.crashed} / refused but wrote ${tally.wrote}`;
    t.diagnostic(line);
    console.log(line);
    for (const f of failures.slice(0, 20)) console.log(`  ${f}`);
    assert.ok(tally.tried >= 40, `only ${tally.tried} calls ran within ${BUDGET_MS} ms`);
    assert.deepEqual(unhandled.map(String), [], "unhandled rejections during the fuzz");
    assert.deepEqual(failures, [], `seed ${SEED}: ${failures.length} calls broke the contract`);
  });
});
