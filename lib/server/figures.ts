/**
 * The server's own figures, counted in memory: requests by route and
 * status, the API-key step's outcomes and lock-outs, store call latency,
 * change batches applied and the busiest keys. `/metrics` serves them
 * (lib/server/metrics.ts) and each lease renewal publishes their
 * {@linkcode ServerFigures} for `keys status`. A request only adds to
 * numbers; the windows move when the figures are read (at every renewal,
 * so at least every 1.5 s), never per request. No label holds more than a
 * route, a status, an outcome, a lock scope, a store method or a key id.
 *
 * @module
 */

import type { LockScope } from "../auth/lockout.ts";
import type { RequestLogLine } from "../http/log.ts";
import {
  type AuthCounts,
  type AuthReason,
  OUTCOME_OF,
} from "../http/telemetry.ts";
import type { ServerFigures, TrafficFigures } from "../store/types.ts";

/** Upper bounds (s) of the store call latency buckets. */
export const LATENCY_BUCKETS: readonly number[] =
  "1 2.5 5 10 25 50 100 500 1000 5000".split(" ").map((ms) =>
    Number(ms) / 1000
  );
/** Keys with a label of their own: the busiest over the last one to two minutes. */
export const BUSIEST_KEYS = 20;
const SLOT_MS = 10_000;
const MINUTE_SLOTS = 6;

/** One store method's calls; `buckets` per bound, not cumulative, the last past every bound. */
export interface Latency {
  count: number;
  sum: number;
  buckets: Float64Array;
}

/** What `/metrics` shows, read at once. */
export interface FigureReading {
  requests: { route: string; status: number; count: number }[];
  outcomes: Readonly<Record<AuthReason, number>>;
  lockouts: Readonly<Record<LockScope, number>>;
  storeCalls: ReadonlyMap<string, Latency>;
  /** Null without a lease. */
  leaseHeld: boolean | null;
  changesApplied: number;
  /** Distinct keys refused by their rate limit in the last minute. */
  rateLimitedKeys: number;
  lockedAddresses: number;
  /** Since start, by requests over the last one to two minutes, at most {@linkcode BUSIEST_KEYS}. */
  busiestKeys: { id: number; requests: number; rateLimited: number }[];
}

export interface FiguresOptions {
  /** The routes' paths; any other path counts as `unrouted`. */
  routes: Iterable<string>;
  /** LOCKOUT_SECONDS: how long a lock-out counts as an address locked. */
  lockSeconds?: number;
  lease?: {
    readonly held: boolean;
    subscribe(apply: () => void): void;
  };
  now?: () => number;
}

type Totals = Omit<TrafficFigures, "rateLimitedKeys"> & { locks: number };

interface KeyCount {
  requests: number;
  rateLimited: number;
  /** `requests` when this minute began, and the count of the one before. */
  mark: number;
  previous: number;
}

const zeroTotals = (): Totals => ({
  requests: 0,
  ok: 0,
  unauthorized: 0,
  lockedOut: 0,
  rateLimited: 0,
  locks: 0,
});

