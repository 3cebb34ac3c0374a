/** What every scenario gets and returns. */
import type { BenchServer } from "./env.js";

/** One line of the results table. */
export interface Row {
  scenario: string;
  variant: string;
  value: number;
  unit: string;
  /** What the ratio is against. */
  baseline?: string;
  ratio?: number;
  target?: string;
  met?: boolean;
  samples?: number[];
  note?: string;
}

/** The run's settings. */
export interface BenchContext {
  server: BenchServer;
  quick: boolean;
  runs: number;
  messages: number;
  keys: number;
  log(line: string): void;
  /** A fresh name. */
  name(prefix: string): string;
}

/** A scenario. */
export type Scenario = (ctx: BenchContext) => Promise<Row[]>;
