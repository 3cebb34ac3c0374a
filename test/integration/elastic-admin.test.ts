/**
 * Elastic group administration against a real server: the exact bytes stored in
 * KV (Go's JSON, `null` and `[]` kept apart through every edit), the work-queue
 * stream's config, idempotent and immutable creation, and bad input rejected with
 * a typed error before anything is written.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { StreamConfig } from "@nats-io/jetstream";
import {
  ConsumerGroupError,
  addMembers,
  createElastic,
  deleteElastic,
  deleteMemberMappings,
  deleteMembers,
  elasticConsume,
  elasticIsInMembershipAndActive,
  elasticMemberStepDown,
  getElasticConsumerGroupConfig,
  listElasticActiveMembers,
  listElasticConsumerGroups,
  setMemberMappings,
  type PartitioningFilter,
} from "../../src/index.js";
import { startEnv, uniqueName, type TestEnv } from "../helpers/nats.js";
import { rawElasticConfig, rejectsWithCode } from "../helpers/elastic-util.js";
import { fullState, stateChanges } from "../helpers/fuzz.js";

describe("elastic - admin", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  const raw = async (stream: string, group: string): Promise<string | undefined> => (await rawElasticConfig(env.js, stream, group))?.text;
  const wqConfig = async (stream: string, group: string): Promise<StreamConfig> => (await env.jsm.streams.info(`${stream}-${group}`)).config;
  const noWorkQueue = async (stream: string, group: string): Promise<void> => {
    await assert.rejects(env.jsm.streams.info(`${stream}-${group}`), /stream not found/, `no work-queue stream ${stream}-${group}`);
  };

  test("elastic - stored bytes: Go's JSON, and null / [] preserved through add, delete, set and delete mappings", async () => {
    const stream = uniqueName("bytes");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    const f = `${stream}.*`;

    const base = `{"max_members":2,"partitioning_filters":[{"filter":"${f}","partitioning_wildcards":[1]}],"max_buffered_msg":-1,"max_buffered_bytes":-1}`;
    await createElastic(env.js, { stream, group: "g1", maxMembers: 2, partitioningFilters: [{ filter: f, partitioning_wildcards: [1] }], maxBufferedMsgs: -1, maxBufferedBytes: -1 });
    assert.equal(await raw(stream, "g1"), base);

    const withTail = (b: string, tail: string): string => `${b.slice(0, -1)}${tail}}`;
    const edits = async (group: string, b: string): Promise<void> => {
      assert.deepEqual(await addMembers(env.js, stream, group, ["m1", "m2"]), ["m1", "m2"]);
      assert.equal(await raw(stream, group), withTail(b, `,"members":["m1","m2"]`));
      // Adding an existing member changes nothing; a new one is appended.
      assert.deepEqual(await addMembers(env.js, stream, group, ["m2", "m0"]), ["m1", "m2", "m0"]);
      assert.equal(await raw(stream, group), withTail(b, `,"members":["m1","m2","m0"]`));
      assert.deepEqual(await deleteMembers(env.js, stream, group, ["m1", "nobody"]), ["m2", "m0"]);
      assert.equal(await raw(stream, group), withTail(b, `,"members":["m2","m0"]`));
      assert.deepEqual(await deleteMembers(env.js, stream, group, ["m2", "m0"]), []);
      assert.equal(await raw(stream, group), b, "no members: the key is omitted, not written as []");
      await setMemberMappings(env.js, stream, group, [
        { member: "m1", partitions: [1] },
        { member: "m2", partitions: [0] },
      ]);
      assert.equal(await raw(stream, group), withTail(b, `,"member_mappings":[{"member":"m1","partitions":[1]},{"member":"m2","partitions":[0]}]`));
      // Mappings replace members.
      await deleteMemberMappings(env.js, stream, group);
      assert.equal(await raw(stream, group), b);
      await addMembers(env.js, stream, group, ["m1"]);
      await setMemberMappings(env.js, stream, group, [{ member: "m9", partitions: [0, 1] }]);
      assert.equal(await raw(stream, group), withTail(b, `,"member_mappings":[{"member":"m9","partitions":[0,1]}]`), "setMemberMappings clears members");
      await deleteMemberMappings(env.js, stream, group);
      assert.equal(await raw(stream, group), b);
    };
    await edits("g1", base);

    // Whole subject, stored as null.
    await createElastic(env.js, { stream, group: "gnull", maxMembers: 2, partitioningFilters: null });
    const nullBase = `{"max_members":2,"partitioning_filters":null}`;
    assert.equal(await raw(stream, "gnull"), nullBase);
    await edits("gnull", nullBase);

    // Whole subject, stored as [].
    await createElastic(env.js, { stream, group: "gempty", maxMembers: 2, partitioningFilters: [] });
    const emptyBase = `{"max_members":2,"partitioning_filters":[]}`;
    assert.equal(await raw(stream, "gempty"), emptyBase);
    await edits("gempty", emptyBase);

    // Inner partitioning_wildcards null and [], and Go's HTML escaping of ">".
    await createElastic(env.js, { stream, group: "ginner", maxMembers: 2, partitioningFilters: [{ filter: `${stream}.a.*`, partitioning_wildcards: null }, { filter: `${stream}.b.>`, partitioning_wildcards: [] }] });
    const innerBase = `{"max_members":2,"partitioning_filters":[{"filter":"${stream}.a.*","partitioning_wildcards":null},{"filter":"${stream}.b.\\u003e","partitioning_wildcards":[]}]}`;
    assert.equal(await raw(stream, "ginner"), innerBase);
    await edits("ginner", innerBase);

    // The decoded config keeps them apart too.
    assert.equal((await getElasticConsumerGroupConfig(env.js, stream, "gnull")).partitioning_filters, null);
    assert.deepEqual((await getElasticConsumerGroupConfig(env.js, stream, "gempty")).partitioning_filters, []);
    const inner = (await getElasticConsumerGroupConfig(env.js, stream, "ginner")).partitioning_filters as PartitioningFilter[];
    assert.equal(inner[0]?.partitioning_wildcards, null);
    assert.deepEqual(inner[1]?.partitioning_wildcards, []);

    assert.deepEqual(await listElasticConsumerGroups(env.js, stream), ["g1", "gempty", "ginner", "gnull"]);
    for (const g of ["g1", "gnull", "gempty", "ginner"]) await deleteElastic(env.js, stream, g);
    assert.deepEqual(await listElasticConsumerGroups(env.js, stream), []);
    assert.equal((await rawElasticConfig(env.js, stream, "g1"))?.operation, "DEL", "deleteElastic writes a delete marker, not a purge");
  });

  test("elastic - work-queue stream config: workqueue, discard new, direct, source's replicas/storage, caps, exact transforms", async () => {
    const stream = uniqueName("wq");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`], storage: "memory" });
    const src = (await env.jsm.streams.info(stream)).config;

    await createElastic(env.js, {
      stream,
      group: "capped",
      maxMembers: 4,
      partitioningFilters: [
        { filter: `${stream}.foo.*.*.>`, partitioning_wildcards: [2, 1] },
        { filter: `${stream}.bar.*`, partitioning_wildcards: [1] },
        { filter: `${stream}.baz.*`, partitioning_wildcards: [] },
      ],
      maxBufferedMsgs: 100,
      maxBufferedBytes: 1_048_576,
    });
    const c = await wqConfig(stream, "capped");
    assert.equal(c.name, `${stream}-capped`);
    assert.equal(c.retention, "workqueue");
    assert.equal(c.discard, "new");
    assert.equal(c.allow_direct, true);
    assert.equal(c.num_replicas, src.num_replicas);
    assert.equal(c.storage, "memory", "the work-queue stream uses the source stream's storage");
    assert.equal(c.max_msgs, 100);
    assert.equal(c.max_bytes, 1_048_576);
    assert.ok(!c.subjects || c.subjects.length === 0, `the work-queue stream only sources, got subjects ${JSON.stringify(c.subjects)}`);
    assert.equal(c.sources?.length, 1);
    const source = c.sources?.[0];
    assert.equal(source?.name, stream);
    assert.ok(!source?.opt_start_seq && !source?.opt_start_time && !source?.filter_subject && !source?.external, `plain source from the start: ${JSON.stringify(source)}`);
    assert.deepEqual(source?.subject_transforms, [
      { src: `${stream}.foo.*.*.>`, dest: `{{Partition(4,2,1)}}.${stream}.foo.{{Wildcard(1)}}.{{Wildcard(2)}}.>` },
      { src: `${stream}.bar.*`, dest: `{{Partition(4,1)}}.${stream}.bar.{{Wildcard(1)}}` },
      { src: `${stream}.baz.*`, dest: `{{Partition(4)}}.${stream}.baz.{{Wildcard(1)}}` },
    ]);

    await createElastic(env.js, { stream, group: "uncapped", maxMembers: 2, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }], maxBufferedMsgs: -1, maxBufferedBytes: -1 });
    const u = await wqConfig(stream, "uncapped");
    assert.equal(u.max_msgs, -1);
    assert.equal(u.max_bytes, -1);
    assert.deepEqual(u.sources?.[0]?.subject_transforms, [{ src: `${stream}.*`, dest: `{{Partition(2,1)}}.${stream}.{{Wildcard(1)}}` }]);

    for (const [group, pfs] of [["whole", null], ["whole2", []]] as [string, PartitioningFilter[] | null][]) {
      await createElastic(env.js, { stream, group, maxMembers: 3, partitioningFilters: pfs });
      const w = await wqConfig(stream, group);
      assert.deepEqual(w.sources?.[0]?.subject_transforms, [{ src: ">", dest: "{{Partition(3)}}.>" }], `whole subject with ${JSON.stringify(pfs)}`);
      assert.equal(w.max_msgs, -1, "no cap: the server's unlimited");
    }
    for (const g of ["capped", "uncapped", "whole", "whole2"]) await deleteElastic(env.js, stream, g);
    await env.jsm.streams.delete(stream);
  });

  test("elastic - createElastic is idempotent with the same arguments and CONFIG_IMMUTABLE with others, changing nothing", async () => {
    const stream = uniqueName("idem");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    const args = {
      stream,
      group: "g",
      maxMembers: 2,
      partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }],
      maxBufferedMsgs: 50,
    };
    const first = await createElastic(env.js, args);
    await addMembers(env.js, stream, "g", ["m1"]);
    const before = await rawElasticConfig(env.js, stream, "g");
    const wqBefore = await env.jsm.streams.info(`${stream}-g`);

    const again = await createElastic(env.js, { ...args, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [1] }] });
    assert.deepEqual(again, { ...first, members: ["m1"] }, "the existing config (with its members) is returned");
    assert.deepEqual(await rawElasticConfig(env.js, stream, "g"), before, "same arguments: nothing written");
    const wqAfter = await env.jsm.streams.info(`${stream}-g`);
    assert.equal(wqAfter.created, wqBefore.created);
    assert.deepEqual(wqAfter.config, wqBefore.config);

    const different: (typeof args & Record<string, unknown>)[] = [
      { ...args, maxMembers: 3 },
      { ...args, partitioningFilters: [{ filter: `${stream}.*`, partitioning_wildcards: [] }] },
      { ...args, partitioningFilters: [{ filter: `${stream}.>`, partitioning_wildcards: [] }] },
      { ...args, partitioningFilters: [] },
      { ...args, maxBufferedMsgs: 51 },
      { ...args, maxBufferedBytes: 1024 },
    ];
    for (const d of different) {
      await rejectsWithCode(createElastic(env.js, d), "CONFIG_IMMUTABLE");
      assert.deepEqual(await rawElasticConfig(env.js, stream, "g"), before, `nothing written for ${JSON.stringify(d)}`);
      const wq = await env.jsm.streams.info(`${stream}-g`);
      assert.deepEqual(wq.config, wqBefore.config, "the work-queue stream is unchanged");
    }
    await deleteElastic(env.js, stream, "g");
  });

  test("elastic - bad input is rejected with a typed error and nothing is written", async () => {
    const stream = uniqueName("bad");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    const nothingFor = async (group: string): Promise<void> => {
      assert.equal(await rawElasticConfig(env.js, stream, group), undefined, `no KV key for ${group}`);
      await noWorkQueue(stream, group);
    };
    const create = (group: string, partitioningFilters: PartitioningFilter[] | null, maxMembers = 2): Promise<unknown> =>
      createElastic(env.js, { stream, group, maxMembers, partitioningFilters });

    // Partitioning filters.
    const badFilters: [string, PartitioningFilter[], string][] = [
      ["nowild", [{ filter: `${stream}.foo`, partitioning_wildcards: [] }], "INVALID_PARTITIONING_FILTER"],
      ["nowild2", [{ filter: `${stream}.foo`, partitioning_wildcards: null }], "INVALID_PARTITIONING_FILTER"],
      ["emptyfilter", [{ filter: "", partitioning_wildcards: [] }], "INVALID_PARTITIONING_FILTER"],
      ["idx0", [{ filter: `${stream}.*`, partitioning_wildcards: [0] }], "INVALID_PARTITIONING_FILTER"],
      ["idxbig", [{ filter: `${stream}.*.*`, partitioning_wildcards: [3] }], "INVALID_PARTITIONING_FILTER"],
      ["toomany", [{ filter: `${stream}.*`, partitioning_wildcards: [1, 2] }], "INVALID_PARTITIONING_FILTER"],
      ["dupidx", [{ filter: `${stream}.*.*`, partitioning_wildcards: [1, 1] }], "INVALID_PARTITIONING_FILTER"],
      [
        "overlap",
        [
          { filter: `${stream}.foo.*`, partitioning_wildcards: [1] },
          { filter: `${stream}.*.bar`, partitioning_wildcards: [1] },
        ],
        "OVERLAPPING_FILTERS",
      ],
      // A literal filter such as foo.bar is no partitioning filter at all (Go's rule comes first).
      [
        "literal",
        [
          { filter: `${stream}.foo.*`, partitioning_wildcards: [1] },
          { filter: `${stream}.foo.bar`, partitioning_wildcards: [] },
        ],
        "INVALID_PARTITIONING_FILTER",
      ],
      [
        "overlap2",
        [
          { filter: `${stream}.>`, partitioning_wildcards: [] },
          { filter: `${stream}.a.*`, partitioning_wildcards: [1] },
        ],
        "OVERLAPPING_FILTERS",
      ],
    ];
    for (const [group, pfs, code] of badFilters) {
      await rejectsWithCode(create(group, pfs), code);
      await nothingFor(group);
    }
    await rejectsWithCode(create("zero", null, 0), "INVALID_MAX_MEMBERS");
    await nothingFor("zero");

    // Names.
    for (const [s, g] of [
      ["", "g"],
      [stream, ""],
      [stream, "a.b"],
      [stream, "a*"],
      [stream, "a>"],
      [stream, "a b"],
      ["x.y", "g"],
    ]) {
      await rejectsWithCode(createElastic(env.js, { stream: s as string, group: g as string, maxMembers: 2 }), "INVALID_NAME");
    }
    await nothingFor("a");

    // Missing stream, missing group.
    await rejectsWithCode(createElastic(env.js, { stream: uniqueName("nostream"), group: "g", maxMembers: 2 }), "STREAM_NOT_FOUND");
    for (const op of [
      () => addMembers(env.js, stream, "nogroup", ["m1"]),
      () => deleteMembers(env.js, stream, "nogroup", ["m1"]),
      () => setMemberMappings(env.js, stream, "nogroup", [{ member: "m1", partitions: [0, 1] }]),
      () => deleteMemberMappings(env.js, stream, "nogroup"),
      () => getElasticConsumerGroupConfig(env.js, stream, "nogroup"),
      () => deleteElastic(env.js, stream, "nogroup"),
      () => listElasticActiveMembers(env.js, stream, "nogroup"),
      () => elasticIsInMembershipAndActive(env.js, stream, "nogroup", "m1"),
      () => elasticMemberStepDown(env.js, stream, "nogroup", "m1"),
    ]) {
      await rejectsWithCode(op, "GROUP_NOT_FOUND");
    }
    await nothingFor("nogroup");
    // Consuming from a group that does not exist: its work-queue stream is missing.
    await rejectsWithCode(elasticConsume(env.js, { stream, group: "nogroup", member: "m1", handler: () => undefined }), "STREAM_NOT_FOUND");

    // A good group to edit.
    await create("g", [{ filter: `${stream}.*`, partitioning_wildcards: [1] }]);
    const unchanged = async (before: Awaited<ReturnType<typeof rawElasticConfig>>): Promise<void> => {
      assert.deepEqual(await rawElasticConfig(env.js, stream, "g"), before, "the config is unchanged");
    };

    // Immutable settings.
    let before = await rawElasticConfig(env.js, stream, "g");
    await rejectsWithCode(create("g", [{ filter: `${stream}.*`, partitioning_wildcards: [1] }], 3), "CONFIG_IMMUTABLE");
    await rejectsWithCode(create("g", [{ filter: `${stream}.>`, partitioning_wildcards: [] }]), "CONFIG_IMMUTABLE");
    await unchanged(before);

    // Empty or invalid member lists.
    await rejectsWithCode(addMembers(env.js, stream, "g", []), "INVALID_ARGUMENT");
    await rejectsWithCode(deleteMembers(env.js, stream, "g", []), "INVALID_ARGUMENT");
    await rejectsWithCode(setMemberMappings(env.js, stream, "g", []), "INVALID_ARGUMENT");
    await rejectsWithCode(addMembers(env.js, stream, "g", ["ok", "not.ok"]), "INVALID_NAME");
    await rejectsWithCode(addMembers(env.js, stream, "g", [""]), "INVALID_NAME");
    await unchanged(before);

    // Invalid mappings.
    const badMappings: [{ member: string; partitions: number[] }[], string][] = [
      [[{ member: "m1", partitions: [0, 0, 1] }], "DUPLICATE_PARTITION"],
      [
        [
          { member: "m1", partitions: [0] },
          { member: "m2", partitions: [0, 1] },
        ],
        "DUPLICATE_PARTITION",
      ],
      [[{ member: "m1", partitions: [0] }], "PARTITION_COVERAGE"],
      [[{ member: "m1", partitions: [0, 2] }], "PARTITION_OUT_OF_RANGE"],
      [[{ member: "m1", partitions: [-1, 0, 1] }], "PARTITION_OUT_OF_RANGE"],
      [
        [
          { member: "m1", partitions: [0] },
          { member: "m1", partitions: [1] },
        ],
        "DUPLICATE_MEMBER",
      ],
      [
        [
          { member: "m1", partitions: [0] },
          { member: "m2", partitions: [1] },
          { member: "m3", partitions: [] },
        ],
        "MAPPING_COUNT",
      ],
    ];
    await addMembers(env.js, stream, "g", ["m1", "m2"]);
    before = await rawElasticConfig(env.js, stream, "g");
    for (const [mappings, code] of badMappings) {
      await rejectsWithCode(setMemberMappings(env.js, stream, "g", mappings), code);
      await unchanged(before);
    }

    // A group with mappings can't have members added or dropped.
    await setMemberMappings(env.js, stream, "g", [{ member: "m1", partitions: [0, 1] }]);
    before = await rawElasticConfig(env.js, stream, "g");
    await rejectsWithCode(addMembers(env.js, stream, "g", ["m2"]), "GROUP_USES_MAPPINGS");
    await rejectsWithCode(deleteMembers(env.js, stream, "g", ["m1"]), "GROUP_USES_MAPPINGS");
    await unchanged(before);

    await deleteElastic(env.js, stream, "g");
    await env.jsm.streams.delete(stream);
  });
  test("elastic - a work-queue stream the server refuses leaves no config, no delete marker and no stream behind", async () => {
    const stream = uniqueName("refused");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
    const pfs = [{ filter: `${stream}.*`, partitioning_wildcards: [1] }];
    // A key with history: a group created and deleted before (its delete marker is the key's last revision).
    await createElastic(env.js, { stream, group: "again", maxMembers: 2, partitioningFilters: pfs });
    await deleteElastic(env.js, stream, "again");
    // A stream of the work queue's name with other settings.
    await env.jsm.streams.add({ name: `${stream}-taken`, subjects: [`${stream}-taken.x`] });
    // The test server holds 8 GB of file storage: a byte cap past it is refused when the stream is made.
    const overStorage = 2 ** 40;
    const cases: [string, Record<string, unknown>, string, RegExp][] = [
      ["fresh", { maxBufferedBytes: overStorage }, "SERVER_ERROR", /insufficient storage/],
      ["again", { maxBufferedBytes: overStorage }, "SERVER_ERROR", /insufficient storage/],
      ["taken", {}, "CONFIG_CONFLICT", /already exists with a different configuration/],
    ];
    for (const [group, extra, code, message] of cases) {
      const before = await fullState(env.jsm);
      const err = await createElastic(env.js, { stream, group, maxMembers: 2, partitioningFilters: pfs, ...extra }).then(
        () => assert.fail(`${group}: createElastic should have been refused`),
        (e: unknown) => e,
      );
      assert.ok(err instanceof ConsumerGroupError && err.code === code && message.test(err.message), `${group}: expected ${code}, got ${String(err)}`);
      assert.deepEqual(stateChanges(before, await fullState(env.jsm)), [], `${group}: the refused call changed the server`);
    }
    // The server's limit is its storage: the same cap within it is taken.
    await createElastic(env.js, { stream, group: "fits", maxMembers: 2, partitioningFilters: pfs, maxBufferedBytes: 2 ** 31 });
    assert.equal((await wqConfig(stream, "fits")).max_bytes, 2 ** 31);
    await deleteElastic(env.js, stream, "fits");
    await env.jsm.streams.delete(`${stream}-taken`);
    await env.jsm.streams.delete(stream);
  });
});
