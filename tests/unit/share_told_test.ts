/**
 * What a refused client is told about when another server could have room
 * (lib/auth/_share_steps.ts `toldFreeAt`): counted from when each holder's
 * answer arrived here, never from this server's older clearing write, so a
 * client that retries at Retry-After is not refused for an early estimate
 * (a final review: told 8 s where the truth was 12.5 s, then 429 again).
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { arrivals, toldFreeAt } from "../../lib/auth/_share_steps.ts";
import type { ShareRecord } from "../../lib/store/rate_shares.ts";

function record(answers: Record<string, number>): ShareRecord {
  return {
    limit: 9,
    window: 30,
    shares: { a: 3, b: 3, c: 3 },
    wants: {},
    answers,
  };
}

Deno.test("a holder's answer is counted from when it arrived here, not from this server's older want, and an unchanged answer keeps its arrival", () => {
  // Server a asked at 10 s; b and c answered after another server's
  // clearing write at 15 s, and a first saw their answers at 17.5 s.
  const first = arrivals(record({ b: 12_500, c: 20_000 }), undefined, 17_500);
  const view = {
    record: record({ b: 12_500, c: 20_000 }),
    version: "1",
    since: 0,
    arrived: first,
  };
  const early = 10_000 + 12_500; // the refusal's own reckoning: asks sooner
  assert.equal(toldFreeAt(view, early, "a"), 30_000);
  // Seen again later with the same answers: their arrival stands.
  const again = arrivals(view.record, first, 25_000);
  assert.equal(toldFreeAt({ ...view, arrived: again }, early, "a"), 30_000);
  // A new answer from b arrives anew.
  const changed = record({ b: 4_000, c: 20_000 });
  const later = arrivals(changed, again, 26_000);
  assert.equal(
    toldFreeAt({ ...view, record: changed, arrived: later }, early, "a"),
    30_000,
  );
});

Deno.test("told is never earlier than the truth: each answer's holder frees `given` after its commit, which came before it arrived (property)", () => {
  fc.assert(fc.property(
    fc.array(
      fc.record({
        committed: fc.integer({ min: 0, max: 60_000 }),
        transit: fc.integer({ min: 0, max: 10_000 }),
        given: fc.integer({ min: 1, max: 30_000 }),
      }),
      { minLength: 2, maxLength: 2 },
    ),
    fc.integer({ min: 0, max: 100_000 }),
    (holders, early) => {
      const [b, c] = holders;
      let arrived = arrivals(
        record({ b: b.given }),
        undefined,
        b.committed + b.transit,
      );
      arrived = arrivals(
        record({ b: b.given, c: c.given }),
        arrived,
        c.committed + c.transit,
      );
      // b's answer arrived before c's only if its time says so; re-note it.
      arrived.set("b", { given: b.given, at: b.committed + b.transit });
      const view = {
        record: record({ b: b.given, c: c.given }),
        version: "1",
        since: 0,
        arrived,
      };
      const truth = Math.min(b.committed + b.given, c.committed + c.given);
      assert.ok(toldFreeAt(view, early, "a") >= truth);
    },
  ));
});
