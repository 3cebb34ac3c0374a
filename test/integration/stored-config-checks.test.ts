/**
 * Stored configs written by hand, by Go or by another port are checked when they are
 * read, as strictly as a new one plus the checks against the server state: the
 * stream's partition transform (static), the work queue's source transforms
 * (elastic), member names that can be consumer names, duplicates. Members refuse to
 * start with a typed error naming the key, describe reports a finding instead of
 * failing, and no membership edit writes over such a config unless it repairs it.
 */
import { after, afterEach, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Kvm } from "@nats-io/kv";
import {
  ConsumerGroupError,
  ELASTIC_BUCKET,
  STATIC_BUCKET,
  addMembers,
  createElastic,
  createStatic,
  deleteMemberMappings,
  deleteMembers,
  deleteStatic,
  describeGroup,
  elasticConsume,
  setMemberMappings,
  staticConsume,
  type ConsumerGroupMember,
  type ErrorCode,
  type MessageHandler,
} from "../../src/index.js";
import { startEnv, uniqueName, waitFor, type TestEnv } from "../helpers/nats.js";
import { createKeyedStream, keys, publishKeyed, recordingHandler, type Handled } from "../helpers/static-fixtures.js";
import { putRawElasticConfig, rawElasticConfig, withTimeout } from "../helpers/elastic-util.js";
import { killAllCg, runCg, runCgJson } from "../helpers/cli-run.js";
import { assertTypedError, thrownBy } from "../helpers/security-state.js";

const noop: MessageHandler = () => undefined;

/** Awaits `p`, asserts it was refused with `code` and a message naming every one of `mentions`, and returns the error. */
async function refusal(p: Promise<unknown>, code: ErrorCode, ...mentions: string[]): Promise<ConsumerGroupError> {
  const err = await thrownBy(() => p);
  assertTypedError(err, code, ...mentions.map((m) => new RegExp(m.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))));
  return err;
}

