import assert from "node:assert/strict";
import fc from "fast-check";
import {
  formatRate,
  parseRate,
  RateLimiter,
  RateSyntaxError,
} from "../../lib/auth/rate_limit.ts";

/** A schedule: gaps between requests in ms, and the limit they run under. */
interface Schedule {
  count: number;
  windowSeconds: number;
  share: number;
  gaps: number[];
}

const schedule: fc.Arbitrary<Schedule> = fc.record({
  count: fc.integer({ min: 1, max: 12 }),
  windowSeconds: fc.integer({ min: 1, max: 5 }),
  share: fc.integer({ min: 0, max: 12 }),
  gaps: fc.array(fc.integer({ min: 0, max: 900 }), {
    minLength: 1,
    maxLength: 300,
  }),
});

function run(s: Schedule) {
  let now = 1_000_000;
  const limiter = new RateLimiter({ now: () => now });
  const limit = { count: s.count, windowSeconds: s.windowSeconds };
  const answers: { at: number; ok: boolean; retryAfterSeconds: number }[] = [];
  for (const gap of s.gaps) {
    now += gap;
    const d = limiter.take(7, limit, { share: s.share });
    answers.push({ at: now, ok: d.ok, retryAfterSeconds: d.retryAfterSeconds });
  }
  return answers;
}

Deno.test("model: no interval of one window ever sees more accepted requests than the server's share", () => {
  fc.assert(
    fc.property(schedule, (s) => {
      const accepted = run(s).filter((a) => a.ok).map((a) => a.at);
      const windowMs = s.windowSeconds * 1000;
      // The busiest interval starts at an accepted request.
      for (const start of accepted) {
        const inside = accepted.filter((t) =>
          t >= start && t < start + windowMs
        );
        assert.ok(
          inside.length <= s.share,
          `${inside.length} accepted in [${start}, ${
            start + windowMs
          }) with a share of ${s.share}`,
        );
      }
    }),
    { numRuns: 300 },
  );
});

Deno.test("model: a request is refused only when the share was used within one window and one slot before it", () => {
  fc.assert(
    fc.property(schedule, (s) => {
      const answers = run(s);
      const windowMs = s.windowSeconds * 1000;
      // The reference: what an exact sliding log would have to have seen.
      const reach = windowMs + windowMs / 10;
      for (const answer of answers) {
        if (answer.ok) continue;
        const before = answers.filter((a) =>
          a.ok && a.at <= answer.at && a.at > answer.at - reach
        );
        assert.ok(
          before.length >= s.share,
          `refused at ${answer.at} with ${before.length} accepted in the ${reach} ms before, share ${s.share}`,
        );
      }
    }),
    { numRuns: 300 },
  );
});

Deno.test("model: a refused client that waits Retry-After seconds is accepted, when nothing else came meanwhile", () => {
  fc.assert(
    fc.property(schedule, (s) => {
      fc.pre(s.share > 0);
      let now = 1_000_000;
      const limiter = new RateLimiter({ now: () => now });
      const limit = { count: s.count, windowSeconds: s.windowSeconds };
      for (const gap of s.gaps) {
        now += gap;
        const d = limiter.take(7, limit, { share: s.share });
        if (d.ok) continue;
        now += d.retryAfterSeconds * 1000;
        assert.equal(limiter.take(7, limit, { share: s.share }).ok, true);
      }
    }),
    { numRuns: 300 },
  );
});

Deno.test("keys are limited apart: one key at its limit leaves another untouched", () => {
  let now = 0;
  const limiter = new RateLimiter({ now: () => now });
  const limit = { count: 3, windowSeconds: 60 };
  for (let i = 0; i < 3; i++) {
    assert.ok(limiter.take(1, limit, { share: 3 }).ok);
  }
  assert.equal(limiter.take(1, limit, { share: 3 }).ok, false);
  assert.equal(limiter.take(2, limit, { share: 3 }).ok, true);
  now += 66_001;
  assert.equal(limiter.take(1, limit, { share: 3 }).ok, true);
});

