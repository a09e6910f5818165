/**
 * The writes that a key's lifetime calls for on the request path: the
 * revocation of a key whose replacement has just been used for the first
 * time, before that first success is answered, and the record of a key
 * found past its deadline. Neither decides whether a request is accepted:
 * the deadline is checked on the cached record at request time
 * (`key_lookup.ts`), and the first use's revocation moves the store's
 * revision, which every instance checks on every request.
 *
 * @module
 */

import type { BackgroundWrites } from "../util/background.ts";
import { Shared } from "../util/coalesce.ts";
import { retireExpired } from "../store/expiry.ts";
import type { KeyRecord, KeyStore } from "../store/types.ts";

/** Who the audit log says did what the server wrote on its own. */
export const SERVER_ACTOR = "server";

/** The retirements of one server process. */
export class Retirements {
  #store: KeyStore;
  /** First-use retirements under way, by the new key's id. */
  #retiring = new Shared<number, void>();
  #lapsed = new Set<string>();
  #onError: (error: unknown) => void;
  #background: BackgroundWrites | undefined;

  /**
   * `onError` hears of a lapsed key's record that could not be written;
   * `background` counts those writes, so that a stop can wait for them.
   */
  constructor(
    store: KeyStore,
    options: {
      onError?: (error: unknown) => void;
      background?: BackgroundWrites;
    } = {},
  ) {
    this.#store = store;
    this.#onError = options.onError ?? (() => {});
    this.#background = options.background;
  }

  /**
   * Revokes the key that `record` retires at its first use, and resolves
   * once the store has done so; nothing when it retires none. Requests of
   * the same key that arrive meanwhile share the one write; later ones read
   * the record again (the revision moved) and find nothing left to do.
   */
  async firstUse(record: KeyRecord): Promise<void> {
    if (record.retires === null) return;
    await this.#retiring.share(
      record.id,
      () =>
        this.#store.retire(record.id, {
          actor: SERVER_ACTOR,
          cause: "first_use",
        }).then(() => {}),
    );
  }

  /**
   * Writes down, off the request path and once per key in this process,
   * that a key was found past its deadline. The key is refused either way.
   */
  lapsed(record: KeyRecord): void {
    // By hash: an import may hand an id to another key, never a hash.
    if (this.#lapsed.has(record.hash)) return;
    this.#lapsed.add(record.hash);
    const write = retireExpired(this.#store, record.id, { actor: SERVER_ACTOR })
      .then(() => {}, this.#onError);
    this.#background?.track(write);
  }
}
