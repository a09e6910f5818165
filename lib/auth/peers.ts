/**
 * The servers sharing one store, as the leases' registrations show them:
 * how many, and this one's rank, by which per-key rate limits are split
 * (docs/design.md, "Rate limits").
 *
 * Only registrations that may hold a lease count. A lease rests on a read
 * before the write of its registration's current version, which came
 * before the listing that first showed it: a version seen unchanged for
 * longer than its lease holds none, whatever killed its server. It is
 * removed at that version, as a change's wait would, so that no change
 * waits for it; a server that renewed meanwhile keeps its registration.
 *
 * @module
 */

import type { RateLimit } from "./rate_limit.ts";
import { hasLapsed, hasRenewed } from "../store/registrations.ts";
import type { InstanceRecord, InstanceRegistry } from "../store/types.ts";

/** How often the registrations are listed, unless set. */
export const PEERS_POLL_MS = 1000;

export interface PeersOptions {
  /** The lease's registration id. */
  self: () => string | null;
  pollMs?: number;
  /** Hears the number of servers whenever a listing changes it. */
  onChange?: (count: number) => void;
  /** Monotonic milliseconds. */
  now?: () => number;
}

/**
 * Rank `rank`'s integer share: shares sum to the limit and differ by at most
 * one; the extras turn with `keyId`, so no server holds every remainder.
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
  #ids: string[] = [];
  /** When each registration was first listed at its current version. */
  #seen = new Map<string, { version: string; since: number }>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #running = false;
  #refreshing: Promise<void> | null = null;
  #listed = false;

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

  /** This one at least. */
  get count(): number {
    const self = this.#self();
    return this.#ids.length +
      (self !== null && this.#ids.includes(self) ? 0 : 1);
  }

  get rank(): number {
    const self = this.#self();
    if (self === null) return 0;
    const index = this.#ids.indexOf(self);
    // Not listed yet: it ranks as if it were, among the sorted ids.
    return index >= 0 ? index : this.#ids.filter((id) => id < self).length;
  }

  /**
   * The live registrations' ids, this one's included, sorted; null before
   * a first listing. An id missing here was removed: its lease has ended.
   */
  get live(): readonly string[] | null {
    if (!this.#listed) return null;
    const self = this.#self();
    return self === null || this.#ids.includes(self)
      ? this.#ids
      : [...this.#ids, self].sort();
  }

  share(limit: RateLimit, keyId: number): number {
    return shareOf(limit, { rank: this.rank, count: this.count, keyId });
  }

  /** Lists now, then every poll. A failed listing keeps the last one. */
  async start(): Promise<void> {
    if (this.#running) return;
    this.#running = true;
    await this.refresh();
  }

  async stop(): Promise<void> {
    this.#running = false;
    clearTimeout(this.#timer);
    await this.#refreshing;
  }

  /** Lists now (shared); a store that cannot be read leaves the last view. */
  refresh(): Promise<void> {
    this.#refreshing ??= (async () => {
      try {
        const listed = await this.#store.instances();
        // After the read: a version listed now was written before this.
        const now = this.#now();
        const before = this.count;
        const lapsed = this.#judge(listed, now);
        this.#listed = true;
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

  /** Returns the lapsed registrations. */
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
      else if (hasLapsed(instance, { since, now })) {
        lapsed.push(instance);
      } else if (hasRenewed(instance)) {
        ids.push(id);
      }
    }
    this.#seen = seen;
    this.#ids = ids.sort();
    return lapsed;
  }
}
