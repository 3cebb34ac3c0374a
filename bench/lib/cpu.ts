/**
 * CPU time of this process and of the nats-server processes a benchmark started,
 * read from /proc, so a rate can be shown next to what each process spent on it.
 */
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";

/** Clock ticks per second of /proc/<pid>/stat times (100 on Linux unless told otherwise). */
const TICKS_PER_SECOND = ((): number => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** CPU seconds (user + system) a process has used so far; NaN when /proc cannot tell. */
export function processCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name (which may hold spaces) start at field 3 (state); utime and stime are fields 14 and 15.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
  } catch {
    return NaN;
  }
}

/** CPU seconds the whole machine has been busy (every core, every process) so far; NaN when /proc cannot tell. */
export function machineBusySeconds(): number {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n", 1)[0] ?? "";
    // cpu user nice system idle iowait irq softirq steal ...: busy is everything but idle and iowait.
    const ticks = line.trim().split(/\s+/).slice(1).map(Number);
    const total = ticks.slice(0, 8).reduce((a, b) => a + b, 0);
    return (total - (ticks[3] ?? 0) - (ticks[4] ?? 0)) / TICKS_PER_SECOND;
  } catch {
    return NaN;
  }
}

/** A point in time with the CPU seconds used so far by each watched server, by this process and by the machine. */
export interface CpuMark {
  at: number;
  servers: number[];
  self: number;
  machine: number;
}

/** Marks now for the given server pids. */
export function cpuMark(pids: readonly number[]): CpuMark {
  const usage = process.cpuUsage();
  return { at: performance.now(), servers: pids.map(processCpuSeconds), self: (usage.user + usage.system) / 1e6, machine: machineBusySeconds() };
}

/** CPU use between two marks, as a share of one core (1 = one core busy all along). */
export interface CpuShare {
  servers: number[];
  self: number;
  /** The whole machine, other users' processes included (at most the core count). */
  machine: number;
}

/** The CPU share of each watched process between `from` and `to`. */
export function cpuShare(from: CpuMark, to: CpuMark): CpuShare {
  const seconds = (to.at - from.at) / 1000;
  return {
    servers: to.servers.map((s, i) => (s - (from.servers[i] ?? NaN)) / seconds),
    self: (to.self - from.self) / seconds,
    machine: (to.machine - from.machine) / seconds,
  };
}
