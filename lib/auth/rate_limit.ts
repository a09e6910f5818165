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
 * A key of a rotation line also counts on its line's counter
 * ({@linkcode lineCounter}, limit 2L): a request is accepted only if both
 * have room, and counted on both or neither. A line's counter starts from
 * its first key's own log here, and that key's requests feed it from then
 * on even when they come with a record that predates the rotation.
 *
 * @module
 */

import { isRateLimit, RATE_MAX_COUNT } from "../store/rate_limits.ts";
import type { RateLimit } from "../store/types.ts";

export type { RateLimit };
export { isRateLimit, RATE_MAX_COUNT };
export { formatRate, parseRate, RateSyntaxError } from "./rate_syntax.ts";

/** What {@linkcode RateLimiter.take} decided, with what the headers say. */
export interface RateDecision {
  ok: boolean;
  /** Scaled to the whole installation. */
  remaining: number;
  /** Until the oldest counted request leaves the window (0: none counted). */
  resetSeconds: number;
  retryAfterSeconds: number;
  /**
   * Given by a key of a rotation line: whether it was refused by the line's
   * count alone (its own had room), so the line is what to wait on.
   */
  lineFull?: boolean;
}

/** A key's line, for {@linkcode RateLimiter.take}: its first key, and this server's share of 2L. */
export interface LineTake {
  root: number;
  share: number;
  scale?: number;
}

/**
 * The counter of the rotation line whose first key is `root`: negative,
 * so that it is no key's own (ids start at 1).
 */
export function lineCounter(root: number): number {
  return -root;
}

const LINE_LIMITS = new WeakMap<RateLimit, RateLimit>();

