/**
 * Per-key rate limits, in memory, on each server's share of a key's limit
 * ("N requests in any window of W"): no store read or write per request.
 *
 * Each server logs the times of its accepted requests still in the last W,
 * and accepts one at t only while fewer than its share lie in (t − W, t].
 * Up to `EXACT_SHARE` the log holds one time per request, so the decision
 * is exact: within the share never refused, past it always, and Retry-After
 * and the reset to the millisecond, never more than W. A larger share is
 * logged in groups of ⌈share / EXACT_SHARE⌉, each at its latest time: the
 * count is high by under one request in EXACT_SHARE, and never low.
 * Memory stays within a budget in bytes for all keys. Shares across
 * servers: docs/design.md ("Rate limits").
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
  /** Scaled to the whole installation. */
  remaining: number;
  /** Until the oldest counted request leaves the window (0: none counted). */
  resetSeconds: number;
  retryAfterSeconds: number;
}

export interface RateLimiterOptions {
  /** Monotonic milliseconds. */
  now?: () => number;
  exactShare?: number;
  maxBytes?: number;
}

const EXACT_SHARE = 1024;

/** A key's bytes besides its entries: Map entry, object, arrays (measured: 550). */
const KEY_BYTES = 600;
/** An entry's bytes: its time and its count. */
const ENTRY_BYTES = 12;

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

/** `600/min`, `100/10s`, `50000/day`…; `none` is null; else throws, so a typo is never "no limit". */
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
  /** `invalid_rateLimit` (a count of 0) is the store's code for a limit out of range. */
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
  /** The window of the last request. */
  windowMs: number;
  /** A ring, oldest first from `head`, its length a power of two. */
  times: Float64Array;
  counts: Uint32Array;
  head: number;
  length: number;
  total: number;
  /** When the key last moved to the back of the eviction order. */
  moved: number;
}

const NO_TIMES = new Float64Array(0);
const NO_COUNTS = new Uint32Array(0);

/** Counts requests per key and decides, in memory, whether one more fits. */
export class RateLimiter {
  #now: () => number;
  #exactShare: number;
  #maxBytes: number;
  #bytes = 0;
  #counters = new Map<number, Counter>();

  constructor(options: RateLimiterOptions = {}) {
    this.#now = options.now ?? (() => performance.now());
    this.#exactShare = options.exactShare ?? EXACT_SHARE;
    this.#maxBytes = options.maxBytes ?? 64 * 1024 * 1024;
  }

  get size(): number {
    return this.#counters.size;
  }

  get bytes(): number {
    return this.#bytes;
  }

