/**
 * Authentication by the `X-API-Key` header: the cheap format check refuses
 * malformed values before any hashing or store read.
 *
 * @module
 */

import { Shared } from "../util/coalesce.ts";
import { hashApiKey, isWellFormedApiKey } from "./api_key.ts";
import { expiryMs, hasExpired } from "../store/expiry.ts";
import type { KeyChanges, KeyRecord, KeyStore } from "../store/types.ts";
import { KeyIndex } from "./key_index.ts";
import { Lease, LEASE_MS } from "./lease.ts";
import { bounded, DeadlineError } from "../util/bounded.ts";
import { StoreUnavailableError } from "../store/errors.ts";
import { awaitAcknowledgement } from "../store/acknowledged.ts";

/** Never shown to the caller, to whom an expired key is a revoked one. */
export type AuthFailure =
  | "missing"
  | "malformed"
  | "unknown"
  | "revoked"
  | "expired";

export type AuthResult =
  | { ok: true; record: KeyRecord }
  | { ok: false; reason: Exclude<AuthFailure, "expired"> }
  | { ok: false; reason: "expired"; record: KeyRecord };

const MAX_CACHED = 100_000;
/**
 * The longest a request waits on the store: one lease for the read it rests
 * on and one for the servers to acknowledge its key's last change (each of
 * which ends within a lease by itself). Past it the store is not answering:
 * 503, never a hang (issue 29).
 */
const WAIT_MS = 2 * LEASE_MS;
// Shared, as they carry nothing of the request.
const MISSING: AuthResult = Object.freeze({ ok: false, reason: "missing" });
const MALFORMED: AuthResult = Object.freeze({ ok: false, reason: "malformed" });
const UNKNOWN: AuthResult = Object.freeze({ ok: false, reason: "unknown" });
const REVOKED: AuthResult = Object.freeze({ ok: false, reason: "revoked" });

interface Cached {
  record: KeyRecord;
  /** Parsed once: the request-time check is one comparison. */
  expires: number;
}

/**
 * Looks keys up, from memory while this process holds its lease, and never
 * with a record that a change which returned before the request was sent
 * has replaced: the records a batch of changes names are dropped before the
 * lease counts it applied, and so before this process acknowledges it.
 * Without the lease, a request first waits for a store read that started
 * after it arrived (shared by all requests waiting then).
 */
export class KeyLookup {
  #store: KeyStore;
  #cache = new Map<string, Cached>();
  /** So that a change by id drops the record. */
  #hashes = new Map<number, string>();
  #index: KeyIndex;
  #lease: Lease;
  /** Moves whenever records are dropped, so a read that raced a drop is not cached. */
  #drops = 0;
  #reads = new Shared<string, Cached | null>();
  /** Every registered server has applied every change up to this revision, or lost its lease. */
  #settled = -1n;
  /**
   * Waits under way, by revision: a key waits for its own last change, never
   * for a later one of another key that a silent server owes.
   */
  #settling = new Map<bigint, Promise<void>>();
  #now: () => number;
  #waitMs: number;

  /** `waitMs`: the longest a request waits on the store, 6 s unless set (tests shorten it). */
  constructor(
    store: KeyStore,
    options: { lease?: Lease; now?: () => number; waitMs?: number } = {},
  ) {
    this.#store = store;
    this.#now = options.now ?? Date.now;
    this.#waitMs = options.waitMs ?? WAIT_MS;
    this.#index = new KeyIndex(store);
    this.#lease = options.lease ?? new Lease(store);
    this.#lease.subscribe((changes) => this.#apply(changes));
  }

  /** Builds the index ahead of the first request; a failure is left for it to meet again. */
  async warm(): Promise<void> {
    await this.#lease.catchUp();
  }

  /**
   * Throws (or rejects with) StoreUnavailableError when the store cannot be
   * read, so an outage is never mistaken for a bad key. Without a promise in
   * the steady state: one per request is a microtask and garbage each time.
   */
  authenticate(header: string | null): AuthResult | Promise<AuthResult> {
    if (header === null || header === "") return MISSING;
    // A repeated header arrives folded as "a, b" and fails here too.
    if (!isWellFormedApiKey(header)) return MALFORMED;
    return this.byHash(hashApiKey(header));
  }

