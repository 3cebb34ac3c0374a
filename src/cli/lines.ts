/**
 * Questions answered on stdin, one line at a time. Lines typed (or piped) ahead
 * of a question are kept, so a script can feed a whole conversation at once.
 */
import { createInterface, type Interface } from "node:readline";
import type { Readable } from "node:stream";
import type { OutStream } from "./output.js";

/** Reads answers from an input stream. */
export class LineReader {
  private rl: Interface | undefined;
  private readonly lines: string[] = [];
  private waiter: ((line: string | undefined) => void) | undefined;
  private ended = false;

  constructor(
    private readonly input: Readable & { isTTY?: boolean },
    private readonly output: OutStream & NodeJS.WritableStream,
  ) {}

  private open(): Interface {
    if (this.rl) return this.rl;
    const terminal = this.input.isTTY === true && this.output.isTTY === true;
    const rl = createInterface({ input: this.input, output: this.output, terminal });
    rl.on("line", (line) => {
      if (this.waiter) {
        const w = this.waiter;
        this.waiter = undefined;
        w(line);
      } else this.lines.push(line);
    });
    rl.on("close", () => {
      this.ended = true;
      const w = this.waiter;
      this.waiter = undefined;
      w?.(undefined);
    });
    // On a terminal readline turns Ctrl-C into this event instead of a signal: raise it, so cg exits with 130.
    rl.on("SIGINT", () => process.kill(process.pid, "SIGINT"));
    this.rl = rl;
    return rl;
  }

  /**
   * Writes `prompt` and waits for the next line.
   *
   * @returns the line without its newline, or undefined at end of input
   */
  async question(prompt: string): Promise<string | undefined> {
    const rl = this.open();
    const queued = this.lines.shift();
    if (rl.terminal) {
      rl.setPrompt(prompt);
      rl.prompt();
    } else {
      this.output.write(prompt);
    }
    const line = queued ?? (this.ended ? undefined : await new Promise<string | undefined>((resolve) => (this.waiter = resolve)));
    // Piped input is not echoed: end the prompt's line so the transcript stays readable.
    if (!rl.terminal || line === undefined) this.output.write("\n");
    return line;
  }

  /** Stops reading; idempotent. */
  close(): void {
    this.rl?.close();
    this.rl = undefined;
    this.input.pause?.();
  }
}
