/**
 * Authentication of a request by its `X-API-Key` header.
 *
 * The order is the point: the cheap synchronous format check refuses
 * malformed values before any hashing or store read, and only a well-formed
 * key costs a hash and a lookup in memory, current by the lease.
 *
 * @module
 */

import { Shared } from "../util/coalesce.ts";
import { hashApiKey, isWellFormedApiKey } from "./api_key.ts";
import { expiryMs, hasExpired } from "../store/expiry.ts";
import type { KeyChanges, KeyRecord, KeyStore } from "../store/types.ts";
import { KeyIndex } from "./key_index.ts";
import { Lease } from "./lease.ts";
import { awaitAcknowledgement } from "../store/acknowledged.ts";

/**
 * Why a request was not authenticated; never shown to the caller, to whom
 * an expired key is a revoked one.
 */
export type AuthFailure =
  | "missing"
  | "malformed"
  | "unknown"
  | "revoked"
  | "expired";

/** The outcome of {@linkcode KeyLookup.authenticate}. */
export type AuthResult =
  | { ok: true; record: KeyRecord }
  | { ok: false; reason: Exclude<AuthFailure, "expired"> }
  | { ok: false; reason: "expired"; record: KeyRecord };

// Shared, as they carry nothing of the request.
const MISSING: AuthResult = Object.freeze({ ok: false, reason: "missing" });
const MALFORMED: AuthResult = Object.freeze({ ok: false, reason: "malformed" });
const UNKNOWN: AuthResult = Object.freeze({ ok: false, reason: "unknown" });
const REVOKED: AuthResult = Object.freeze({ ok: false, reason: "revoked" });

interface Cached {
  record: KeyRecord;
  /** The record's expiresAt, parsed once: the request-time check is one comparison. */
  expires: number;
}

/**
 * Looks keys up, from memory while this process holds its lease, and never
 * with a record that a change which returned before the request was sent
 * has replaced.
 *
 * Cached records and the index of stored hashes are current to the lease's
 * applied revision: the lease (lib/auth/lease.ts) hands over every batch of
 * changes, and the records they name are dropped before the batch counts
 * as applied, and so before this process acknowledges it. While the lease
 * holds, a request costs a hash and two map lookups. Without it, a request
 * first waits for a read of the store that started after it arrived (one
 * read shared by all requests waiting then), as every request did before
 * leases.
 *
 * The index refuses keys that exist nowhere: minting well-formed keys is
 * free, so they must not cost a store read each.
 */
export class KeyLookup {
  #store: KeyStore;
  #cache = new Map<string, Cached>();
  /** Which cached hash belongs to which key id, so a change by id drops it. */
  #hashes = new Map<number, string>();
  #maxEntries: number;
  #index: KeyIndex;
  #lease: Lease;
  /** Moves whenever records are dropped, so a read that raced a drop is not cached. */
  #drops = 0;
  /** Reads under way, by hash, tagged with the drop count when each began. */
  #reads = new Shared<string, Cached | null>();
  /** Every registered server has applied every change up to this revision, or lost its lease. */
  #settled = -1n;
  /** The wait for the newest revision a read has asked to be settled. */
  #settling: { revision: bigint; done: Promise<void> } | null = null;

  /** The clock deadlines are checked against, in milliseconds. */
  #now: () => number;

  /**
   * `maxEntries` bounds the cache of records; `lease` is this process's, if
   * it has one; `now` is the clock (Date.now unless set; tests pin it).
   */
  constructor(
    store: KeyStore,
    options: {
      maxEntries?: number;
      index?: KeyIndex;
      lease?: Lease;
      now?: () => number;
    } = {},
  ) {
    this.#store = store;
    this.#now = options.now ?? Date.now;
    this.#maxEntries = options.maxEntries ?? 100_000;
    this.#index = options.index ?? new KeyIndex(store);
    this.#lease = options.lease ?? new Lease(store);
    this.#lease.subscribe((changes) => this.#apply(changes));
  }

  /**
   * Builds the index ahead of the first request, so that it does not wait
   * for it. A failure is left for the first request to meet again.
   */
  async warm(): Promise<void> {
    await this.#lease.catchUp();
  }

