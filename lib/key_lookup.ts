/**
 * Authentication of a request by its `X-API-Key` header.
 *
 * The order is the point: the cheap synchronous format check refuses
 * malformed values before any hashing or store read, and only a well-formed
 * key costs a hash and a strongly consistent lookup.
 *
 * @module
 */

import { hashApiKey, isWellFormedApiKey } from "./api_key.ts";
import { expiryMs } from "./store/records.ts";
import type { KeyRecord, KeyStore } from "./store/types.ts";
import { Coalesced } from "./_coalesce.ts";
import { KeyIndex } from "./key_index.ts";

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

interface Cached {
  record: KeyRecord | null;
  revision: bigint;
  /** The record's expiresAt, parsed once: the request-time check is one comparison. */
  expires: number;
}

/**
 * Looks keys up in the store, with a cache that can never serve a revoked key.
 *
 * Each cached record carries the store revision it was read at, and the
 * store moves its revision with every change. A cached record is used only
 * after a revision read that started after the request arrived still shows
 * that revision, so nothing changed in between: a revocation that returned
 * before the request was sent, by this process or any other sharing the
 * store, is always seen. The revision read is shared by all requests waiting
 * at that moment, so under load one small read serves many requests.
 *
 * Before the cache, an index of every stored hash, current to the same
 * revision, refuses keys that exist nowhere: minting well-formed keys is
 * free, so they must not cost a store read each.
 */
export class KeyLookup {
  #store: KeyStore;
  #cache = new Map<string, Cached>();
  #maxEntries: number;
  #revision: Coalesced<bigint>;
  #index: KeyIndex;

  /** `maxEntries` bounds the cache of records. */
  constructor(
    store: KeyStore,
    options: { maxEntries?: number; index?: KeyIndex } = {},
  ) {
    this.#store = store;
    this.#maxEntries = options.maxEntries ?? 100_000;
    this.#revision = new Coalesced(() => store.revision());
    this.#index = options.index ?? new KeyIndex(store);
  }

  /**
   * Builds the index ahead of the first request, so that it does not wait
   * for it. A failure is left for the first request to meet again.
   */
  async warm(): Promise<void> {
    await this.#index.catchUp(await this.#revision.get());
  }

  /**
   * Authenticates the value of the `X-API-Key` header. Throws
   * StoreUnavailableError when the store cannot be read, so that an outage
   * is never mistaken for a bad key.
   */
  async authenticate(header: string | null): Promise<AuthResult> {
    if (header === null || header === "") {
      return { ok: false, reason: "missing" };
    }
    // A repeated header arrives folded as "a, b" and fails here too.
    if (!isWellFormedApiKey(header)) return { ok: false, reason: "malformed" };
    const hash = hashApiKey(header);
    const revision = await this.#revision.get();
    // An invented key stops here, at the cost of a hash and a Set lookup.
    let known = this.#index.mayExist(hash, revision);
    if (typeof known !== "boolean") known = await known;
    if (!known) return { ok: false, reason: "unknown" };
    const { record, expires } = await this.#find(hash, revision);
    if (record === null) return { ok: false, reason: "unknown" };
    if (record.status !== "valid") return { ok: false, reason: "revoked" };
    // The deadline is checked now, on every request, so no job has to run
    // for a key to stop working on time.
    if (Date.now() >= expires) return { ok: false, reason: "expired", record };
    return { ok: true, record };
  }

  async #find(hash: string, revision: bigint): Promise<Cached> {
    const cached = this.#cache.get(hash);
    if (cached !== undefined && cached.revision === revision) return cached;
    // Missing or stale: one snapshot read gives the record and its revision.
    const read = await this.#store.findByHashAt(hash);
    const fresh = {
      ...read,
      expires: read.record === null ? Infinity : expiryMs(read.record),
    };
    this.#cache.delete(hash);
    if (this.#cache.size >= this.#maxEntries) {
      this.#cache.delete(this.#cache.keys().next().value!);
    }
    this.#cache.set(hash, fresh);
    return fresh;
  }
}
