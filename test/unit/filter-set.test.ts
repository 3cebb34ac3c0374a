/** Matching delivered subjects against a consumer's filters, without a server. */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { FilterSet } from "../../src/core/filter-set.js";
import { matchesFilter, parseFilter, subjectMatchesFilter } from "../../src/core/subjects.js";

describe("filter set", () => {
  const cases: { filters: string[]; subject: string; matches: boolean }[] = [
    { filters: ["0.>", "3.>"], subject: "3.orders.k1", matches: true },
    { filters: ["0.>", "3.>"], subject: "2.orders.k1", matches: false },
    { filters: ["0.>", "3.>"], subject: "30.orders.k1", matches: false },
    { filters: ["0.>"], subject: "0", matches: false },
    { filters: [], subject: "anything.at.all", matches: true },
    { filters: ["*.orders.k1"], subject: "7.orders.k1", matches: true },
    { filters: ["*.orders.k1"], subject: "7.orders.k2", matches: false },
    { filters: ["1.>", "8.mapped.*.x"], subject: "8.mapped.a.x", matches: true },
    { filters: ["1.>", "8.mapped.*.x"], subject: "8.mapped.a.y", matches: false },
    { filters: [">"], subject: "a.b", matches: true },
    { filters: ["orders.>"], subject: "orders.a", matches: true },
    { filters: ["0.s.*", "1.s.*"], subject: "1.s.k7", matches: true },
    { filters: ["0.s.*", "1.s.*"], subject: "2.s.k7", matches: false },
    { filters: ["0.s.*", "1.s.*"], subject: "1.s.k7.extra", matches: false },
    { filters: ["0.s.*"], subject: "0", matches: false },
    // Partition numbers are looked up by value, so a token that spells one differently is not it.
    { filters: ["3.>"], subject: "03.orders.k1", matches: false },
    { filters: ["0.>"], subject: "00.orders.k1", matches: false },
    { filters: ["3.>", "3"], subject: "3", matches: true },
    { filters: ["3", "3.>"], subject: "3.a", matches: true },
    { filters: ["3"], subject: "3.a", matches: false },
    { filters: ["123456.>"], subject: "123456.a", matches: true },
    { filters: ["123456.>"], subject: "12345.a", matches: false },
    { filters: ["65535.s.*", "65536.s.*"], subject: "65536.s.k", matches: true },
    { filters: ["pcg-repartition.2.s.*", "2.s.*"], subject: "pcg-repartition.2.s.k", matches: true },
    { filters: ["pcg-repartition.2.s.*"], subject: "pcg-repartition.3.s.k", matches: false },
    { filters: ["2.s.*", "*.t.>"], subject: "2.t.k", matches: true },
    { filters: ["2.s.k"], subject: "2.s.kk", matches: false },
    { filters: ["2.s.kk"], subject: "2.s.k", matches: false },
  ];
  for (const c of cases) {
    test(`filter set - ${JSON.stringify(c.filters)} ${c.matches ? "matches" : "does not match"} ${c.subject}`, () => {
      assert.equal(new FilterSet(c.filters).matches(c.subject), c.matches);
    });
  }
});

describe("subject matching on text", () => {
  const filters = ["a", "a.b", "a.*", "*.b", "a.>", ">", "*", "a.*.c", "*.*", "a.b.c", "ab.>", "a.bc", "*.>", "a.*.>"];
  const subjects = ["a", "b", "a.b", "a.c", "ab", "ab.c", "a.bc", "a.b.c", "a.b.c.d", "b.b", "a.x.c", "aa.b", "a.bb", "x.y.z", "0.orders.k12"];
  test("subject matching - the text matcher agrees with the token matcher on every filter and subject", () => {
    for (const f of filters) {
      for (const s of subjects) {
        assert.equal(subjectMatchesFilter(s, parseFilter(f)), matchesFilter(s.split("."), parseFilter(f)), `${s} against ${f}`);
      }
    }
  });
});
