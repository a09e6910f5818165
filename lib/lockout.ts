/**
 * Lock-out of clients that keep failing authentication (spec section 7:
 * retrying a failing request in a loop leads to lock-out).
 *
 * Failures are counted per client address in a sliding window, estimated
 * from two fixed windows: the previous window's count weighted by how much
 * of it still overlaps, plus the current one's. That is O(1) in time and
 * memory per client whatever the threshold, where a list of timestamps would
 * cost O(threshold). Past the threshold the client is locked for a fixed
 * time, during which every request from it is refused before any hashing or
 * store read.
 *
 * Memory is bounded: at most `maxClients` counting addresses plus at most
 * `maxClients` locks, three numbers each. A flood of failures from ever new
 * addresses pushes out only the stalest counters, never a lock.
 *
 * @module
 */

/** Options of {@linkcode LockoutTracker}. */
export interface LockoutOptions {
  /** Failures within the window that lock the client. */
  maxFailures: number;
  /** The sliding window, in seconds. */
  windowSeconds: number;
  /** How long a lock lasts, in seconds. */
  lockSeconds: number;
  /** The most addresses tracked at once. */
  maxClients?: number;
  /** The clock, in milliseconds; tests move it. */
  now?: () => number;
}

interface Counter {
  /** Start of the current fixed window, in ms. */
  windowStart: number;
  current: number;
  previous: number;
}

/** What {@linkcode LockoutTracker.fail} reports when a failure locks the client. */
export interface LockEvent {
  client: string;
  failures: number;
  lockedUntil: Date;
}

/** Counts failed authentications per client and locks repeat offenders. */
export class LockoutTracker {
  readonly maxFailures: number;
  readonly #windowMs: number;
  readonly #lockMs: number;
  readonly #maxClients: number;
  readonly #now: () => number;
  // Clients still counting. A Map iterates in insertion order and each
  // failure re-inserts, so the stalest comes first, and is the one forgotten
  // when the map is full.
  readonly #failing = new Map<string, Counter>();
  // Locked clients apart, so that a flood of single failures from fresh
  // addresses can push out only other counters, never a lock. Locks all
  // last the same time, so insertion order is expiry order.
  readonly #locked = new Map<string, number>();

  constructor(options: LockoutOptions) {
    this.maxFailures = options.maxFailures;
    this.#windowMs = options.windowSeconds * 1000;
    this.#lockMs = options.lockSeconds * 1000;
    this.#maxClients = options.maxClients ?? 10_000;
    this.#now = options.now ?? Date.now;
  }

  /** Seconds the client must still wait, or 0 when it may proceed. */
  retryAfter(client: string): number {
    const until = this.#locked.get(client);
    if (until === undefined) return 0;
    const left = until - this.#now();
    if (left > 0) return Math.ceil(left / 1000);
    // The lock expired: the client starts again with a clean slate.
    this.#locked.delete(client);
    return 0;
  }

  /** Records a failed authentication; returns the lock when this failure caused one. */
  fail(client: string): LockEvent | null {
    if (this.retryAfter(client) > 0) return null;
    const now = this.#now();
    const counter = this.#failing.get(client) ??
      { windowStart: now, current: 0, previous: 0 };
    const windows = Math.floor((now - counter.windowStart) / this.#windowMs);
    if (windows > 0) {
      counter.previous = windows === 1 ? counter.current : 0;
      counter.current = 0;
      counter.windowStart += windows * this.#windowMs;
    }
    counter.current++;
    const overlap = 1 - (now - counter.windowStart) / this.#windowMs;
    const failures = counter.current + counter.previous * overlap;
    this.#failing.delete(client);
    if (failures < this.maxFailures) {
      this.#failing.set(client, counter);
      if (this.#failing.size > this.#maxClients) {
        this.#forgetFirst(this.#failing);
      }
      return null;
    }
    const lockedUntil = now + this.#lockMs;
    this.#locked.set(client, lockedUntil);
    // Full of locks (an attacker with thousands of addresses, each failing
    // enough to be locked): the lock closest to expiry goes first.
    if (this.#locked.size > this.#maxClients) this.#forgetFirst(this.#locked);
    return {
      client,
      failures: Math.round(failures),
      lockedUntil: new Date(lockedUntil),
    };
  }

  /** How many clients are tracked: at most `maxClients` counting plus as many locked. */
  get size(): number {
    return this.#failing.size + this.#locked.size;
  }

  #forgetFirst(map: Map<string, unknown>): void {
    map.delete(map.keys().next().value!);
  }
}
