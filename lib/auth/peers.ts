/**
 * The servers that share one store, as the registrations that leases keep
 * (lib/auth/lease.ts) show them: how many there are, and where this one ranks.
 * Per-key rate limits are split by it, so that no request costs a store
 * write and the installation as a whole still keeps each key's limit
 * (docs/design.md, "Rate limits").
 *
 * Only registrations that may hold a lease count. A lease rests on the read
 * before the write of its registration's current version, and that write
 * came before the listing that first showed the version: a version seen
 * unchanged for longer than its lease holds none, whatever killed its
 * server (a crash, a failed start, a signal). Such a registration is
 * removed at that version, as a change's wait would (lib/store/acknowledged.ts),
 * so that no change waits for it either; a server that renewed meanwhile
 * keeps its registration.
 *
 * @module
 */

import type { RateLimit } from "./rate_limit.ts";
import { LEASE_MARGIN_MS, leaseOf } from "../store/registrations.ts";
import type { InstanceRecord, InstanceRegistry } from "../store/types.ts";

/** How often the registrations are listed: one small read per server. */
const PEERS_POLL_MS = 1000;

/** Options of {@linkcode Peers}. */
export interface PeersOptions {
  /** This server's registration id, once it has one (the lease's). */
  self: () => string | null;
  /** How often to list the registrations; default 1 s. */
  pollMs?: number;
  /**
   * Hears the number of servers whenever a listing changes it: for the log,
   * where an operator (and a test) sees the shares move.
   */
  onChange?: (count: number) => void;
  /** Monotonic milliseconds; `performance.now` unless set (tests). */
  now?: () => number;
}

/**
 * This server's integer share of `limit.count` among `count` servers,
 * ranked `rank` (0-based): the shares of all ranks add up to the limit
 * exactly, and differ by at most one. Which ranks get the extra one turns
 * with `keyId`, so that no server holds every key's remainder.
 */
export function shareOf(
  limit: Pick<RateLimit, "count">,
  place: { rank: number; count: number; keyId: number },
): number {
  const count = Math.max(1, place.count);
  const base = Math.floor(limit.count / count);
  const extra = limit.count % count;
  const turn = ((place.rank - place.keyId) % count + count) % count;
  return base + (turn < extra ? 1 : 0);
}

/** The live registrations as last listed, refreshed in the background. */
export class Peers {
  #store: Pick<InstanceRegistry, "instances" | "removeInstance">;
  #self: () => string | null;
  #pollMs: number;
  #onChange: ((count: number) => void) | undefined;
  #now: () => number;
  /** The registrations that count, this one's included when listed. */
  #ids: string[] = [];
  /** When each registration was first listed at its current version. */
  #seen = new Map<string, { version: string; since: number }>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #running = false;
  #refreshing: Promise<void> | null = null;

  /** Peers listed from `store`; nothing is read before {@linkcode start}. */
  constructor(
    store: Pick<InstanceRegistry, "instances" | "removeInstance">,
    options: PeersOptions,
  ) {
    this.#store = store;
    this.#self = options.self;
    this.#pollMs = options.pollMs ?? PEERS_POLL_MS;
    this.#onChange = options.onChange;
    this.#now = options.now ?? (() => performance.now());
  }

  /** How many servers share the limits: this one at least. */
  get count(): number {
    const self = this.#self();
    return this.#ids.length +
      (self !== null && this.#ids.includes(self) ? 0 : 1);
  }

  /** This server's place among them, by registration id. */
  get rank(): number {
    const self = this.#self();
    if (self === null) return 0;
    const index = this.#ids.indexOf(self);
    // Not listed yet: it ranks as if it were, among the sorted ids.
    return index >= 0 ? index : this.#ids.filter((id) => id < self).length;
  }

  /** This server's share of key `keyId`'s limit now. */
  share(limit: RateLimit, keyId: number): number {
    return shareOf(limit, { rank: this.rank, count: this.count, keyId });
  }

  /** Lists now, then every poll. A failed listing keeps the last one. */
  async start(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    await this.refresh();
  }

  /** Stops the polling. */
  async stop(): Promise<void> {
    this.#running = false;
    clearTimeout(this.#timer);
    await this.#refreshing;
  }

  /**
   * Lists the registrations now (shared with a listing under way). A store
   * that cannot be read leaves the last view, on the safe side for a server
   * that is still registered.
   */
  refresh(): Promise<void> {
    this.#refreshing ??= (async () => {
      try {
        const listed = await this.#store.instances();
        // After the read: a version listed now was written before this.
        const now = this.#now();
        const before = this.count;
        const lapsed = this.#judge(listed, now);
        if (this.count !== before) this.#onChange?.(this.count);
        await Promise.all(
          lapsed.map(({ id, version }) =>
            this.#store.removeInstance(id, { version }).catch(() => {})
          ),
        );
      } catch {
        // Kept: the servers did not change because the store cannot answer.
      } finally {
        this.#refreshing = null;
        if (this.#running) {
          clearTimeout(this.#timer);
          this.#timer = setTimeout(() => this.refresh(), this.#pollMs);
          Deno.unrefTimer(this.#timer);
        }
      }
    })();
    return this.#refreshing;
  }

  /** Takes in a listing made at `now`; returns the lapsed registrations. */
  #judge(listed: InstanceRecord[], now: number): InstanceRecord[] {
    const self = this.#self();
    const seen = new Map<string, { version: string; since: number }>();
    const ids: string[] = [];
    const lapsed: InstanceRecord[] = [];
    for (const instance of listed) {
      const { id, version } = instance;
      const before = this.#seen.get(id);
      const since = before?.version === version ? before.since : now;
      seen.set(id, { version, since });
      if (id === self) ids.push(id);
      else if (now - since > leaseOf(instance) + LEASE_MARGIN_MS) {
        lapsed.push(instance);
      } else if (!instance.broken && instance.acked >= 0n) {
        // Renewed at least once: a start that failed right after
        // registering never changes a share, even for one listing.
        ids.push(id);
      }
    }
    this.#seen = seen;
    this.#ids = ids.sort();
    return lapsed;
  }
}
