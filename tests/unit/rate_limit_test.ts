import assert from "node:assert/strict";
import fc from "fast-check";
import {
  formatRate,
  parseRate,
  type RateDecision,
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

/** Requests with a share each: the servers came and went meanwhile. */
const shifting = fc.record({
  windowSeconds: fc.integer({ min: 1, max: 5 }),
  steps: fc.array(
    fc.record({
      gap: fc.integer({ min: 0, max: 900 }),
      share: fc.integer({ min: 0, max: 12 }),
    }),
    { minLength: 1, maxLength: 300 },
  ),
});

function run(s: Schedule, limiter?: (now: () => number) => RateLimiter) {
  let now = 1_000_000;
  const clock = () => now;
  const counter = limiter?.(clock) ?? new RateLimiter({ now: clock });
  const limit = { count: s.count, windowSeconds: s.windowSeconds };
  const answers: { at: number; ok: boolean; retryAfterSeconds: number }[] = [];
  for (const gap of s.gaps) {
    now += gap;
    const d = counter.take(7, limit, { share: s.share });
    answers.push({ at: now, ok: d.ok, retryAfterSeconds: d.retryAfterSeconds });
  }
  return answers;
}

/**
 * The reference: an exact sliding log, what the limiter must decide for a
 * share it counts request by request. A request at t is accepted iff fewer
 * than the share were accepted in (t − W, t]; a refused one may come back
 * when enough of those have left for one more to fit.
 */
function exactly(windowMs: number, steps: { at: number; share: number }[]) {
  const accepted: number[] = [];
  return steps.map(({ at, share }) => {
    const inside = accepted.filter((a) => a > at - windowMs);
    const ok = inside.length < share;
    if (ok) accepted.push(at), inside.push(at);
    return {
      ok,
      remaining: Math.max(0, share - inside.length),
      resetSeconds: inside.length === 0
        ? 0
        : Math.ceil((inside[0] + windowMs - at) / 1000),
      retryAfterSeconds: ok ? 0 : share === 0 ? windowMs / 1000 : Math.max(
        1,
        Math.ceil((inside[inside.length - share] + windowMs - at) / 1000),
      ),
    };
  });
}

/** No interval [start, start + W) holds more than `share` of `accepted`. */
function assertWithin(accepted: number[], windowMs: number, share: number) {
  // The busiest interval starts at an accepted request.
  for (const start of accepted) {
    const inside = accepted.filter((t) => t >= start && t < start + windowMs);
    assert.ok(
      inside.length <= share,
      `${inside.length} accepted in [${start}, ${
        start + windowMs
      }) with a share of ${share}`,
    );
  }
}

Deno.test("model: no interval of one window ever sees more accepted requests than the server's share, counted exactly or in groups", () => {
  fc.assert(
    fc.property(schedule, fc.integer({ min: 1, max: 13 }), (s, exactShare) => {
      for (
        const made of [
          undefined,
          (now: () => number) => new RateLimiter({ now, exactShare }),
        ]
      ) {
        const accepted = run(s, made).filter((a) => a.ok).map((a) => a.at);
        assertWithin(accepted, s.windowSeconds * 1000, s.share);
      }
    }),
    { numRuns: 300 },
  );
});

Deno.test("model: up to 1024 a share is counted exactly: every answer, its remaining, reset and Retry-After are the exact sliding log's, however the share changes", () => {
  fc.assert(
    fc.property(shifting, ({ windowSeconds, steps }) => {
      let now = 1_000_000;
      const limiter = new RateLimiter({ now: () => now });
      const limit = { count: 12, windowSeconds };
      const timed = steps.map(({ gap, share }) => ({ at: now += gap, share }));
      now = 1_000_000;
      const seen = steps.map(({ gap, share }) => {
        now += gap;
        return limiter.take(7, limit, { share });
      });
      assert.deepEqual(seen, exactly(windowSeconds * 1000, timed));
    }),
    { numRuns: 300 },
  );
});

Deno.test("model: the exact count holds at the largest share it covers, 1024 requests, with no more than 1024 in any window", () => {
  let now = 0;
  const limiter = new RateLimiter({ now: () => now });
  const limit = { count: 1024, windowSeconds: 1 };
  const steps: { at: number; share: number }[] = [];
  const seen: RateDecision[] = [];
  // Bursts of 600 at once, then steps of a few ms: past the share and back.
  for (let i = 0; i < 7_000; i++) {
    now += i % 700 < 600 ? 0 : 3;
    steps.push({ at: now, share: 1024 });
    seen.push(limiter.take(1, limit, { share: 1024 }));
  }
  assert.deepEqual(seen, exactly(1000, steps));
  assert.ok(seen.some((d) => !d.ok));
  assertWithin(steps.filter((_, i) => seen[i].ok).map((s) => s.at), 1000, 1024);
});

Deno.test("model: a share counted in groups is refused only when the exact count in the window is within a group less one of it", () => {
  fc.assert(
    fc.property(schedule, fc.integer({ min: 1, max: 5 }), (s, exactShare) => {
      const answers = run(s, (now) => new RateLimiter({ now, exactShare }));
      const windowMs = s.windowSeconds * 1000;
      const slack = Math.max(0, Math.ceil(s.share / exactShare) - 1);
      for (const answer of answers) {
        if (answer.ok) continue;
        const before = answers.filter((a) =>
          a.ok && a.at <= answer.at && a.at > answer.at - windowMs
        );
        assert.ok(
          before.length >= s.share - slack,
          `refused at ${answer.at} with ${before.length} accepted in the window, share ${s.share}, groups of ${
            slack + 1
          }`,
        );
      }
    }),
    { numRuns: 300 },
  );
});

Deno.test("model: a refused client that waits Retry-After seconds is accepted, when nothing else came meanwhile, counted exactly or in groups", () => {
  fc.assert(
    fc.property(schedule, fc.integer({ min: 1, max: 13 }), (s, exactShare) => {
      fc.pre(s.share > 0);
      let now = 1_000_000;
      const limiter = new RateLimiter({ now: () => now, exactShare });
      const limit = { count: s.count, windowSeconds: s.windowSeconds };
      for (const gap of s.gaps) {
        now += gap;
        const d = limiter.take(7, limit, { share: s.share });
        if (d.ok) continue;
        assert.ok(d.retryAfterSeconds <= s.windowSeconds);
        now += d.retryAfterSeconds * 1000;
        assert.equal(limiter.take(7, limit, { share: s.share }).ok, true);
      }
    }),
    { numRuns: 300 },
  );
});

Deno.test("a client evenly at 95% of its limit is never refused: 10/10s at one request every 1.05 s gets 24 × 200", () => {
  let now = 0;
  const limiter = new RateLimiter({ now: () => now });
  const limit = { count: 10, windowSeconds: 10 };
  const statuses: number[] = [];
  for (let i = 0; i < 24; i++) {
    now = i * 1050;
    statuses.push(limiter.take(1, limit, { share: 10 }).ok ? 200 : 429);
  }
  assert.deepEqual(statuses, Array(24).fill(200));
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
    resetSeconds: 10,
    retryAfterSeconds: 0,
  });
  now = 4_500;
  for (let i = 0; i < 4; i++) limiter.take(1, limit, { share: 5, scale: 2 });
  const refused = limiter.take(1, limit, { share: 5, scale: 2 });
  assert.equal(refused.ok, false);
  assert.equal(refused.remaining, 0);
  // The first request leaves the window at 10 s, 5.5 s from now.
  assert.equal(refused.retryAfterSeconds, 6);
  assert.equal(refused.resetSeconds, 6);
});

Deno.test("memory stays within its budget in bytes whatever the number of keys that call and the shares they use, idle keys going first", () => {
  let now = 0;
  const limiter = new RateLimiter({ now: () => now, maxBytes: 200_000 });
  // A busy key, under a minute's limit it uses up, with a log of 1024 times
  // (about 12 kB); thousands of others calling once a second at most.
  const busy = { count: 1024, windowSeconds: 60 };
  const other = { count: 1024, windowSeconds: 1 };
  const accepted: number[] = [];
  for (let id = 2; id <= 30_000; id++) {
    now += 10;
    if (limiter.take(1, busy, { share: 1024 }).ok) accepted.push(now);
    // Now and then another key uses all of its share, growing its log.
    const calls = id % 3000 === 0 ? 1024 : 1;
    for (let i = 0; i < calls; i++) limiter.take(id, other, { share: 1024 });
    assert.ok(limiter.bytes <= 200_000, `${limiter.bytes} bytes`);
  }
  assert.ok(limiter.size > 100);
  // The idle keys went, not the busy one: had its count been dropped, it
  // would have been accepted afresh within a minute.
  assert.ok(accepted.length > 1024);
  assertWithin(accepted, 60_000, 1024);
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
  // Another window keeps the times: what was accepted still counts.
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
