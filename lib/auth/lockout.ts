/**
 * Lock-out of clients that keep failing authentication (spec section 7),
 * counted over the current fixed window and the whole previous one, at three
 * levels: an address (IPv6 per /64), its network (/24, IPv6 /48), and
 * everywhere, past which an address is locked at its first failure (each
 * attacking address buys one guess; none is refused for the global rate alone).
 *
 * Counts and locks live in fixed-size tables of hashed cells (count-min
 * sketches), never in a table that forgets its oldest entry, which an
 * attacker with more addresses than its bound could count his way round.
 * Hashes are seeded per process so nobody can aim at someone else's cells.
 * Collisions only add: a count is never low and a lock never ends early;
 * a full table costs false lock-outs, never missed ones. A valid key is
 * never refused by a lock (lib/http/authenticate.ts says why).
 *
 * @module
 */

import { networkKey } from "../net/client_address.ts";

export interface LockoutOptions {
  /** From one address within the window. */
  maxFailures: number;
  windowSeconds: number;
  lockSeconds: number;
  /** Default 10 × `maxFailures`. */
  networkMaxFailures?: number;
  /** Default 100 × `maxFailures`. */
  globalMaxFailures?: number;
  /** A power of two; default 32 768. */
  sketchWidth?: number;
  now?: () => number;
}

/** The defaults of LOCKOUT_MAX_FAILURES, LOCKOUT_WINDOW_SECONDS and LOCKOUT_SECONDS. */
export const DEFAULT_LOCKOUT: Pick<
  LockoutOptions,
  "maxFailures" | "windowSeconds" | "lockSeconds"
> = { maxFailures: 10, windowSeconds: 60, lockSeconds: 300 };

export type LockScope = "address" | "network" | "global";

/** A lock a failure caused. */
export interface LockEvent {
  scope: LockScope;
  client: string;
  failures: number;
  /** The very time `Retry-After` counts down to. */
  lockedUntil: Date;
}

/** Hashed rows per table: four rows make a false match the product of four small chances. */
const ROWS = 4;
const DEFAULT_WIDTH = 32_768;

/** The cells a key falls on, one per row. */
class Cells {
  readonly width: number;
  readonly #mask: number;
  readonly #seeds = crypto.getRandomValues(new Uint32Array(2));
  /** Reused, valid until the next call: a lookup allocates nothing. */
  readonly #at = new Uint32Array(ROWS);

  constructor(width: number) {
    if (!Number.isInteger(Math.log2(width)) || width < 1) {
      throw new RangeError(`sketchWidth must be a power of two, not ${width}`);
    }
    this.width = width;
    this.#mask = width - 1;
  }

