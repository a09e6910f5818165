/**
 * A rotation line's count in the in-memory limiter (lib/auth/rate_limit.ts):
 * a key of a line is accepted only while its own count and its line's (2L)
 * both have room, counted on both or neither, and the line's count holds
 * its first key's requests here, before the rotation and after it.
 */

import assert from "node:assert/strict";
import { lineCounter, RateLimiter } from "../../lib/auth/rate_limit.ts";

const L = { count: 5, windowSeconds: 60 };
const LINE = { root: 1, share: 10 };

function limiter() {
  const clock = { ms: 0 };
  return { clock, limiter: new RateLimiter({ now: () => clock.ms }) };
}

Deno.test("a line's count starts from its first key's requests here: a replacement made after 5 of a 5/min key gets 5, then the line is full", () => {
  const { clock, limiter: rates } = limiter();
  for (let i = 0; i < 5; i++) {
    assert.ok(rates.take(1, L, { share: 5 }).ok);
    clock.ms += 1000;
  }
  const seen = [];
  for (let i = 0; i < 6; i++) {
    seen.push(rates.take(2, L, { share: 5, line: LINE }).ok);
  }
  assert.deepEqual(seen, [true, true, true, true, true, false]);
  assert.equal(rates.used(lineCounter(1)), 10);
  // Another key of the line with no request of its own: refused by the line,
  // until the first key's first request leaves the window (at 60 s).
  const refused = rates.take(3, L, { share: 5, line: LINE });
  assert.equal(refused.ok, false);
  assert.equal(refused.lineFull, true);
  assert.equal(refused.remaining, 0);
  assert.equal(refused.retryAfterSeconds, 55);
  assert.equal(rates.used(3), 0, "counted on neither");
  clock.ms = 60_000;
  assert.ok(rates.take(3, L, { share: 5, line: LINE }).ok);
});

Deno.test("the first key's requests read with a record from before its rotation still count on its line, made before or after its own count", () => {
  const { clock, limiter: rates } = limiter();
  // A server that learns of the rotation late: the replacement first.
  assert.ok(rates.take(2, L, { share: 5, line: LINE }).ok);
  for (let i = 0; i < 5; i++) assert.ok(rates.take(1, L, { share: 5 }).ok);
  assert.equal(rates.used(lineCounter(1)), 6);
  for (let i = 0; i < 4; i++) {
    assert.ok(rates.take(2, L, { share: 5, line: LINE }).ok);
  }
  // The first key's own count is full; a third key meets the line's 10.
  assert.equal(rates.take(1, L, { share: 5 }).lineFull, false);
  assert.equal(rates.take(3, L, { share: 5, line: LINE }).lineFull, true);
  // A window later the line is empty again, for the first key's old record too.
  clock.ms += 60_000;
  for (let i = 0; i < 5; i++) assert.ok(rates.take(1, L, { share: 5 }).ok);
  assert.equal(rates.used(lineCounter(1)), 5);

  const other = limiter().limiter;
  // Or the first key's own count before the line: it feeds the line too.
  for (let i = 0; i < 3; i++) assert.ok(other.take(7, L, { share: 5 }).ok);
  assert.ok(other.take(8, L, { share: 5, line: { root: 7, share: 10 } }).ok);
  assert.ok(other.take(7, L, { share: 5 }).ok);
  assert.equal(other.used(lineCounter(7)), 5);
});

Deno.test("a key of a line reads what binds it: its own count's remaining and reset, or the line's when it has less", () => {
  const { clock, limiter: rates } = limiter();
  const first = rates.take(2, L, { share: 5, line: LINE });
  assert.deepEqual(first, {
    ok: true,
    remaining: 4,
    resetSeconds: 60,
    retryAfterSeconds: 0,
    lineFull: false,
  });
  clock.ms += 10_000;
  for (let i = 0; i < 7; i++) {
    rates.take(i < 4 ? 1 : 3, L, { share: 5, line: LINE });
  }
  // Line: 1 + 7 = 8 of 10 (2 left); key 2's own: 1 of 5 (4 left).
  const next = rates.take(2, L, { share: 5, line: LINE });
  assert.equal(next.remaining, 1);
  assert.equal(
    next.resetSeconds,
    50,
    "the line's oldest request leaves at 60 s",
  );
});

Deno.test("a key never rotated takes one count, and makes no line's", () => {
  const { limiter: rates } = limiter();
  for (let i = 0; i < 5; i++) assert.ok(rates.take(4, L, { share: 5 }).ok);
  assert.equal(rates.take(4, L, { share: 5 }).ok, false);
  // Until a line counter exists, a line's count reads its first key's log.
  assert.equal(rates.used(lineCounter(4)), rates.used(4));
  assert.equal(rates.size, 1, "no line counter was made");
});
