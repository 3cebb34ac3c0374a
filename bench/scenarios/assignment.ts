/**
 * Scenario 9, assignment: how many partitions change owner over a seeded random
 * sequence of joins and leaves (1 to 32 members), with Go's balanced mode (contiguous
 * blocks in name order), with sticky mappings, and at the least any ±1-balanced
 * assignment must move. Pure computation: it needs no server.
 */
import { partitionOwners } from "../../src/core/assignment.js";
import { minimumMoves, movedPartitions, stickyMappings } from "../../src/core/sticky-assignment.js";
import type { MemberMapping } from "../../src/core/types.js";
import { seededRandom } from "../lib/stats.js";
import type { BenchContext, Row } from "../lib/types.js";

const PARTITION_COUNTS = [64, 1024];
const STEPS = 50;
const MAX_MEMBERS = 32;
/** Member names are drawn from this many, so joiners sort anywhere among the others. */
const NAME_POOL = 64;

/** What one sequence moved, per step. */
interface RunMoves {
  go: number[];
  sticky: number[];
  minimum: number[];
  /** The member count after each step. */
  sizes: number[];
}

/** The next membership: one join or leave, sometimes up to four at once, within 1..MAX_MEMBERS. */
function nextMembers(random: () => number, members: readonly string[]): string[] {
  const next = [...members];
  const changes = random() < 0.2 ? 2 + Math.floor(random() * 3) : 1;
  for (let i = 0; i < changes; i++) {
    const join = next.length <= 1 || (next.length < MAX_MEMBERS && random() < 0.5);
    if (join) {
      const outside = Array.from({ length: NAME_POOL }, (_, n) => `member-${n}`).filter((n) => !next.includes(n));
      next.push(outside[Math.floor(random() * outside.length)] ?? "member-extra");
    } else {
      next.splice(Math.floor(random() * next.length), 1);
    }
  }
  return next;
}

/** One seeded sequence of STEPS membership changes over `partitionCount` partitions. */
function runSequence(partitionCount: number, seed: number): RunMoves {
  const random = seededRandom(seed);
  const moves: RunMoves = { go: [], sticky: [], minimum: [], sizes: [] };
  // Start anywhere in 1..MAX_MEMBERS, so the sequence covers small and large groups.
  const names = Array.from({ length: NAME_POOL }, (_, n) => `member-${n}`);
  let members = names.filter(() => random() < 0.5).slice(0, 1 + Math.floor(random() * MAX_MEMBERS));
  if (members.length === 0) members = ["member-0"];
  let goOwners = partitionOwners({ max_members: partitionCount, members });
  let mappings: MemberMapping[] = stickyMappings(partitionCount, [], members);
  for (let step = 0; step < STEPS; step++) {
    members = nextMembers(random, members);
    const before = partitionOwners({ max_members: partitionCount, member_mappings: mappings });
    const nextGo = partitionOwners({ max_members: partitionCount, members });
    mappings = stickyMappings(partitionCount, mappings, members);
    moves.go.push(movedPartitions(goOwners, nextGo));
    moves.sticky.push(movedPartitions(before, partitionOwners({ max_members: partitionCount, member_mappings: mappings })));
    moves.minimum.push(minimumMoves(before, members));
    moves.sizes.push(members.length);
    goOwners = nextGo;
  }
  return moves;
}

const sum = (values: readonly number[]): number => values.reduce((a, b) => a + b, 0);

/** Scenario 9: partitions moved per membership change, Go's balanced mode against sticky mappings. */
export function assignment(ctx: BenchContext): Promise<Row[]> {
  const rows: Row[] = [];
  const runs = Math.max(ctx.runs, 5);
  for (const partitionCount of PARTITION_COUNTS) {
    const all: RunMoves[] = [];
    for (let run = 0; run < runs; run++) {
      const moves = runSequence(partitionCount, 1 + run);
      all.push(moves);
      ctx.log(
        `  assignment ${partitionCount} partitions, run ${run + 1} (seed ${run + 1}, ${STEPS} steps, ${Math.min(...moves.sizes)}..${Math.max(...moves.sizes)} members): moved in total Go balanced ${sum(moves.go)}, sticky ${sum(moves.sticky)}, minimum ${sum(moves.minimum)}`,
      );
    }
    const steps = runs * STEPS;
    const go = all.map((m) => sum(m.go));
    const sticky = all.map((m) => sum(m.sticky));
    const minimum = all.map((m) => sum(m.minimum));
    const worstExcess = Math.max(...all.flatMap((m) => m.sticky.map((s, i) => s - (m.minimum[i] ?? 0))));
    const label = `${partitionCount} partitions, ${runs} runs × ${STEPS} joins/leaves, 1..${MAX_MEMBERS} members`;
    rows.push(
      { scenario: "9 assignment", variant: `${label}: Go balanced, partitions moved per step`, value: sum(go) / steps, unit: "partitions/step", samples: go, note: `totals per run: ${go.join(", ")}` },
      {
        scenario: "9 assignment",
        variant: `${label}: minimum (any ±1-balanced assignment), partitions moved per step`,
        value: sum(minimum) / steps,
        unit: "partitions/step",
        baseline: "Go balanced",
        ratio: sum(minimum) / sum(go),
        samples: minimum,
        note: `totals per run: ${minimum.join(", ")}`,
      },
      {
        scenario: "9 assignment",
        variant: `${label}: sticky, partitions moved per step`,
        value: sum(sticky) / steps,
        unit: "partitions/step",
        baseline: "Go balanced",
        ratio: sum(sticky) / sum(go),
        target: "sticky ≤ minimum + 1 per step",
        met: worstExcess <= 1,
        samples: sticky,
        note: `totals per run: ${sticky.join(", ")}; worst step ${worstExcess} over the minimum`,
      },
    );
  }
  return Promise.resolve(rows);
}
