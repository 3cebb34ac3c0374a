/** The benchmarks' order checker and pause finder (bench/lib/order.ts), and the server-log reading of the holds scenario. */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { checkOrder, longestPause, type Start } from "../../bench/lib/order.js";
import { slowConsumerCuts } from "../../bench/scenarios/holds.js";

const start = (key: string, seq: number, at: number, who = "A", dc = 1): Start => ({ who, key, seq, dc, at });

describe("bench order checker", () => {
  test("bench order - in-order first handling with a redelivery of an earlier message is in order", () => {
    const report = checkOrder([start("k", 1, 1), start("k", 2, 2), start("k", 1, 3, "B", 2), start("k", 3, 4)], new Map([["k", 3]]));
    assert.deepEqual(report.outOfOrder, []);
    assert.deepEqual(report.lost, []);
    assert.equal(report.unique, 3);
    assert.equal(report.starts, 4);
  });

  test("bench order - a message first handled after a later one of its key is out of order, whichever instance ran it", () => {
    const report = checkOrder([start("k", 1, 1), start("k", 3, 2, "B"), start("k", 2, 3), start("j", 1, 2.5)], new Map([["k", 3], ["j", 1]]));
    assert.deepEqual(report.outOfOrder, ["k/2"]);
  });

  test("bench order - starts are ordered by time, not by when they were reported", () => {
    const report = checkOrder([start("k", 2, 2, "B"), start("k", 1, 1)], new Map([["k", 2]]));
    assert.deepEqual(report.outOfOrder, []);
  });

  test("bench order - a published message never started is lost", () => {
    const report = checkOrder([start("k", 1, 1), start("k", 3, 2)], new Map([["k", 3], ["j", 1]]));
    assert.deepEqual(report.lost, ["k/2", "j/1"]);
  });

  test("bench order - the longest pause counts from the fault and ends at the next start", () => {
    const starts = [start("k", 1, 0), start("k", 2, 10), start("k", 3, 200), start("k", 4, 210), start("k", 5, 900)];
    assert.deepEqual(longestPause(starts, 50, 1000), { ms: 690, resumedAt: 900 });
    assert.deepEqual(longestPause(starts, 5, 100), { ms: 190, resumedAt: 200 });
    assert.equal(longestPause(starts, 1000, 2000), undefined);
  });

  test("bench order - the server's slow-consumer lines are read with their microsecond local times", () => {
    const log = [
      "[1] 2026/12/02 07:04:43.616714 [INF] Starting nats-server",
      '[1] 2026/12/02 07:04:45.000250 [INF] 127.0.0.1:5000 - cid:7 - "v3.4.0:node" - Slow Consumer Detected: MaxPending of 67108864 Exceeded',
    ].join("\n");
    assert.deepEqual(slowConsumerCuts(log), [new Date(2026, 11, 2, 7, 4, 45).getTime() + 0.25]);
  });
});
