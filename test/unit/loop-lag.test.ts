/**
 * When a disconnect is taken for the server cutting a slow consumer (it says nothing
 * before it closes): a blocked or busy event loop, or pulls that could bring at least
 * the server's default max_pending.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { likelySlowConsumerCut, SERVER_DEFAULT_MAX_PENDING, SLOW_CONSUMER_BLOCK_MS, SLOW_CONSUMER_BUSY_SHARE } from "../../src/nats/loop-lag.js";

const MiB = 1024 * 1024;
const cases: { name: string; blockedMs: number; busyShare: number; askedBytes: number; cut: boolean }[] = [
  { name: "an idle loop and small pulls (a network cut)", blockedMs: 0, busyShare: 0.1, askedBytes: 1 * MiB, cut: false },
  { name: "the default byte budget (16 MiB) outstanding on an idle loop", blockedMs: 30, busyShare: 0.5, askedBytes: 16 * MiB, cut: false },
  { name: "a block of the loop", blockedMs: SLOW_CONSUMER_BLOCK_MS, busyShare: 0.1, askedBytes: 0, cut: true },
  { name: "a loop with no idle time", blockedMs: 0, busyShare: SLOW_CONSUMER_BUSY_SHARE, askedBytes: 0, cut: true },
  { name: "pulls for the server's whole max_pending, the loop looking idle (a loaded machine)", blockedMs: 50, busyShare: 0.6, askedBytes: SERVER_DEFAULT_MAX_PENDING, cut: true },
  { name: "pulls just under it", blockedMs: 50, busyShare: 0.6, askedBytes: SERVER_DEFAULT_MAX_PENDING - 1, cut: false },
];
for (const c of cases) {
  test(`loop lag - ${c.name}: ${c.cut ? "a likely slow-consumer cut" : "not one"}`, () => {
    assert.equal(likelySlowConsumerCut({ blockedMs: c.blockedMs, busyShare: c.busyShare }, c.askedBytes), c.cut);
  });
}
