/**
 * Rate-limit shares lent between servers, so that a key line's requests
 * all landing on one server still get the whole limit L (docs/design.md,
 * "Rate limits"). A request within this server's share costs a map lookup;
 * only one past it comes here, and waits a moment instead of a 429.
 *
 * By default every server holds its even share (peers.ts, `shareOf`). A hot
 * counter has a record in the store: committed shares by registration id,
 * adding up to at most L, and what servers past theirs want. Each step is
 * one compare-and-set commit:
 *
 * - **Want.** Past its share a server writes how much more it wants and
 *   holds the request, up to {@linkcode shareWaitMs}: until a server lends,
 *   or every server holding part of the share has answered that it has no
 *   room, or a silent one (frozen, killed) has lapsed and its share is free.
 * - **Lend.** Polling, a server with spare room (its share less the count
 *   in its window now) first lowers its own share, to no less than that
 *   count, then commits it: it accepts at most that in any later window.
 * - **Answer.** One with none left (a borrower too) says when its oldest
 *   counted request leaves its window, and the answer stays until then:
 *   while every holder's holds, a request past the share is refused at
 *   once, with no write, saying when the first could have room.
 * - **Claim.** A server with waiting requests raises its committed share by
 *   what no server holds, and accepts more only after that commit. So no
 *   window sees more than L across the servers.
 * - **Reclaim.** A server whose registration is gone has no lease; its
 *   share is free. **Give back:** a record idle for its window (at most a
 *   minute) drifts back to even shares and is removed.
 * @module
 */

import type { RateLimit } from "./rate_limit.ts";
import type { Peers } from "./peers.ts";
import {
  copyShares,
  sameShares,
  type ShareRecord,
  type ShareStore,
  sumOf,
} from "../store/rate_shares.ts";
import type { StoreUnavailableError } from "../store/errors.ts";
import {
  answer,
  answeredAt,
  arrivals,
  evenShares,
  goneFrom,
  heard,
  idle,
  leaseLost,
  reasks,
  setTimer,
  tidyShare,
  toldFreeAt,
  type View,
  wantOf,
} from "./_share_steps.ts";

export { refusal, shareWaitMs } from "./_share_steps.ts";

const TRIES = 3; // of one step against others' commits, before the next poll
/** Requests of one key line held at once on a server; more get 429 at once. */
const MAX_WAITING = 1000;

export interface ShareLedgerOptions {
  /** This server's registration id (null: not registered). */
  self: () => string | null;
  /** Whether this server holds its lease: without one it lends and claims nothing. */
  held: () => boolean;
  peers: Pick<Peers, "share" | "count" | "live">;
  /** Every registration's id, listed now (InstanceRegistry.instances). */
  registered: () => Promise<string[]>;
  /** The requests of a counter this server counts in its window now. */
  used: (counter: number) => number;
  /** Milliseconds until a counter has room under `share` (0: room now). */
  frees: (counter: number, share: number) => number;
  /** How long a request past the share may wait: {@linkcode shareWaitMs}. */
  waitMs: () => number;
  /** Monotonic milliseconds. */
  now?: () => number;
  /** Runs `run` after `ms`; returns the cancel. */
  setTimer?: (run: () => void, ms: number) => () => void;
}

/** A request held: `attempt` tries it again, true when it was accepted. */
type Waiter = {
  attempt: () => boolean;
  done: (accepted: boolean | StoreUnavailableError) => void;
};

/** Requests held for a counter; `asked` of them covered by the last want. */
type Waiting = {
  limit: RateLimit;
  waiters: Set<Waiter>;
  asked: number;
  queued: boolean;
};

type Found = { record: ShareRecord | null; version: string | null };

/** This server's side of the lending protocol. */
export class ShareLedger {
  #store: ShareStore;
  /** What it asks of the server: its counts, registrations and bound. */
  #options: ShareLedgerOptions;
  #self: () => string | null;
  #held: () => boolean;
  #peers: ShareLedgerOptions["peers"];
  #now: () => number;
  #views = new Map<number, View>();
  /** Shares lowered here whose commit is not known yet: never exceeded. */
  #caps = new Map<number, number>();
  #waiting = new Map<number, Waiting>();
  /** When this server's last want that cleared the answers began its write. */
  #asked = new Map<number, number>();
  /** The registration whose lease the last full listing was read under. */
  #listedAs: string | null = null;
  /** Store work, one step at a time: no listing races this server's commits. */
  #queue: Promise<unknown> = Promise.resolve();
  #polling: Promise<void> | null = null;

