/**
 * Static group administration against a real nats-server: idempotent creation,
 * mismatches, the partition-count check, bad input (each with its error code and
 * nothing written), and deleteStatic deleting only its own members' consumers.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm, type KV } from "@nats-io/kv";
import {
  ConsumerGroupError,
  STATIC_BUCKET,
  createStatic,
  deleteStatic,
  getStaticConsumerGroupConfig,
  listStaticActiveMembers,
  listStaticConsumerGroups,
  staticConsume,
  staticMemberStepDown,
  type ConsumerGroupMember,
  type ErrorCode,
  type MessageHandler,
} from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { createKeyedStream, thrown, within } from "../helpers/static-fixtures.js";

const noop: MessageHandler = () => undefined;

function assertCode(err: unknown, code: ErrorCode, what: string): void {
  assert.ok(err instanceof ConsumerGroupError, `${what}: expected a ConsumerGroupError, got ${String(err)}`);
  assert.equal(err.code, code, `${what}: ${err.message}`);
}

describe("static - behaviour: administration", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];

  before(async () => {
    env = await startEnv();
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((m) => m.stop()));
  });
  after(async () => {
    await env.close();
  });

  async function bucket(): Promise<KV | undefined> {
    try {
      await env.jsm.streams.info(`KV_${STATIC_BUCKET}`);
    } catch {
      return undefined;
    }
    return new Kvm(env.js).open(STATIC_BUCKET);
  }

  /** Every key of the static bucket (none when there is no bucket). */
  async function allKeys(): Promise<string[]> {
    const kv = await bucket();
    if (!kv) return [];
    const found: string[] = [];
    for await (const k of await kv.keys()) found.push(k);
    return found.sort();
  }

  async function stored(stream: string, group: string): Promise<{ value: string; revision: number } | undefined> {
    const entry = await (await bucket())?.get(`${stream}.${group}`);
    return entry && entry.operation === "PUT" ? { value: entry.string(), revision: entry.revision } : undefined;
  }

  async function consumers(stream: string): Promise<string[]> {
    const names: string[] = [];
    for await (const ci of env.jsm.consumers.list(stream)) names.push(ci.name);
    return names.sort();
  }

  async function plainStream(partitions = 4): Promise<string> {
    const stream = uniqueName("adm");
    await createKeyedStream(env.jsm, stream, partitions, stream);
    return stream;
  }

  test("static - behaviour: with no bucket, reads and consume fail with BUCKET_NOT_FOUND and create nothing", async () => {
    const fresh = await startEnv();
    try {
      const stream = uniqueName("nob");
      await createKeyedStream(fresh.jsm, stream, 2, stream);
      assertCode(await thrown(() => getStaticConsumerGroupConfig(fresh.js, stream, "g")), "BUCKET_NOT_FOUND", "get");
      assertCode(await thrown(() => listStaticConsumerGroups(fresh.js, stream)), "BUCKET_NOT_FOUND", "list");
      assertCode(await thrown(() => staticConsume(fresh.js, { stream, group: "g", member: "m1", handler: noop })), "BUCKET_NOT_FOUND", "consume");
      assertCode(await thrown(() => deleteStatic(fresh.js, stream, "g")), "BUCKET_NOT_FOUND", "delete");
      await assert.rejects(fresh.jsm.streams.info(`KV_${STATIC_BUCKET}`), "no bucket was created");
      const names: string[] = [];
      for await (const ci of fresh.jsm.consumers.list(stream)) names.push(ci.name);
      assert.deepEqual(names, [], "no consumer was created");
    } finally {
      await fresh.close();
    }
  });

  test("static - behaviour: createStatic is idempotent and writes Go's bytes; [] and absent mappings are equal", async () => {
    const stream = await plainStream(4);
    const first = await createStatic(env.js, { stream, group: "bal", maxMembers: 4, filters: [">"], members: ["m1", "m2"], memberMappings: [] });
    assert.deepEqual(first, { max_members: 4, filters: [">"], members: ["m1", "m2"] });
    const written = await stored(stream, "bal");
    assert.equal(written?.value, '{"max_members":4,"filters":["\\u003e"],"members":["m1","m2"]}');
    const again = await createStatic(env.js, { stream, group: "bal", maxMembers: 4, filters: [">"], members: ["m1", "m2"] });
    assert.deepEqual(again, first);
    assert.equal((await stored(stream, "bal"))?.revision, written?.revision, "the same create does not rewrite the key");

    const mappings = [
      { member: "a", partitions: [0, 1] },
      { member: "b", partitions: [2, 3] },
    ];
    await createStatic(env.js, { stream, group: "map", maxMembers: 4, memberMappings: mappings });
    const mapWritten = await stored(stream, "map");
    assert.equal(mapWritten?.value, '{"max_members":4,"member_mappings":[{"member":"a","partitions":[0,1]},{"member":"b","partitions":[2,3]}]}');
    await createStatic(env.js, { stream, group: "map", maxMembers: 4, members: [], memberMappings: mappings, filters: [] });
    assert.equal((await stored(stream, "map"))?.revision, mapWritten?.revision);

    assert.deepEqual(await getStaticConsumerGroupConfig(env.js, stream, "map"), { max_members: 4, member_mappings: mappings });
    assert.deepEqual(await listStaticConsumerGroups(env.js, stream), ["bal", "map"]);
  });

  test("static - behaviour: a different config for an existing group is CONFIG_MISMATCH and changes nothing", async () => {
    const stream = await plainStream(4);
    await createStatic(env.js, { stream, group: "g", maxMembers: 4, members: ["m1", "m2"] });
    const before = await stored(stream, "g");
    const variants = [
      { maxMembers: 4, members: ["m1", "m2", "m3"] },
      { maxMembers: 4, members: ["m2", "m1"] },
      { maxMembers: 4, members: ["m1", "m2"], filters: [`${stream}.*`] },
      {
        maxMembers: 4,
        memberMappings: [
          { member: "m1", partitions: [0, 1] },
          { member: "m2", partitions: [2, 3] },
        ],
      },
    ];
    for (const v of variants) {
      assertCode(await thrown(() => createStatic(env.js, { stream, group: "g", ...v })), "CONFIG_MISMATCH", JSON.stringify(v));
    }
    assert.deepEqual(await stored(stream, "g"), before);
  });

  test("static - behaviour: a stream partitioned into a different N is PARTITION_COUNT_MISMATCH, nothing written", async () => {
    const stream = await plainStream(10);
    const keysBefore = await allKeys();
    const err = await thrown(() => createStatic(env.js, { stream, group: "g", maxMembers: 4, members: ["m1"] }));
    assertCode(err, "PARTITION_COUNT_MISMATCH", "N 10 vs maxMembers 4");
    assert.match((err as Error).message, /10 partitions/);
    assert.equal(await stored(stream, "g"), undefined);
    assert.deepEqual(await allKeys(), keysBefore);
    await createStatic(env.js, { stream, group: "g", maxMembers: 10, members: ["m1"] });
  });

  test("static - behaviour: a stream without a partition transform is accepted with a warning", async () => {
    const stream = uniqueName("notr");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`], storage: "memory" });
    const warnings: string[] = [];
    await createStatic(env.js, { stream, group: "g", maxMembers: 3, members: ["m1"], onWarning: (w) => warnings.push(w) });
    assert.equal(warnings.length, 1);
    assert.match(warnings[0] ?? "", new RegExp(stream));
    assert.match(warnings[0] ?? "", /partition/);
    assert.ok(await stored(stream, "g"));
  });

  test("static - behaviour: a missing stream is STREAM_NOT_FOUND and nothing is written", async () => {
    await createStatic(env.js, { stream: await plainStream(1), group: "g", maxMembers: 1, members: ["m"] }); // the bucket exists from here on
    const keysBefore = await allKeys();
    const stream = uniqueName("missing");
    assertCode(await thrown(() => createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["m1"] })), "STREAM_NOT_FOUND", "create");
    assertCode(await thrown(() => staticConsume(env.js, { stream, group: "g", member: "m1", handler: noop })), "STREAM_NOT_FOUND", "consume");
    assertCode(await thrown(() => deleteStatic(env.js, stream, "g")), "STREAM_NOT_FOUND", "delete");
    assert.deepEqual(await allKeys(), keysBefore);
  });

  test("static - behaviour: a missing group is GROUP_NOT_FOUND for get, consume, delete and step-down", async () => {
    const stream = await plainStream(2);
    await createStatic(env.js, { stream, group: "other", maxMembers: 2, members: ["m1"] });
    assertCode(await thrown(() => getStaticConsumerGroupConfig(env.js, stream, "nope")), "GROUP_NOT_FOUND", "get");
    assertCode(await thrown(() => staticConsume(env.js, { stream, group: "nope", member: "m1", handler: noop })), "GROUP_NOT_FOUND", "consume");
    assertCode(await thrown(() => deleteStatic(env.js, stream, "nope")), "GROUP_NOT_FOUND", "delete");
    assertCode(await thrown(() => staticMemberStepDown(env.js, stream, "nope", "m1")), "GROUP_NOT_FOUND", "step down");
    assertCode(await thrown(() => staticMemberStepDown(env.js, stream, "other", "m1")), "GROUP_NOT_FOUND", "step down with no instance running");
    assert.deepEqual(await consumers(stream), []);
    assert.equal(await stored(stream, "nope"), undefined);
  });

  test("static - behaviour: invalid names are INVALID_NAME and nothing is written", async () => {
    const stream = await plainStream(2);
    await createStatic(env.js, { stream, group: "ok", maxMembers: 2, members: ["m1"] });
    const keysBefore = await allKeys();
    const bad = ["a.b", "a*", "a>", "my group", "tab\there", ""];
    for (const name of bad) {
      assertCode(await thrown(() => createStatic(env.js, { stream: name, group: "g", maxMembers: 2, members: ["m1"] })), "INVALID_NAME", `stream ${JSON.stringify(name)}`);
      assertCode(await thrown(() => createStatic(env.js, { stream, group: name, maxMembers: 2, members: ["m1"] })), "INVALID_NAME", `group ${JSON.stringify(name)}`);
      assertCode(await thrown(() => createStatic(env.js, { stream, group: "g", maxMembers: 2, members: [name] })), "INVALID_NAME", `member ${JSON.stringify(name)}`);
      assertCode(
        await thrown(() => createStatic(env.js, { stream, group: "g", maxMembers: 1, memberMappings: [{ member: name, partitions: [0] }] })),
        "INVALID_NAME",
        `mapped member ${JSON.stringify(name)}`,
      );
      assertCode(await thrown(() => staticConsume(env.js, { stream, group: "ok", member: name, handler: noop })), "INVALID_NAME", `consume member ${JSON.stringify(name)}`);
      assertCode(await thrown(() => getStaticConsumerGroupConfig(env.js, stream, name)), "INVALID_NAME", `get group ${JSON.stringify(name)}`);
      assertCode(await thrown(() => deleteStatic(env.js, stream, name)), "INVALID_NAME", `delete group ${JSON.stringify(name)}`);
    }
    assert.deepEqual(await allKeys(), keysBefore);
    assert.deepEqual(await consumers(stream), []);
  });

  test("static - behaviour: invalid membership is rejected with Go's rule codes and nothing is written", async () => {
    const stream = await plainStream(4);
    await createStatic(env.js, { stream, group: "seed", maxMembers: 4, members: ["m1"] });
    const keysBefore = await allKeys();
    const cases: { code: ErrorCode; maxMembers: number; members?: string[]; memberMappings?: { member: string; partitions: number[] }[] }[] = [
      { code: "INVALID_MAX_MEMBERS", maxMembers: 0, members: ["m1"] },
      { code: "INVALID_MAX_MEMBERS", maxMembers: -1, members: ["m1"] },
      { code: "MEMBERS_AND_MAPPINGS", maxMembers: 4, members: ["m1"], memberMappings: [{ member: "m1", partitions: [0, 1, 2, 3] }] },
      {
        code: "MAPPING_COUNT",
        maxMembers: 1,
        memberMappings: [
          { member: "a", partitions: [0] },
          { member: "b", partitions: [] },
        ],
      },
      {
        code: "DUPLICATE_MEMBER",
        maxMembers: 4,
        memberMappings: [
          { member: "a", partitions: [0, 1] },
          { member: "a", partitions: [2, 3] },
        ],
      },
      {
        code: "DUPLICATE_PARTITION",
        maxMembers: 4,
        memberMappings: [
          { member: "a", partitions: [0, 1] },
          { member: "b", partitions: [1, 2, 3] },
        ],
      },
      { code: "DUPLICATE_PARTITION", maxMembers: 4, memberMappings: [{ member: "a", partitions: [0, 0, 1, 2, 3] }] },
      {
        code: "PARTITION_OUT_OF_RANGE",
        maxMembers: 4,
        memberMappings: [
          { member: "a", partitions: [0, 1] },
          { member: "b", partitions: [2, 4] },
        ],
      },
      { code: "PARTITION_OUT_OF_RANGE", maxMembers: 4, memberMappings: [{ member: "a", partitions: [-1, 0, 1, 2] }] },
      {
        code: "PARTITION_COVERAGE",
        maxMembers: 4,
        memberMappings: [
          { member: "a", partitions: [0, 1] },
          { member: "b", partitions: [2] },
        ],
      },
    ];
    for (const c of cases) {
      const { code, ...args } = c;
      const err = await thrown(() => createStatic(env.js, { stream, group: "g", ...args }));
      assertCode(err, code, JSON.stringify(args));
    }
    assert.deepEqual(await allKeys(), keysBefore);
  });

  test("static - behaviour: consume rejects non-members, bad templates and bad handlers, creating no consumer", async () => {
    const stream = await plainStream(2);
    await createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["m1", "m2", "m3"] });
    assertCode(await thrown(() => staticConsume(env.js, { stream, group: "g", member: "m9", handler: noop })), "NOT_IN_MEMBERSHIP", "non-member");
    assertCode(await thrown(() => staticMemberStepDown(env.js, stream, "g", "m9")), "NOT_IN_MEMBERSHIP", "step down of a non-member");
    assertCode(
      await thrown(() => staticConsume(env.js, { stream, group: "g", member: "m1", handler: noop, consumerConfig: { filter_subject: "0.>" } })),
      "INVALID_CONSUMER_TEMPLATE",
      "template with filter_subject",
    );
    const badHandlers: unknown[] = [undefined, null, "handler", 42, {}];
    for (const handler of badHandlers) {
      assertCode(
        await thrown(() => staticConsume(env.js, { stream, group: "g", member: "m1", handler: handler as MessageHandler })),
        "INVALID_HANDLER",
        `handler ${JSON.stringify(handler) ?? "undefined"}`,
      );
    }
    assert.deepEqual(await consumers(stream), []);

    // m3 is in the membership but over the cap of 2 partitions: it idles without a consumer, as in Go.
    const idle = await staticConsume(env.js, { stream, group: "g", member: "m3", handler: noop });
    running.push(idle);
    assert.deepEqual(idle.partitions(), []);
    assert.deepEqual(await consumers(stream), []);
    await idle.stop();
    assert.equal(await idle.closed(), undefined);
  });

  test("static - behaviour: a second instance with a different template is CONSUMER_CONFLICT", async () => {
    const stream = await plainStream(2);
    await createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["m1"] });
    running.push(await staticConsume(env.js, { stream, group: "g", member: "m1", handler: noop, consumerConfig: { max_ack_pending: 5 } }));
    const err = await thrown(() => staticConsume(env.js, { stream, group: "g", member: "m1", handler: noop, consumerConfig: { max_ack_pending: 6 } }));
    assertCode(err, "CONSUMER_CONFLICT", "different template");
    assert.equal((await env.jsm.consumers.info(stream, "g-m1")).config.max_ack_pending, 5, "the existing consumer is untouched");
  });

  test("static - behaviour: active members are the ones with a running instance", async () => {
    const stream = await plainStream(2);
    await createStatic(env.js, { stream, group: "g", maxMembers: 2, members: ["m1", "m2"] });
    assert.deepEqual(await listStaticActiveMembers(env.js, stream, "g"), []);
    const c = await env.connect();
    const m2 = await staticConsume(c.js, { stream, group: "g", member: "m2", handler: noop, consumerConfig: { ack_wait: 2000 * 1_000_000 } });
    running.push(m2);
    await waitFor(async () => (await listStaticActiveMembers(env.js, stream, "g")).includes("m2"), 10_000, "m2 to be active");
    assert.deepEqual(await listStaticActiveMembers(env.js, stream, "g"), ["m2"]);
    await c.nc.close();
    await within(m2.closed(), 10_000, "m2 to stop after its connection closed");
    await waitFor(async () => (await listStaticActiveMembers(env.js, stream, "g")).length === 0, 10_000, "m2 to be inactive");
  });

  test("static - behaviour: deleteStatic deletes only its own members' consumers (not another group's with the same prefix)", async () => {
    const stream = await plainStream(2);
    const a = uniqueName("a");
    const ab = `${a}-b`;
    await createStatic(env.js, { stream, group: a, maxMembers: 2, members: ["x"] });
    await createStatic(env.js, { stream, group: ab, maxMembers: 2, members: ["m1"] });
    for (const [group, member] of [
      [a, "x"],
      [ab, "m1"],
    ] as const) {
      const m = await staticConsume(env.js, { stream, group, member, handler: noop });
      await m.stop(); // a planned stop keeps the durable
    }
    await env.jsm.consumers.add(stream, { durable_name: `${a}-unrelated`, ack_policy: "explicit" });
    assert.deepEqual(await consumers(stream), [`${a}-b-m1`, `${a}-unrelated`, `${a}-x`].sort());

    await deleteStatic(env.js, stream, a);
    assert.deepEqual(await consumers(stream), [`${a}-b-m1`, `${a}-unrelated`].sort(), `${a}-b-m1 (group ${ab}) and a consumer outside any group survive`);
    assert.equal(await stored(stream, a), undefined);
    assert.deepEqual(await getStaticConsumerGroupConfig(env.js, stream, ab), { max_members: 2, members: ["m1"] });
    assertCode(await thrown(() => deleteStatic(env.js, stream, a)), "GROUP_NOT_FOUND", "deleting again");

    await deleteStatic(env.js, stream, ab);
    assert.deepEqual(await consumers(stream), [`${a}-unrelated`]);
  });
});
