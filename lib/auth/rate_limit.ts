/**
 * Per-key rate limits, enforced in memory by each server on its share of a
 * key's limit: no store read or write per request.
 *
 * A limit is "N requests per window W". Each server counts a key's accepted
 * requests in `SLOTS + 1` buckets of W / SLOTS each, and accepts a request
 * only while the buckets that overlap the last W, the current one included,
 * hold fewer than its share. Any interval of length W lies within
 * `SLOTS + 1` consecutive buckets, so no interval of length W ever sees more
 * than the share accepted on one server: the bound is exact, never an
 * estimate. The price is on the safe side: a client that spreads its calls
 * evenly gets at least SLOTS / (SLOTS + 1) of the rate it is allowed (about
 * 91% with 10 slots), and never more than all of it. Memory is
 * `SLOTS + 1` counters per key that called within its window.
 *
 * How the shares follow the servers, and the bound across an installation,
 * are in docs/design.md ("Rate limits").
 *
 * @module
 */

import {
  isRateLimit,
  RATE_MAX_COUNT,
  RATE_MAX_WINDOW_SECONDS,
} from "../store/rate_limits.ts";
import type { RateLimit } from "../store/types.ts";

export type { RateLimit };
export { isRateLimit, RATE_MAX_COUNT };

/** What {@linkcode RateLimiter.take} decided, with what the headers say. */
export interface RateDecision {
  ok: boolean;
  /** Requests this server still accepts now, scaled to the whole installation. */
  remaining: number;
  /** Seconds until the oldest counted request leaves the window (0: none counted). */
  resetSeconds: number;
  /** When refused: seconds until one more request is accepted here. */
  retryAfterSeconds: number;
}

/** Options of {@linkcode RateLimiter}. */
export interface RateLimiterOptions {
  /** Monotonic milliseconds; tests move it. */
  now?: () => number;
  /** Buckets per window; more is closer to the full rate, and costs memory. */
  slots?: number;
  /** The most keys counted at once; idle ones go first. */
  maxKeys?: number;
}

/** The units a limit may be written in, in seconds. */
const UNITS: Record<string, number> = {
  s: 1,
  sec: 1,
  second: 1,
  m: 60,
  min: 60,
  minute: 60,
  h: 3600,
  hour: 3600,
  d: 86_400,
  day: 86_400,
};

/**
 * Reads `600/min`, `10/s`, `1000/h`, `50000/day` (also `/second`, `/minute`,
 * `/hour`), with an optional number of units (`100/10s`, `5000/15min`, as
 * {@linkcode formatRate} writes a window it has no unit for); `none` is null
 * (no limit). Throws {@linkcode RateSyntaxError} for anything else, so that
 * a typo is never read as "no limit".
 */
export function parseRate(text: string): RateLimit | null {
  const trimmed = text.trim().toLowerCase();
  if (trimmed === "none") return null;
  // A count of 0 is read, to be refused as out of range rather than as no rate.
  const match = /^(0+|[1-9][0-9]*)\/([1-9][0-9]{0,5})?([a-z]+)$/.exec(
    trimmed,
  );
  const seconds = match ? UNITS[match[3]] : undefined;
  if (match === null || seconds === undefined) {
    throw new RateSyntaxError("rate_syntax", text);
  }
  const windowSeconds = seconds * Number(match[2] ?? 1);
  if (windowSeconds > RATE_MAX_WINDOW_SECONDS) {
    throw new RateSyntaxError("rate_syntax", text);
  }
  const count = Number(match[1]);
  if (count < 1) throw new RateSyntaxError("invalid_rateLimit", text);
  if (count > RATE_MAX_COUNT) throw new RateSyntaxError("rate_too_large", text);
  return { count, windowSeconds };
}

/** `600/min`: the unit the window was written in, or seconds. */
export function formatRate(limit: RateLimit): string {
  const unit = WRITTEN[limit.windowSeconds];
  return unit === undefined
    ? `${limit.count}/${limit.windowSeconds}s`
    : `${limit.count}/${unit}`;
}

const WRITTEN: Record<number, string> = {
  1: "s",
  60: "min",
  3600: "h",
  86_400: "day",
};

/** A rate the console or the configuration could not read. */
export class RateSyntaxError extends Error {
  /**
   * `rate_syntax`, `rate_too_large`, or `invalid_rateLimit` for a count of
   * 0 (the store's code for a limit out of range).
   */
  readonly code: "rate_syntax" | "rate_too_large" | "invalid_rateLimit";
  constructor(code: RateSyntaxError["code"], text: string) {
    const rate = `Rate '${text.slice(0, 40)}'`;
    super(
      code === "rate_syntax"
        ? `${rate} is not a rate; write COUNT/UNIT such as 600/min, 10/s, 100/10s, 1000/h or 50000/day (a window of at most a day), or none`
        : code === "rate_too_large"
        ? `${rate} allows more than ${RATE_MAX_COUNT} requests; write a smaller count, or none for no limit`
        : `${rate} allows no requests; the count must be 1 to ${RATE_MAX_COUNT}, such as 600/min, or none for no limit`,
    );
    this.name = "RateSyntaxError";
    this.code = code;
  }
}

