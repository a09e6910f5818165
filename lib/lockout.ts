/**
 * Lock-out of clients that keep failing authentication (spec section 7:
 * retrying a failing request in a loop leads to lock-out).
 *
 * Failures are counted in a sliding window, estimated from two fixed
 * windows: the previous window's count weighted by how much of it still
 * overlaps, plus the current one's. That is O(1) in time and memory whatever
 * the threshold. They are counted at three levels, so that memory stays
 * bounded without letting an attacker count his way out by spreading:
 *
 * - per client address (IPv6 per /64): `maxFailures` in the window locks
 *   the address for `lockSeconds`;
 * - per network (/24, IPv6 /48): `networkMaxFailures` locks the network
 *   for every address in it that has not authenticated lately without
 *   failing since;
 * - everywhere: past `globalMaxFailures` in the window, an address is locked
 *   at its first failure until the rate falls again. Nobody is refused for
 *   the global rate alone, so a flood cannot shut honest clients out, while
 *   each attacking address buys one guess.
 *
 * The per-address and per-network tables are bounded; a flood of fresh
 * addresses evicts the stalest counters, and what it evicts is still
 * counted one level up, where the flood itself crosses the threshold.
 * Locks are kept apart from counters, so a flood never pushes a lock out
 * while there is room, and addresses that authenticated are remembered
 * apart too, so an honest integrator keeps working through the network and
 * global locks an attack causes.
 *
 * @module
 */

import { networkKey } from "./client_address.ts";

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
  /** The most addresses (and networks) tracked at once, per table. */
  maxClients?: number;
  /** The clock, in milliseconds; tests move it. */
  now?: () => number;
}

/** Which budget a lock was taken from: "global" locks an address at its first failure under a flood. */
export type LockScope = "address" | "network" | "global";

/** What {@linkcode LockoutTracker.fail} reports when a failure locks something. */
export interface LockEvent {
  scope: LockScope;
  /** The address, the network, or `*`. */
  client: string;
  failures: number;
  lockedUntil: Date;
}

/** A two-bucket sliding-window counter. */
class Window {
  start: number;
  current = 0;
  previous = 0;

  constructor(now: number) {
    this.start = now;
  }

  /** Counts one event; returns the estimated events in the last window. */
  add(now: number, windowMs: number): number {
    this.#roll(now, windowMs);
    this.current++;
    return this.estimate(now, windowMs);
  }

  estimate(now: number, windowMs: number): number {
    this.#roll(now, windowMs);
    const overlap = 1 - (now - this.start) / windowMs;
    return this.current + this.previous * overlap;
  }

  #roll(now: number, windowMs: number): void {
    const windows = Math.floor((now - this.start) / windowMs);
    if (windows > 0) {
      this.previous = windows === 1 ? this.current : 0;
      this.current = 0;
      this.start += windows * windowMs;
    }
  }
}

/** An insertion-ordered map that forgets its oldest entry past a bound. */
class Bounded<V> extends Map<string, V> {
  constructor(readonly bound: number) {
    super();
  }