  of(key: string): Uint32Array {
    const h1 = hash(key, this.#seeds[0]);
    // Odd, so the rows' cells differ (double hashing).
    const h2 = hash(key, this.#seeds[1]) | 1;
    for (let row = 0; row < ROWS; row++) {
      this.#at[row] = row * this.width + ((h1 + row * h2) & this.#mask);
    }
    return this.#at;
  }
}

/** MurmurHash3-style, 32 bits, of the key's UTF-16 units. */
function hash(key: string, seed: number): number {
  let h = seed;
  for (let i = 0; i < key.length; i++) {
    let k = Math.imul(key.charCodeAt(i), 0xcc9e2d51);
    k = Math.imul((k << 15) | (k >>> 17), 0x1b873593);
    h ^= k;
    h = Math.imul((h << 13) | (h >>> 19), 5) + 0xe6546b64;
  }
  h ^= key.length;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/**
 * A count-min sketch of two-bucket windows; every cell shares the windows'
 * start, so a roll is a swap of two arrays. Only the cells at the key's
 * smallest count are raised (conservative update): still never below a
 * key's own count.
 */
class CountSketch {
  readonly #cells: Cells;
  #current: Uint32Array;
  #previous: Uint32Array;
  #start: number;

  constructor(width: number, now: number) {
    this.#cells = new Cells(width);
    this.#current = new Uint32Array(ROWS * width);
    this.#previous = new Uint32Array(ROWS * width);
    this.#start = now;
  }

  get bytes(): number {
    return this.#current.byteLength + this.#previous.byteLength;
  }

  /** The key's estimate in the last window. */
  add(key: string, now: number, windowMs: number): number {
    this.#roll(now, windowMs);
    const at = this.#cells.of(key);
    let least = Infinity;
    for (const i of at) least = Math.min(least, this.#current[i]);
    for (const i of at) {
      if (this.#current[i] === least) this.#current[i] = least + 1;
    }
    return this.#estimate(at);
  }

  /**
   * The whole previous window counts, not a share by how much of it still
   * overlaps: failures bunched at its end are inside the sliding window,
   * and weighted down they let a client 2 × the threshold less one 401s
   * within one window. Whole, any stretch of one window sees at most the
   * threshold; the price is that a failure counts for up to two windows.
   */
  #estimate(at: Uint32Array): number {
    let least = Infinity;
    for (const i of at) {
      least = Math.min(least, this.#current[i] + this.#previous[i]);
    }
    return least;
  }

  #roll(now: number, windowMs: number): void {
    const windows = Math.floor((now - this.#start) / windowMs);
    if (windows <= 0) return;
    if (windows === 1) {
      [this.#previous, this.#current] = [this.#current, this.#previous];
      this.#current.fill(0);
    } else {
      this.#previous.fill(0);
      this.#current.fill(0);
    }
    this.#start += windows * windowMs;
  }
}

/** "Locked until" per key, the earliest of its cells: a lock is never lost, at worst shared. */
class LockSketch {
  readonly #cells: Cells;
  readonly #until: Float64Array;
  /** The latest end of any lock: past it, no lookup is needed at all. */
  #latest = -Infinity;

  constructor(width: number) {
    this.#cells = new Cells(width);
    this.#until = new Float64Array(ROWS * width);
  }

  get bytes(): number {
    return this.#until.byteLength;
  }

  lock(key: string, until: number): void {
    for (const i of this.#cells.of(key)) {
      if (this.#until[i] < until) this.#until[i] = until;
    }
    if (until > this.#latest) this.#latest = until;
  }

  active(now: number): boolean {
    return now < this.#latest;
  }

  until(key: string, now: number): number {
    if (now >= this.#latest) return 0;
    let earliest = Infinity;
    for (const i of this.#cells.of(key)) {
      earliest = Math.min(earliest, this.#until[i]);
    }
    return earliest > now ? earliest : 0;
  }
}

/** Counts failed authentications and locks repeat offenders. */
export class LockoutTracker {
  readonly maxFailures: number;
  readonly #networkMax: number;
  readonly #globalMax: number;
  readonly #windowMs: number;
  readonly #lockMs: number;
  readonly #now: () => number;
  readonly #addresses: CountSketch;
  readonly #networks: CountSketch;
  /** The one global count: a sketch of one cell per row. */
  readonly #global: CountSketch;
  /** Address locks, by threshold or under a flood: one table, so neither can push the other out. */
  readonly #addressLocks: LockSketch;
  readonly #networkLocks: LockSketch;

  constructor(options: LockoutOptions) {
    this.maxFailures = options.maxFailures;
    this.#networkMax = options.networkMaxFailures ?? options.maxFailures * 10;
    this.#globalMax = options.globalMaxFailures ?? options.maxFailures * 100;
    this.#windowMs = options.windowSeconds * 1000;
    this.#lockMs = options.lockSeconds * 1000;
    this.#now = options.now ?? Date.now;
    const width = options.sketchWidth ?? DEFAULT_WIDTH;
    const now = this.#now();
    this.#addresses = new CountSketch(width, now);
    this.#networks = new CountSketch(width, now);
    this.#addressLocks = new LockSketch(width);
    this.#networkLocks = new LockSketch(width);
    this.#global = new CountSketch(1, now);
  }

  /** Seconds the client must still wait; 0: none. */
  retryAfter(client: string): number {
    const now = this.#now();
    const own = this.#addressLocks.until(client, now);
    // The network's lock counts too when it is the longer one, so a lock
    // that a collision gave the address never shortens a real one.
    const network = this.#networkLocks.active(now)
      ? this.#networkLocks.until(networkKey(client), now)
      : 0;
    const until = Math.max(own, network);
    return until === 0 ? 0 : Math.ceil((until - now) / 1000);
  }

  /** Returns the lock this failure caused; a locked client is not counted again. */
  fail(client: string): LockEvent | null {
    if (this.retryAfter(client) > 0) return null;
    const now = this.#now();
    const window = this.#windowMs;
    const until = now + this.#lockMs;
    const globalCount = this.#global.add("*", now, window);
    const network = networkKey(client);
    const networkCount = this.#networks.add(network, now, window);
    const count = this.#addresses.add(client, now, window);
    let event: LockEvent | null = null;
    if (
      networkCount >= this.#networkMax &&
      this.#networkLocks.until(network, now) === 0
    ) {
      this.#networkLocks.lock(network, until);
      event = lockEvent("network", network, networkCount, until);
    }
    if (count >= this.maxFailures) {
      this.#addressLocks.lock(client, until);
      return event ?? lockEvent("address", client, count, until);
    }
    if (globalCount >= this.#globalMax) {
      this.#addressLocks.lock(client, until);
      return event ?? lockEvent("global", client, count, until);
    }
    return event;
  }

  /** Fixed at construction, whatever the traffic. */
  get tableBytes(): number {
    return this.#addresses.bytes + this.#networks.bytes +
      this.#addressLocks.bytes + this.#networkLocks.bytes;
  }
}

function lockEvent(
  scope: LockScope,
  client: string,
  failures: number,
  until: number,
): LockEvent {
  return {
    scope,
    client,
    failures: Math.round(failures),
    lockedUntil: new Date(until),
  };
}