describe("stored config checks - behaviour", () => {
  let env: TestEnv;
  const running: ConsumerGroupMember[] = [];
  before(async () => {
    env = await startEnv();
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((m) => m.stop()));
  });
  after(async () => {
    await killAllCg();
    await env.close();
  });

  /** A static group on a `partition(4)` stream, its config then replaced by `raw`, as a hand edit would. */
  async function staticGroup(raw: string): Promise<{ stream: string; prefix: string }> {
    const stream = uniqueName("scfg");
    const prefix = await createKeyedStream(env.jsm, stream, 4, stream);
    await createStatic(env.js, { stream, group: "g", maxMembers: 4, members: ["a", "b"] });
    await new Kvm(env.js).open(STATIC_BUCKET).then((kv) => kv.put(`${stream}.g`, raw));
    return { stream, prefix };
  }

  const staticRaw = async (stream: string): Promise<string | undefined> => {
    const entry = await (await new Kvm(env.js).open(STATIC_BUCKET)).get(`${stream}.g`);
    return entry?.operation === "PUT" ? entry.string() : undefined;
  };

  test("stored config checks - a static max_members other than the stream's partition count: members refuse to start, describe reports it", async () => {
    for (const max of [8, 2]) {
      const { stream } = await staticGroup(`{"max_members":${max},"members":["a","b"]}`);
      await refusal(staticConsume(env.js, { stream, group: "g", member: "a", handler: noop }), "PARTITION_COUNT_MISMATCH", `${stream}.g`, `max_members ${max}`, "4 partitions");
      const d = await describeGroup(env.js, "static", stream, "g");
      const finding = d.findings.find((f) => f.code === "CONFIG_MISMATCH");
      assert.ok(finding, `describe reports CONFIG_MISMATCH for max_members ${max}: ${JSON.stringify(d.findings)}`);
      assert.equal(finding.severity, "error");
      assert.match(finding.message, /hashes into 4 partitions/);
      assert.deepEqual((await env.jsm.consumers.list(stream).next()).map((c) => c.name), [], "no consumer was made");
    }
  });

  test("stored config checks - static member names that cannot be consumer names: refused when read, naming the key and the member; describe reports them", async () => {
    for (const bad of ["b.c", "*", "m.x"]) {
      const { stream, prefix } = await staticGroup(JSON.stringify({ max_members: 4, members: ["a", bad] }));
      await refusal(staticConsume(env.js, { stream, group: "g", member: "a", handler: noop }), "INVALID_NAME", `"${stream}.g"`, JSON.stringify(bad));
      await publishKeyed(env.js, prefix, keys(8), 1);
      const d = await describeGroup(env.js, "static", stream, "g");
      const finding = d.findings.find((f) => f.code === "INVALID_CONFIG");
      assert.ok(finding, `describe reports INVALID_CONFIG for ${bad}: ${JSON.stringify(d.findings)}`);
      assert.ok(finding.message.includes(JSON.stringify(bad)), finding.message);
      assert.equal(d.partitions.length, 4, "the rest of the group is still described");
      assert.equal(d.partitions.reduce((n, p) => n + (p.pending ?? 0), 0), 8);
      // deleteStatic still cleans it up.
      await deleteStatic(env.js, stream, "g");
      assert.equal(await staticRaw(stream), undefined);
    }
  });

  test("stored config checks - a name Go accepts and the server takes (m@1) still passes", async () => {
    const { stream, prefix } = await staticGroup(`{"max_members":4,"members":["a","m@1"]}`);
    const handled: Handled[] = [];
    running.push(await staticConsume(env.js, { stream, group: "g", member: "a", handler: recordingHandler("a", handled) }));
    await publishKeyed(env.js, prefix, keys(40), 1);
    const d = await describeGroup(env.js, "static", stream, "g");
    assert.equal(d.findings.filter((f) => f.code === "INVALID_CONFIG").length, 0, JSON.stringify(d.findings));
    await waitFor(() => handled.length >= 1, 10_000, "a to handle its partitions");
  });

  test("stored config checks - static duplicate members: every partition is still consumed (measured), describe reports the duplicate", async () => {
    const { stream, prefix } = await staticGroup(`{"max_members":4,"members":["a","a","b"]}`);
    const handled: Handled[] = [];
    for (const m of ["a", "b"]) running.push(await staticConsume(env.js, { stream, group: "g", member: m, handler: recordingHandler(m, handled) }));
    const sent = await publishKeyed(env.js, prefix, keys(40), 1);
    await waitFor(() => handled.length === sent.length, 15_000, `all ${sent.length} messages handled (have ${handled.length})`);
    assert.deepEqual([...new Set(handled.map((h) => h.partition))].sort(), [0, 1, 2, 3]);
    const d = await describeGroup(env.js, "static", stream, "g");
    const finding = d.findings.find((f) => f.code === "DUPLICATE_MEMBERS");
    assert.ok(finding, JSON.stringify(d.findings));
    assert.equal(finding.severity, "warning");
    assert.match(finding.message, /"a"/);
  });

  /** An elastic group over 4 partitions keyed by the first wildcard of `<stream>.*.*`, with members a and b. */
  async function elasticGroup(): Promise<{ stream: string; base: string }> {
    const stream = uniqueName("ecfg");
    await env.jsm.streams.add({ name: stream, subjects: [`${stream}.>`], storage: "memory" });
    await createElastic(env.js, { stream, group: "g", maxMembers: 4, partitioningFilters: [{ filter: `${stream}.*.*`, partitioning_wildcards: [1] }] });
    await addMembers(env.js, stream, "g", ["a", "b"]);
    return { stream, base: `{"max_members":4,"partitioning_filters":[{"filter":"${stream}.*.*","partitioning_wildcards":[1]}]` };
  }

  test("stored config checks - an elastic member name that cannot be a consumer name: members refuse, addMembers writes nothing, deleteMembers repairs", async () => {
    const { stream, base } = await elasticGroup();
    const invalid = `${base},"members":["a","m.x"]}`;
    await putRawElasticConfig(env.js, stream, "g", invalid);
    await refusal(elasticConsume(env.js, { stream, group: "g", member: "a", handler: noop }), "INVALID_NAME", `"${stream}.g"`, `"m.x"`);
    const err = await refusal(addMembers(env.js, stream, "g", ["c"]), "INVALID_NAME", `"m.x"`, "Nothing was written");
    assert.match(err.message, /deleteMembers/);
    assert.equal((await rawElasticConfig(env.js, stream, "g"))?.text, invalid, "the stored config is untouched");
    // An edit that does not touch the bad member leaves it invalid: refused as well.
    await refusal(deleteMembers(env.js, stream, "g", ["b"]), "INVALID_NAME", "Nothing was written");
    const d = await describeGroup(env.js, "elastic", stream, "g");
    assert.ok(d.findings.some((f) => f.code === "INVALID_CONFIG" && f.message.includes(`"m.x"`)), JSON.stringify(d.findings));
    // Dropping it repairs the config, and members start again.
    assert.deepEqual(await deleteMembers(env.js, stream, "g", ["m.x"]), ["a"]);
    assert.equal((await rawElasticConfig(env.js, stream, "g"))?.text, `${base},"members":["a"]}`);
    running.push(await elasticConsume(env.js, { stream, group: "g", member: "a", handler: noop }));
    // A name that is not a member must still be a valid name.
    await refusal(deleteMembers(env.js, stream, "g", ["n.o"]), "INVALID_NAME");
  });

  test("stored config checks - a running elastic member stops when a hand edit adds a name that cannot be a consumer name", async () => {
    const { stream, base } = await elasticGroup();
    const member = await elasticConsume(env.js, { stream, group: "g", member: "a", handler: noop });
    running.push(member);
    await putRawElasticConfig(env.js, stream, "g", `${base},"members":["a","b","b.c"]}`);
    const closed = await withTimeout(member.closed(), 10_000, "the member to stop");
    assert.ok(closed instanceof ConsumerGroupError, `stopped with a typed error, got ${String(closed)}`);
    assert.equal(closed.code, "INVALID_NAME", closed.message);
    assert.ok(closed.message.includes(`${stream}.g`) && closed.message.includes(`"b.c"`), closed.message);
  });

  for (const edit of [
    { what: "max_members", raw: (stream: string) => `{"max_members":8,"partitioning_filters":[{"filter":"${stream}.*.*","partitioning_wildcards":[1]}],"members":["a","b"]}`, says: "hashes into 4 partitions" },
    { what: "partitioning wildcard", raw: (stream: string) => `{"max_members":4,"partitioning_filters":[{"filter":"${stream}.*.*","partitioning_wildcards":[2]}],"members":["a","b"]}`, says: "[2] but the work queue hashes [1]" },
  ]) {
    test(`stored config checks - an elastic ${edit.what} edited by hand: members refuse, admin edits write nothing and say how to repair, describe reports it`, async () => {
      const { stream, base } = await elasticGroup();
      const edited = edit.raw(stream);
      const revision = await putRawElasticConfig(env.js, stream, "g", edited);
      await refusal(elasticConsume(env.js, { stream, group: "g", member: "a", handler: noop }), "CONFIG_MISMATCH", `"${stream}.g"`, edit.says);
      const err = await refusal(addMembers(env.js, stream, "g", ["c"]), "CONFIG_MISMATCH", "Nothing was written", edit.says);
      // The repair the error gives is the value the work queue was made from.
      assert.ok(err.message.includes(`nats kv put ${ELASTIC_BUCKET} ${stream}.g '${base},"members":["a","b"]}'`), err.message);
      await refusal(deleteMembers(env.js, stream, "g", ["a"]), "CONFIG_MISMATCH", "Nothing was written");
      await refusal(setMemberMappings(env.js, stream, "g", [{ member: "a", partitions: [0, 1, 2, 3] }]), "CONFIG_MISMATCH", "Nothing was written");
      await refusal(deleteMemberMappings(env.js, stream, "g"), "CONFIG_MISMATCH", "Nothing was written");
      const after = await rawElasticConfig(env.js, stream, "g");
      assert.equal(after?.text, edited);
      assert.equal(after?.revision, revision, "nothing was written");
      const d = await describeGroup(env.js, "elastic", stream, "g");
      const finding = d.findings.find((f) => f.code === "CONFIG_MISMATCH");
      assert.ok(finding && finding.message.includes(edit.says), JSON.stringify(d.findings));
      // Putting back what the error said repairs it.
      await putRawElasticConfig(env.js, stream, "g", `${base},"members":["a","b"]}`);
      assert.deepEqual(await addMembers(env.js, stream, "g", ["c"]), ["a", "b", "c"]);
      running.push(await elasticConsume(env.js, { stream, group: "g", member: "a", handler: noop }));
    });
  }

  test("stored config checks - cg describe reports an invalid config as a finding, cg elastic add refuses, cg elastic drop repairs", async () => {
    const { stream, base } = await elasticGroup();
    await putRawElasticConfig(env.js, stream, "g", `${base},"members":["a","m.x"]}`);
    const url = env.server.url;
    const { doc } = await runCgJson<{ findings: { code: string; message: string; explanation: string }[] }>(["-s", url, "elastic", "describe", stream, "g"]);
    const finding = doc.findings.find((f) => f.code === "INVALID_CONFIG");
    assert.ok(finding && finding.message.includes(`"m.x"`) && finding.explanation !== "", JSON.stringify(doc.findings));
    const add = await runCg(["-s", url, "elastic", "add", stream, "g", "c"]);
    assert.equal(add.code, 1, add.stderr);
    assert.match(add.stderr, /Nothing was written/);
    const drop = await runCg(["-s", url, "elastic", "drop", stream, "g", "m.x"]);
    assert.equal(drop.code, 0, drop.stderr);
    assert.equal((await rawElasticConfig(env.js, stream, "g"))?.text, `${base},"members":["a"]}`);
  });
});