  /**
   * What a request with the key of this hash would meet, with no format check
   * first: for found values (lib/auth/leak_reports.ts), each hashed alike
   * whatever its shape.
   */
  byHash(hash: string): AuthResult | Promise<AuthResult> {
    if (!this.#lease.held) return this.#bounded(this.#authenticateLate(hash));
    // An invented key stops here, at the cost of a hash and a Set lookup.
    const known = this.#index.mayExist(hash, this.#lease.applied);
    if (known === false) return UNKNOWN;
    if (known !== true) {
      return this.#bounded(this.#authenticateLate(hash, known));
    }
    const found = this.#cache.get(hash);
    return found === undefined
      ? this.#bounded(this.#read(hash).then((read) => this.#judge(read)))
      : this.#judge(found);
  }

  /**
   * Every store wait of a request, cut at `#waitMs` as an outage: a store
   * call that blocks instead of failing (a KV file another process froze
   * mid-write) must not hold requests. Only waiting requests pay for the
   * timer; the work goes on, and caches nothing a drop made stale.
   */
  #bounded(work: Promise<AuthResult>): Promise<AuthResult> {
    return bounded(work, this.#waitMs).catch((error) => {
      if (!(error instanceof DeadlineError)) throw error;
      throw new StoreUnavailableError(
        "store_unavailable",
        "The key store did not answer in time",
        { cause: error },
      );
    });
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
    const fresh = { record, expires: expiryMs(record) };
    // The record may show a change whose writer is still waiting for the
    // servers: answered now, a request here could succeed with the new
    // state while another server, not yet told, still accepts the old
    // (an --until-first-use rotation's old key after its first use). So a
    // success waits for the last change that altered this key, which wrote
    // every record it linked (that old key) in the same commit; not for the
    // store's, which a silent server may owe for another key. A usage note
    // (a first use from a network) alters nothing, so nothing waits on it.
    // A refusal waits for nothing: revoked is for good, and no request
    // succeeds on it anywhere once every server knows.
    const revoked = record.status !== "valid";
    if (!revoked && !hasExpired(fresh.expires, this.#now())) {
      await this.#settle(authRevision);
    } else if (!revoked && authRevision > this.#settled) {
      // Found past its deadline, unsettled: a clock stepped back would make
      // it succeed from the cache, so it answers this request only.
      return fresh;
    }
    // A batch of changes dropped records while this read was out: it may
    // predate one of them, so it answers this request only.
    if (drops !== this.#drops) return fresh;
    if (this.#cache.size >= MAX_CACHED) {
      // The oldest goes. An eviction is no change: `#drops` stays.
      this.#drop(this.#cache.values().next().value!.record.id);
    }
    this.#cache.set(hash, fresh);
    this.#hashes.set(record.id, hash);
    return fresh;
  }

  /** Resolves once every registered server has acknowledged `revision` or its lease ran out; one wait per revision. */
  #settle(revision: bigint): Promise<void> | void {
    if (revision <= this.#settled) return;
    // Not a wait for a later revision: that one may be owed for long.
    const settling = this.#settling.get(revision);
    if (settling !== undefined) return settling;
    // This process's own acknowledgement is among those waited for.
    if (this.#lease.applied < revision) this.#lease.poke();
    const done = awaitAcknowledgement(this.#store, { revision }).then(() => {
      if (revision > this.#settled) this.#settled = revision;
    }).finally(() => this.#settling.delete(revision));
    this.#settling.set(revision, done);
    return done;
  }

  /**
   * Drops key `id`'s record, for a change whose audit line names another key:
   * a link spent at first use is written on the new key, the feed names the old.
   */
  forget(id: number): void {
    // A read under way may predate the change: it must not be cached.
    this.#drops++;
    this.#drop(id);
  }

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
