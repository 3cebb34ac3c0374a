/**
 * Bounded parallelism of request fan-outs (describe): order kept, the limit held,
 * failures passed on, bad limits refused.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mapWithLimit } from "../../src/core/parallel.js";

describe("parallel - mapWithLimit", () => {
  test("parallel - results in the order of the items, never more than the limit in flight", async () => {
    let inFlight = 0;
    let most = 0;
    const items = Array.from({ length: 50 }, (_, i) => i);
    const results = await mapWithLimit(items, 7, async (item, index) => {
      inFlight += 1;
      most = Math.max(most, inFlight);
      await new Promise((resolve) => setTimeout(resolve, (item * 7) % 5));
      inFlight -= 1;
      return `${item}/${index}`;
    });
    assert.deepEqual(results, items.map((i) => `${i}/${i}`));
    assert.equal(most, 7);
  });

  test("parallel - fewer items than the limit, and none", async () => {
    assert.deepEqual(await mapWithLimit([1, 2], 32, (x) => Promise.resolve(x * 2)), [2, 4]);
    assert.deepEqual(await mapWithLimit([], 4, (x: number) => Promise.resolve(x)), []);
  });

  test("parallel - the first failure rejects the call", async () => {
    await assert.rejects(
      mapWithLimit([1, 2, 3], 2, (x) => (x === 2 ? Promise.reject(new Error("boom 2")) : Promise.resolve(x))),
      /boom 2/,
    );
  });

  test("parallel - a limit that is not a positive integer is refused", async () => {
    for (const limit of [0, -1, 1.5, Number.NaN]) await assert.rejects(mapWithLimit([1], limit, (x) => Promise.resolve(x)), RangeError);
  });
});