/** A line's limit for keys of limit `limit`: twice the count, the same window (one object per limit). */
export function lineLimit(limit: RateLimit): RateLimit {
  let line = LINE_LIMITS.get(limit);
  if (line === undefined) {
    line = { count: 2 * limit.count, windowSeconds: limit.windowSeconds };
    LINE_LIMITS.set(limit, line);
  }
  return line;
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
  /** On a line's first key: the line's counter, fed by every request it accepts. */
  line: Counter | undefined;
  /** The share last taken with; what a request fed through `line` meets. */
  share: number;
  /** On a line's counter: the line's first key (0 on a key's own). */
  root: number;
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
    options: { share: number; scale?: number; line?: LineTake },
  ): RateDecision {
    const now = this.#now();
    const windowMs = limit.windowSeconds * 1000;
    const counter = this.#counter(keyId, windowMs, now);
    const share = Math.max(0, Math.floor(options.share));
    const scale = options.scale ?? 1;
    // Undefined for a key never rotated: one counter, as before lines.
    const line = options.line === undefined
      ? counter.line
      : this.#line(options.line, windowMs, now);
    if (line !== undefined) {
      return this.#takeBoth(keyId, { counter, share, scale }, {
        line,
        lineShare: options.line === undefined
          ? line.share
          : Math.max(0, Math.floor(options.line.share)),
        lineScale: options.line?.scale ?? scale,
        now,
      });
    }
    counter.share = share;
    const ok = counter.total < share;
    if (ok) {
      this.#count(keyId, counter, now, Math.ceil(share / this.#exactShare));
    }
    return {
      ok,
      remaining: Math.max(0, share - counter.total) * scale,
      resetSeconds: this.#resetSeconds(counter, now),
      retryAfterSeconds: ok
        ? 0
        : Math.max(1, Math.ceil(this.#freedMs(counter, now, share) / 1000)),
    };
  }

  /** A line key's request: accepted only if both counters have room, counted on both or neither. */
  #takeBoth(
    keyId: number,
    own: { counter: Counter; share: number; scale: number },
    options: {
      line: Counter;
      lineShare: number;
      lineScale: number;
      now: number;
    },
  ): RateDecision {
    const { counter, share, scale } = own;
    const { line, lineShare, lineScale, now } = options;
    const lineId = lineCounter(line.root);
    // Reached through the first key's link, it was not pruned yet.
    this.#prune(line, now);
    counter.share = share;
    line.share = lineShare;
    const keyRoom = counter.total < share;
    const lineRoom = line.total < lineShare;
    const ok = keyRoom && lineRoom;
    if (ok) {
      this.#count(keyId, counter, now, Math.ceil(share / this.#exactShare));
      const group = Math.ceil(lineShare / this.#exactShare);
      this.#count(lineId, line, now, group);
    }
    const keyLeft = Math.max(0, share - counter.total) * scale;
    const lineLeft = Math.max(0, lineShare - line.total) * lineScale;
    // What binds the key: its own count, or the line's when that has less.
    const binding = lineLeft < keyLeft ? line : counter;
    const keyWait = keyRoom ? 0 : this.#freedMs(counter, now, share);
    const lineWait = lineRoom ? 0 : this.#freedMs(line, now, lineShare);
    return {
      ok,
      remaining: Math.min(keyLeft, lineLeft),
      resetSeconds: this.#resetSeconds(binding, now),
      retryAfterSeconds: ok
        ? 0
        : Math.max(1, Math.ceil(Math.max(keyWait, lineWait) / 1000)),
      lineFull: keyRoom && !lineRoom,
    };
  }

  /** `keyId`'s counter, made if new, pruned to the window ending now. */
  #counter(keyId: number, windowMs: number, now: number): Counter {
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
        // A line made from this key before its counter (dropped, or never
        // made here) still hears of its requests.
        line: keyId > 0 ? this.#counters.get(lineCounter(keyId)) : undefined,
        share: 0,
        root: 0,
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
    return counter;
  }

  /**
   * The counter of the line of `take.root`. Made, it starts from the first
   * key's own log here (its requests before the rotation are the line's
   * too), and the first key's counter feeds it from then on.
   */
  #line(take: LineTake, windowMs: number, now: number): Counter {
    const id = lineCounter(take.root);
    const known = this.#counters.has(id);
    const line = this.#counter(id, windowMs, now);
    if (known) return line;
    line.root = take.root;
    const first = this.#counters.get(take.root);
    if (first === undefined) return line;
    this.#prune(first, now);
    first.line = line;
    while (line.times.length < first.length) this.#grow(id, line, now);
    for (let i = 0; i < first.length; i++) {
      const at = (first.head + i) & (first.times.length - 1);
      this.#append(id, line, first.times[at], first.counts[at]);
      line.total += first.counts[at];
    }
    return line;
  }

  #resetSeconds(counter: Counter, now: number): number {
    return counter.length === 0 ? 0 : Math.ceil(
      (counter.times[counter.head] + counter.windowMs - now) / 1000,
    );
  }

  /**
   * The requests of `keyId` counted in its window now (0 when none): a
   * share lowered to no less is never exceeded in any window ending later,
   * as what lies in the window only leaves it and each accept needs room.
   */
  used(keyId: number): number {
    const counter = this.#counted(keyId);
    if (counter === undefined) return 0;
    this.#prune(counter, this.#now());
    return counter.total;
  }

  /** Milliseconds until `keyId` has room under `share` (0: room now). */
  freesInMs(keyId: number, share: number): number {
    const counter = this.#counted(keyId);
    if (counter === undefined) return 0;
    const now = this.#now();
    this.#prune(counter, now);
    return counter.total < share ? 0 : this.#freedMs(counter, now, share);
  }

  /**
   * What counts for `keyId`: a line's counter not made here yet (no key of
   * the line reached this server since its rotation) is its first key's own
   * log, which it would start from, so a server never reports (and lends)
   * room the line has used; once made, it holds that log and more.
   */
  #counted(keyId: number): Counter | undefined {
    const counter = this.#counters.get(keyId);
    return counter ?? (keyId < 0 ? this.#counters.get(-keyId) : undefined);
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
    const mask = counter.times.length - 1;
    const newest = (counter.head + counter.length - 1) & mask;
    if (counter.length > 0 && counter.counts[newest] < group) {
      counter.counts[newest]++;
      counter.times[newest] = now;
      return;
    }
    this.#append(keyId, counter, now, 1);
  }

  /** A new newest entry of `count` requests at `at`, the ring grown when full. */
  #append(keyId: number, counter: Counter, at: number, count: number): void {
    if (counter.length === counter.times.length) {
      this.#grow(keyId, counter, at);
    }
    const slot = (counter.head + counter.length) & (counter.times.length - 1);
    counter.times[slot] = at;
    counter.counts[slot] = count;
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
    // A line's first key stops feeding it: a line made again starts afresh
    // from that key's log.
    const first = counter.root > 0 ? this.#counters.get(counter.root) : null;
    if (first?.line === counter) first.line = undefined;
    this.#bytes -= KEY_BYTES + counter.times.length * ENTRY_BYTES;
  }
}
