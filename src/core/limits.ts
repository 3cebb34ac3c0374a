/**
 * The largest partition count a group may have, and why.
 */
import { ConsumerGroupError } from "./errors.js";
import { quoted } from "./option-checks.js";

/**
 * The largest partition count (`max_members`) a group may have. A member's consumer
 * carries one filter subject per partition it owns, and one member may own them
 * all. Measured on nats-server 2.15.3 (one consumer, pinned, on a work queue):
 * 1,024 filters create in about 70 ms, 4,096 in about 1 s, 16,384 time out, and
 * 65,536 exceed the default max payload.
 */
export const MAX_PARTITIONS = 4096;

/**
 * Checks a partition count.
 *
 * @param what - how the message names it
 * @throws ConsumerGroupError `INVALID_MAX_MEMBERS` when it is not an integer in 1..{@link MAX_PARTITIONS}
 */
export function assertPartitionCount(count: unknown, what = "the max number of members"): asserts count is number {
  if (typeof count !== "number" || !Number.isSafeInteger(count) || count < 1) {
    throw new ConsumerGroupError("INVALID_MAX_MEMBERS", `${what} must be >= 1 (got ${quoted(count)})`);
  }
  if (count > MAX_PARTITIONS) {
    throw new ConsumerGroupError(
      "INVALID_MAX_MEMBERS",
      `${what} must be at most ${MAX_PARTITIONS} (got ${count}): each member's consumer carries one filter per partition it owns, and nats-server takes about a second to create a consumer with ${MAX_PARTITIONS} filters and times out well before 16,384`,
    );
  }
}
