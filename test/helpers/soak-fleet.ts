/**
 * The member instances of the soak test, each a child process running
 * test/helpers/soak-member-child.js: started, killed with SIGKILL (the kill time is
 * recorded), restarted, and stopped cleanly at the end. A child that exits on its own
 * is recorded as an unexpected exit and replaced, so the soak goes on and the test
 * can report it. Every child's log file is tailed by one {@link SoakLogReader}.
 *
 * Given a pool of TCP proxies, each instance connects through one of its own (taken
 * at its start, given back at its exit), so one instance's link can be held half-open
 * ({@link SoakFleet.stall}) or slowed ({@link SoakFleet.slowLink}) while the others' work.
 *
 * A member can be scaled down ({@link SoakFleet.stopMember}: SIGTERM to all its
 * instances at once, as a Deployment scaled down does); its instances are then never
 * restarted.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { Pause } from "./soak-check.js";
import type { TcpProxy } from "./tcp-proxy.js";
import type { SoakChildSettings } from "./soak-member-child.js";
import type { JetStreamClient } from "@nats-io/jetstream";
import { SoakLogReader, type SoakPayload } from "./soak-log.js";

const CHILD = fileURLToPath(new URL("./soak-member-child.js", import.meta.url));

/** A clock shared with the children: ms since the epoch. */
export const now = (): number => performance.timeOrigin + performance.now();

/** One member instance in its own process. */
export interface SoakInstance {
  member: string;
  pid: number;
  child: ChildProcess;
  /** Resolves true once the member consumes, false if the process exited first. */
  ready: Promise<boolean>;
  isReady(): boolean;
  alive(): boolean;
  exited: Promise<void>;
}

/** An exit the fleet did not ask for. */
export interface UnexpectedExit {
  member: string;
  pid: number;
  at: number;
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Starts, kills and stops the soak's member instances. */
export class SoakFleet {
  /** pid → when SIGKILL was sent. */
  readonly kills = new Map<number, number>();
  /** pid → when SIGTERM was sent to scale its member down. */
  readonly stops = new Map<number, number>();
  /** pid → when the process was seen to exit. */
  readonly exits = new Map<number, number>();
  readonly unexpectedExits: UnexpectedExit[] = [];
  /** SIGSTOP pulses, once each has ended (SIGCONT sent). */
  readonly pauses: Pause[] = [];
  /** Slow-link spells, once each has ended: pid, from, to, the delay per chunk. */
  readonly slowLinks: { pid: number; from: number; to: number; delayMs: number }[] = [];
  /** Processes stopped right now. */
  private readonly paused = new Set<number>();
  /** Proxies no instance uses now. */
  private readonly freeProxies: TcpProxy[];
  /** pid → the proxy its connection goes through. */
  private readonly proxyOf = new Map<number, TcpProxy>();
  /** Processes whose link is slowed right now. */
  private readonly slowed = new Set<number>();
  readonly log = new SoakLogReader();
  private readonly instances: SoakInstance[] = [];
  private files = 0;
  private stopping = false;
  /** Members scaled down: their instances are not restarted. */
  private readonly retired = new Set<string>();

  constructor(
    private readonly dir: string,
    private readonly settings: Omit<SoakChildSettings, "member" | "logFile">,
    proxies: readonly TcpProxy[] = [],
  ) {
    this.freeProxies = [...proxies];
  }

  /** Instances whose process is alive and which are consuming. */
  live(): SoakInstance[] {
    return this.instances.filter((i) => i.alive() && i.isReady());
  }

  /** Every instance whose process is alive, ready or not. */
  running(): SoakInstance[] {
    return this.instances.filter((i) => i.alive());
  }

  /** Whether `member` was scaled down. */
  isRetired(member: string): boolean {
    return this.retired.has(member);
  }

  /** Members that were not scaled down and have an instance running, sorted. */
  members(): string[] {
    return [...new Set(this.running().map((i) => i.member))].filter((m) => !this.retired.has(m)).sort();
  }

  /** The member a process ran, or "?". */
  memberOf(pid: number): string {
    return this.instances.find((i) => i.pid === pid)?.member ?? "?";
  }

