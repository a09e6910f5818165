/**
 * An in-memory index of every key's hash, so that a key which passes every
 * public format check but exists nowhere is refused without a store read.
 *
 * The checksum in a key is public (CRC32), so anyone can mint well-formed
 * keys; without the index each one costs what a real key costs. The index
 * holds the first 52 bits of every stored hash (valid and revoked): a miss
 * means "no such key", a hit means "ask the store", so a false hit costs
 * only the read the key would have cost anyway.
 *
 * Freshness is by revision, the same rule as the record cache: the index
 * answers for revision R only once it has caught up with a revision read
 * that started after R was observed. Catching up lists the keys with ids
 * above the highest one seen (ids only grow), or rebuilds from scratch when
 * the store reports a wholesale import since. One catch-up at a time, shared
 * by every request waiting on it.
 *
 * @module
 */

import type { KeyStore } from "../store/types.ts";

/** The part of the store the index reads. */
export type IndexSource = Pick<
  KeyStore,
  "revision" | "importRevision" | "keyHashes"
>;

/** Options of {@linkcode KeyIndex}. */
export interface KeyIndexOptions {
  /** Called after every catch-up with how many keys were read; for tests and metrics. */
  onRefresh?: (info: { rebuilt: boolean; read: number }) => void;
}

/** The first 52 bits of a hex hash, as an exact double. */
function prefixOf(hash: string): number {
  return parseInt(hash.slice(0, 13), 16);
}

/** Which hashes the store holds, as of a known revision. */
export class KeyIndex {
  #source: IndexSource;
  #prefixes = new Set<number>();
  #revision = -1n;
  #maxId = 0;
  #refreshing: Promise<void> | null = null;
  #onRefresh?: KeyIndexOptions["onRefresh"];

  constructor(source: IndexSource, options: KeyIndexOptions = {}) {
    this.#source = source;
    this.#onRefresh = options.onRefresh;
  }

  /**
   * Whether a key with this hash may exist at `revision` (a revision read
   * that started after the request arrived). Synchronous while the index is
   * current, which is the steady state; false is definite.
   */
  mayExist(hash: string, revision: bigint): boolean | Promise<boolean> {
    if (this.#revision >= revision) return this.#prefixes.has(prefixOf(hash));
    return this.catchUp(revision).then(() =>
      this.#prefixes.has(prefixOf(hash))
    );
  }

  /** The number of hashes held. */
  get size(): number {
    return this.#prefixes.size;
  }

  /** Resolves once the index answers for `revision` or later. */
  async catchUp(revision: bigint): Promise<void> {
    while (this.#revision < revision) {
      this.#refreshing ??= this.#refresh().finally(() => {
        this.#refreshing = null;
      });
      await this.#refreshing;
    }
  }

  async #refresh(): Promise<void> {
    // Read the revision first: every key committed up to it is then listed.
    const revision = await this.#source.revision();
    const imported = await this.#source.importRevision();
    const rebuild = this.#revision < 0n || imported > this.#revision;
    const prefixes = rebuild ? new Set<number>() : this.#prefixes;
    let maxId = rebuild ? 0 : this.#maxId;
    let read = 0;
    for await (
      const { id, hash } of this.#source.keyHashes(
        rebuild ? {} : { afterId: maxId },
      )
    ) {
      prefixes.add(prefixOf(hash));
      if (id > maxId) maxId = id;
      read++;
    }
    // Swapped in whole, so a failed rebuild leaves the old index answering
    // only for the old revision, never a half-read one.
    this.#prefixes = prefixes;
    this.#maxId = maxId;
    this.#revision = revision;
    this.#onRefresh?.({ rebuilt: rebuild, read });
  }
}
