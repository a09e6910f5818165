/**
 * Rate-limit share records on {@linkcode Entries}: `["rate_shares", counter]`
 * → a ShareRecord, each write a compare-and-set on the version read, then a
 * hint so that servers on a store that pushes notices look at once.
 * @module
 */

import type { Entries, EntryKey } from "../entries.ts";
import {
  readShares,
  type ShareRecord,
  type ShareStore,
  type StoredShares,
} from "../rate_shares.ts";
import { hintChange } from "./_keys.ts";

const PREFIX = "rate_shares";
const sharesKey = (counter: number): EntryKey => [PREFIX, counter];

/** The share records of one store. */
export class ShareEntries implements ShareStore {
  #kv: Entries;

  constructor(kv: Entries) {
    this.#kv = kv;
  }

  async list(): Promise<StoredShares[]> {
    const found: StoredShares[] = [];
    for await (const entry of this.#kv.list({ prefix: [PREFIX] })) {
      const counter = entry.key[1];
      if (typeof counter !== "number" || entry.key.length !== 2) continue;
      found.push({
        counter,
        version: entry.versionstamp,
        record: readShares(entry.value),
      });
    }
    return found;
  }

  async get(
    counter: number,
  ): Promise<{ version: string | null; record: ShareRecord | null }> {
    const entry = await this.#kv.get(sharesKey(counter));
    return { version: entry.versionstamp, record: readShares(entry.value) };
  }

  async put(
    counter: number,
    record: ShareRecord | null,
    version: string | null,
  ): Promise<{ ok: boolean; version: string | null }> {
    const key = sharesKey(counter);
    const op = this.#kv.atomic().check({ key, versionstamp: version });
    const result =
      await (record === null ? op.delete(key) : op.set(key, record))
        .commit();
    if (!result.ok) return { ok: false, version };
    await hintChange(this.#kv);
    return { ok: true, version: record === null ? null : result.versionstamp };
  }
}
