/**
 * `cg static|elastic top`: on a pseudo-terminal (util-linux `script`) it draws
 * screens with the partitions, members and markers, and `q` / Ctrl-C leave it with
 * the terminal restored; without a terminal it prints one plain block per refresh
 * and exits 130 on SIGINT; with `--json` its frames carry the rates computed from
 * successive refreshes and the source-lag trend.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { partitionOf } from "../../src/index.js";
import type { TopFrameDoc } from "../../src/cli/model.js";
import { startEnv, uniqueName, type TestEnv } from "../helpers/nats.js";
import { CG_BIN, CgProcess, addSourceStream, addStaticStream, cgEnv, killAllCg, runCg } from "../helpers/cli-run.js";

const hasScript = spawnSync("script", ["--version"]).status === 0;

let env: TestEnv;
let url: string;

before(async () => {
  env = await startEnv();
  url = env.server.url;
});

after(async () => {
  await killAllCg();
  await Promise.all([...ptys].map((p) => p.kill()));
  await env.close();
});

const ptys = new Set<Pty>();
const quote = (s: string): string => `'${s.replaceAll("'", "'\\''")}'`;
// eslint-disable-next-line no-control-regex
const ESCAPES = /\u001b\[[0-9;?]*[A-Za-z]/g;

/**
 * A shell command in a pseudo-terminal of 140 x 60 (`script -qefc`): after it, the
 * shell prints `EXIT=<its exit code>` and the terminal's modes (`stty -a`).
 */
class Pty {
  readonly child: ChildProcess;
  raw = "";
  private readonly listeners = new Set<() => void>();
  private readonly exit: Promise<number | null>;

