/**
 * Lock-out of clients that keep failing authentication (spec section 7:
 * retrying a failing request in a loop leads to lock-out).
 *
 * Failures are counted per client address in a sliding window. Past the
 * threshold the client is locked for a fixed time, during which every
 * request from it is refused before any hashing or store read.
 *
 * Memory is bounded: at most `maxClients` counting addresses, each with
 * fewer than `maxFailures` timestamps, plus at most `maxClients` locks. A
 * flood of failures from ever new addresses pushes out only the stalest
 * counters, never a lock.
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
  // Clients still counting: failure times, oldest first. A Map iterates in
  // insertion order and each failure re-inserts, so the stalest comes first,
  // and is the one forgotten when the map is full.
  readonly #failing = new Map<string, number[]>();
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
    const since = now - this.#windowMs;
    const failures = (this.#failing.get(client) ?? []).filter((t) => t > since);
    failures.push(now);
    this.#failing.delete(client);
    if (failures.length < this.maxFailures) {
      this.#failing.set(client, failures);
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
      failures: failures.length,
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