  constructor(store: ShareStore, options: ShareLedgerOptions) {
    this.#store = store;
    this.#options = options;
    this.#self = options.self;
    this.#held = options.held;
    this.#peers = options.peers;
    this.#now = options.now ?? (() => performance.now());
  }

  /**
   * This server's share of `counter`'s limit now, a map lookup and no store
   * call, and by what to scale what remains of it for the installation: by
   * the servers while shares are even; by 1 for a share lent or borrowed.
   */
  place(limit: RateLimit, counter: number): { share: number; scale: number } {
    const view = this.#views.get(counter);
    if (view !== undefined && view.record.limit === limit.count) {
      return { share: this.#mine(counter, view.record), scale: 1 };
    }
    const scale = this.#peers.count;
    // Resumed from a pause (its registration removed: no id) or registered
    // afresh, it has not listed records written since (its share taken):
    // none is its own until it has. No clock read: this is every request's.
    const listed = this.#listedAs;
    const unsure = scale > 1 && (listed === null || listed !== this.#self());
    return { share: unsure ? 0 : this.#peers.share(limit, counter), scale };
  }

  /** Ms until another server could have room (0: now; null: none holds any). */
  freesInMs(counter: number): number | null {
    if (!this.#views.has(counter)) return null;
    const at = this.#freesAt(counter);
    if (at === undefined) return 0;
    const told = toldFreeAt(this.#views.get(counter)!, at, this.#self()!);
    return told === Infinity ? null : told - this.#now();
  }

  /**
   * Whether a request past this server's share of `counter` is refused with
   * no wait, as {@linkcode wait} would: every other holder's answer holds,
   * by this view or, lacking one, by the record read afresh (no write).
   */
  refuses(counter: number, limit: RateLimit): Promise<boolean> {
    const answered = () => this.#freesAt(counter, limit) !== undefined;
    if (answered()) return Promise.resolve(true);
    return this.#serial(() => this.#read(counter)).then(answered);
  }

  /**
   * Holds a request past the share until `attempt` accepts it (after a
   * claim, or its own requests leaving the window), every holder answers
   * it has no room, or the wait bound passes; resolves whether accepted.
   * Rejects with StoreUnavailableError when the bound passes without a
   * lease here: it could not lend, claim or know, so the answer is the
   * store's outage (503), not a limit it could not judge (429).
   */
  wait(
    counter: number,
    limit: RateLimit,
    attempt: () => boolean,
  ): Promise<boolean> {
    // Without a lease (a renewal the store was slow to take) it waits for
    // the lease as for a lender: #step does nothing until it is back.
    const waiting = this.#waiting.get(counter);
    if (
      (this.#peers.count <= 1 && !this.#views.has(counter)) ||
      // Memory, not fairness: each one held is a connection held as well.
      (waiting !== undefined && waiting.waiters.size >= MAX_WAITING) ||
      // Every holder said it has no room yet: nothing to wait for.
      (waiting === undefined && this.#freesAt(counter, limit) !== undefined)
    ) return Promise.resolve(false);
    const first = waiting === undefined;
    const held = waiting ?? { waiters: new Set(), asked: 0, queued: false };
    this.#waiting.set(counter, Object.assign(held, { limit }));
    const { promise, resolve, reject } = Promise.withResolvers<boolean>();
    let cancel = () => {};
    const waiter: Waiter = {
      attempt,
      done: (accepted) => {
        cancel();
        held.waiters.delete(waiter);
        if (held.waiters.size === 0 && this.#waiting.get(counter) === held) {
          this.#waiting.delete(counter);
        }
        if (accepted instanceof Error) reject(accepted);
        else resolve(accepted);
      },
    };
    held.waiters.add(waiter);
    cancel = (this.#options.setTimer ?? setTimer)(() => {
      const leased = this.#self() !== null && this.#held();
      waiter.done(leased ? false : leaseLost());
    }, this.#options.waitMs());
    // The want is written at once, and again only when it must grow.
    if ((first || held.waiters.size > held.asked) && !held.queued) {
      held.queued = true;
      this.#serial(async () => {
        held.queued = false;
        await this.#settle(counter, await this.#read(counter));
        this.#retry(counter);
      }).catch(() => {});
    }
    return promise;
  }

  /**
   * One look at every record, run at each lease poll (joining one that
   * runs): lends to wants, claims what is free, reclaims the shares of
   * servers gone, gives back idle ones. One listing when nothing is hot.
   */
  poll(): Promise<void> {
    this.#polling ??= this.#serial(async () => {
      const as = this.#held() ? this.#self() : null;
      const listed = await this.#store.list();
      const now = this.#now();
      const seen = new Set<number>();
      for (const { counter, version, record } of listed) {
        seen.add(counter);
        // Unreadable: it grants nothing, and goes.
        if (record === null) await this.#store.put(counter, null, version);
        else this.#see(counter, record, version, now);
      }
      for (const counter of [...this.#views.keys()]) {
        if (!seen.has(counter)) this.#forget(counter);
      }
      this.#listedAs = as;
      const hot = new Set([...this.#views.keys(), ...this.#waiting.keys()]);
      for (const counter of hot) {
        const view = this.#views.get(counter);
        await this.#settle(counter, view ?? { record: null, version: null });
      }
    }).finally(() => {
      this.#polling = null;
      // And what the window let go of: a waiter may fit without a claim.
      for (const counter of [...this.#waiting.keys()]) this.#retry(counter);
    });
    return this.#polling;
  }

  /** Runs `work` after the store work before it. */
  #serial<T>(work: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(work, work);
    this.#queue = next.catch(() => {});
    return next;
  }

  /** Steps until a commit holds or nothing is to be done; a conflict reads afresh. */
  async #settle(counter: number, found: Found): Promise<void> {
    for (let tries = 0; tries < TRIES; tries++) {
      if (await this.#step(counter, found)) return;
      found = await this.#read(counter);
    }
  }

  /** `counter`'s record read now, and seen (or forgotten when absent). */
  async #read(counter: number): Promise<Found> {
    const found = await this.#store.get(counter);
    if (found.record === null) this.#forget(counter);
    else this.#see(counter, found.record, found.version!, this.#now());
    return found;
  }

  /** One decision on a counter's record, one commit at most; false on a conflict. */
  async #step(counter: number, found: Found): Promise<boolean> {
    const self = this.#self();
    if (self === null || !this.#held()) return true;
    const waiting = this.#waiting.get(counter);
    const stale = found.record !== null && waiting !== undefined &&
      found.record.limit !== waiting.limit.count;
    const current = stale ? null : found.record;
    const live = this.#peers.live;
    // Before a first listing this server cannot tell what even is.
    if (live === null) return true;
    const next = current !== null
      ? copyShares(current)
      : waiting !== undefined
      ? evenShares(counter, waiting.limit, { live, self })
      : null;
    if (next === null) return true;
    // Held requests look past the peers' listing (a second old at most): a
    // server stopped since has left its share free (a moment's wait, not 429).
    const known = waiting ? live.filter((id) => !next.shares[id]) : live;
    const listing = { self, live: known };
    for (const id of await goneFrom(next, listing, this.#options.registered)) {
      delete next.shares[id];
      delete next.wants[id];
      delete next.answers[id];
    }
    const cap = this.#caps.get(counter);
    const member = next.shares[self] !== undefined;
    const mine = Math.min(next.shares[self] ?? 0, cap ?? Infinity);
    if (member) next.shares[self] = mine;
    const free = next.limit - sumOf(next.shares);
    const frees = () => this.#options.frees(counter, mine);
    let raised = false;
    let lowered = false;
    let cleared = false;
    const others = sumOf(next.wants) - (next.wants[self] ?? 0);
    const asked = this.#asked.get(counter);
    if (waiting !== undefined) {
      const count = waiting.waiters.size;
      const want = wantOf(next, count);
      const now = this.#now();
      // Every other holder has answered, read just now (a view older than
      // another's answer comes here): refused (#retry), no want written.
      const refused = cap === undefined && heard(next, { self, asked, now });
      // Only what is held while others want too: theirs is as urgent.
      const take = refused ? 0 : Math.min(free, others > 0 ? count : want);
      waiting.asked = want;
      if (take > 0) {
        next.shares[self] = mine + take; // room now: its answer is void
        delete next.answers[self];
        raised = true;
      }
      if (take >= count) delete next.wants[self];
      else if (!refused) next.wants[self] = Math.min(next.limit, want - take);
      cleared = !refused && reasks(next, { self, asked, now });
      if (cleared) next.answers = {};
      // Its requests held, it has no room: any want hears so, its own
      // included, so that the next one past the limit here or elsewhere
      // finds every holder's answer and needs no write.
      if (take === 0) answer(next, { self, mine, others: 1 }, frees);
    } else {
      delete next.wants[self];
      const lending = sumOf(next.wants);
      // Synchronous from here to the cap: the count cannot grow between.
      const spare = mine - this.#options.used(counter);
      if (member && lending > free && spare > 0) {
        next.shares[self] = mine - Math.min(spare, lending - free);
        lowered = true;
      }
      if (spare > 0) delete next.answers[self];
      else answer(next, { self, mine, others: lending - free }, frees);
      const since = this.#views.get(counter)?.since;
      if (!lowered && lending === 0 && idle(current, since, this.#now())) {
        const place = { self, mine, free, live, used: mine - spare };
        const tidied = tidyShare(counter, next, place);
        if (tidied === "remove") {
          return await this.#commit(counter, null, found);
        }
        lowered = tidied === "lowered";
        raised = tidied === "raised";
      }
    }
    if (current !== null && sameShares(next, current)) return true;
    if (lowered) this.#caps.set(counter, next.shares[self]);
    const started = this.#now();
    const committed = await this.#commit(counter, next, found);
    if (committed && cleared) this.#asked.set(counter, started);
    if (!committed && lowered) {
      // Never committed, so never claimable: the committed share holds.
      if (cap === undefined) this.#caps.delete(counter);
      else this.#caps.set(counter, cap);
    }
    if (committed && raised) this.#retry(counter);
    return committed;
  }

  /** Commits `next` (null: removes) over `found`; keeps a lowering's cap on an unknown outcome. */
  async #commit(
    counter: number,
    next: ShareRecord | null,
    found: Found,
  ): Promise<boolean> {
    const result = await this.#store.put(counter, next, found.version);
    if (!result.ok) return false;
    this.#caps.delete(counter);
    if (next === null) this.#forget(counter);
    else this.#see(counter, next, result.version!, this.#now());
    return true;
  }

  /** When another server could first have room ({@linkcode answeredAt}), if later than now. */
  #freesAt(counter: number, limit?: RateLimit): number | undefined {
    const view = this.#views.get(counter);
    const self = this.#self();
    // A lowering in flight frees room once committed: not refused before.
    if (view === undefined || this.#caps.has(counter)) return;
    if (self === null || !this.#held()) return;
    if (limit !== undefined && view.record.limit !== limit.count) return;
    const asked = this.#asked.get(counter);
    const at = answeredAt(view.record, { self, asked });
    return at !== undefined && at > this.#now() ? at : undefined;
  }

  #mine(counter: number, record: ShareRecord): number {
    // Without a lease this registration may be gone and its share reclaimed.
    if (!this.#held()) return 0;
    const self = this.#self();
    const committed = self === null ? 0 : record.shares[self] ?? 0;
    const cap = this.#caps.get(counter);
    return cap === undefined ? committed : Math.min(committed, cap);
  }

  #see(counter: number, record: ShareRecord, version: string, now: number) {
    const before = this.#views.get(counter);
    const since = before?.version === version ? before.since : now;
    const arrived = arrivals(record, before?.arrived, now);
    this.#views.set(counter, { record, version, since, arrived });
    const self = this.#self();
    const cap = this.#caps.get(counter);
    // A lowering whose commit failed without an answer shows here if it held.
    if (
      cap !== undefined && self !== null && (record.shares[self] ?? 0) <= cap
    ) this.#caps.delete(counter);
  }

  #forget(counter: number): void {
    this.#views.delete(counter);
    this.#caps.delete(counter);
    this.#asked.delete(counter);
  }

  /** Lets waiting requests try again, in arrival order, while they fit. */
  #retry(counter: number): void {
    const waiting = this.#waiting.get(counter);
    if (waiting === undefined) return;
    for (const waiter of [...waiting.waiters]) {
      if (!waiter.attempt()) {
        // Every holder has answered that it has no room: 429 now.
        if (this.#freesAt(counter, waiting.limit) === undefined) return;
        for (const refused of [...waiting.waiters]) refused.done(false);
        return;
      }
      waiter.done(true);
    }
  }
}
