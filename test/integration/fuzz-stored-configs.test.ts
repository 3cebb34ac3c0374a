/**
 * A seeded fuzz of stored configs against a real nats-server: a static and an elastic
 * group's config is replaced by a mutation of it (as Go, another port or a person
 * editing the bucket would write it: unknown fields, keys in another case, bad names,
 * wrong types, counts that disagree with the stream's transform, broken JSON, bytes that
 * are not UTF-8), then read, described, consumed from or edited. What the rules refuse
 * must be refused with a ConsumerGroupError (describe reports it as a finding), what
 * they take must be taken, nothing may crash or hang, and a call that throws must leave
 * the streams, the consumers and every KV key (with its revision) as they were. An edit
 * that is taken must leave a config that reads back clean.
 *
 * The seed is printed; `FUZZ_SEED=<n>` repeats a run, `FUZZ_CALLS=<n>` changes its length.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import {
  ConsumerGroupError,
  ELASTIC_BUCKET,
  STATIC_BUCKET,
  addMembers,
  createElastic,
  createStatic,
  deleteMembers,
  describeGroup,
  elasticConsume,
  getElasticConsumerGroupConfig,
  getStaticConsumerGroupConfig,
  staticConsume,
  type ConsumerGroupMember,
  type ErrorCode,
} from "../../src/index.js";
import { startEnv, type TestEnv } from "../helpers/nats.js";
import { ARGUMENT_CODES, Random, fullState, fuzzSeed, stateChanges, type FullState } from "../helpers/fuzz.js";
import { mutateStored, type StoredBase, type StoredMutation } from "../helpers/stored-config-mutations.js";

const SEED = fuzzSeed();
const CALLS = Number(process.env["FUZZ_CALLS"] ?? "400");
/** The run stops early past this, so that a loaded machine still ends in time (the tally says how many ran). */
const BUDGET_MS = 40_000;
/** A call that takes longer than this counts as hung. */
const CALL_TIMEOUT_MS = 15_000;
const FS = "FZCS";
const FE = "FZCE";
const PARTITIONS = 2;
const noop = (): void => undefined;

/** Codes that say a stored config was refused (rather than, say, a member not being listed). */
const REFUSED_CONFIG: readonly ErrorCode[] = [...ARGUMENT_CODES, "CONFIG_DECODE", "PARTITION_COUNT_MISMATCH", "CONFIG_MISMATCH"];
/** Codes that refuse the stored config as a whole, whatever the call asked. */
const CONFIG_REFUSALS: readonly ErrorCode[] = ["CONFIG_DECODE", "PARTITION_COUNT_MISMATCH", "CONFIG_MISMATCH"];
/** Findings of `describeGroup` that say the stored config is wrong. */
const CONFIG_FINDINGS = ["INVALID_CONFIG", "CONFIG_MISMATCH"];

type Call = "read" | "describe" | "consume" | "edit";
type Outcome = { kind: "taken"; value: unknown } | { kind: "typed"; error: ConsumerGroupError } | { kind: "crashed"; error: unknown };

async function run(call: () => Promise<unknown>): Promise<Outcome> {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`hung for ${CALL_TIMEOUT_MS} ms`)), CALL_TIMEOUT_MS);
  });
  try {
    return { kind: "taken", value: await Promise.race([call(), hang]) };
  } catch (err) {
    return err instanceof ConsumerGroupError ? { kind: "typed", error: err } : { kind: "crashed", error: err };
  } finally {
    clearTimeout(timer);
  }
}

const shown = (o: Outcome): string =>
  o.kind === "taken" ? "taken" : o.kind === "typed" ? `${o.error.code}: ${o.error.message.slice(0, 200)}` : `crashed: ${o.error instanceof Error ? `${o.error.name}: ${o.error.message}` : String(o.error)}`;

