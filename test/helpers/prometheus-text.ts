/**
 * Reading a Prometheus text exposition in a test: the samples of one metric with
 * their labels.
 */

/** One sample: its labels and value. */
export interface Sample {
  labels: Record<string, string>;
  value: number;
}

/** The samples of one metric in a Prometheus text exposition. */
export function samples(text: string, name: string): Sample[] {
  const result: Sample[] = [];
  for (const line of text.split("\n")) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1] ?? ""] = l[2] ?? "";
    result.push({ labels, value: Number(m[3]) });
  }
  return result;
}

/** The sum of some samples' values. */
export const sum = (xs: Sample[]): number => xs.reduce((n, s) => n + s.value, 0);
