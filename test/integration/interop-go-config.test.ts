/**
 * Interop with the Go reference (orbit.go/pcgroups v0.2.2), configs both ways,
 * against one real nats-server: groups created by Go read by TypeScript and the
 * other way round (through the Go driver and Go's own `cg info`), the stored KV
 * bytes of every operation compared byte for byte, the config buckets and the
 * elastic work-queue streams compared field for field, and each side's create
 * being an idempotent no-op on a group the other side created.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { StreamConfig } from "@nats-io/jetstream";
import {
  ELASTIC_BUCKET,
  STATIC_BUCKET,
  addMembers,
  createElastic,
  createStatic,
  deleteMemberMappings,
  deleteMembers,
  elasticGetPartitionFilters,
  encodeElasticConfig,
  encodeStaticConfig,
  getElasticConsumerGroupConfig,
  getStaticConsumerGroupConfig,
  isConsumerGroupError,
  partitionAssignment,
  setMemberMappings,
  staticMemberFilters,
  type ElasticConsumerGroupConfig,
  type MemberMapping,
  type PartitioningFilter,
  type StaticConsumerGroupConfig,
} from "../../src/index.js";
import { startEnv, uniqueName, type TestEnv } from "../helpers/nats.js";
import { cgBinary, driverBinary, goDriver, goDriverError, partitionsOfFilters, rawKv, runCg } from "../helpers/interop-go.js";

interface StaticCase {
  name: string;
  max: number;
  members: string[] | null;
  mappings: MemberMapping[] | null;
  filters: string[] | null;
}

const STATIC_CASES: StaticCase[] = [
  { name: "balanced", max: 6, members: ["m2", "m1", "m3"], mappings: null, filters: null },
  { name: "mapped", max: 6, members: null, mappings: [{ member: "a", partitions: [5, 0, 1] }, { member: "b", partitions: [2, 3, 4] }], filters: null },
  { name: "filtered", max: 6, members: ["m1", "m2", "m4", "m3"], mappings: null, filters: ["foo.*", "bar.>"] },
  { name: "mapped_filtered", max: 6, members: null, mappings: [{ member: "a", partitions: [0, 1, 2, 3] }, { member: "b", partitions: [4, 5] }], filters: ["foo.*"] },
];

interface ElasticCase {
  name: string;
  max: number;
  filters: PartitioningFilter[] | null;
  msgs: number;
  bytes: number;
}

const ELASTIC_CASES: ElasticCase[] = [
  { name: "filtered", max: 4, filters: [{ filter: "ev.*.*", partitioning_wildcards: [1] }], msgs: 0, bytes: 0 },
  {
    name: "multi",
    max: 5,
    filters: [
      { filter: "ev.*.*", partitioning_wildcards: [2, 1] },
      { filter: "log.>", partitioning_wildcards: [] },
      { filter: "m.*.x.*", partitioning_wildcards: null },
    ],
    msgs: 0,
    bytes: 0,
  },
  { name: "whole_null", max: 3, filters: null, msgs: 0, bytes: 0 },
  { name: "whole_empty", max: 3, filters: [], msgs: 0, bytes: 0 },
  { name: "capped", max: 4, filters: [{ filter: "ev.*.*", partitioning_wildcards: [1] }], msgs: 100, bytes: 1_048_576 },
  { name: "unlimited", max: 2, filters: [{ filter: "log.>", partitioning_wildcards: [] }], msgs: -1, bytes: -1 },
];

const MEMBERS = ["m1", "m2", "m3", "m4", "a", "b", "nobody"];
const json = (v: unknown): string => JSON.stringify(v);
const sorted = (xs: number[]): number[] => [...xs].sort((a, b) => a - b);

/** A stream config without what legitimately differs between two groups' streams. */
function comparable(config: StreamConfig): Partial<StreamConfig> {
  const { name: _name, metadata: _metadata, ...rest } = config;
  return rest;
}

// Counted as a failure (not only as cancelled tests) when the driver or cg is missing or stale.
test("interop-go - the Go driver and Go's cg CLI are built and current", () => {
  driverBinary();
  cgBinary();
});

