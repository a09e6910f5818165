/**
 * The first 52 bits of every stored hash, so that a well-formed key that
 * exists nowhere (anyone can mint one: the checksum is public) is refused
 * without a store read; a false hit costs only the read a key would anyway.
 *
 * The index answers for revision R only once caught up with a revision read
 * that started after R was observed. Catching up lists ids above the highest
 * seen (ids only grow), or rebuilds after a wholesale import.
 *
 * @module
 */

import type { KeyStore } from "../store/types.ts";

export type IndexSource = Pick<
  KeyStore,
  "revision" | "importRevision" | "keyHashes"
>;

export interface KeyIndexOptions {
  /** After every catch-up. */
  onRefresh?: (info: { rebuilt: boolean; read: number }) => void;
}

/** As an exact double. */
function prefixOf(hash: string): number {
  return parseInt(hash.slice(0, 13), 16);
}

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

  /** Synchronous while the index is current; false is definite. */
  mayExist(hash: string, revision: bigint): boolean | Promise<boolean> {
    if (this.#revision >= revision) return this.#prefixes.has(prefixOf(hash));
    return this.catchUp(revision).then(() =>
      this.#prefixes.has(prefixOf(hash))
    );
  }

  get size(): number {
    return this.#prefixes.size;
  }

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
