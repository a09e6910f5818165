/**
 * When each key last authenticated a request, noted in memory and written
 * in batches, at most once a minute per key per process, with the real time
 * of the first use in that minute: never later than a real use.
 *
 * @module
 */

import { BackgroundRecorder, type RecorderOptions } from "../store/recorder.ts";
import type { KeyStore } from "../store/types.ts";

const MINUTE = 60_000;

export class LastUsedRecorder extends BackgroundRecorder {
  #store: KeyStore;
  #written = new Map<number, number>();
  #pending = new Map<number, Date>();

  constructor(store: KeyStore, options: RecorderOptions = {}) {
    super("last_used", options);
    this.#store = store;
  }

  /** A map lookup on the hot path. */
  used(id: number, now: number): void {
    if (now - (this.#written.get(id) ?? -Infinity) < MINUTE) return;
    this.#written.set(id, now);
    // The real time, never rounded: a time rounded down could fall before
    // the key's creation, one rounded up after its real use.
    this.#pending.set(id, new Date(now));
  }

  protected take(): (() => Promise<void>) | null {
    if (this.#pending.size === 0) return null;
    const batch = [...this.#pending].map(([id, at]) => ({ id, at }));
    this.#pending.clear();
    return () => this.#store.recordLastUsed(batch);
  }
}