describe("interop-go - configs both ways (orbit.go/pcgroups v0.2.2)", () => {
  let env: TestEnv;
  let url: string;
  const staticStream = uniqueName("st");
  const source = uniqueName("src");

  before(async () => {
    driverBinary(); // fails loudly when the driver was not built
    env = await startEnv();
    url = env.server.url;
    await env.jsm.streams.add({
      name: staticStream,
      subjects: ["foo.*", "bar.*"],
      storage: "file",
      subject_transform: { src: "*.*", dest: "{{partition(6,2)}}.{{wildcard(1)}}.{{wildcard(2)}}" },
    });
    await env.jsm.streams.add({ name: source, subjects: ["ev.>", "log.>", "m.>"], storage: "file" });
  });
  after(async () => {
    await env?.close();
  });

  /** Go's filters for every member, and TypeScript's view of the same config agreeing with them. */
  async function assertSameAssignment(kind: "static" | "elastic", group: string, config: StaticConsumerGroupConfig | ElasticConsumerGroupConfig): Promise<void> {
    const stream = kind === "static" ? staticStream : source;
    const goFilters = JSON.parse(await goDriver(url, "partition-filters", kind, stream, group, json(MEMBERS))) as Record<string, string[]>;
    const assignment = partitionAssignment(config);
    for (const m of MEMBERS) {
      const ours = kind === "static" ? staticMemberFilters(config, m) : elasticGetPartitionFilters(config as ElasticConsumerGroupConfig, m);
      assert.deepEqual(ours, goFilters[m], `${group}: ${m}'s consumer filter subjects, TypeScript vs Go's GeneratePartitionFilters`);
      assert.deepEqual(sorted(assignment.get(m) ?? []), sorted(partitionsOfFilters(goFilters[m] ?? [])), `${group}: ${m}'s partitions, partitionAssignment vs Go`);
    }
  }

  test("interop-go - static: Go creates balanced, mapped and filtered groups; TypeScript reads the same config, filters and assignment", async () => {
    for (const c of STATIC_CASES) {
      const group = `go_${c.name}`;
      const printed = await goDriver(url, "create-static", staticStream, group, String(c.max), json(c.members), json(c.mappings), json(c.filters));
      const stored = await rawKv(env.js, STATIC_BUCKET, `${staticStream}.${group}`);
      assert.equal(stored, printed, `${group}: the stored value is Go's json.Marshal of the config`);
      const ours = await getStaticConsumerGroupConfig(env.js, staticStream, group);
      assert.deepEqual(ours, JSON.parse(printed), `${group}: TypeScript reads the config Go wrote`);
      assert.equal(encodeStaticConfig(ours), stored, `${group}: our encoder writes Go's bytes`);
      await assertSameAssignment("static", group, ours);
    }
  });

  test("interop-go - static: TypeScript creates the same groups with identical stored bytes; Go reads them (driver and cg info); each create is a no-op on the other's group", async () => {
    for (const c of STATIC_CASES) {
      const goGroup = `go_${c.name}`;
      const tsGroup = `ts_${c.name}`;
      const options = {
        stream: staticStream,
        maxMembers: c.max,
        ...(c.members ? { members: c.members } : {}),
        ...(c.mappings ? { memberMappings: c.mappings } : {}),
        ...(c.filters ? { filters: c.filters } : {}),
      };
      await createStatic(env.js, { ...options, group: tsGroup });
      const goBytes = await rawKv(env.js, STATIC_BUCKET, `${staticStream}.${goGroup}`);
      const tsBytes = await rawKv(env.js, STATIC_BUCKET, `${staticStream}.${tsGroup}`);
      assert.equal(tsBytes, goBytes, `${c.name}: TypeScript stores the bytes Go stores for the same CreateStatic`);

      assert.equal(await goDriver(url, "get-static", staticStream, tsGroup), goBytes, `${c.name}: Go's GetStaticConsumerGroupConfig reads our config`);
      await assertSameAssignment("static", tsGroup, await getStaticConsumerGroupConfig(env.js, staticStream, tsGroup));

      const goInfo = await runCg(url, "static", "info", staticStream, goGroup);
      const tsInfo = await runCg(url, "static", "info", staticStream, tsGroup);
      assert.equal(tsInfo.code, 0, `cg static info ${tsGroup}: ${tsInfo.stderr}`);
      assert.match(tsInfo.stdout, new RegExp(`^config: max members=${c.max}, filters=`));
      assert.equal(tsInfo.stdout, goInfo.stdout, `${c.name}: Go's cg info prints the same for both groups`);

      // Go's CreateStatic on our group and ours on Go's: same config, so both succeed without writing.
      assert.equal(await goDriver(url, "create-static", staticStream, tsGroup, String(c.max), json(c.members), json(c.mappings), json(c.filters)), goBytes);
      assert.deepEqual(await createStatic(env.js, { ...options, group: goGroup }), JSON.parse(goBytes ?? ""));
      assert.equal(await rawKv(env.js, STATIC_BUCKET, `${staticStream}.${goGroup}`), goBytes);
    }
    // A different config is refused by both, with Go's message.
    const goErr = await goDriverError(url, "create-static", staticStream, "ts_balanced", "6", json(["m1"]), "null", "null");
    assert.equal(goErr, "the existing static consumer group config doesn't match ours");
    await assert.rejects(createStatic(env.js, { stream: staticStream, group: "go_balanced", maxMembers: 6, members: ["m1"] }), (err: unknown) => {
      assert.ok(isConsumerGroupError(err) && err.code === "CONFIG_MISMATCH" && err.message.startsWith(goErr), String(err));
      return true;
    });
  });

  test("interop-go - elastic: TypeScript creates filtered, multi-filter, whole-subject and capped groups; Go reads the same config and the same stored bytes", async () => {
    for (const c of ELASTIC_CASES) {
      const group = `ts_${c.name}`;
      const ours = await createElastic(env.js, {
        stream: source,
        group,
        maxMembers: c.max,
        partitioningFilters: c.filters,
        maxBufferedMsgs: c.msgs,
        maxBufferedBytes: c.bytes,
      });
      const stored = await rawKv(env.js, ELASTIC_BUCKET, `${source}.${group}`);
      assert.equal(stored, encodeElasticConfig(ours));
      const goRead = await goDriver(url, "get-elastic", source, group);
      assert.equal(goRead, stored, `${group}: Go decodes and re-encodes our bytes unchanged (null stays null, [] stays [])`);
      assert.deepEqual(await getElasticConsumerGroupConfig(env.js, source, group), JSON.parse(goRead));
    }
  });

  test("interop-go - elastic: Go creates the same groups; stored bytes and work-queue streams are identical; TypeScript and cg info read them alike", async () => {
    for (const c of ELASTIC_CASES) {
      const goGroup = `go_${c.name}`;
      const tsGroup = `ts_${c.name}`;
      const printed = await goDriver(url, "create-elastic", source, goGroup, String(c.max), json(c.filters), String(c.msgs), String(c.bytes));
      const goBytes = await rawKv(env.js, ELASTIC_BUCKET, `${source}.${goGroup}`);
      assert.equal(goBytes, printed);
      assert.equal(await rawKv(env.js, ELASTIC_BUCKET, `${source}.${tsGroup}`), goBytes, `${c.name}: the same CreateElastic stores the same bytes from either side`);
      const ours = await getElasticConsumerGroupConfig(env.js, source, goGroup);
      assert.deepEqual(ours, JSON.parse(printed));
      assert.equal(encodeElasticConfig(ours), goBytes);

      const goStream = (await env.jsm.streams.info(`${source}-${goGroup}`)).config;
      const tsStream = (await env.jsm.streams.info(`${source}-${tsGroup}`)).config;
      assert.deepEqual(comparable(tsStream), comparable(goStream), `${c.name}: the work-queue streams are configured alike`);

      const goInfo = await runCg(url, "elastic", "info", source, goGroup);
      const tsInfo = await runCg(url, "elastic", "info", source, tsGroup);
      assert.equal(tsInfo.code, 0, `cg elastic info ${tsGroup}: ${tsInfo.stderr}`);
      assert.match(tsInfo.stdout, new RegExp(`^config: max members=${c.max}, max buffered msgs=${c.msgs}, max buffered bytes=${c.bytes}\\n`));
      assert.equal(tsInfo.stdout, goInfo.stdout, `${c.name}: Go's cg info prints the same for both groups`);
    }
  });

  test("interop-go - config buckets: the one Go creates (static) and the one TypeScript creates (elastic) have the same settings, but for deny_delete", async () => {
    // In this file Go created the static bucket (first test) and TypeScript the elastic one (third test).
    const goBucket = (await env.jsm.streams.info(`KV_${STATIC_BUCKET}`)).config;
    const tsBucket = (await env.jsm.streams.info(`KV_${ELASTIC_BUCKET}`)).config;
    // nats.go's CreateKeyValue sets deny_delete (no STREAM.MSG.DELETE on the bucket's stream);
    // nats.js's Kvm.create cannot. KV deletes are delete markers either way, so neither side notices.
    assert.equal(goBucket.deny_delete, true);
    const strip = (c: StreamConfig): Partial<StreamConfig> => {
      const { subjects: _subjects, deny_delete: _denyDelete, ...rest } = comparable(c);
      return rest;
    };
    assert.deepEqual(strip(tsBucket), strip(goBucket));
    assert.deepEqual(tsBucket.subjects, [`$KV.${ELASTIC_BUCKET}.>`]);
    assert.deepEqual(goBucket.subjects, [`$KV.${STATIC_BUCKET}.>`]);
  });

  test("interop-go - elastic work-queue stream: Go's CreateElastic on our groups and our createElastic on Go's succeed with the same arguments; different ones are refused by both", async () => {
    for (const c of ELASTIC_CASES) {
      const goGroup = `go_${c.name}`;
      const tsGroup = `ts_${c.name}`;
      const before = await env.jsm.streams.info(`${source}-${tsGroup}`);
      const printed = await goDriver(url, "create-elastic", source, tsGroup, String(c.max), json(c.filters), String(c.msgs), String(c.bytes));
      assert.equal(printed, await rawKv(env.js, ELASTIC_BUCKET, `${source}.${tsGroup}`), `${c.name}: Go's CreateElastic after ours`);
      const afterGo = await env.jsm.streams.info(`${source}-${tsGroup}`);
      assert.equal(afterGo.created, before.created, `${c.name}: the work-queue stream was not recreated`);
      assert.deepEqual(afterGo.config, before.config);

      const goBefore = await env.jsm.streams.info(`${source}-${goGroup}`);
      const again = await createElastic(env.js, { stream: source, group: goGroup, maxMembers: c.max, partitioningFilters: c.filters, maxBufferedMsgs: c.msgs, maxBufferedBytes: c.bytes });
      assert.equal(encodeElasticConfig(again), await rawKv(env.js, ELASTIC_BUCKET, `${source}.${goGroup}`), `${c.name}: our createElastic after Go's`);
      const goAfter = await env.jsm.streams.info(`${source}-${goGroup}`);
      assert.equal(goAfter.created, goBefore.created);
      assert.deepEqual(goAfter.config, goBefore.config);
    }
    const goErr = await goDriverError(url, "create-elastic", source, "ts_filtered", "5", json([{ filter: "ev.*.*", partitioning_wildcards: [1] }]), "0", "0");
    assert.match(goErr, /^the existing elastic consumer group config can not be updated to the requested one/);
    await assert.rejects(
      createElastic(env.js, { stream: source, group: "go_filtered", maxMembers: 4, partitioningFilters: [{ filter: "ev.*.*", partitioning_wildcards: [2] }] }),
      (err: unknown) => isConsumerGroupError(err) && err.code === "CONFIG_IMMUTABLE" && err.message.startsWith(goErr),
    );
    // null and [] are different configs to Go (reflect.DeepEqual). We accept either for the
    // other (same work-queue stream: both hash the whole subject) and change nothing stored.
    await assert.rejects(goDriver(url, "create-elastic", source, "ts_whole_null", "3", "[]", "0", "0"), /can not be updated/);
    const stored = await rawKv(env.js, ELASTIC_BUCKET, `${source}.go_whole_empty`);
    const lenient = await createElastic(env.js, { stream: source, group: "go_whole_empty", maxMembers: 3, partitioningFilters: null });
    assert.deepEqual(lenient.partitioning_filters, []);
    assert.equal(await rawKv(env.js, ELASTIC_BUCKET, `${source}.go_whole_empty`), stored);
  });

  test("interop-go - elastic membership edits (add, drop, set-mappings, delete-mappings) store the same bytes from either side, and keep null/[] as they were", async () => {
    for (const name of ["filtered", "multi", "whole_null", "whole_empty"]) {
      const goGroup = `go_${name}`;
      const tsGroup = `ts_${name}`;
      const goKey = `${source}.${goGroup}`;
      const tsKey = `${source}.${tsGroup}`;
      const created = await rawKv(env.js, ELASTIC_BUCKET, goKey);
      const same = async (what: string): Promise<string | undefined> => {
        const goBytes = await rawKv(env.js, ELASTIC_BUCKET, goKey);
        assert.equal(await rawKv(env.js, ELASTIC_BUCKET, tsKey), goBytes, `${name}: ${what}: stored bytes differ`);
        return goBytes;
      };
      const max = ELASTIC_CASES.find((c) => c.name === name)?.max ?? 0;

      assert.equal(await goDriver(url, "add", source, goGroup, json(["m1"])), json(["m1"]));
      assert.deepEqual(await addMembers(env.js, source, tsGroup, ["m1"]), ["m1"]);
      await same("add m1");

      // Go's AddMembers returns the union in random (map) order; ours keeps order. Same set, same assignment.
      const goMembers = JSON.parse(await goDriver(url, "add", source, goGroup, json(["m3", "m2"]))) as string[];
      const tsMembers = await addMembers(env.js, source, tsGroup, ["m3", "m2"]);
      assert.deepEqual([...goMembers].sort(), ["m1", "m2", "m3"]);
      assert.deepEqual(tsMembers, ["m1", "m3", "m2"]);
      const goConfig = await getElasticConsumerGroupConfig(env.js, source, goGroup);
      const tsConfig = await getElasticConsumerGroupConfig(env.js, source, tsGroup);
      assert.deepEqual({ ...tsConfig, members: [...(tsConfig.members ?? [])].sort() }, { ...goConfig, members: [...(goConfig.members ?? [])].sort() });
      await assertSameAssignment("elastic", goGroup, goConfig);
      await assertSameAssignment("elastic", tsGroup, tsConfig);
      assert.deepEqual(partitionAssignment(tsConfig), partitionAssignment(goConfig));

      assert.deepEqual(JSON.parse(await goDriver(url, "drop", source, goGroup, json(["m1", "m3", "zz"]))), ["m2"]);
      assert.deepEqual(await deleteMembers(env.js, source, tsGroup, ["m1", "m3", "zz"]), ["m2"]);
      await same("drop m1, m3");

      const mappings: MemberMapping[] = [{ member: "a", partitions: [max - 1] }, { member: "b", partitions: [...Array(max - 1).keys()] }];
      await goDriver(url, "set-mappings", source, goGroup, json(mappings));
      await setMemberMappings(env.js, source, tsGroup, mappings);
      const mapped = await same("set-mappings");
      assert.ok(mapped?.includes('"member_mappings":[{"member":"a"'), mapped);
      await assertSameAssignment("elastic", tsGroup, await getElasticConsumerGroupConfig(env.js, source, tsGroup));

      await goDriver(url, "delete-mappings", source, goGroup);
      await deleteMemberMappings(env.js, source, tsGroup);
      assert.equal(await same("delete-mappings"), created, `${name}: back to the bytes CreateElastic wrote`);

      // Cross edits: each side edits the other's group; the untouched fields stay byte for byte.
      await addMembers(env.js, source, goGroup, ["m4"]);
      await goDriver(url, "add", source, tsGroup, json(["m4"]));
      await same("cross add m4");
      await goDriver(url, "drop", source, goGroup, json(["m4"]));
      await deleteMembers(env.js, source, tsGroup, ["m4"]);
      assert.equal(await same("cross drop m4"), created);
    }
  });

  test("interop-go - elastic: a Go group whose partitioning filters overlap without one containing the other (accepted by Go and the server) is readable and editable by TypeScript", async () => {
    const group = "go_overlap";
    const filters: PartitioningFilter[] = [
      { filter: "ev.a.*", partitioning_wildcards: [1] },
      { filter: "ev.*.b", partitioning_wildcards: [1] },
    ];
    const printed = await goDriver(url, "create-elastic", source, group, "2", json(filters), "0", "0");
    const ours = await getElasticConsumerGroupConfig(env.js, source, group);
    assert.deepEqual(ours, JSON.parse(printed));
    assert.deepEqual(await addMembers(env.js, source, group, ["m1"]), ["m1"]);
    assert.equal(await goDriver(url, "get-elastic", source, group), await rawKv(env.js, ELASTIC_BUCKET, `${source}.${group}`));
    await assertSameAssignment("elastic", group, await getElasticConsumerGroupConfig(env.js, source, group));
  });
});
