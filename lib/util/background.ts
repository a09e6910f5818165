/**
 * Writes a server makes off the request path (a key found in a URL marked
 * exposed, a key past its deadline written down as revoked), counted so
 * that a stop waits for them before it closes the store: a SIGTERM right
 * after such a request must not lose the write, however slow the machine.
 *
 * @module
 */

/** The writes in flight, and a way to wait for them all. */
export class BackgroundWrites {
  #pending = new Set<Promise<unknown>>();

  /** Counts `work` until it settles; returns it unchanged. */
  track<T>(work: Promise<T>): Promise<T> {
    const settled = work.then(() => {}, () => {});
    this.#pending.add(settled);
    settled.finally(() => this.#pending.delete(settled));
    return work;
  }

  get size(): number {
    return this.#pending.size;
  }

  /** Once every write tracked, and any they started, has settled; never rejects (failures were reported). */
  async settled(): Promise<void> {
    while (this.#pending.size > 0) {
      await Promise.all(this.#pending);
    }
  }
}
