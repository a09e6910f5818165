import assert from "node:assert/strict";
import { LockoutTracker } from "../lib/lockout.ts";

function tracker(options: { maxClients?: number } = {}) {
  let now = 1_000_000;
  const t = new LockoutTracker({
    maxFailures: 3,
    windowSeconds: 60,
    lockSeconds: 300,
    now: () => now,
    ...options,
  });
  return { t, advance: (seconds: number) => (now += seconds * 1000) };
}

Deno.test("a client is locked at the threshold and told how long to wait", () => {
  const { t, advance } = tracker();
  assert.equal(t.fail("a"), null);
  assert.equal(t.fail("a"), null);
  assert.equal(t.retryAfter("a"), 0);
  const lock = t.fail("a");
  assert.equal(lock?.failures, 3);
  assert.equal(t.retryAfter("a"), 300);
  advance(120);
  assert.equal(t.retryAfter("a"), 180);
  advance(180);
  assert.equal(t.retryAfter("a"), 0, "the lock expires");
  assert.equal(t.fail("a"), null, "and the count starts again");
});

Deno.test("failures older than the window do not count", () => {
  const { t, advance } = tracker();
  t.fail("a");
  t.fail("a");
  advance(61);
  assert.equal(t.fail("a"), null);
  assert.equal(t.retryAfter("a"), 0);
  advance(30);
  assert.equal(t.fail("a"), null, "two failures within the last 60 s");
  assert.ok(t.fail("a"), "the third within 60 s locks");
});

Deno.test("a lock is reported once, however often the locked client fails", () => {
  const { t } = tracker();
  const locks = Array.from({ length: 20 }, () => t.fail("a")).filter((l) =>
    l !== null
  );
  assert.equal(locks.length, 1);
});

Deno.test("another client is unaffected by a locked one", () => {
  const { t } = tracker();
  for (let i = 0; i < 5; i++) t.fail("attacker");
  assert.ok(t.retryAfter("attacker") > 0);
  assert.equal(t.retryAfter("monitoring"), 0);
  t.fail("monitoring");
  assert.equal(t.retryAfter("monitoring"), 0);
});

/** Heap in use after a full collection (deno test runs with --expose-gc). */
function heapUsed(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return Deno.memoryUsage().heapUsed;
}

Deno.test("a flood from 300 000 addresses keeps the tracker at its bound", () => {
  assert.ok(
    "gc" in globalThis,
    "run with --v8-flags=--expose-gc, as deno task test does",
  );
  const { t } = tracker({ maxClients: 10_000 });
  const heapBefore = heapUsed();
  for (let i = 0; i < 300_000; i++) {
    t.fail(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  }
  assert.ok(t.size <= 10_000, `${t.size} tracked`);
  const grown = heapUsed() - heapBefore;
  // 10 000 entries of a few timestamps each: a few MB, where 300 000 would take tens.
  assert.ok(
    grown < 8 * 1024 * 1024,
    `heap grew by ${Math.round(grown / 1024 / 1024)} MB`,
  );
});

Deno.test("a flood of single failures from fresh addresses does not release a locked client", () => {
  const { t } = tracker({ maxClients: 100 });
  for (let i = 0; i < 3; i++) t.fail("guesser");
  assert.ok(t.retryAfter("guesser") > 0);
  for (let i = 0; i < 10_000; i++) t.fail(`10.1.${i >> 8}.${i & 255}`);
  assert.ok(t.retryAfter("guesser") > 0, "still locked");
  assert.ok(t.size <= 200);
});

Deno.test("the stalest counting client is forgotten first when the tracker is full", () => {
  const { t } = tracker({ maxClients: 3 });
  t.fail("old");
  t.fail("old");
  t.fail("b");
  t.fail("c");
  t.fail("d");
  assert.equal(t.size, 3);
  // "old" was forgotten: its earlier two failures no longer count.
  assert.equal(t.fail("old"), null);
  assert.equal(t.retryAfter("old"), 0);
});
