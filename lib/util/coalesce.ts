/**
 * The one way work is shared in this service: {@linkcode Shared} keeps one
 * promise per key while it runs, and a caller joins it only when the work
 * is as fresh as the caller needs (its `tag`); {@linkcode Coalesced} is the
 * store read that a lease catches up with, shared the same way.
 *
 * @module
 */

/** Work under way, by key, joined by callers who may use it. */
export class Shared<K, T> {
  #pending = new Map<K, { tag: number; work: Promise<T> }>();

  /**
   * The work under way for `key` when it began at the caller's `tag` (0
   * unless given), or else new work from `start`, which later callers with
   * that tag share until it settles. A caller whose tag moved since (a
   * change was applied) must not get work that may predate it.
   */
  share(
    key: K,
    start: () => Promise<T>,
    options: { tag?: number } = {},
  ): Promise<T> {
    const tag = options.tag ?? 0;
    const pending = this.#pending.get(key);
    if (pending !== undefined && pending.tag === tag) return pending.work;
    const work = start();
    const entry = { tag, work };
    this.#pending.set(key, entry);
    const done = () => {
      if (this.#pending.get(key) === entry) this.#pending.delete(key);
    };
    work.then(done, done);
    return work;
  }
}

/**
 * Shares one read among every caller that asked before it started. A caller
 * never joins a read in flight, which may miss a change made just before it
 * asked: it waits for the next, which starts when the current one ends.
 */
export class Coalesced<T> {
  #read: () => Promise<T>;
  #reads = new Shared<number, T>();
  #started = 0;
  #last: Promise<T> | null = null;

  constructor(read: () => Promise<T>) {
    this.#read = read;
  }

  /** A value read entirely after this call. */
  get(): Promise<T> {
    return this.#reads.share(this.#started + 1, () => {
      const last = this.#last;
      if (last === null) return this.#begin();
      return last.then(() => this.#begin(), () => this.#begin());
    });
  }

  #begin(): Promise<T> {
    this.#started++;
    const read = this.#read();
    this.#last = read;
    const done = () => {
      if (this.#last === read) this.#last = null;
    };
    read.then(done, done);
    return read;
  }
}
