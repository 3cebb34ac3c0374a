/**
 * The pure part of repartitioning (issue 18): which old partitions feed a new one,
 * the transition subjects and filters, the stored record and grown mappings.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  decodeRepartitionRecord,
  encodeRepartitionRecord,
  feedingPartitions,
  growMappings,
  isReplacedCopy,
  partitionsToWaitFor,
  partitionOfStored,
  splitStoredSubject,
  transitionFilters,
  transitionTransforms,
} from "../../src/core/repartition.js";
import { partitionOf } from "../../src/core/partition.js";
import { ConsumerGroupError } from "../../src/core/errors.js";
import { sourceFresh, sourceRunning, sourcedPastStart, storedOrigin } from "../../src/elastic/repartition/source-switch.js";
import type { StreamInfo } from "@nats-io/jetstream";
import { LOCK_STALE_MS, ownerAlive } from "../../src/elastic/repartition/repartition-lock.js";

describe("repartition - pure parts", () => {
  test("feeding partitions - every key's old partition is among its new partition's feeders (checked by hashing 5,000 keys for several N -> M)", () => {
    for (const [from, to] of [
      [4, 12],
      [4, 6],
      [3, 7],
      [6, 9],
      [1, 5],
      [8, 64],
    ] as const) {
      for (let i = 0; i < 5000; i++) {
        const subject = `orders.k${i}`;
        const oldP = partitionOf(subject, from, { filter: "orders.*", wildcards: [1] });
        const newQ = partitionOf(subject, to, { filter: "orders.*", wildcards: [1] });
        assert.ok(feedingPartitions(from, to, newQ).includes(oldP), `${subject}: old ${oldP} of ${from} not among the feeders of new ${newQ} of ${to}`);
      }
    }
  });

  test("feeding partitions - a multiple waits for one old partition, and the old partitions wait for none", () => {
    assert.deepEqual(feedingPartitions(4, 12, 9), [1]);
    for (let q = 0; q < 4; q++) assert.deepEqual(partitionsToWaitFor(4, 12, q), [], `old partition ${q} keeps its keys`);
    for (let q = 4; q < 12; q++) assert.deepEqual(partitionsToWaitFor(4, 12, q), [q % 4]);
    // 4 -> 6: gcd 2, so even partitions are fed by 0 and 2, odd ones by 1 and 3.
    assert.deepEqual(feedingPartitions(4, 6, 3), [1, 3]);
    assert.deepEqual(partitionsToWaitFor(4, 6, 2), [0]);
    assert.deepEqual(partitionsToWaitFor(4, 6, 5), [1, 3]);
    // Coprime counts: every old partition feeds every new one.
    assert.deepEqual(feedingPartitions(3, 7, 6), [0, 1, 2]);
  });

  test("transition transforms - Go's destinations with the transition token in front", () => {
    assert.deepEqual(transitionTransforms(12, [{ filter: "orders.*", partitioning_wildcards: [1] }]), [{ src: "orders.*", dest: "pcg-repartition.{{Partition(12,1)}}.orders.{{Wildcard(1)}}" }]);
    assert.deepEqual(transitionTransforms(6, null), [{ src: ">", dest: "pcg-repartition.{{Partition(6)}}.>" }]);
  });

  test("transition filters - each final filter kept, a twin added only for open partitions", () => {
    const finalFilters = ["4.orders.*", "5.orders.*", "10.orders.*"];
    assert.deepEqual(transitionFilters(finalFilters, (q) => q !== 5), ["4.orders.*", "5.orders.*", "10.orders.*", "pcg-repartition.4.orders.*", "pcg-repartition.10.orders.*"]);
    assert.deepEqual(transitionFilters(["0.>"], () => false), ["0.>"]);
  });

  test("stored subjects - the partition and the subject, in both layouts", () => {
    assert.deepEqual(splitStoredSubject("7.orders.eu"), { partition: 7, subject: "orders.eu" });
    assert.deepEqual(splitStoredSubject("pcg-repartition.11.orders.eu"), { partition: 11, subject: "orders.eu" });
    assert.ok(Number.isNaN(splitStoredSubject("orders.eu").partition));
    assert.deepEqual(splitStoredSubject("3"), { partition: 3, subject: "3" });
  });

  test("stored subject - partitionOfStored (read per message) agrees with splitStoredSubject on every shape", () => {
    const subjects = ["7.orders.eu", "pcg-repartition.11.orders.eu", "orders.eu", "3", "0.x", "007.x", "4096", "12a.x", "a12.x", ".x", "", "pcg-repartition.", "pcg-repartition.x.y", "-1.x", "1e3.x", " 1.x", "99999999999999999999.x"];
    for (const subject of subjects) {
      const expected = splitStoredSubject(subject).partition;
      const got = partitionOfStored(subject);
      assert.ok(Object.is(got, expected), `"${subject}": ${got}, expected ${expected}`);
    }
  });

  test("record - round trip, and a record this version does not understand is a typed error", () => {
    const record = { from: 4, to: 12, phase: "moving" as const, started: "2026-11-30T12:00:00.000Z" };
    assert.deepEqual(decodeRepartitionRecord(encodeRepartitionRecord(record)), record);
    const switched = { ...record, switchedAfter: 50, switchedAfterOrigin: 60 };
    assert.deepEqual(decodeRepartitionRecord(encodeRepartitionRecord(switched)), switched);
    assert.deepEqual(decodeRepartitionRecord('{"from":4,"to":12,"phase":"moving","started":"x","switchedAfter":-1,"switchedAfterOrigin":"7"}'), { from: 4, to: 12, phase: "moving", started: "x" }, "bad anchors are ignored");
    for (const bad of ["{", "null", '{"from":4,"to":12,"phase":"paused","started":"x"}', '{"from":0,"to":12,"phase":"moving","started":"x"}', '{"from":4,"to":12.5,"phase":"moving","started":"x"}']) {
      assert.throws(
        () => decodeRepartitionRecord(bad),
        (err: unknown) => err instanceof ConsumerGroupError && err.code === "CONFIG_DECODE",
        bad,
      );
    }
  });

  test("grown mappings - nothing moves, new partitions go to the least loaded, balanced within one", () => {
    const grown = growMappings(
      [
        { member: "a", partitions: [0, 1] },
        { member: "b", partitions: [2] },
        { member: "c", partitions: [3] },
      ],
      4,
      9,
    );
    assert.deepEqual(grown, [
      { member: "a", partitions: [0, 1, 6] },
      { member: "b", partitions: [2, 4, 7] },
      { member: "c", partitions: [3, 5, 8] },
    ]);
    assert.deepEqual(growMappings([], 4, 8), []);
  });

  test("source running - only once the server has heard from the configured source's consumer (a switch's start position is read when it is made)", () => {
    const configured = [{ src: "orders.*", dest: "pcg-repartition.{{Partition(8,1)}}.orders.{{Wildcard(1)}}" }];
    const info = (running: { active: number; subject_transforms?: { src: string; dest: string }[] } | undefined): StreamInfo =>
      ({ config: { sources: [{ name: "orders", subject_transforms: configured, opt_start_seq: 41 }] }, sources: running ? [{ name: "orders", lag: 0, ...running }] : [] }) as unknown as StreamInfo;
    assert.equal(sourceRunning(info({ active: 1_000, subject_transforms: configured })), true);
    assert.equal(sourceRunning(info({ active: 0, subject_transforms: configured })), true, "heard from just now");
    assert.equal(sourceRunning(info({ active: -1, subject_transforms: configured })), false, "its consumer is not made yet");
    assert.equal(sourceRunning(info(undefined)), false, "no source reported");
    assert.equal(sourceRunning(info({ active: 5, subject_transforms: [{ src: "orders.*", dest: "{{Partition(4,1)}}.orders.{{Wildcard(1)}}" }] })), false, "the server still reports the previous transforms");
    assert.equal(sourceRunning(info({ active: 5, subject_transforms: [...configured, ...configured] })), false);
  });

  test("source state - the origin sequence stored (nats-server >= 2.15), past the start position, heard from lately", () => {
    const transforms = [{ src: "orders.*", dest: "{{Partition(8,1)}}.orders.{{Wildcard(1)}}" }];
    const info = (source: Record<string, unknown> | undefined, start?: number): StreamInfo =>
      ({ config: { sources: [{ name: "orders", subject_transforms: transforms, ...(start ? { opt_start_seq: start } : {}) }] }, sources: source ? [{ name: "orders", lag: 0, subject_transforms: transforms, ...source }] : [] }) as unknown as StreamInfo;
    assert.equal(storedOrigin(info({ active: 1, seq: 300 })), 300);
    assert.equal(storedOrigin(info({ active: 1 })), undefined, "older servers do not report it");
    assert.equal(storedOrigin(info({ active: 1, seq: 0 })), undefined, "nothing stored yet");
    assert.equal(storedOrigin(info(undefined)), undefined);
    assert.equal(sourcedPastStart(info({ active: 1, seq: 41 }, 41)), true, "the first message at the start position is stored");
    assert.equal(sourcedPastStart(info({ active: 1, seq: 40 }, 41)), false, "only what the old source stored");
    assert.equal(sourcedPastStart(info({ active: 1 }, 41)), false, "unknown: kept");
    assert.equal(sourcedPastStart(info({ active: 1, seq: 90 })), false, "no start position to drop");
    assert.equal(sourceFresh(info({ active: 900_000_000 })), true);
    assert.equal(sourceFresh(info({ active: 9_000_000_000 })), false, "a source not heard from for 9 s may be stalled");
    assert.equal(sourceFresh(info({ active: -1 })), false);
  });

  test("replaced copies - only the switch's old source's messages from later in the origin than its anchor, known from the message's own header", () => {
    const filters = [{ filter: "orders.*", partitioning_wildcards: [1] }];
    const header = (seq: number, dest: string): string => `orders ${seq} orders.* ${dest} orders.k1`;
    const goFour = "{{Partition(4,1)}}.orders.{{Wildcard(1)}}";
    const transition = "pcg-repartition.{{Partition(8,1)}}.orders.{{Wildcard(1)}}";
    const goEight = "{{Partition(8,1)}}.orders.{{Wildcard(1)}}";
    const cut = { from: 4, to: 8, phase: "moving" as const, started: "x", switchedAfter: 50, switchedAfterOrigin: 60 };
    const finish = { ...cut, phase: "finishing" as const, switchedAfter: 500, switchedAfterOrigin: 700 };
    assert.equal(isReplacedCopy(cut, header(61, goFour), filters), true, "the cut's old source, after its anchor");
    assert.equal(isReplacedCopy(cut, header(60, goFour), filters), false, "the anchor itself was stored before the switch");
    assert.equal(isReplacedCopy(cut, header(61, transition), filters), false, "the new source's");
    assert.equal(isReplacedCopy(cut, header(900, goEight), filters), false, "a member still reading the cut's record never drops the final layout's messages");
    assert.equal(isReplacedCopy(finish, header(701, transition), filters), true, "the finish's old source, after its anchor");
    assert.equal(isReplacedCopy(finish, header(650, transition), filters), false);
    assert.equal(isReplacedCopy(finish, header(701, goEight), filters), false);
    assert.equal(isReplacedCopy(finish, header(701, goFour), filters), false);
    assert.equal(isReplacedCopy(undefined, header(61, goFour), filters), false, "no repartition");
    const { switchedAfterOrigin: _dropped, ...withoutOrigin } = cut;
    assert.equal(isReplacedCopy(withoutOrigin, header(61, goFour), filters), false, "a record from before the anchor's origin was kept");
    assert.equal(isReplacedCopy(cut, undefined, filters), false);
    assert.equal(isReplacedCopy(cut, "orders 61", filters), false, "an old header format");
    const wholeSubject = { ...cut };
    assert.equal(isReplacedCopy(wholeSubject, "orders 61 > {{Partition(4)}}.> orders.k1", null), true, "whole-subject partitioning");
  });

  test("lock - an owner is alive while its heartbeat is younger than LOCK_STALE_MS; a lock without owner (a run that stopped, or an older version's) has none", () => {
    const now = Date.parse("2026-11-30T12:00:10.000Z");
    const lock = { from: 4, to: 8, started: "2026-11-30T12:00:00.000Z" };
    assert.equal(ownerAlive({ ...lock, owner: "a", heartbeat: new Date(now - 1000).toISOString() }, now), true);
    assert.equal(ownerAlive({ ...lock, owner: "a", heartbeat: new Date(now - LOCK_STALE_MS + 1).toISOString() }, now), true);
    assert.equal(ownerAlive({ ...lock, owner: "a", heartbeat: new Date(now - LOCK_STALE_MS).toISOString() }, now), false, "stale: its run died or froze");
    assert.equal(ownerAlive(lock, now), false, "ownerless");
    assert.equal(ownerAlive({ ...lock, heartbeat: new Date(now).toISOString() }, now), false, "a heartbeat without owner");
    assert.equal(ownerAlive({ ...lock, owner: "a", heartbeat: "yesterday" }, now), false, "unreadable");
  });
});
