/**
 * What the next pull may ask for (src/nats/pull-room.ts): room in messages and in
 * bytes, and a byte limit only on a pull that could otherwise take the window past
 * the byte budget (each pull with a limit costs a `409 Batch Completed` message).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_MAX_PAYLOAD, DELIVERY_OVERHEAD_BYTES, largestPossibleDelivery, pullRoom, slotShare, type PullRoom, type PullRoomInput } from "../../src/nats/pull-room.js";

const MiB = 1024 * 1024;
const worst = largestPossibleDelivery(undefined);
const base: PullRoomInput = { messageCap: 100, byteBudget: 16 * MiB, largestHeld: 128, largestPossible: worst, held: 0, outstanding: 75 };
const share = slotShare(16 * MiB, 100);

const cases: { name: string; input: Partial<PullRoomInput>; want: PullRoom }[] = [
  { name: "small messages, the default budget: a 1 MiB message could still come, so the pull carries its slots' shares of the budget", input: {}, want: { batch: 25, maxBytes: 25 * share } },
  { name: "before the first delivery (nothing held): the same shares", input: { largestHeld: 0 }, want: { batch: 25, maxBytes: 25 * share } },
  { name: "the first pull of an empty window: the whole budget, in shares", input: { outstanding: 0 }, want: { batch: 100, maxBytes: 100 * share } },
  { name: "a budget that holds the whole window of the largest possible deliveries: no byte limit", input: { byteBudget: 100 * worst }, want: { batch: 25 } },
  { name: "one byte short of that: the limit is back", input: { byteBudget: 100 * worst - 1 }, want: { batch: 25, maxBytes: 25 * slotShare(100 * worst - 1, 100) } },
  { name: "a server with a small max_payload (64 KiB) and a window of 100 under 16 MiB: no byte limit", input: { largestPossible: largestPossibleDelivery(64 * 1024) }, want: { batch: 25 } },
  { name: "large messages held: the batch shrinks to the shares left", input: { largestHeld: MiB, held: 10, outstanding: 0 }, want: { batch: 37, maxBytes: 37 * share } },
  { name: "the byte room taken by what is held: no pull", input: { largestHeld: MiB, held: 16, outstanding: 0 }, want: { batch: 0 } },
  { name: "the message cap reached: no pull", input: { held: 25 }, want: { batch: 0 } },
  { name: "a budget smaller than the message cap: one byte per slot", input: { byteBudget: 50, outstanding: 0, largestHeld: 0 }, want: { batch: 50, maxBytes: 50 } },
];
for (const c of cases) {
  test(`pull room - ${c.name}`, () => {
    assert.deepEqual(pullRoom({ ...base, ...c.input }), c.want);
  });
}

/**
 * nats.js's schedule: a first pull of the whole window, then a pull of what is missing
 * each time at most three quarters of the window are outstanding; the server fills the
 * pulls in order, and a pull's byte limit stays reserved until it ends. `sizes` gives
 * each delivery's size; the handler is synchronous (nothing stays held).
 */
function reservedAtMost(messageCap: number, byteBudget: number, sizes: (i: number) => number, deliveries: number): number {
  const live: { left: number; bytes: number }[] = [];
  let most = 0;
  const pull = (): void => {
    const outstanding = live.reduce((n, p) => n + p.left, 0);
    const room = pullRoom({ messageCap, byteBudget, largestHeld: 0, largestPossible: worst, held: 0, outstanding });
    if (room.batch > 0) live.push({ left: room.batch, bytes: room.maxBytes ?? room.batch * worst });
    most = Math.max(most, live.reduce((n, p) => n + p.bytes, 0));
  };
  pull();
  for (let i = 0; i < deliveries && live.length > 0; i++) {
    const first = live[0];
    if (!first) break;
    const size = sizes(i);
    if (size > first.bytes) {
      live.shift(); // 409 Message Size Exceeds MaxBytes: the pull ends, the message waits for the next
      i -= 1;
    } else {
      first.bytes -= size;
      first.left -= 1;
      if (first.left === 0) live.shift(); // 409 Batch Completed
    }
    if (live.reduce((n, p) => n + p.left, 0) <= 0.75 * messageCap) pull();
    if (live.length === 0) pull();
  }
  return most;
}

test("pull room - the byte limits of the pulls live at once stay within twice the budget, however small the messages (2,800 of 64 B then 1 MB ones)", () => {
  for (const cap of [100, 200, 256]) {
    const most = reservedAtMost(cap, 16 * MiB, (i) => (i < 2800 ? 64 : 1_000_000), 5000);
    assert.ok(most <= 2 * 16 * MiB, `window ${cap}: ${most} bytes reserved at once`);
    assert.ok(most < 64 * MiB, "under the server's default max_pending");
  }
});

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
