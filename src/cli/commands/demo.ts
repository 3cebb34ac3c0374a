/**
 * `cg demo`: the guided demo. (Being written by the lead; the CLI wiring calls registerDemo.)
 */
import type { Command } from "commander";

/** Adds the `demo` command to the program. */
export function registerDemo(program: Command): void {
  program.command("demo").description("run the guided demo against an embedded nats-server");
}
