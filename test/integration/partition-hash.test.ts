/**
 * The pure partition hash against the real server's `{{partition(N, …)}}` transform:
 * thousands of random subjects, multi-byte UTF-8 included, N from 1 to 64.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { partitionOf } from "../../src/index.js";
import { startEnv, uniqueName, type TestEnv } from "../helpers/nats.js";

const ALPHABET = ["a", "b", "z", "0", "9", "_", "-", "é", "ü", "ß", "日本", "中", "😀", "🚀", "Ω", "ñ", "€", "x"];

function randomToken(rand: () => number): string {
  const len = 1 + Math.floor(rand() * 6);
  let s = "";
  for (let i = 0; i < len; i++) s += ALPHABET[Math.floor(rand() * ALPHABET.length)];
  return s;
}

/** A small deterministic PRNG so a failure can be reproduced. */
function mulberry32(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Mode {
  label: string;
  /** Builds the stream's transform for N, and a random subject with what partitionOf needs. */
  src: string;
  dest: (n: number) => string;
  subject: (rand: () => number, prefix: string) => string;
  options?: { filter: string; wildcards: number[] };
}

describe("partition hash - matches the server's subject transform", () => {
  let env: TestEnv;
  before(async () => {
    env = await startEnv();
  });
  after(async () => {
    await env.close();
  });

  const modes: Mode[] = [
    {
      label: "one wildcard",
      src: "one.*.*",
      dest: (n) => `{{partition(${n},1)}}.one.{{wildcard(1)}}.{{wildcard(2)}}`,
      subject: (r) => `one.${randomToken(r)}.${randomToken(r)}`,
      options: { filter: "one.*.*", wildcards: [1] },
    },
    {
      label: "several wildcards, out of order",
      src: "multi.*.*.*",
      dest: (n) => `{{partition(${n},3,1)}}.multi.{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}`,
      subject: (r) => `multi.${randomToken(r)}.${randomToken(r)}.${randomToken(r)}`,
      options: { filter: "multi.*.*.*", wildcards: [3, 1] },
    },
    {
      label: "whole subject",
      src: "whole.>",
      dest: (n) => `{{partition(${n})}}.whole.>`,
      subject: (r) => `whole.${randomToken(r)}${r() < 0.5 ? `.${randomToken(r)}` : ""}`,
    },
  ];

  let verified = 0;
  after(() => {
    console.log(`partition-hash: ${verified} subjects verified against nats-server ${env.server.version}`);
  });

  for (const mode of modes) {
    test(`partition hash - ${mode.label}, N = 1..64`, async () => {
      const rand = mulberry32(mode.label.length * 7919);
      for (let n = 1; n <= 64; n++) {
        const stream = uniqueName("hash");
        await env.jsm.streams.add({
          name: stream,
          subjects: [mode.src],
          storage: "memory",
          subject_transform: { src: mode.src, dest: mode.dest(n) },
        });
        const subjects = Array.from({ length: 55 }, () => mode.subject(rand, stream));
        await Promise.all(subjects.map((s) => env.js.publish(s)));
        const consumer = await env.js.consumers.get(stream);
        const messages = await consumer.fetch({ max_messages: subjects.length, expires: 5000 });
        let i = 0;
        for await (const m of messages) {
          const original = subjects[m.seq - 1] ?? "";
          const serverPartition = Number(m.subject.split(".")[0]);
          const ours = partitionOf(original, n, mode.options ?? {});
          assert.equal(ours, serverPartition, `N=${n} subject ${original}: server put it in ${serverPartition}, partitionOf said ${ours}`);
          verified += 1;
          if (++i === subjects.length) break;
        }
        assert.equal(i, subjects.length, `N=${n}: read back ${i} of ${subjects.length} messages`);
        await env.jsm.streams.delete(stream);
      }
    });
  }
});
