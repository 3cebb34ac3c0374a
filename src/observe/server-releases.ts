/**
 * What the library knows about nats-server releases' throughput, from the `versions`
 * benchmark (bench/scenarios/versions.ts). Pure.
 */

/** The first release that serves a consumer with many filter subjects as fast as one with one filter. */
export const FAST_FILTERS_RELEASE = "2.14.10";

/**
 * The slowdown of a consumer with 16 filter subjects against one consumer of the whole
 * stream (raw nats.js, pinned, callback mode), as the medians of the `versions`
 * benchmark ranged over 2.11.17, 2.12.15 and 2.14.9 on a busy 2-core machine.
 */
const MEASURED_SLOWDOWN = "4-9×";

/** A release that makes member consumers with many filter subjects slow. */
export interface SlowFiltersRelease {
  /** The server version, as the server reports it. */
  version: string;
  /** How much slower, as measured (`4-9×`). */
  slowdown: string;
}

function parts(version: string): [number, number, number] | undefined {
  const m = /^v?(\d+)\.(\d+)\.(\d+)/.exec(version);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3])] : undefined;
}

/**
 * Whether `version` is a release on which a consumer with many filter subjects is
 * several times slower than one with a single filter: every release before
 * {@link FAST_FILTERS_RELEASE} (measured on 2.11.17, 2.12.15 and 2.14.9; 2.14.10 and
 * 2.15.3 are not). Undefined for a faster release or a version it cannot read.
 */
export function slowFiltersRelease(version: string | undefined): SlowFiltersRelease | undefined {
  const v = version === undefined ? undefined : parts(version);
  const fast = parts(FAST_FILTERS_RELEASE) as [number, number, number];
  if (!v) return undefined;
  const older = v[0] !== fast[0] ? v[0] < fast[0] : v[1] !== fast[1] ? v[1] < fast[1] : v[2] < fast[2];
  if (!older) return undefined;
  return { version: v.join("."), slowdown: MEASURED_SLOWDOWN };
}
