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
  assert.ok(t.size <= 3 * 10_000, `${t.size} tracked`);
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
  assert.ok(t.size <= 300, `${t.size} tracked`);
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

Deno.test("round-robin failures over 20 000 addresses in one /16 are still locked out, by network and globally", () => {
  // The attack that walked around the old tracker: every counter was evicted
  // before it reached the threshold. 10 rounds over 20 000 addresses.
  const { t } = tracker({ maxClients: 1_000 });
  let refused = 0;
  let counted = 0;
  for (let round = 0; round < 10; round++) {
    for (let i = 0; i < 20_000; i++) {
      const address = `10.9.${i >> 8}.${i & 255}`;
      if (t.retryAfter(address) > 0) refused++;
      else {
        t.fail(address);
        counted++;
      }
    }
  }
  // 79 networks of /24, each locked at 10 × 3 failures.
  assert.ok(
    counted <= 79 * 30,
    `${counted} failures got through to a key check`,
  );
  assert.ok(refused >= 197_000, `${refused} refused`);
});

Deno.test("a network lock spares addresses in it that authenticated lately and have not failed since", () => {
  const { t } = tracker();
  t.succeeded("192.0.2.1");
  t.succeeded("192.0.2.2");
  t.fail("192.0.2.2"); // authenticated once, then started guessing
  for (let i = 10; i < 60; i++) t.fail(`192.0.2.${i}`);
  assert.ok(
    t.retryAfter("192.0.2.200") > 0,
    "a fresh address in the network waits",
  );
  assert.equal(t.retryAfter("192.0.2.1"), 0, "the honest client does not");
  assert.ok(t.retryAfter("192.0.2.2") > 0, "the one that failed does");
  assert.equal(t.retryAfter("192.0.3.1"), 0, "nor does the next network");
});

Deno.test("one valid key does not lift the network budget for every address that uses it", () => {
  const { t } = tracker();
  let guesses = 0;
  // An attacker authenticates from 254 addresses of one /24, then guesses from each.
  for (let i = 1; i < 255; i++) t.succeeded(`198.51.100.${i}`);
  for (let round = 0; round < 3; round++) {
    for (let i = 1; i < 255; i++) {
      const address = `198.51.100.${i}`;
      if (t.retryAfter(address) === 0) {
        t.fail(address);
        guesses++;
      }
    }
  }
  assert.ok(guesses <= 30 + 254, `${guesses} guesses`); // the network's budget, then one each
});

Deno.test("past the global budget a failing address is locked at its first failure, and honest newcomers are still served", () => {
  const { t, advance } = tracker();
  // 300 failures from 300 networks: no address or network reaches its threshold.
  for (let i = 0; i < 300; i++) t.fail(`10.${i >> 8}.${i & 255}.1`);
  assert.equal(t.retryAfter("198.51.100.1"), 0, "a new address is served");
  const lock = t.fail("198.51.100.1");
  assert.equal(lock?.scope, "global");
  assert.ok(
    t.retryAfter("198.51.100.1") > 0,
    "and locked at its first failure",
  );
  advance(121);
  t.fail("198.51.100.7");
  assert.equal(
    t.retryAfter("198.51.100.7"),
    0,
    "the usual threshold once the rate falls",
  );
});

Deno.test("a locked address stays locked however many other addresses fail", () => {
  const { t } = tracker({ maxClients: 50 });
  for (let i = 0; i < 3; i++) t.fail("198.51.100.9");
  for (let i = 0; i < 100_000; i++) {
    t.fail(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  }
  assert.ok(t.retryAfter("198.51.100.9") > 0);
});
