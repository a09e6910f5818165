/**
 * Lock-out of clients that keep failing authentication (spec section 7:
 * retrying a failing request in a loop leads to lock-out).
 *
 * Failures are counted per client address in a sliding window. Past the
 * threshold the client is locked for a fixed time, during which every
 * request from it is refused before any hashing or store read.
 *
 * Memory is bounded: at most `maxClients` addresses are tracked, each with
 * at most `maxFailures` timestamps. When full, the least recently failing
 * client is forgotten first, so a flood from many addresses pushes out its
 * own entries rather than growing the map.
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

interface Client {
  /** Failure times, oldest first, at most maxFailures of them. */
  failures: number[];
  /** 0 when not locked. */
  lockedUntil: number;
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
  // A Map iterates in insertion order; re-inserting on each failure keeps the
  // stalest client first, which is the one to forget when full.
  readonly #clients = new Map<string, Client>();

  constructor(options: LockoutOptions) {
    this.maxFailures = options.maxFailures;
    this.#windowMs = options.windowSeconds * 1000;
    this.#lockMs = options.lockSeconds * 1000;
    this.#maxClients = options.maxClients ?? 10_000;
    this.#now = options.now ?? Date.now;
  }

  /** Seconds the client must still wait, or 0 when it may proceed. */
  retryAfter(client: string): number {
    const entry = this.#clients.get(client);
    if (entry === undefined || entry.lockedUntil === 0) return 0;
    const left = entry.lockedUntil - this.#now();
    if (left > 0) return Math.ceil(left / 1000);
    // The lock expired: the client starts again with a clean slate.
    this.#clients.delete(client);
    return 0;
  }

  /** Records a failed authentication; returns the lock when this failure caused one. */
  fail(client: string): LockEvent | null {
    const now = this.#now();
    let entry = this.#clients.get(client);
    if (entry === undefined) {
      if (this.#clients.size >= this.#maxClients) {
        // Forget the stalest client. Should it still be locked, it is
        // released early: the price of a bound on memory under a flood.
        this.#clients.delete(this.#clients.keys().next().value!);
      }
      entry = { failures: [], lockedUntil: 0 };
    } else {
      this.#clients.delete(client);
    }
    this.#clients.set(client, entry);
    if (entry.lockedUntil > now) return null;
    const since = now - this.#windowMs;
    const failures = entry.failures.filter((t) => t > since);
    failures.push(now);
    entry.failures = failures.slice(-this.maxFailures);
    if (failures.length < this.maxFailures) return null;
    entry.lockedUntil = now + this.#lockMs;
    entry.failures = [];
    return {
      client,
      failures: failures.length,
      lockedUntil: new Date(entry.lockedUntil),
    };
  }

  /** How many clients are tracked: bounded by `maxClients`. */
  get size(): number {
    return this.#clients.size;
  }
}