/** The one owner of the counts; it hears the API-key step as its {@linkcode AuthCounts}. */
export class Figures implements AuthCounts {
  readonly #now: () => number;
  readonly #lease: FiguresOptions["lease"];
  readonly #lockSlots: number;
  /** By route, indexed by status. */
  readonly #byRoute = new Map<string, Float64Array>();
  readonly #unrouted = new Float64Array(600);
  readonly #outcomes = Object.fromEntries(
    Object.keys(OUTCOME_OF).map((reason) => [reason, 0]),
  ) as Record<AuthReason, number>;
  readonly #lockouts: Record<LockScope, number> = {
    address: 0,
    network: 0,
    global: 0,
  };
  readonly #totals = zeroTotals();
  readonly #keys = new Map<number, KeyCount>();
  /** Each key refused by its limit, with the slot it last was. */
  readonly #limited = new Map<number, number>();
  readonly #calls = new Map<string, Latency>();
  /** The totals as first read in each slot, oldest first. */
  readonly #history: { slot: number; totals: Totals }[];
  #slot: number;
  #changes = 0;

  constructor(options: FiguresOptions) {
    this.#now = options.now ?? Date.now;
    for (const path of options.routes) {
      this.#byRoute.set(path, new Float64Array(600));
    }
    this.#lockSlots = Math.ceil((options.lockSeconds ?? 300) * 1000 / SLOT_MS);
    this.#lease = options.lease;
    this.#lease?.subscribe(() => void this.#changes++);
    this.#slot = Math.floor(this.#now() / SLOT_MS);
    this.#history = [{ slot: this.#slot, totals: zeroTotals() }];
  }

  /** The router's line of an answered request. */
  request(line: Pick<RequestLogLine, "path" | "status" | "apiKeyId">): void {
    const { status } = line;
    if (status < 600) {
      (this.#byRoute.get(line.path) ?? this.#unrouted)[status]++;
    }
    this.#totals.requests++;
    if (status === 401) this.#totals.unauthorized++;
    else if (status === 200 && line.apiKeyId !== undefined) this.#totals.ok++;
  }

  outcome(reason: AuthReason, keyId?: number): void {
    this.#outcomes[reason]++;
    if (reason === "locked_out") this.#totals.lockedOut++;
    if (keyId === undefined) return;
    let key = this.#keys.get(keyId);
    if (key === undefined) {
      key = { requests: 0, rateLimited: 0, mark: 0, previous: 0 };
      this.#keys.set(keyId, key);
    }
    key.requests++;
    if (reason === "rate_limited") {
      key.rateLimited++;
      this.#totals.rateLimited++;
      this.#limited.set(keyId, this.#slot);
    }
  }

  lockout(scope: LockScope): void {
    this.#lockouts[scope]++;
    // A network's lock is not an address's; its count says how many.
    if (scope !== "network") this.#totals.locks++;
  }

  /** A store call that took `seconds`. */
  storeCall(method: string, seconds: number): void {
    let latency = this.#calls.get(method);
    if (latency === undefined) {
      const buckets = new Float64Array(LATENCY_BUCKETS.length + 1);
      latency = { count: 0, sum: 0, buckets };
      this.#calls.set(method, latency);
    }
    latency.count++;
    latency.sum += seconds;
    let i = 0;
    while (i < LATENCY_BUCKETS.length && seconds > LATENCY_BUCKETS[i]) i++;
    latency.buckets[i]++;
  }

  /** For `keys status`: the last minute (60 to 70 s, in 10 s steps) and since start. */
  snapshot(): ServerFigures {
    this.#roll();
    const { locks: _, ...minute } = this.#since(MINUTE_SLOTS);
    const { locks: __, ...sinceStart } = this.#totals;
    return {
      at: new Date(this.#now()).toISOString(),
      lastMinute: { ...minute, rateLimitedKeys: this.#limitedSince() },
      sinceStart: { ...sinceStart, rateLimitedKeys: this.#limited.size },
      lockedAddresses: this.#lockedAddresses(),
    };
  }

  read(): FigureReading {
    this.#roll();
    const requests: FigureReading["requests"] = [];
    for (
      const [route, byStatus] of [
        ...this.#byRoute,
        ["unrouted", this.#unrouted] as const,
      ]
    ) {
      byStatus.forEach((count, status) => {
        if (count > 0) requests.push({ route, status, count });
      });
    }
    // The top few by insertion, not a sort of every key at each scrape.
    const busiest: (FigureReading["busiestKeys"][number] & { rank: number })[] =
      [];
    for (const [id, key] of this.#keys) {
      const rank = key.requests - key.mark + key.previous;
      const least = busiest.at(-1)?.rank ?? 0;
      if (rank === 0 || (busiest.length === BUSIEST_KEYS && rank <= least)) {
        continue;
      }
      let at = busiest.length;
      while (at > 0 && busiest[at - 1].rank < rank) at--;
      const { requests, rateLimited } = key;
      busiest.splice(at, 0, { id, requests, rateLimited, rank });
      if (busiest.length > BUSIEST_KEYS) busiest.pop();
    }
    return {
      requests,
      outcomes: { ...this.#outcomes },
      lockouts: { ...this.#lockouts },
      storeCalls: this.#calls,
      leaseHeld: this.#lease === undefined ? null : this.#lease.held,
      changesApplied: this.#changes,
      rateLimitedKeys: this.#limitedSince(),
      lockedAddresses: this.#lockedAddresses(),
      busiestKeys: busiest.map(({ rank: _, ...key }) => key),
    };
  }

  /** Notes the totals at the first read of each slot, and each key's count at each minute's start. */
  #roll(): void {
    const slot = Math.floor(this.#now() / SLOT_MS);
    if (slot <= this.#slot) return;
    const gap = Math.floor(slot / MINUTE_SLOTS) -
      Math.floor(this.#slot / MINUTE_SLOTS);
    if (gap > 0) {
      for (const key of this.#keys.values()) {
        key.previous = gap === 1 ? key.requests - key.mark : 0;
        key.mark = key.requests;
      }
    }
    this.#slot = slot;
    this.#history.push({ slot, totals: { ...this.#totals } });
    const keep = Math.max(MINUTE_SLOTS, this.#lockSlots) + 1;
    while (this.#history.length > 1 && this.#history[1].slot <= slot - keep) {
      this.#history.shift();
    }
  }

  /** The totals' growth since the latest note at least `slots` old (or since start). */
  #since(slots: number): Totals {
    let base = this.#history[0].totals;
    for (const { slot, totals } of this.#history) {
      if (slot <= this.#slot - slots) base = totals;
    }
    const out = zeroTotals();
    for (const name of Object.keys(out) as (keyof Totals)[]) {
      out[name] = this.#totals[name] - base[name];
    }
    return out;
  }

  #limitedSince(): number {
    let count = 0;
    for (const slot of this.#limited.values()) {
      if (slot > this.#slot - MINUTE_SLOTS) count++;
    }
    return count;
  }

  /** Address lock-outs started within LOCKOUT_SECONDS: each still holds. */
  #lockedAddresses(): number {
    return this.#since(this.#lockSlots).locks;
  }
}
