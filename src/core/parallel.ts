/**
 * Bounded parallelism for request fan-outs (one request per partition or member).
 * No NATS import.
 */

/**
 * Runs `work` on every item with at most `limit` calls in flight, and resolves with
 * the results in the order of `items`. The first failure rejects the whole call
 * (calls already started still finish).
 */
export async function mapWithLimit<T, R>(items: readonly T[], limit: number, work: (item: T, index: number) => Promise<R>): Promise<R[]> {
  if (!Number.isInteger(limit) || limit < 1) throw new RangeError(`limit must be a positive integer, got ${limit}`);
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++;
      results[index] = await work(items[index] as T, index);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