  constructor(command: string) {
    const shell = `stty cols 140 rows 60; ${command}; echo "EXIT=$?"; stty -a`;
    this.child = spawn("script", ["-qefc", shell, "/dev/null"], { env: cgEnv({ SHELL: "/bin/sh", TERM: "xterm" }), stdio: ["pipe", "pipe", "pipe"] });
    ptys.add(this);
    this.child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      this.raw += chunk;
      for (const l of this.listeners) l();
    });
    this.child.stdin?.on("error", () => undefined);
    this.exit = new Promise((resolve) =>
      this.child.on("close", (code) => {
        ptys.delete(this);
        for (const l of this.listeners) l();
        resolve(code);
      }),
    );
  }

  /** The screens drawn so far, without escape codes (each redraw starts at the cursor's home). */
  screens(): string[] {
    return this.raw
      .split("\u001b[H")
      .filter((chunk) => chunk.includes("\u001b[J"))
      .map((chunk) => chunk.slice(0, chunk.indexOf("\u001b[J")).replace(ESCAPES, "").replaceAll("\r", ""));
  }

  async waitFor(check: () => boolean, timeoutMs: number, what: string): Promise<void> {
    if (check()) return;
    await new Promise<void>((resolve, reject) => {
      const listener = (): void => {
        if (check()) done();
        else if (!ptys.has(this)) done(new Error(`the terminal closed before ${what}\n${this.raw}`));
      };
      const done = (err?: Error): void => {
        clearTimeout(timer);
        this.listeners.delete(listener);
        if (err) reject(err);
        else resolve();
      };
      const timer = setTimeout(() => done(new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${this.raw.replace(ESCAPES, "")}`)), timeoutMs);
      this.listeners.add(listener);
    });
  }

  /** Types on the terminal. */
  type(text: string): void {
    this.child.stdin?.write(text);
  }

  async exited(timeoutMs: number): Promise<number | null> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`the terminal did not close within ${timeoutMs} ms\n${this.raw.replace(ESCAPES, "")}`)), timeoutMs);
    });
    try {
      return await Promise.race([this.exit, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async kill(): Promise<void> {
    if (ptys.has(this)) this.child.kill("SIGKILL");
    await this.exit;
  }
}

function topCommand(kind: string, stream: string, group: string, extra = ""): string {
  return `${quote(process.execPath)} ${quote(CG_BIN)} -s ${url} ${kind} top ${stream} ${group} ${extra}`;
}

/** After the last screen: the cursor is shown again, the alternate screen left, and the line discipline is back to cooked mode. */
function assertRestored(pty: Pty, code: number): void {
  const last = pty.raw.lastIndexOf("cg top:");
  const tail = pty.raw.slice(last);
  assert.ok(tail.includes("\u001b[?25h"), "the cursor is shown again");
  assert.ok(tail.includes("\u001b[?1049l"), "the alternate screen is left");
  assert.ok(pty.raw.includes("\u001b[?1049h\u001b[?25l"), "it entered the alternate screen and hid the cursor");
  assert.match(tail, new RegExp(`EXIT=${code}\\r?\\n`));
  const modes = tail.slice(tail.indexOf("EXIT="));
  assert.match(modes, /(^|\s)icanon(\s|;|$)/, "canonical mode is back (raw mode off)");
  assert.match(modes, /(^|\s)echo(\s|;|$)/, "echo is back");
}

/** A static group on 4 partitions, m1 and m2; m1 runs and handles its messages (so it is pinned), m2 has no instance. */
async function staticGroupWithOneInstance(): Promise<{ stream: string; group: string; m1: CgProcess; perPartition: number[] }> {
  const stream = uniqueName("S");
  await addStaticStream(env.jsm, stream, 4);
  const group = uniqueName("g");
  assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "4", "m1", "m2"])).code, 0);
  const perPartition = [0, 0, 0, 0];
  for (let i = 0; i < 60; i++) {
    const subject = `${stream}.k${i}`;
    perPartition[partitionOf(subject, 4, { filter: `${stream}.*`, wildcards: [1] })]! += 1;
    await env.js.publish(subject, String(i));
  }
  const m1 = new CgProcess(["-s", url, "--json", "static", "consume", stream, group, "m1", "--sleep", "0"]);
  await m1.waitFor(() => m1.json().length === perPartition[0]! + perPartition[1]!, 60_000, "m1 to handle its messages");
  return { stream, group, m1, perPartition };
}

describe("cli top", () => {
  test("cli top - on a terminal: partitions, members, the pinned marker and findings; q exits 0 and restores the terminal", { skip: !hasScript && "util-linux script is not installed" }, async () => {
    const { stream, group, m1, perPartition } = await staticGroupWithOneInstance();
    const pty = new Pty(topCommand("static", stream, group, "--interval 300ms"));
    const ready = (): boolean => {
      const screens = pty.screens();
      return screens.length >= 3 && /^0 +m1 \*(≤\d+)? /m.test(screens[screens.length - 1] ?? "");
    };
    await pty.waitFor(ready, 60_000, "three screens, m1 pinned");
    const screen = pty.screens().at(-1) ?? "";
    assert.match(screen, new RegExp(`^cg top: static group ${group} on stream ${stream} +\\d\\d:\\d\\d:\\d\\d +every 300ms +q to quit$`, "m"));
    // one instance may hold a second pull: the standbys are known as an upper bound only
    assert.match(screen, /^4 partitions +2 members: 1 active, 1 pinned, standbys (0|≤\d+) +handled [\d.-]+\/s +pending \d+/m);
    assert.match(screen, /^MEMBER +PARTITIONS +INSTANCES +HANDLED\/S +PENDING +ACK PENDING +REDELIVERED +LAST DELIVERY$/m);
    assert.match(screen, /^m1 +\[0 1\] +\* pinned(, ≤\d+ standbys?)? +[\d.-]+ +0 +0 +0 +[\d.]+s ago$/m);
    assert.match(screen, new RegExp(`^m2 +\\[2 3\\] +! none +- +${perPartition[2]! + perPartition[3]!} +0 +0 +never$`, "m"));
    assert.match(screen, /^PARTITION +OWNER +PENDING +ACK PENDING +REDELIVERED +BACKLOG\/S +LAST ACTIVITY$/m);
    assert.match(screen, /^0 +m1 \*(≤\d+)? +0 +\[\.{12}\] +0 +/m);
    assert.match(screen, /^1 +m1 \*(≤\d+)? +0 +\[\.{12}\] +0 +/m);
    assert.match(screen, new RegExp(`^2 +m2 ! +${perPartition[2]} +\\[#+\\.*\\] +0 +- +`, "m"));
    assert.match(screen, new RegExp(`^3 +m2 ! +${perPartition[3]} +\\[#+\\.*\\] +0 +- +`, "m"));
    assert.match(screen, /ERROR +NO_ACTIVE_INSTANCE +member m2 owns partitions 2, 3/);
    assert.ok(pty.raw.includes("\u001b[31mERROR  \u001b[39m"), "findings are highlighted");

    pty.type("q");
    assert.equal(await pty.exited(30_000), 0);
    assertRestored(pty, 0);
    m1.signal("SIGINT");
    assert.equal((await m1.exited(30_000)).code, 130);
  });

  test("cli top - on a terminal: Ctrl-C exits 130 and restores the terminal; a standby shows as ≤n", { skip: !hasScript && "util-linux script is not installed" }, async () => {
    const { stream, group, m1 } = await staticGroupWithOneInstance();
    const standby = new CgProcess(["-s", url, "--json", "static", "consume", stream, group, "m1", "--sleep", "0"]);
    await standby.waitForText(/"event":"started"/, 30_000, "stderr");
    const pty = new Pty(topCommand("static", stream, group, "--interval 300ms"));
    await pty.waitFor(() => /^0 +m1 \*≤\d+ /m.test(pty.screens().at(-1) ?? ""), 60_000, "m1 pinned with a standby");
    assert.match(pty.screens().at(-1) ?? "", /^m1 +\[0 1\] +\* pinned, ≤\d+ standbys? /m);
    pty.type("\u0003");
    assert.equal(await pty.exited(30_000), 0, "script's own shell ends normally");
    assertRestored(pty, 130);
    m1.signal("SIGINT");
    standby.signal("SIGINT");
    assert.equal((await m1.exited(30_000)).code, 130);
    assert.equal((await standby.exited(30_000)).code, 130);
  });

  test("cli top - not a terminal: one plain block per refresh, SIGINT exits 130", async () => {
    const { stream, group, m1 } = await staticGroupWithOneInstance();
    const top = new CgProcess(["-s", url, "static", "top", stream, group, "--interval", "200ms"]);
    const blocks = (): string[] => top.stdout.split(/^(?=cg top: )/m).filter((b) => b.endsWith("\n\n"));
    await top.waitFor(() => blocks().length >= 3, 60_000, "three blocks");
    assert.ok(!top.stdout.includes("\u001b"), "no escape codes");
    for (const block of blocks()) {
      assert.match(block, new RegExp(`^cg top: static group ${group} on stream ${stream} +\\d\\d:\\d\\d:\\d\\d +every 200ms +Ctrl-C to stop\\n`));
      assert.match(block, /^MEMBER +PARTITIONS +INSTANCES/m);
      // m1 may hold a second pull: then it shows a standby bound
      assert.match(block, /^m1 +\[0 1\] +\* pinned(, ≤\d+ standbys?)? /m);
      assert.match(block, /^m2 +\[2 3\] +! none /m);
      assert.match(block, /^PARTITION +OWNER +PENDING/m);
      assert.equal(block.match(/^[0-3] +m[12] [*!](≤\d+)? /gm)?.length, 4, `one row per partition:\n${block}`);
      assert.match(block, /ERROR +NO_ACTIVE_INSTANCE/);
    }
    top.signal("SIGINT");
    const r = await top.exited(30_000);
    assert.equal(r.code, 130);
    assert.equal(r.stderr, "");
    m1.signal("SIGINT");
    assert.equal((await m1.exited(30_000)).code, 130);
  });

  test("cli top --json - NDJSON frames with handled/s per member and the backlog trend per partition", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, group, "2", "m1"])).code, 0);
    const m1 = new CgProcess(["-s", url, "--json", "static", "consume", stream, group, "m1", "--sleep", "20ms"]);
    await m1.waitForText(/"event":"started"/, 30_000, "stderr");
    const top = new CgProcess(["-s", url, "--json", "static", "top", stream, group, "--interval", "300ms"]);
    await top.waitFor(() => top.json().length >= 1, 60_000, "a first frame");
    const first = top.json<TopFrameDoc>()[0];
    assert.ok(first);
    assert.deepEqual(first.rates, { interval_ms: null, handled_per_sec: null, members: { m1: null }, partitions_backlog_per_sec: [null, null], source_lag_per_sec: null }, "no rates before a second refresh");

    for (let i = 0; i < 150; i++) await env.js.publish(`${stream}.k${i}`, String(i));
    const draining = (f: TopFrameDoc): boolean =>
      (f.rates.members["m1"] ?? 0) > 0 && (f.rates.handled_per_sec ?? 0) > 0 && f.rates.partitions_backlog_per_sec.some((r) => r !== null && r < 0);
    await top.waitFor(() => top.json<TopFrameDoc>().some(draining), 60_000, "a frame with m1 handling and a partition draining");
    await m1.waitFor(() => m1.json().length === 150, 60_000, "m1 to handle everything");
    await top.waitFor(() => top.json<TopFrameDoc>().at(-1)?.summary.pending === 0, 60_000, "a frame with nothing pending");
    for (const f of top.json<TopFrameDoc>().slice(1)) {
      assert.ok(f.rates.interval_ms !== null && f.rates.interval_ms > 0);
      assert.ok((f.rates.members["m1"] ?? 0) >= 0, "settled deliveries never go back");
    }
    top.signal("SIGINT");
    assert.equal((await top.exited(30_000)).code, 130);
    m1.signal("SIGINT");
    assert.equal((await m1.exited(30_000)).code, 130);
  });

  test("cli top --json - elastic: the buffer, and SOURCE_LAG_GROWING while the buffer is full and messages keep coming", async () => {
    const stream = uniqueName("E");
    await addSourceStream(env.jsm, stream);
    const group = uniqueName("g");
    assert.equal((await runCg(["-s", url, "elastic", "create", stream, group, "2", "--filter", `${stream}.*`, "--wildcards", "1", "--max-buffered-msgs", "5"])).code, 0);
    assert.equal((await runCg(["-s", url, "elastic", "add", stream, group, "a"])).code, 0);
    for (let i = 0; i < 20; i++) await env.js.publish(`${stream}.k${i}`, String(i));
    const top = new CgProcess(["-s", url, "--json", "elastic", "top", stream, group, "--interval", "300ms"]);
    await top.waitFor(() => top.json<TopFrameDoc>().some((f) => f.buffer?.messages === 5 && f.findings.some((x) => x.code === "BUFFER_FULL")), 60_000, "a full buffer");
    const seen = top.json().length;
    for (let i = 20; i < 60; i++) await env.js.publish(`${stream}.k${i}`, String(i));
    await top.waitFor(
      () => top.json<TopFrameDoc>().slice(seen).some((f) => f.findings.some((x) => x.code === "SOURCE_LAG_GROWING") && (f.rates.source_lag_per_sec ?? 0) > 0),
      60_000,
      "the lag to grow between two refreshes",
    );
    top.signal("SIGINT");
    assert.equal((await top.exited(30_000)).code, 130);
  });

  test("cli top - errors: a missing group exits 1 at once, a too short --interval is a usage error", async () => {
    const stream = uniqueName("S");
    await addStaticStream(env.jsm, stream, 2);
    assert.equal((await runCg(["-s", url, "static", "create", "balanced", stream, "exists", "2", "m1"])).code, 0);
    const missing = await runCg(["-s", url, "static", "top", stream, "nope"]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, new RegExp(`cg static ls ${stream}`));
    const fast = await runCg(["-s", url, "static", "top", stream, "exists", "--interval", "10ms"]);
    assert.equal(fast.code, 2);
    assert.match(fast.stderr, /--interval must be at least 100ms/);
  });
});
