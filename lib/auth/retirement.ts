/**
 * The writes a key's lifetime calls for on the request path: revoking a key
 * whose replacement was just used first, and recording a key found past its
 * deadline. Neither decides whether a request is accepted.
 *
 * @module
 */

import type { BackgroundWrites } from "../util/background.ts";
import { Shared } from "../util/coalesce.ts";
import { retireExpired } from "../store/expiry.ts";
import type { KeyRecord, KeyStore } from "../store/types.ts";

export const SERVER_ACTOR = "server";

export class Retirements {
  #store: KeyStore;
  /** By the new key's id. */
  #retiring = new Shared<number, void>();
  #lapsed = new Set<string>();
  #onError: (error: unknown) => void;
  #background: BackgroundWrites | undefined;

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

  /** Revokes the key `record` retires at its first use; requests meanwhile share the write. */
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

  /** Off the request path, once per key in this process. */
  lapsed(record: KeyRecord): void {
    // By hash: an import may hand an id to another key, never a hash.
    if (this.#lapsed.has(record.hash)) return;
    this.#lapsed.add(record.hash);
    const write = retireExpired(this.#store, record.id, { actor: SERVER_ACTOR })
      .then(() => {}, this.#onError);
    this.#background?.track(write);
  }
}
