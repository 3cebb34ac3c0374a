/** Checks of membership arguments, before anything is written. */
import { ConsumerGroupError } from "./errors.js";
import { assertValidName } from "./names.js";
import type { MemberMapping } from "./types.js";

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
      if (!mapping || typeof mapping !== "object" || !Array.isArray(mapping.partitions)) {
        throw new ConsumerGroupError("INVALID_ARGUMENT", `each member mapping must be { member: string, partitions: number[] }, got ${JSON.stringify(m)}`);
      }
      assertValidName("member", mapping.member);
    }
  }
}
