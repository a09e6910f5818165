import assert from "node:assert/strict";
import fc from "fast-check";
import { networkKey } from "../../lib/net/client_address.ts";
import { type LockoutOptions, LockoutTracker } from "../../lib/auth/lockout.ts";

function tracker(options: Partial<LockoutOptions> = {}) {
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

Deno.test("failures count until the window after theirs has ended, and not after", () => {
  const { t, advance } = tracker();
  t.fail("a");
  t.fail("a");
  advance(121);
  assert.equal(t.fail("a"), null, "two windows on: the first two are gone");
  assert.equal(t.retryAfter("a"), 0);
  advance(30);
  assert.equal(t.fail("a"), null, "two failures within the last 60 s");
  assert.ok(t.fail("a"), "the third within 60 s locks");
});

Deno.test("one address never gets more than the threshold's 401s in any stretch of one window, however it times its failures (property)", () => {
  // What beat an estimate weighting the previous window by its overlap:
  // failures bunched at a window's end, then more just after its start.
  fc.assert(
    fc.property(
      // Bursts (gaps of a few hundred ms) between waits up to a window.
      fc.array(
        fc.oneof(
          fc.constantFrom(0, 250, 500),
          fc.integer({ min: 0, max: 61_000 }),
        ),
        { maxLength: 200 },
      ),
      (gaps) => {
        const { t, advance } = tracker({ lockSeconds: 60 });
        let now = 0;
        const answered401: number[] = [];
        for (const gap of gaps) {
          advance(gap / 1000);
          now += gap;
          // As the authentication step answers a failing request.
          if (t.retryAfter("a") > 0) continue;
          t.fail("a");
          answered401.push(now);
        }
        for (const end of answered401) {
          const within = answered401.filter((at) =>
            at > end - 60_000 && at <= end
          );
          assert.ok(within.length <= 3, `${within.length} × 401 within 60 s`);
        }
      },
    ),
    { numRuns: 300 },
  );
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
  const { t } = tracker();
  const tables = t.tableBytes;
  const heapBefore = heapUsed();
  for (let i = 0; i < 300_000; i++) {
    t.fail(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  }
  assert.equal(t.tableBytes, tables, "the hashed tables never grow");
  assert.ok(tables <= 4 * 1024 * 1024, `${tables} bytes of tables`);
  const grown = heapUsed() - heapBefore;
  // Nothing per address: 300 000 entries of anything would take tens of MB.
  assert.ok(
    grown < 8 * 1024 * 1024,
    `heap grew by ${Math.round(grown / 1024 / 1024)} MB`,
  );
});

Deno.test("a flood of single failures from fresh addresses does not release a locked client", () => {
  const { t } = tracker();
  for (let i = 0; i < 3; i++) t.fail("guesser");
  assert.ok(t.retryAfter("guesser") > 0);
  for (let i = 0; i < 10_000; i++) t.fail(`10.1.${i >> 8}.${i & 255}`);
  assert.ok(t.retryAfter("guesser") > 0, "still locked");
});

Deno.test("round-robin failures over 20 000 addresses in one /16 are still locked out, by network and globally", () => {
  // The attack that walked around the old tracker: every counter was evicted
  // before it reached the threshold. 10 rounds over 20 000 addresses.
  const { t } = tracker();
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
  const { t } = tracker();
  for (let i = 0; i < 3; i++) t.fail("198.51.100.9");
  for (let i = 0; i < 100_000; i++) {
    t.fail(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  }
  assert.ok(t.retryAfter("198.51.100.9") > 0);
});

/** 127.X.Y.7: every address in a /24 of its own, as in the attack that walked round the old tables. */
function spreadAddress(i: number): string {
  return `127.${(i >> 8) & 255}.${i & 255}.7`;
}

Deno.test("invented keys from 12 000 addresses in distinct /24s, cycled three times, are refused from the second pass on", () => {
  // The server's defaults: 10 failures a minute, locked for 5 minutes.
  const { t, advance } = tracker({ maxFailures: 10, windowSeconds: 60 });
  const answers = { 401: 0, 429: 0 };
  for (let pass = 0; pass < 3; pass++) {
    for (let i = 0; i < 12_000; i++) {
      advance(0.002); // 500 guesses a second
      const address = spreadAddress(i);
      if (t.retryAfter(address) > 0) {
        answers[429]++;
        continue;
      }
      // As the authentication step answers: the failure that locks is a
      // 401, one that finds the lock taken meanwhile a 429.
      const lock = t.fail(address);
      answers[lock === null && t.retryAfter(address) > 0 ? 429 : 401]++;
    }
  }
  // The old tables evicted first-in-first-out at 10 000: 36 000 × 401.
  // Past 1 000 failures a minute each address is locked at its first one,
  // so only the first 1 000 or so addresses get a second guess.
  assert.ok(answers[401] <= 12_000 + 1_000, `${answers[401]} × 401`);
  assert.ok(answers[429] >= 2 * 12_000 - 1_000, `${answers[429]} × 429`);
});

Deno.test("no address gets more than the threshold's guesses in a window, however many addresses take turns", () => {
  // The network and global levels switched off: the address level alone holds.
  const { t } = tracker({
    networkMaxFailures: Infinity,
    globalMaxFailures: Infinity,
  });
  const guesses = new Map<string, number>();
  for (let pass = 0; pass < 12; pass++) {
    for (let i = 0; i < 12_000; i++) {
      const address = spreadAddress(i);
      if (t.retryAfter(address) > 0) continue;
      t.fail(address);
      guesses.set(address, (guesses.get(address) ?? 0) + 1);
    }
  }
  const most = Math.max(...guesses.values());
  assert.ok(most <= 3, `one address guessed ${most} times`);
});

Deno.test("a global lock's event ends when Retry-After says, after the lock period", () => {
  const { t, advance } = tracker();
  for (let i = 0; i < 300; i++) t.fail(`10.${i >> 8}.${i & 255}.1`);
  advance(20);
  const lock = t.fail("198.51.100.1");
  assert.equal(lock?.scope, "global");
  assert.equal(t.retryAfter("198.51.100.1"), 300);
  assert.equal(
    lock!.lockedUntil.getTime() - (1_000_000 + 20_000),
    300_000,
    "the log line's end is the lock's end",
  );
});

/**
 * The reference model: the same rules with exact per-address and
 * per-network counts in unbounded maps, windows aligned as the tracker's.
 */
class ExactLockout {
  #counts = new Map<
    string,
    { start: number; current: number; previous: number }
  >();
  #locks = new Map<string, number>();
  constructor(
    readonly options: LockoutOptions & { networkMaxFailures: number },
    readonly now: () => number,
    readonly origin: number,
  ) {}

  #add(key: string): number {
    const now = this.now();
    const windowMs = this.options.windowSeconds * 1000;
    const aligned = this.origin +
      Math.floor((now - this.origin) / windowMs) * windowMs;
    const c = this.#counts.get(key) ??
      { start: aligned, current: 0, previous: 0 };
    const windows = Math.floor((now - c.start) / windowMs);
    if (windows > 0) {
      c.previous = windows === 1 ? c.current : 0;
      c.current = 0;
      c.start += windows * windowMs;
    }
    c.current++;
    this.#counts.set(key, c);
    return c.current + c.previous;
  }

  #until(key: string): number {
    const until = this.#locks.get(key) ?? 0;
    return until > this.now() ? until : 0;
  }

  retryAfter(client: string): number {
    const now = this.now();
    const until = Math.max(
      this.#until(`a ${client}`),
      this.#until(`n ${networkKey(client)}`),
    );
    return until === 0 ? 0 : Math.ceil((until - now) / 1000);
  }

  fail(client: string): void {
    const until = this.now() + this.options.lockSeconds * 1000;
    const network = `n ${networkKey(client)}`;
    if (
      this.#add(network) >= this.options.networkMaxFailures &&
      this.#until(network) === 0
    ) this.#locks.set(network, until);
    if (this.#add(`a ${client}`) >= this.options.maxFailures) {
      this.#locks.set(`a ${client}`, until);
    }
  }
}

const operation = fc.oneof(
  fc.record({ kind: fc.constant("fail" as const), who: fc.nat(39) }),
  fc.record({ kind: fc.constant("wait" as const), ms: fc.nat(200_000) }),
);

/** Forty addresses over four /24s, so networks fill up too. */
const address = (who: number) => `10.0.${who % 4}.${who}`;

function runAgainstModel(
  ops: { kind: string; who?: number; ms?: number }[],
  width: number,
  check: (tracker: number, model: number, who: string) => void,
): void {
  let now = 5_000_000;
  const options = {
    maxFailures: 3,
    windowSeconds: 60,
    lockSeconds: 90,
    networkMaxFailures: 8,
    globalMaxFailures: Infinity,
  };
  const t = new LockoutTracker({
    ...options,
    sketchWidth: width,
    now: () => now,
  });
  const model = new ExactLockout(options, () => now, now);
  for (const op of ops) {
    if (op.kind === "wait") now += op.ms!;
    else {
      const who = address(op.who!);
      // Only a failure the tracker counts reaches the model: both see the
      // same history, so any lock the model holds is one the tracker owes.
      if (t.retryAfter(who) === 0) {
        t.fail(who);
        model.fail(who);
      }
    }
    for (let i = 0; i < 40; i++) {
      check(t.retryAfter(address(i)), model.retryAfter(address(i)), address(i));
    }
  }
}

Deno.test("a lock is never missed or shortened, however the hashed cells collide (property, against an exact model)", () => {
  fc.assert(
    fc.property(fc.array(operation, { maxLength: 300 }), (ops) => {
      runAgainstModel(ops, 4, (tracker, model, who) => {
        assert.ok(
          tracker >= model,
          `${who}: the tracker says ${tracker} s where the exact model says ${model} s`,
        );
      });
    }),
    { numRuns: 200 },
  );
});

Deno.test("with room in the hashed cells, the tracker answers exactly as the exact model (property)", () => {
  fc.assert(
    fc.property(fc.array(operation, { maxLength: 300 }), (ops) => {
      runAgainstModel(ops, 32_768, (tracker, model, who) => {
        assert.equal(tracker, model, who);
      });
    }),
    { numRuns: 100 },
  );
});