interface Counter {
  /** The window these counts were taken in: another carries their total over. */
  windowMs: number;
  /** Index (time / slot length) of the newest bucket. */
  newest: number;
  /** Ring of counts, `slots + 1` long; bucket i lives at i % length. */
  counts: Uint32Array;
  /** Their sum. */
  total: number;
}

/** Counts requests per key and decides, in memory, whether one more fits. */
export class RateLimiter {
  #now: () => number;
  #slots: number;
  #maxKeys: number;
  #counters = new Map<number, Counter>();

  /** A limiter with its own clock, or performance.now(). */
  constructor(options: RateLimiterOptions = {}) {
    this.#now = options.now ?? (() => performance.now());
    this.#slots = options.slots ?? 10;
    this.#maxKeys = options.maxKeys ?? 100_000;
  }

  /** How many keys hold counts now. */
  get size(): number {
    return this.#counters.size;
  }

  /**
   * Counts one request of key `keyId` under `limit` if this server's `share`
   * of it (requests per window; 0 refuses all) has room, and says so.
   * `scale` turns this server's remaining share into the installation's
   * (the number of servers sharing the limit) for the headers.
   */
  take(
    keyId: number,
    limit: RateLimit,
    options: { share: number; scale?: number },
  ): RateDecision {
    const now = this.#now();
    const windowMs = limit.windowSeconds * 1000;
    const slotMs = windowMs / this.#slots;
    const index = Math.floor(now / slotMs);
    let counter = this.#counters.get(keyId);
    if (counter === undefined || counter.windowMs !== windowMs) {
      // A new count keeps what was accepted: only the share is compared with
      // it, so a changed count holds from the next request. A changed window
      // cannot map the old buckets, so what they hold counts as accepted
      // now: never fewer than were, which may refuse more for one window.
      let carried = 0;
      if (counter === undefined) {
        this.#makeRoom(now);
      } else {
        this.#advance(
          counter,
          Math.floor(now / (counter.windowMs / this.#slots)),
        );
        carried = counter.total;
      }
      counter = {
        windowMs,
        newest: index,
        counts: new Uint32Array(this.#slots + 1),
        total: carried,
      };
      counter.counts[index % counter.counts.length] = carried;
      this.#counters.set(keyId, counter);
    } else if (index > counter.newest) {
      // Recency order, kept per bucket rather than per request (a Map
      // re-insertion on every request is most of what the limit costs): a
      // key idle for longer moves to the front of eviction.
      this.#counters.delete(keyId);
      this.#counters.set(keyId, counter);
    }
    this.#advance(counter, index);
    const share = Math.max(0, Math.floor(options.share));
    const scale = options.scale ?? 1;
    const ok = counter.total < share;
    if (ok) {
      counter.counts[index % counter.counts.length]++;
      counter.total++;
    }
    const reset = this.#resetMs(counter, index, slotMs, now);
    return {
      ok,
      remaining: Math.max(0, share - counter.total) * scale,
      resetSeconds: Math.ceil(reset / 1000),
      retryAfterSeconds: ok ? 0 : Math.max(
        1,
        Math.ceil(this.#freedMs(counter, index, slotMs, now, share) / 1000),
      ),
    };
  }

  /** Drops every count: for tests, and when the limits were reloaded wholesale. */
  clear(): void {
    this.#counters.clear();
  }

  /** Empties the buckets that have left the window by bucket `index`. */
  #advance(counter: Counter, index: number): void {
    const length = counter.counts.length;
    if (index - counter.newest >= length) {
      counter.counts.fill(0);
      counter.total = 0;
    } else {
      for (let i = counter.newest + 1; i <= index; i++) {
        counter.total -= counter.counts[i % length];
        counter.counts[i % length] = 0;
      }
    }
    if (index > counter.newest) counter.newest = index;
  }

  /** Milliseconds until the oldest bucket holding a count leaves the window. */
  #resetMs(
    counter: Counter,
    index: number,
    slotMs: number,
    now: number,
  ): number {
    const length = counter.counts.length;
    for (let i = index - length + 1; i <= index; i++) {
      if (counter.counts[((i % length) + length) % length] > 0) {
        return (i + length) * slotMs - now;
      }
    }
    return 0;
  }

  /** Milliseconds until enough old buckets leave for one request to fit. */
  #freedMs(
    counter: Counter,
    index: number,
    slotMs: number,
    now: number,
    share: number,
  ): number {
    if (share === 0) return counter.windowMs;
    const length = counter.counts.length;
    let total = counter.total;
    for (let i = index - length + 1; i <= index; i++) {
      total -= counter.counts[((i % length) + length) % length];
      if (total < share) return (i + length) * slotMs - now;
    }
    return counter.windowMs;
  }

  /** Keeps the table bounded: idle keys first, then the least recent. */
  #makeRoom(now: number): void {
    if (this.#counters.size < this.#maxKeys) return;
    for (const [id, counter] of this.#counters) {
      const slotMs = counter.windowMs / (counter.counts.length - 1);
      if (Math.floor(now / slotMs) - counter.newest >= counter.counts.length) {
        this.#counters.delete(id);
      }
      if (this.#counters.size < this.#maxKeys) return;
    }
    // All busy: the least recent goes, and may start afresh. Bounded memory
    // wins over a key that has not called for the longest time.
    this.#counters.delete(this.#counters.keys().next().value!);
  }
}