Deno.test("the headers' numbers: remaining scaled to the installation, reset when the oldest count leaves", () => {
  let now = 0;
  const limiter = new RateLimiter({ now: () => now });
  const limit = { count: 10, windowSeconds: 10 };
  const first = limiter.take(1, limit, { share: 5, scale: 2 });
  assert.deepEqual(first, {
    ok: true,
    remaining: 8,
    resetSeconds: 11,
    retryAfterSeconds: 0,
  });
  now = 4_500;
  for (let i = 0; i < 4; i++) limiter.take(1, limit, { share: 5, scale: 2 });
  const refused = limiter.take(1, limit, { share: 5, scale: 2 });
  assert.equal(refused.ok, false);
  assert.equal(refused.remaining, 0);
  // The first request's bucket leaves the window at 11 s.
  assert.equal(refused.retryAfterSeconds, 7);
});

Deno.test("memory stays bounded whatever the number of keys that call", () => {
  let now = 0;
  const limiter = new RateLimiter({ now: () => now, maxKeys: 1000 });
  const limit = { count: 5, windowSeconds: 60 };
  for (let id = 1; id <= 50_000; id++) {
    now += 1;
    limiter.take(id, limit, { share: 5 });
    assert.ok(limiter.size <= 1000);
  }
});

Deno.test("parseRate reads counts per second, minute, hour and day (of one unit or several), none as no limit, reads back whatever formatRate writes, and refuses anything else", () => {
  assert.deepEqual(parseRate("600/min"), { count: 600, windowSeconds: 60 });
  assert.deepEqual(parseRate("10/s"), { count: 10, windowSeconds: 1 });
  assert.deepEqual(parseRate("1000/H"), { count: 1000, windowSeconds: 3600 });
  assert.deepEqual(parseRate("50000/day"), {
    count: 50000,
    windowSeconds: 86400,
  });
  assert.equal(parseRate("none"), null);
  assert.deepEqual(parseRate("100/10s"), { count: 100, windowSeconds: 10 });
  assert.deepEqual(parseRate("5/15min"), { count: 5, windowSeconds: 900 });
  for (
    const bad of [
      "",
      "0/min",
      "-1/min",
      "10",
      "10/fortnight",
      "1.5/s",
      "10 / s",
      "01/s",
      "99999999999/s",
      "10/0s",
      "10/2day",
    ]
  ) {
    assert.throws(() => parseRate(bad), RateSyntaxError, bad);
  }
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 1_000_000_000 }),
    fc.integer({ min: 1, max: 86400 }),
    (count, windowSeconds) => {
      const limit = { count, windowSeconds };
      assert.deepEqual(parseRate(formatRate(limit)), limit);
    },
  ));
});

Deno.test("a key's limit changed mid-window keeps what it accepted: tightened, it refuses at once, loosened, it allows only the difference", () => {
  let now = 0;
  const limiter = new RateLimiter({ now: () => now });
  const wide = { count: 100, windowSeconds: 60 };
  for (let i = 0; i < 100; i++) {
    assert.ok(limiter.take(1, wide, { share: 100 }).ok);
  }
  const tight = { count: 50, windowSeconds: 60 };
  assert.equal(limiter.take(1, tight, { share: 50 }).ok, false);
  now += 1000;
  const wider = { count: 102, windowSeconds: 60 };
  assert.ok(limiter.take(1, wider, { share: 102 }).ok);
  assert.ok(limiter.take(1, wider, { share: 102 }).ok);
  assert.equal(limiter.take(1, wider, { share: 102 }).ok, false);
  // Another window cannot map the buckets: what they hold counts as now.
  const hourly = { count: 103, windowSeconds: 3600 };
  assert.ok(limiter.take(1, hourly, { share: 103 }).ok);
  assert.equal(limiter.take(1, hourly, { share: 103 }).ok, false);
});

Deno.test("a count past the largest allowed is refused as too large, however many digits it has", () => {
  for (
    const text of ["1000000001/day", "999999999999/s", `${"9".repeat(400)}/min`]
  ) {
    assert.throws(
      () => parseRate(text),
      (error: unknown) =>
        error instanceof RateSyntaxError && error.code === "rate_too_large",
      text,
    );
  }
});

Deno.test("a count of 0 is refused as out of range (1 to 1000000000), not as something that is no rate", () => {
  for (const text of ["0/min", "00/s", "0/10s"]) {
    assert.throws(
      () => parseRate(text),
      (error: unknown) =>
        error instanceof RateSyntaxError &&
        error.code === "invalid_rateLimit" &&
        error.message.includes("1 to 1000000000"),
      text,
    );
  }
});