  /**
   * Authenticates the value of the `X-API-Key` header. Throws (or rejects
   * with) StoreUnavailableError when the store cannot be read, so that an
   * outage is never mistaken for a bad key.
   *
   * Answers without a promise in the steady state (the lease held, the
   * index current, the record cached): a promise per request was a
   * microtask and garbage on every request the server answers.
   */
  authenticate(header: string | null): AuthResult | Promise<AuthResult> {
    if (header === null || header === "") return MISSING;
    // A repeated header arrives folded as "a, b" and fails here too.
    if (!isWellFormedApiKey(header)) return MALFORMED;
    const hash = hashApiKey(header);
    if (!this.#lease.held) return this.#authenticateLate(hash);
    // An invented key stops here, at the cost of a hash and a Set lookup.
    const known = this.#index.mayExist(hash, this.#lease.applied);
    if (known === false) return UNKNOWN;
    if (known !== true) return this.#authenticateLate(hash, known);
    const found = this.#cache.get(hash);
    return found === undefined
      ? this.#read(hash).then((read) => this.#judge(read))
      : this.#judge(found);
  }

  /** The same steps once the lease or the index had to catch up first. */
  async #authenticateLate(
    hash: string,
    known?: Promise<boolean>,
  ): Promise<AuthResult> {
    if (known === undefined) await this.#lease.catchUp();
    const exists = await (known ??
      this.#index.mayExist(hash, this.#lease.applied));
    if (!exists) return UNKNOWN;
    return this.#judge(this.#cache.get(hash) ?? await this.#read(hash));
  }

  #judge(found: Cached | null): AuthResult {
    if (found === null) return UNKNOWN;
    const { record, expires } = found;
    if (record.status !== "valid") return REVOKED;
    // The deadline is checked now, on every request, so no job has to run
    // for a key to stop working on time.
    if (hasExpired(expires, this.#now())) {
      return { ok: false, reason: "expired", record };
    }
    return { ok: true, record };
  }

  #read(hash: string): Promise<Cached | null> {
    // Requests for one key that miss together share one read, but only a
    // read begun since the last drop: an older one may predate a change
    // this process has acknowledged.
    return this.#reads.share(hash, () => this.#readStore(hash), {
      tag: this.#drops,
    });
  }

  async #readStore(hash: string): Promise<Cached | null> {
    const drops = this.#drops;
    // Strongly consistent and begun after the request arrived: current.
    const { record, authRevision } = await this.#store.findByHashAt(hash);
    if (record === null) return null;
    // The record may show a change whose writer is still waiting for the
    // servers: answered now, a request here could succeed with the new
    // state while another server, not yet told, still accepts the old
    // (an --until-first-use rotation's old key after its first use). Only
    // changes that alter authentication count: a usage note since (a first
    // use from a network) moves the revision, but no server drops anything
    // for it, so nothing waits on it.
    await this.#settle(authRevision);
    const fresh = { record, expires: expiryMs(record) };
    // A batch of changes dropped records while this read was out: it may
    // predate one of them, so it answers this request only.
    if (drops !== this.#drops) return fresh;
    if (this.#cache.size >= this.#maxEntries) {
      // The oldest goes. An eviction is no change: `#drops` stays.
      this.#drop(this.#cache.values().next().value!.record.id);
    }
    this.#cache.set(hash, fresh);
    this.#hashes.set(record.id, hash);
    return fresh;
  }

  /**
   * Resolves once every registered server has acknowledged `revision` or
   * its lease has run out: at once when a read has already waited for it.
   * One wait at a time per revision, shared by every read that needs it.
   */
  #settle(revision: bigint): Promise<void> | void {
    if (revision <= this.#settled) return;
    const settling = this.#settling;
    if (settling !== null && settling.revision >= revision) {
      return settling.done;
    }
    // This process's own acknowledgement is among those waited for.
    if (this.#lease.applied < revision) this.#lease.poke();
    const done = awaitAcknowledgement(this.#store, { revision }).then(() => {
      if (revision > this.#settled) this.#settled = revision;
      if (this.#settling?.done === done) this.#settling = null;
    });
    this.#settling = { revision, done };
    return done;
  }

  /**
   * Drops key `id`'s record, so that the next request reads it afresh. For a
   * change this process made whose audit line names another key: a
   * rotation's link spent at first use is written on the new key, while the
   * change feed names only the old one.
   */
  forget(id: number): void {
    // A read under way may predate the change: it must not be cached.
    this.#drops++;
    this.#drop(id);
  }

  /** Drops what `changes` invalidate; the lease counts them applied after. */
  async #apply(changes: KeyChanges): Promise<void> {
    // New keys enter the index before their batch counts as applied.
    await this.#index.catchUp(changes.revision);
    this.#drops++;
    if (changes.rebuild) {
      this.#cache.clear();
      this.#hashes.clear();
      return;
    }
    for (const id of changes.keyIds) this.#drop(id);
  }

  /** Drops key `id`'s cached record, if any; the caller moves `#drops`. */
  #drop(id: number): void {
    const hash = this.#hashes.get(id);
    if (hash === undefined) return;
    this.#hashes.delete(id);
    this.#cache.delete(hash);
  }
}
