/**
 * What the next pull may ask for (src/nats/pull-room.ts): room in messages and in
 * bytes, and a byte limit only on a pull that could otherwise take the window past
 * the byte budget (each pull with a limit costs a `409 Batch Completed` message).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_MAX_PAYLOAD, DELIVERY_OVERHEAD_BYTES, largestPossibleDelivery, pullRoom, type PullRoom, type PullRoomInput } from "../../src/nats/pull-room.js";

const MiB = 1024 * 1024;
const worst = largestPossibleDelivery(undefined);
const base: PullRoomInput = { messageCap: 100, byteBudget: 16 * MiB, largestSeen: 128, largestPossible: worst, held: 0, outstanding: 75 };

const cases: { name: string; input: Partial<PullRoomInput>; want: PullRoom }[] = [
  { name: "small messages, the default budget: a 1 MiB message could still come, so the pull carries the byte room", input: {}, want: { batch: 25, maxBytes: 16 * MiB - 128 * 75 } },
  { name: "before the first delivery the batch is bounded by messages only, and the bytes by the budget", input: { largestSeen: 0 }, want: { batch: 25, maxBytes: 16 * MiB } },
  { name: "a budget that holds the whole window of the largest possible deliveries: no byte limit", input: { byteBudget: 100 * worst }, want: { batch: 25 } },
  { name: "one byte short of that: the limit is back", input: { byteBudget: 100 * worst - 1 }, want: { batch: 25, maxBytes: 100 * worst - 1 - 128 * 75 } },
  { name: "a server with a small max_payload (64 KiB) and a window of 100 under 16 MiB: no byte limit", input: { largestPossible: largestPossibleDelivery(64 * 1024) }, want: { batch: 25 } },
  { name: "large deliveries seen: the batch shrinks to what the byte room holds", input: { largestSeen: MiB, outstanding: 10 }, want: { batch: 6, maxBytes: 6 * MiB } },
  { name: "the byte room taken by what is held: no pull", input: { largestSeen: MiB, held: 16, outstanding: 0 }, want: { batch: 0 } },
  { name: "the message cap reached: no pull", input: { held: 25 }, want: { batch: 0 } },
];
for (const c of cases) {
  test(`pull room - ${c.name}`, () => {
    assert.deepEqual(pullRoom({ ...base, ...c.input }), c.want);
  });
}

test("pull room - the largest possible delivery is the server's max_payload (1 MiB when it does not say) plus room for subject and headers", () => {
  assert.equal(largestPossibleDelivery(undefined), DEFAULT_MAX_PAYLOAD + DELIVERY_OVERHEAD_BYTES);
  assert.equal(largestPossibleDelivery(0), DEFAULT_MAX_PAYLOAD + DELIVERY_OVERHEAD_BYTES);
  assert.equal(largestPossibleDelivery(8 * MiB), 8 * MiB + DELIVERY_OVERHEAD_BYTES);
});

test("pull room - without a byte limit, the window at the largest possible delivery never passes the budget", () => {
  for (let budget = 1024; budget < 300 * MiB; budget = Math.ceil(budget * 1.7)) {
    for (const outstanding of [0, 10, 50, 99]) {
      const input = { ...base, byteBudget: budget, outstanding };
      const room = pullRoom(input);
      if (room.batch > 0 && room.maxBytes === undefined) assert.ok((outstanding + room.batch) * worst <= budget, `budget ${budget}, outstanding ${outstanding}`);
    }
  }
});
