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
   * The work for `key` begun at `tag` (default 0), else new work: a caller
   * whose tag moved (a change applied) must not get work that may predate it.
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

/** One read shared by callers who asked before it started; one in flight may predate their change. */
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