describe("fuzz - stored configs", { timeout: 120_000 }, () => {
  let env: TestEnv;
  const unhandled: unknown[] = [];
  const onUnhandled = (err: unknown): void => {
    unhandled.push(err);
  };
  const bases: Record<"static" | "elastic", { base: StoredBase; bytes: Uint8Array; stream: string; group: string; bucket: string }> = {} as never;

  before(async () => {
    process.on("unhandledRejection", onUnhandled);
    env = await startEnv();
    await env.jsm.streams.add({ name: FS, subjects: [`${FS}.*`], subject_transform: { src: `${FS}.*`, dest: `{{partition(${PARTITIONS},1)}}.${FS}.{{wildcard(1)}}` } });
    await env.jsm.streams.add({ name: FE, subjects: [`${FE}.>`] });
    await createStatic(env.js, { stream: FS, group: "sg", maxMembers: PARTITIONS, members: ["m1", "m2"] });
    await createElastic(env.js, { stream: FE, group: "eg", maxMembers: PARTITIONS, partitioningFilters: [{ filter: `${FE}.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, FE, "eg", ["m1"]);
    const kvm = new Kvm(env.js);
    for (const [kind, stream, group, bucket, members] of [
      ["static", FS, "sg", STATIC_BUCKET, ["m1", "m2"]],
      ["elastic", FE, "eg", ELASTIC_BUCKET, ["m1"]],
    ] as const) {
      const entry = await (await kvm.open(bucket)).get(`${stream}.${group}`);
      assert.ok(entry, `the ${kind} fixture's config`);
      const config = entry.json<Record<string, unknown>>();
      bases[kind] = { base: { kind, config, partitions: PARTITIONS, members, ...(kind === "elastic" ? { filter: `${FE}.*` } : {}) }, bytes: entry.value, stream, group, bucket };
    }
  });

  after(async () => {
    process.off("unhandledRejection", onUnhandled);
    await env?.close();
  });

  test("fuzz - a stored config the rules refuse is refused by every call with a ConsumerGroupError or reported by describe, one they take is taken, and no call that throws writes anything", { timeout: 120_000 }, async (t) => {
    t.diagnostic(`FUZZ_SEED=${SEED} (repeat with FUZZ_SEED=${SEED} node --test dist/test/integration/fuzz-stored-configs.test.js)`);
    console.log(`stored-config fuzz seed: FUZZ_SEED=${SEED}`);
    const random = new Random(SEED);
    const kvm = new Kvm(env.js);
    const tally = { tried: 0, typed: 0, taken: 0, reported: 0, wronglyTaken: 0, wronglyRefused: 0, crashed: 0, wrote: 0 };
    const failures: string[] = [];
    const started: ConsumerGroupMember[] = [];
    const fixtures = await fullState(env.jsm);
    const deadline = performance.now() + BUDGET_MS;

    for (let i = 0; i < CALLS && performance.now() < deadline; i++) {
      const kind = random.pick(["static", "elastic"] as const);
      const fixture = bases[kind];
      const mutation: StoredMutation = mutateStored(random, fixture.base);
      const calls: Call[] = kind === "elastic" ? ["read", "describe", "consume", "edit"] : ["read", "describe", "consume"];
      const call = random.pick(calls);
      const kv = await kvm.open(fixture.bucket);
      const key = `${fixture.stream}.${fixture.group}`;
      await kv.put(key, mutation.bytes);
      const before: FullState = await fullState(env.jsm);
      const label = `#${i} ${call} of the ${kind} config (${mutation.what})`;
      tally.tried += 1;

      const editMembers = random.below(2) === 0 ? ["m3"] : ["m1"];
      const outcome = await run(async () => {
        if (call === "read") return kind === "static" ? getStaticConsumerGroupConfig(env.js, FS, "sg") : getElasticConsumerGroupConfig(env.js, FE, "eg");
        if (call === "describe") return describeGroup(env.js, kind, fixture.stream, fixture.group);
        if (call === "consume") {
          const member =
            kind === "static"
              ? await staticConsume(env.js, { stream: FS, group: "sg", member: "m1", handler: noop })
              : await elasticConsume(env.js, { stream: FE, group: "eg", member: "m1", handler: noop });
          started.push(member);
          return member;
        }
        return editMembers[0] === "m3" ? addMembers(env.js, FE, "eg", editMembers) : deleteMembers(env.js, FE, "eg", editMembers);
      });

      const v = mutation.verdict;
      const fail = (why: string): void => {
        failures.push(`${label}: ${why} (${shown(outcome)})`);
      };
      if (outcome.kind === "crashed") {
        tally.crashed += 1;
        fail("not a ConsumerGroupError");
      } else if (outcome.kind === "typed") {
        tally.typed += 1;
        // An edit may be refused for what it asks (adding to a group of mappings); only a refusal of the config itself is wrong.
        const refusedConfig = (call === "edit" ? CONFIG_REFUSALS : REFUSED_CONFIG).includes(outcome.error.code);
        if (v.verdict === "valid" && refusedConfig) {
          tally.wronglyRefused += 1;
          fail("a config the rules take was refused");
        }
        const changes = stateChanges(before, await fullState(env.jsm));
        if (changes.length > 0) {
          tally.wrote += 1;
          fail(`threw, yet left: ${changes.join("; ")}`);
        }
      } else {
        tally.taken += 1;
        if (call === "describe") {
          const findings = (outcome.value as { findings: { code: string }[] }).findings.map((f) => f.code).filter((c) => CONFIG_FINDINGS.includes(c));
          if (findings.length > 0) tally.reported += 1;
          if (v.verdict === "invalid" && findings.length === 0) {
            tally.wronglyTaken += 1;
            fail("described with no INVALID_CONFIG or CONFIG_MISMATCH finding");
          }
          if (v.verdict === "valid" && findings.length > 0) {
            tally.wronglyRefused += 1;
            fail(`a config the rules take was reported: ${findings.join(", ")}`);
          }
        } else if (v.verdict === "invalid" && (call !== "read" || v.by !== "mismatch") && call !== "edit") {
          tally.wronglyTaken += 1;
          fail(`taken though it must be refused (${v.by})`);
        }
        if (call === "edit") {
          // An edit that was taken wrote a config: it must read back clean (a repair is an edit whose result is valid).
          const written = await run(() => describeGroup(env.js, "elastic", FE, "eg"));
          const bad = written.kind === "taken" ? (written.value as { findings: { code: string; message: string }[] }).findings.filter((f) => CONFIG_FINDINGS.includes(f.code)) : [];
          if (written.kind !== "taken" || bad.length > 0) {
            tally.wronglyTaken += 1;
            fail(`the edit wrote a config that does not read back clean: ${written.kind === "taken" ? bad.map((f) => `${f.code} ${f.message}`).join("; ") : shown(written)}`);
          }
        }
      }

      // Back to the fixtures: members stopped, the config as created, no consumer the call made.
      for (const m of started.splice(0)) await m.stop();
      await kv.put(key, fixture.bytes);
      for (const [name, s] of Object.entries((await fullState(env.jsm)).streams)) {
        for (const c of s.consumers.filter((c) => !fixtures.streams[name]?.consumers.includes(c))) await env.jsm.consumers.delete(name, c).catch(() => undefined);
      }
    }
    const line = `stored-config fuzz tally (seed ${SEED}): tried ${tally.tried} / typed error ${tally.typed} / taken ${tally.taken} (describe reported the config in ${tally.reported}) / wrongly taken ${tally.wronglyTaken} / wrongly refused ${tally.wronglyRefused} / crashed ${tally.crashed} / refused but wrote ${tally.wrote}`;
    t.diagnostic(line);
    console.log(line);
    for (const f of failures.slice(0, 20)) console.log(`  ${f}`);
    assert.ok(tally.tried >= 40, `only ${tally.tried} calls ran within ${BUDGET_MS} ms`);
    assert.deepEqual(unhandled.map(String), [], "unhandled rejections during the fuzz");
    assert.deepEqual(failures, [], `seed ${SEED}: ${failures.length} calls broke the contract`);
  });
});
