/**
 * The member instances of the soak test, each a child process running
 * test/helpers/soak-member-child.js: started, killed with SIGKILL (the kill time is
 * recorded), restarted, and stopped cleanly at the end. A child that exits on its own
 * is recorded as an unexpected exit and replaced, so the soak goes on and the test
 * can report it. Every child's log file is tailed by one {@link SoakLogReader}.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { Pause } from "./soak-check.js";
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
  /** Processes stopped right now. */
  private readonly paused = new Set<number>();
  readonly log = new SoakLogReader();
  private readonly instances: SoakInstance[] = [];
  private files = 0;
  private stopping = false;

  constructor(
    private readonly dir: string,
    private readonly settings: Omit<SoakChildSettings, "member" | "logFile">,
  ) {}

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
    const settings: SoakChildSettings = { ...this.settings, member, logFile };
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
