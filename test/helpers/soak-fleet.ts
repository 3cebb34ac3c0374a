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
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { Pause } from "./soak-check.js";
import type { TcpProxy } from "./tcp-proxy.js";
import type { SoakChildSettings } from "./soak-member-child.js";
import { SoakLogReader } from "./soak-log.js";

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
          if (!this.stopping && !this.kills.has(inst.pid)) {
            this.unexpectedExits.push({ member, pid: inst.pid, at, code, signal });
            this.start(member);
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
    this.kills.set(inst.pid, now());
    inst.child.kill("SIGKILL");
    await inst.exited;
  }

  /**
   * Stops an instance with SIGSTOP for `ms`, then SIGCONT (a starved or suspended
   * process); resolves after the SIGCONT. A kill meanwhile ends the pulse.
   */
  async pause(inst: SoakInstance, ms: number): Promise<void> {
    if (!inst.alive() || this.paused.has(inst.pid)) return;
    const from = now();
    this.paused.add(inst.pid);
    inst.child.kill("SIGSTOP");
    await Promise.race([new Promise((r) => setTimeout(r, ms)), inst.exited]);
    this.paused.delete(inst.pid);
    if (inst.alive()) inst.child.kill("SIGCONT");
    this.pauses.push({ pid: inst.pid, from, to: now() });
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