  /** Sets the entry as the newest. */
  touch(key: string, value: V): void {
    this.delete(key);
    this.set(key, value);
    if (this.size > this.bound) this.delete(this.keys().next().value!);
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
  readonly #addresses: Bounded<Window>;
  readonly #networks: Bounded<Window>;
  readonly #global: Window;
  // Locks all last the same time, so insertion order is expiry order: when
  // a table is full, the lock closest to expiry is the one that goes.
  readonly #addressLocks: Bounded<number>;
  readonly #networkLocks: Bounded<number>;
  /** Addresses locked at their first failure during a flood. */
  readonly #pressureLocks: Bounded<number>;
  /** Addresses that authenticated, with when; they pass network and global locks. */
  readonly #trusted: Bounded<number>;

  constructor(options: LockoutOptions) {
    this.maxFailures = options.maxFailures;
    this.#networkMax = options.networkMaxFailures ?? options.maxFailures * 10;
    this.#globalMax = options.globalMaxFailures ?? options.maxFailures * 100;
    this.#windowMs = options.windowSeconds * 1000;
    this.#lockMs = options.lockSeconds * 1000;
    this.#now = options.now ?? Date.now;
    const bound = options.maxClients ?? 10_000;
    this.#addresses = new Bounded(bound);
    this.#networks = new Bounded(bound);
    this.#addressLocks = new Bounded(bound);
    this.#networkLocks = new Bounded(bound);
    this.#pressureLocks = new Bounded(bound);
    this.#trusted = new Bounded(bound);
    this.#global = new Window(this.#now());
  }

  /** Seconds the client must still wait, or 0 when it may proceed. */
  retryAfter(client: string): number {
    const now = this.#now();
    const own = this.#left(this.#addressLocks, client, now) ||
      (this.#pressureLocks.size > 0 &&
        this.#left(this.#pressureLocks, client, now));
    if (own) return own;
    if (this.#networkLocks.size === 0 || this.#isTrusted(client, now)) return 0;
    return this.#left(this.#networkLocks, networkKey(client), now);
  }

  /**
   * Records a failed authentication; returns the lock this failure caused,
   * if any. A client that is locked already is not counted again.
   */
  fail(client: string): LockEvent | null {
    if (this.retryAfter(client) > 0) return null;
    const now = this.#now();
    const window = this.#windowMs;
    const globalCount = this.#global.add(now, window);
    const network = networkKey(client);
    const networkCounter = this.#networks.get(network) ?? new Window(now);
    const networkCount = networkCounter.add(now, window);
    this.#networks.touch(network, networkCounter);
    const counter = this.#addresses.get(client) ?? new Window(now);
    const count = counter.add(now, window);
    let event: LockEvent | null = null;
    if (networkCount >= this.#networkMax && !this.#networkLocks.has(network)) {
      this.#networkLocks.touch(network, now + this.#lockMs);
      event = this.#event("network", network, networkCount, now);
    }
    if (count >= this.maxFailures) {
      this.#addresses.delete(client);
      this.#addressLocks.touch(client, now + this.#lockMs);
      return event ?? this.#event("address", client, count, now);
    }
    this.#addresses.touch(client, counter);
    if (globalCount >= this.#globalMax) {
      // Kept apart from threshold locks, which a flood of these must not evict.
      this.#pressureLocks.touch(client, now + this.#lockMs);
      return event ?? this.#event("global", client, count, now);
    }
    return event;
  }

  /** Records a successful authentication: the address is known to be honest. */
  succeeded(client: string): void {
    const now = this.#now();
    // Refreshing at most once a second keeps the hot path to one Map read.
    const last = this.#trusted.get(client);
    if (last === undefined || now - last > 1000) {
      this.#trusted.touch(client, now);
    }
  }

  /** How many addresses are counted or locked: each of the three tables is bounded by `maxClients`. */
  get size(): number {
    return this.#addresses.size + this.#addressLocks.size +
      this.#pressureLocks.size;
  }

  /**
   * Authenticated lately and not failed since: a valid key proves the
   * client honest only until it starts guessing, or one key would buy an
   * attacker the network budget of every address it can call from.
   */
  #isTrusted(client: string, now: number): boolean {
    const last = this.#trusted.get(client);
    if (last === undefined || now - last >= this.#lockMs) return false;
    const counter = this.#addresses.get(client);
    return counter === undefined || counter.estimate(now, this.#windowMs) < 1;
  }

  #left(locks: Map<string, number>, key: string, now: number): number {
    const until = locks.get(key);
    if (until === undefined) return 0;
    const left = until - now;
    if (left > 0) return Math.ceil(left / 1000);
    // The lock expired: the client starts again with a clean slate.
    locks.delete(key);
    return 0;
  }

  #event(
    scope: LockScope,
    client: string,
    failures: number,
    now: number,
  ): LockEvent {
    return {
      scope,
      client,
      failures: Math.round(failures),
      lockedUntil: new Date(
        now + (scope === "global" ? this.#windowMs : this.#lockMs),
      ),
    };
  }
}