  /**
   * Counts one request if `share` (0 refuses all) has room; `scale` (the
   * servers sharing it) makes what remains the installation's, for the headers.
   */
  take(
    keyId: number,
    limit: RateLimit,
    options: { share: number; scale?: number },
  ): RateDecision {
    const now = this.#now();
    const windowMs = limit.windowSeconds * 1000;
    let counter = this.#counters.get(keyId);
    if (counter === undefined) {
      this.#makeRoom(KEY_BYTES, now);
      counter = {
        windowMs,
        times: NO_TIMES,
        counts: NO_COUNTS,
        head: 0,
        length: 0,
        total: 0,
        moved: now,
      };
      this.#counters.set(keyId, counter);
      this.#bytes += KEY_BYTES;
    } else if (now - counter.moved >= counter.windowMs / 10) {
      // Recency order, kept to a tenth of the window rather than per request
      // (a Map re-insertion on every request would be most of what the limit
      // costs): a key idle for longer moves to the front of eviction.
      this.#counters.delete(keyId);
      this.#counters.set(keyId, counter);
      counter.moved = now;
    }
    // A changed window keeps the times, so what was accepted counts under the
    // new one from when it was: a changed share or window only changes what
    // is compared with them, from this request on.
    counter.windowMs = windowMs;
    this.#prune(counter, now);
    const share = Math.max(0, Math.floor(options.share));
    const ok = counter.total < share;
    if (ok) {
      this.#count(keyId, counter, now, Math.ceil(share / this.#exactShare));
    }
    const scale = options.scale ?? 1;
    return {
      ok,
      remaining: Math.max(0, share - counter.total) * scale,
      resetSeconds: counter.length === 0
        ? 0
        : Math.ceil((counter.times[counter.head] + windowMs - now) / 1000),
      retryAfterSeconds: ok
        ? 0
        : Math.max(1, Math.ceil(this.#freedMs(counter, now, share) / 1000)),
    };
  }

  /**
   * The requests of `keyId` counted in its window now (0 when none): a
   * share lowered to no less is never exceeded in any window ending later,
   * as what lies in the window only leaves it and each accept needs room.
   */
  used(keyId: number): number {
    const counter = this.#counters.get(keyId);
    if (counter === undefined) return 0;
    this.#prune(counter, this.#now());
    return counter.total;
  }

  /** Drops the entries that have left the window. */
  #prune(counter: Counter, now: number): void {
    const { times, counts, windowMs } = counter;
    const mask = times.length - 1;
    while (counter.length > 0 && times[counter.head] + windowMs <= now) {
      counter.total -= counts[counter.head];
      counter.head = (counter.head + 1) & mask;
      counter.length--;
    }
  }

  /** Logs one accepted request, in the newest entry while it holds < `group`. */
  #count(keyId: number, counter: Counter, now: number, group: number): void {
    counter.total++;
    let mask = counter.times.length - 1;
    const newest = (counter.head + counter.length - 1) & mask;
    if (counter.length > 0 && counter.counts[newest] < group) {
      counter.counts[newest]++;
      counter.times[newest] = now;
      return;
    }
    if (counter.length === counter.times.length) {
      this.#grow(keyId, counter, now);
      mask = counter.times.length - 1;
    }
    const at = (counter.head + counter.length) & mask;
    counter.times[at] = now;
    counter.counts[at] = 1;
    counter.length++;
  }

  /** Doubles a full ring. */
  #grow(keyId: number, counter: Counter, now: number): void {
    const old = counter.times.length;
    const size = Math.max(4, old * 2);
    // Out of the table while room is made, so that it is not what goes.
    this.#counters.delete(keyId);
    this.#makeRoom((size - old) * ENTRY_BYTES, now);
    this.#counters.set(keyId, counter);
    counter.moved = now;
    const times = new Float64Array(size);
    const counts = new Uint32Array(size);
    for (let i = 0; i < counter.length; i++) {
      times[i] = counter.times[(counter.head + i) & (old - 1)];
      counts[i] = counter.counts[(counter.head + i) & (old - 1)];
    }
    counter.times = times;
    counter.counts = counts;
    counter.head = 0;
    this.#bytes += (size - old) * ENTRY_BYTES;
  }

  /** Milliseconds until enough old entries leave for one request to fit. */
  #freedMs(counter: Counter, now: number, share: number): number {
    const { times, counts, windowMs } = counter;
    const mask = times.length - 1;
    let total = counter.total;
    for (let i = 0; i < counter.length && share > 0; i++) {
      const at = (counter.head + i) & mask;
      total -= counts[at];
      if (total < share) return times[at] + windowMs - now;
    }
    return windowMs;
  }

  /** Keeps the counts within budget: idle keys first, then the least recent. */
  #makeRoom(bytes: number, now: number): void {
    const fits = () => this.#bytes + bytes <= this.#maxBytes;
    if (fits()) return;
    for (const [id, counter] of this.#counters) {
      const newest = (counter.head + counter.length - 1) &
        (counter.times.length - 1);
      if (
        counter.length === 0 ||
        counter.times[newest] + counter.windowMs <= now
      ) this.#drop(id, counter);
      if (fits()) return;
    }
    // All busy: the least recent go, and may start afresh. Bounded memory
    // wins over the keys that have not called for the longest time.
    for (const [id, counter] of this.#counters) {
      this.#drop(id, counter);
      if (fits()) return;
    }
  }

  #drop(id: number, counter: Counter): void {
    this.#counters.delete(id);
    this.#bytes -= KEY_BYTES + counter.times.length * ENTRY_BYTES;
  }
}