  /** Starts an instance of `member`. */
  start(member: string): SoakInstance {
    const logFile = join(this.dir, `${member}-${++this.files}.ndjson`);
    this.log.add(logFile);
    // Without a free proxy (more instances than proxies) it connects directly.
    const proxy = this.freeProxies.shift();
    const settings: SoakChildSettings = { ...this.settings, member, logFile, url: proxy?.url ?? this.settings.url };
    const child = spawn(process.execPath, [CHILD, JSON.stringify(settings)], { stdio: ["pipe", "pipe", "inherit"] });
    // Closing stdin is how the child is asked to stop; a dead child's pipe must not throw here.
    child.stdin?.on("error", () => undefined);
    // A spawn that failed never exits: make it look like an exit so nothing waits for it.
    child.once("error", () => void (child.pid === undefined && child.emit("exit", null, null)));
    let ready = false;
    let exited = false;
    let markReady!: (ok: boolean) => void;
    const inst: SoakInstance = {
      member,
      pid: child.pid ?? -1,
      child,
      ready: new Promise((r) => (markReady = r)),
      isReady: () => ready,
      alive: () => !exited,
      exited: new Promise((r) =>
        child.once("exit", (code, signal) => {
          exited = true;
          const at = now();
          if (proxy) {
            this.proxyOf.delete(inst.pid);
            this.freeProxies.push(proxy);
          }
          this.exits.set(inst.pid, at);
          markReady(false);
          const stopped = this.stops.has(inst.pid);
          // A scaled-down instance is expected to exit, with status 0 (it stopped its member cleanly); one
          // stopped before it had loaded (no SIGTERM handler yet) ends by the signal, as a process does.
          const clean = code === 0 || (!ready && signal === "SIGTERM");
          if (!this.stopping && !this.kills.has(inst.pid) && (!stopped || !clean)) {
            this.unexpectedExits.push({ member, pid: inst.pid, at, code, signal });
            if (!stopped && !this.retired.has(member)) this.start(member);
          }
          r();
        }),
      ),
    };
    if (child.stdout) {
      createInterface({ input: child.stdout }).on("line", (line) => {
        if (line.includes('"ready"')) {
          ready = true;
          markReady(true);
        }
      });
    }
    if (proxy) this.proxyOf.set(inst.pid, proxy);
    this.instances.push(inst);
    return inst;
  }

  /** kill -9 of an instance; resolves once it exited. */
  async kill(inst: SoakInstance): Promise<void> {
    if (!inst.alive()) return;
    // The time is read after the signal is sent: read before it, a harness descheduled between
    // the two (24 ms once, two burners beside a fleet) recorded a kill the child then outlived,
    // starting runs "after its death". After kill(2) returns the child runs no more user code.
    inst.child.kill("SIGKILL");
    this.kills.set(inst.pid, now());
    await inst.exited;
  }

  /**
   * Scales `member` down: SIGTERM to every instance of it at once (each stops its member
   * cleanly: drains, and the last one takes the member out of the group). Resolves once
   * they all exited, with how long that took; an instance still there after `timeoutMs`
   * gets kill -9 (recorded as a kill) and `forced` says so.
   */
  async stopMember(member: string, timeoutMs = 30_000): Promise<{ member: string; pids: number[]; ms: number; forced: boolean }> {
    this.retired.add(member);
    const targets = this.running().filter((i) => i.member === member);
    const from = now();
    for (const i of targets) this.stops.set(i.pid, from);
    for (const i of targets) i.child.kill("SIGTERM");
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)));
    await Promise.race([Promise.all(targets.map((i) => i.exited)), timedOut]);
    clearTimeout(timer);
    const stuck = targets.filter((i) => i.alive());
    for (const i of stuck) await this.kill(i);
    return { member, pids: targets.map((i) => i.pid), ms: now() - from, forced: stuck.length > 0 };
  }

  /**
   * Stops an instance with SIGSTOP for `ms`, then SIGCONT (a starved or suspended
   * process); resolves after the SIGCONT. A kill meanwhile ends the pulse.
   */
  async pause(inst: SoakInstance, ms: number): Promise<void> {
    if (!inst.alive() || this.paused.has(inst.pid)) return;
    this.paused.add(inst.pid);
    // Read after SIGSTOP is sent and before SIGCONT is, so the recorded pause lies inside the real one (see kill()).
    inst.child.kill("SIGSTOP");
    const from = now();
    await Promise.race([new Promise((r) => setTimeout(r, ms)), inst.exited]);
    this.paused.delete(inst.pid);
    const to = now();
    if (inst.alive()) inst.child.kill("SIGCONT");
    this.pauses.push({ pid: inst.pid, from, to });
  }

  /** Whether the instance's link can be held or slowed (it goes through a proxy, and none of that is under way). */
  canDisturbLink(inst: SoakInstance): boolean {
    const proxy = this.proxyOf.get(inst.pid);
    return inst.alive() && proxy !== undefined && !proxy.holding && !this.slowed.has(inst.pid);
  }

  /**
   * Holds the instance's link half-open for `ms` (bytes neither delivered nor dropped),
   * then releases it; recorded in {@link SoakFleet.pauses} as a `stall`, under which a
   * run may start for up to `proofWindowMs` after it began: the instance's last proof
   * of its pin came no later than that.
   */
  async stall(inst: SoakInstance, ms: number, proofWindowMs: number): Promise<void> {
    const proxy = this.proxyOf.get(inst.pid);
    if (!proxy || !this.canDisturbLink(inst)) return;
    const from = now();
    await proxy.hold(ms);
    this.pauses.push({ pid: inst.pid, from, to: now(), kind: "stall", startsExcusedUntil: from + proofWindowMs });
  }

  /** Adds `delayMs` to every chunk of the instance's link, each way, for `ms`. */
  async slowLink(inst: SoakInstance, delayMs: number, ms: number): Promise<void> {
    const proxy = this.proxyOf.get(inst.pid);
    if (!proxy || !this.canDisturbLink(inst)) return;
    const from = now();
    this.slowed.add(inst.pid);
    proxy.setDelay(delayMs);
    await Promise.race([new Promise((r) => setTimeout(r, ms)), inst.exited]);
    proxy.setDelay(0);
    this.slowed.delete(inst.pid);
    this.slowLinks.push({ pid: inst.pid, from, to: now(), delayMs });
  }

  /**
   * Stops every instance cleanly (stdin closed: the child stops its member and exits),
   * kill -9 for any still there after `timeoutMs`. Idempotent.
   */
  async stopAll(timeoutMs = 20_000): Promise<void> {
    this.stopping = true;
    for (const pid of this.paused) this.running().find((i) => i.pid === pid)?.child.kill("SIGCONT");
    const running = this.running();
    for (const i of running) i.child.stdin?.end();
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)));
    await Promise.race([Promise.all(running.map((i) => i.exited)), timedOut]);
    clearTimeout(timer);
    for (const i of this.running()) i.child.kill("SIGKILL");
    await Promise.all(this.instances.map((i) => i.exited));
  }
}

