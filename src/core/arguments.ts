/** Checks of membership arguments, before anything is written. */
import { ConsumerGroupError } from "./errors.js";
import { assertValidName } from "./names.js";
import { quoted, refuseUnknownKeys } from "./option-checks.js";
import type { MemberMapping } from "./types.js";

/** The keys of a member mapping. */
const MAPPING_KEYS: readonly string[] = Object.keys({ member: true, partitions: true } satisfies Record<keyof MemberMapping, true>);

/**
 * Checks that members are valid names and mappings are `{ member, partitions: number[] }`
 * with valid member names. Go's partition rules are checked by the validators.
 *
 * @throws ConsumerGroupError `INVALID_ARGUMENT`, `INVALID_NAME`
 */
export function checkMembersAndMappings(members: unknown, mappings: unknown): void {
  if (members !== undefined) {
    if (!Array.isArray(members)) throw new ConsumerGroupError("INVALID_ARGUMENT", "members must be an array of member names");
    members.forEach((m) => assertValidName("member", m));
  }
  if (mappings !== undefined) {
    if (!Array.isArray(mappings)) throw new ConsumerGroupError("INVALID_ARGUMENT", "memberMappings must be an array of { member, partitions }");
    for (const m of mappings as unknown[]) {
      const mapping = m as Partial<MemberMapping> | null;
      if (!mapping || typeof mapping !== "object" || Array.isArray(mapping) || !Array.isArray(mapping.partitions)) {
        throw new ConsumerGroupError("INVALID_ARGUMENT", `each member mapping must be { member: string, partitions: number[] }, got ${quoted(m)}`);
      }
      refuseUnknownKeys(mapping, "a member mapping", MAPPING_KEYS);
      assertValidName("member", mapping.member);
    }
  }
}
