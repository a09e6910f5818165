/**
 * Remembers when each key last authenticated a request, off the request's
 * path: a request only notes the id in memory; a timer writes the notes in
 * one batch. Each key is written at most once per minute per process, with
 * the real time of the first use in that minute: never later than a real
 * use, and at most a minute (plus a flush) behind the last one. The stores
 * show no time before the key's creation.
 *
 * @module
 */

import { BackgroundRecorder, type RecorderOptions } from "../store/recorder.ts";
import type { KeyStore } from "../store/types.ts";

const MINUTE = 60_000;

/** Notes key use and writes it to the store in the background. */
export class LastUsedRecorder extends BackgroundRecorder {
  #store: KeyStore;
  #written = new Map<number, number>();
  #pending = new Map<number, Date>();

  /** Writes pending notes every `flushMs` (default 5 s); a failed write is logged. */
  constructor(store: KeyStore, options: RecorderOptions = {}) {
    super("last_used", options);
    this.#store = store;
  }

  /** Notes that key `id` was used now; costs a map lookup on the hot path. */
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
