/**
 * Lock-out of clients that keep failing authentication (spec section 7:
 * retrying a failing request in a loop leads to lock-out).
 *
 * Failures are counted in a sliding window, estimated from two fixed
 * windows: the previous window's count weighted by how much of it still
 * overlaps, plus the current one's. They are counted at three levels:
 *
 * - per client address (IPv6 per /64): `maxFailures` in the window locks
 *   the address for `lockSeconds`;
 * - per network (/24, IPv6 /48): `networkMaxFailures` locks the network
 *   for every address in it;
 * - everywhere: past `globalMaxFailures` in the window, an address is locked
 *   for `lockSeconds` at its first failure. Nobody is refused for the
 *   global rate alone, while each attacking address buys one guess.
 *
 * Addresses and networks are counted, and their locks kept, in fixed-size
 * tables of hashed cells (a count-min sketch, and the same shape holding
 * "locked until" times), never in a table that forgets its oldest entry:
 * a table that evicts lets an attacker with more addresses than its bound
 * count his way round it. Each address maps to one cell in each of `rows`
 * rows, through hashes seeded at random per process so nobody can choose
 * addresses that land on someone else's cells; its count is the smallest
 * of its cells and its lock the earliest end among them. Collisions only
 * add, so a count is never below the address's own failures and a lock
 * never ends early, whatever the number of addresses: the cost of a full
 * table is false lock-outs, never missed ones. A valid key is never
 * refused by a lock (lib/http/authenticate.ts says why).
 *
 * @module
 */

import { networkKey } from "../net/client_address.ts";

/** Options of {@linkcode LockoutTracker}. */
export interface LockoutOptions {
  /** Failures from one address within the window that lock it. */
  maxFailures: number;
  /** The sliding window, in seconds. */
  windowSeconds: number;
  /** How long a lock lasts, in seconds. */
  lockSeconds: number;
  /** Failures from one network that lock it; default 10 × `maxFailures`. */
  networkMaxFailures?: number;
  /** Failures from everywhere past which one failure locks an address; default 100 × `maxFailures`. */
  globalMaxFailures?: number;
  /** Cells per row of the hashed tables, a power of two; default 32 768. */
  sketchWidth?: number;
  /** The clock, in milliseconds; tests move it. */
  now?: () => number;
}

/**
 * The lock-out when nothing is set (LOCKOUT_MAX_FAILURES,
 * LOCKOUT_WINDOW_SECONDS and LOCKOUT_SECONDS in lib/server/config.ts default to it):
 * what a handler built without a configuration uses.
 */
export const DEFAULT_LOCKOUT: Pick<
  LockoutOptions,
  "maxFailures" | "windowSeconds" | "lockSeconds"
> = { maxFailures: 10, windowSeconds: 60, lockSeconds: 300 };

/** Which budget a lock was taken from: "global" locks an address at its first failure under a flood. */
export type LockScope = "address" | "network" | "global";

/** What {@linkcode LockoutTracker.fail} reports when a failure locks something. */
export interface LockEvent {
  scope: LockScope;
  /** The address, the network, or `*`. */
  client: string;
  failures: number;
  /** When the lock ends: the very time `Retry-After` counts down to. */
  lockedUntil: Date;
}

/** Hashed rows per table: four rows make a false match the product of four small chances. */
const ROWS = 4;
const DEFAULT_WIDTH = 32_768;

/** The cells a key falls on, one per row; hashes seeded per process. */
class Cells {
  readonly width: number;
  readonly #mask: number;
  readonly #seeds = crypto.getRandomValues(new Uint32Array(2));
  /** Reused: a lookup allocates nothing. */
  readonly #at = new Uint32Array(ROWS);

  constructor(width: number) {
    if (!Number.isInteger(Math.log2(width)) || width < 1) {
      throw new RangeError(`sketchWidth must be a power of two, not ${width}`);
    }
    this.width = width;
    this.#mask = width - 1;
  }

  /** The index of the key's cell in each row (valid until the next call). */
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

/** A 32-bit MurmurHash3-style hash of the key's UTF-16 units, seeded. */
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
 * Sliding-window failure counts of any number of keys in fixed memory: a
 * count-min sketch of two-bucket windows. Every cell shares the windows'
 * start, so a roll is a swap of two arrays. Only the cells at the key's
 * smallest count are raised (conservative update), which keeps every cell
 * at or above each of its keys' own count, and so the estimate too.
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

  /** Bytes held, whatever the number of keys. */
  get bytes(): number {
    return this.#current.byteLength + this.#previous.byteLength;
  }

  /** Counts one failure of the key; returns its estimate in the last window. */
  add(key: string, now: number, windowMs: number): number {
    this.#roll(now, windowMs);
    const at = this.#cells.of(key);
    let least = Infinity;
    for (const i of at) least = Math.min(least, this.#current[i]);
    for (const i of at) {
      if (this.#current[i] === least) this.#current[i] = least + 1;
    }
    return this.#estimate(at, now, windowMs);
  }

  #estimate(at: Uint32Array, now: number, windowMs: number): number {
    const overlap = 1 - (now - this.#start) / windowMs;
    let least = Infinity;
    for (const i of at) {
      least = Math.min(least, this.#current[i] + this.#previous[i] * overlap);
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

/**
 * When each of any number of keys is locked until, in fixed memory: a lock
 * raises the key's cells to its end, and a key is locked until the earliest
 * of its cells, so a lock is never shortened or lost, only possibly
 * shared by a key that falls on the same cells in every row.
 */
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

  /** Whether any key may be locked at `now`: when not, lookups can be skipped. */
  active(now: number): boolean {
    return now < this.#latest;
  }

  /** When the key's lock ends, or 0 when it has none at `now`. */
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

  /** Seconds the client must still wait, or 0 when it may proceed. */
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

  /**
   * Records a failed authentication; returns the lock this failure caused,
   * if any. A client that is locked already is not counted again.
   */
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

  /** Bytes the counters and locks hold: fixed at construction, whatever the traffic. */
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