/**
 * Publishes `workload` at `rate` messages per second from `startAt`, in order, each
 * message once (a retried publish keeps its msg id), to `<stream>.<key>`; `published`
 * grows as they are stored. Stops early once `running()` is false.
 */
export async function publishSoakWorkload(
  js: JetStreamClient,
  stream: string,
  workload: readonly SoakPayload[],
  rate: number,
  startAt: number,
  published: SoakPayload[],
  running: () => boolean,
): Promise<void> {
  for (const [i, p] of workload.entries()) {
    if (!running()) break;
    const due = startAt + (i * 1000) / rate;
    if (due > now()) await new Promise((r) => setTimeout(r, due - now()));
    for (let attempt = 0; ; attempt++) {
      try {
        await js.publish(`${stream}.${p.key}`, JSON.stringify(p), { msgID: `${stream}-${p.key}-${p.seq}`, timeout: 5000 });
        break;
      } catch (err) {
        if (attempt >= 20) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    published.push(p);
  }
}

/**
 * What was done to the processes a failed run's report names (kills, SIGSTOP pulses,
 * link stalls, slow links and scale-down SIGTERMs), their connections' events, their ownership and pin events and the errors they reported, in time order: the
 * timeline a reader needs to tell a fault's documented effect from a broken promise.
 */
export function disturbances(f: SoakFleet, kills: { member: string; pid: number; at: number }[], report: string): string {
  const named = new Set([...report.matchAll(/pid (\d+)/g)].map((m) => Number(m[1])));
  const at = (t: number): string => new Date(t).toISOString().slice(11, 23);
  const lines: { t: number; text: string }[] = [
    ...kills.filter((k) => named.has(k.pid)).map((k) => ({ t: k.at, text: `kill -9 of ${k.member} (pid ${k.pid})` })),
    ...f.pauses.filter((p) => named.has(p.pid)).map((p) => ({ t: p.from, text: `${p.kind ?? "sigstop"} of pid ${p.pid} until ${at(p.to)}` })),
    ...[...f.stops].filter(([pid]) => named.has(pid)).map(([pid, t]) => ({ t, text: `SIGTERM (scale-down) of ${f.memberOf(pid)} (pid ${pid})` })),
    ...f.slowLinks.filter((s) => named.has(s.pid)).map((s) => ({ t: s.from, text: `slow link (${s.delayMs} ms per chunk) of pid ${s.pid} until ${at(s.to)}` })),
    ...f.log.errors.map((e) => ({ t: e.at, text: `pid ${e.pid} reported ${e.detail}` })),
    ...f.log.connection.filter((c) => named.has(c.pid)).map((c) => ({ t: c.at, text: `pid ${c.pid} ${c.type}${c.detail === undefined ? "" : `: ${c.detail}`}` })),
    ...f.log.ownership.filter((o) => named.has(o.pid)).map((o) => ({ t: o.at, text: `pid ${o.pid} ${o.type}${o.info === undefined ? "" : ` (${o.info})`}` })),
  ].sort((a, b) => a.t - b.t);
  return `what happened to the processes named above (with what they owned and when they were pinned), and every error reported:\n${lines.map((l) => `  ${at(l.t)} ${l.text}`).join("\n") || "  nothing"}`;
}

