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

import type { KeyStore } from "./store/types.ts";

const MINUTE = 60_000;

/** Notes key use and writes it to the store in the background. */
export class LastUsedRecorder {
  #store: KeyStore;
  #written = new Map<number, number>();
  #pending = new Map<number, Date>();
  #timer: ReturnType<typeof setInterval>;
  #flushing: Promise<void> = Promise.resolve();

  /** Writes pending notes every `flushMs` (default 5 s). */
  constructor(store: KeyStore, options: { flushMs?: number } = {}) {
    this.#store = store;
    this.#timer = setInterval(() => this.flush(), options.flushMs ?? 5_000);
    Deno.unrefTimer(this.#timer);
  }

  /** Notes that key `id` was used now; costs a map lookup on the hot path. */
  used(id: number, now: number): void {
    if (now - (this.#written.get(id) ?? -Infinity) < MINUTE) return;
    this.#written.set(id, now);
    // The real time, never rounded: a time rounded down could fall before
    // the key's creation, one rounded up after its real use.
    this.#pending.set(id, new Date(now));
  }

  /** Writes what is pending. Failures are dropped: this is a hint, not a record. */
  flush(): Promise<void> {
    if (this.#pending.size === 0) return this.#flushing;
    const batch = [...this.#pending].map(([id, at]) => ({ id, at }));
    this.#pending.clear();
    this.#flushing = this.#flushing
      .then(() => this.#store.recordLastUsed(batch))
      .catch(() => {});
    return this.#flushing;
  }

  /** Stops the timer and writes what is pending. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.flush();
  }
}
