/**
 * Shares one read among every caller that asked before that read started.
 *
 * A caller never joins a read already in flight: it may have started before
 * the caller's request arrived, and so may miss a change made just before.
 * It waits for the next read, which starts the moment the current one ends,
 * and whose answer is therefore at least as new as the caller's arrival.
 * There is no timer: a lone caller is served at once.
 */
export class Coalesced<T> {
  #read: () => Promise<T>;
  #inFlight: Promise<T> | null = null;
  #next: Promise<T> | null = null;

  constructor(read: () => Promise<T>) {
    this.#read = read;
  }

  /** A value read entirely after this call. */
  get(): Promise<T> {
    if (this.#inFlight === null) return this.#start();
    this.#next ??= this.#inFlight.then(
      () => this.#start(),
      () => this.#start(),
    );
    return this.#next;
  }

  #start(): Promise<T> {
    this.#next = null;
    const read = this.#read();
    this.#inFlight = read;
    const clear = () => {
      if (this.#inFlight === read) this.#inFlight = null;
    };
    read.then(clear, clear);
    return read;
  }
}
