/**
 * The checks of a stored config against the server state, pure: a static group's
 * partition count against its stream's partition transform, an elastic group's
 * partition count and partitioning filters against its work-queue stream's source
 * transforms, and the value a mismatch is repaired with.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { elasticLayoutProblem, staticLayoutProblem, type SubjectTransform } from "../../src/core/layout-checks.js";
import { sourceTransforms } from "../../src/core/names.js";
import type { ElasticConsumerGroupConfig, PartitioningFilter } from "../../src/core/types.js";

describe("layout checks - static partition count against the stream's transform", () => {
  const cases: { name: string; max: number; dest: string | undefined; code?: string; says?: RegExp }[] = [
    { name: "same count", max: 4, dest: "{{partition(4,1)}}.orders.{{wildcard(1)}}" },
    { name: "Go's capitalisation and spaces", max: 4, dest: "{{ Partition(4, 1) }}.orders.{{wildcard(1)}}" },
    { name: "no transform: cannot be compared", max: 8, dest: undefined },
    { name: "a transform without partition(): cannot be compared", max: 8, dest: "orders.{{wildcard(1)}}" },
    { name: "more partitions in the config", max: 8, dest: "{{partition(4,1)}}.orders.{{wildcard(1)}}", code: "PARTITION_COUNT_MISMATCH", says: /max_members 8 .* 4 partitions: partitions 4 to 7 never get a message/ },
    { name: "fewer partitions in the config", max: 2, dest: "{{partition(4,1)}}.orders.{{wildcard(1)}}", code: "PARTITION_COUNT_MISMATCH", says: /partitions 2 to 3 are never consumed/ },
  ];
  for (const c of cases) {
    test(`layout checks - static: ${c.name}`, () => {
      const problem = staticLayoutProblem({ max_members: c.max, members: ["a"] }, c.dest);
      assert.equal(problem?.code, c.code);
      if (c.says) assert.match(problem?.message ?? "", c.says);
    });
  }
});

describe("layout checks - elastic config against the work queue's source transforms", () => {
  const f = (filter: string, w: number[] | null): PartitioningFilter => ({ filter, partitioning_wildcards: w });
  const config = (max: number, filters: PartitioningFilter[] | null): ElasticConsumerGroupConfig => ({ max_members: max, partitioning_filters: filters, members: ["a", "b"] });
  const made = (c: ElasticConsumerGroupConfig): SubjectTransform[] => sourceTransforms(c.max_members, c.partitioning_filters);
  const cases: { name: string; stored: ElasticConsumerGroupConfig; actual: SubjectTransform[]; repartitioning?: boolean; says?: RegExp; repaired?: ElasticConsumerGroupConfig | null }[] = [
    { name: "as created", stored: config(4, [f("ev.*.*", [1])]), actual: made(config(4, [f("ev.*.*", [1])])) },
    { name: "whole subject, null filters", stored: config(4, null), actual: [{ src: ">", dest: "{{Partition(4)}}.>" }] },
    { name: "whole subject, [] filters", stored: config(4, []), actual: [{ src: ">", dest: "{{Partition(4)}}.>" }] },
    { name: "another port's spelling of the same transform", stored: config(4, [f("ev.*.*", [1])]), actual: [{ src: "ev.*.*", dest: "{{partition(4, 1)}}.ev.{{ wildcard(1) }}.{{Wildcard(2)}}" }] },
    {
      name: "max_members edited",
      stored: config(8, [f("ev.*.*", [1])]),
      actual: made(config(4, [f("ev.*.*", [1])])),
      says: /max_members 8 but the work queue hashes into 4 partitions/,
      repaired: config(4, [f("ev.*.*", [1])]),
    },
    {
      name: "partitioning wildcard edited",
      stored: config(4, [f("ev.*.*", [2])]),
      actual: made(config(4, [f("ev.*.*", [1])])),
      says: /the partitioning wildcards of "ev.\*.\*" are \[2\] but the work queue hashes \[1\]/,
      repaired: config(4, [f("ev.*.*", [1])]),
    },
    {
      name: "filter edited",
      stored: config(4, [f("ev.x.*", [1])]),
      actual: made(config(4, [f("ev.*.*", [1])])),
      says: /partitioning filter 1 is "ev.x.\*" but the work queue's is "ev.\*.\*"/,
      repaired: config(4, [f("ev.*.*", [1])]),
    },
    {
      name: "a filter added",
      stored: config(4, [f("ev.*.*", [1]), f("other.*", [1])]),
      actual: made(config(4, [f("ev.*.*", [1])])),
      says: /partitioning filter 2 is "other.\*" but the work queue's is absent/,
      repaired: config(4, [f("ev.*.*", [1])]),
    },
    { name: "filters given to a whole-subject group", stored: config(4, [f("ev.*", [1])]), actual: [{ src: ">", dest: "{{Partition(4)}}.>" }], says: /absent/, repaired: config(4, null) },
    { name: "max_members edited during a repartition: not compared", stored: config(8, [f("ev.*.*", [1])]), actual: made(config(4, [f("ev.*.*", [1])])), repartitioning: true },
    { name: "no source transforms at all", stored: config(4, null), actual: [], says: /\(none\)/, repaired: null },
    { name: "transforms of two counts: no repair to offer", stored: config(4, [f("a.*", [1]), f("b.*", [1])]), actual: [{ src: "a.*", dest: "{{Partition(4,1)}}.a.{{Wildcard(1)}}" }, { src: "b.*", dest: "{{Partition(8,1)}}.b.{{Wildcard(1)}}" }], says: /differ/, repaired: null },
  ];
  for (const c of cases) {
    test(`layout checks - elastic: ${c.name}`, () => {
      const problem = elasticLayoutProblem(c.stored, c.actual, c.repartitioning ?? false);
      if (!c.says) {
        assert.equal(problem, undefined, problem?.message);
        return;
      }
      assert.equal(problem?.code, "CONFIG_MISMATCH");
      assert.match(problem?.message ?? "", c.says);
      if (c.repaired !== undefined) assert.deepEqual(problem?.repaired, c.repaired ?? undefined);
      // A repair given gives back exactly these transforms.
      if (problem?.repaired) assert.equal(elasticLayoutProblem(problem.repaired, c.actual, false), undefined);
    });
  }
});
