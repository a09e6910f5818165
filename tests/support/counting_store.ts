/**
 * A key store that counts what is asked of it, for unit tests that must show
 * a step costs no store read: it wraps a real store (an in-memory Deno KV),
 * counts every call by method, can be told to fail as an unreachable
 * database does, and can hold a method's calls until the test lets them go.
 *
 * @module
 */

import { StoreUnavailableError } from "../../lib/store/errors.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import type { KeyStore } from "../../lib/store/types.ts";
import { type StoredKey, storeKey } from "./stored_keys.ts";

/** A store whose calls are counted; closing it closes the store inside. */
export interface CountingStore extends AsyncDisposable {
  /** Hand this to the code under test. */
  store: KeyStore;
  /** How many calls were made to these methods (all of them when none named). */
  calls(...methods: (keyof KeyStore)[]): number;
  /** Forgets the calls counted so far. */
  reset(): void;
  /** Waits until no call is under way and none follows within a turn. */
  settled(): Promise<void>;
  /** While true, every call throws StoreUnavailableError, as an outage does. */
  failing: boolean;
  /**
   * Holds every call to `method` made from now on before it reaches the
   * store, as a slow read does, until `release` is called (calls after it
   * go straight through); `reached` resolves at the first call held.
   */
  hold(method: keyof KeyStore): { reached: Promise<void>; release(): void };
  /** Stores a key, uncounted, as {@linkcode storeKey} does. */
  addKey(
    name: string,
    options?: { revoked?: boolean },
  ): Promise<StoredKey>;
}

/** The methods that answer with a stream rather than a promise. */
const STREAMS = new Set(["list", "audit", "keyHashes", "exportAll"]);

/** An empty in-memory store whose calls are counted. */
export async function countingStore(): Promise<CountingStore> {
  const inner = await openKvStore(":memory:");
  const counts = new Map<string, number>();
  const underWay = new Set<Promise<unknown>>();
  const track = <T>(promise: Promise<T>): Promise<T> => {
    underWay.add(promise);
    const done = () => underWay.delete(promise);
    promise.then(done, done);
    return promise;
  };
  const control = { failing: false };
  const held = new Map<string, { reached: () => void; gate: Promise<void> }>();
  const store = new Proxy(inner, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (typeof value !== "function" || typeof property !== "string") {
        return value;
      }
      return (...args: unknown[]) => {
        counts.set(property, (counts.get(property) ?? 0) + 1);
        if (control.failing) {
          const error = new StoreUnavailableError(
            "store_unavailable",
            "the test store is down",
          );
          return STREAMS.has(property)
            ? {
              [Symbol.asyncIterator]: () => ({
                next: () => Promise.reject(error),
              }),
            }
            : Promise.reject(error);
        }
        const hold = held.get(property);
        if (hold !== undefined) {
          hold.reached();
          return track(hold.gate.then(() => value.apply(target, args)));
        }
        const result = value.apply(target, args);
        if (result instanceof Promise) return track(result);
        if (result && typeof result[Symbol.asyncIterator] === "function") {
          return trackIterable(result as AsyncIterable<unknown>, track);
        }
        return result;
      };
    },
  }) as KeyStore;
  return {
    store,
    calls: (...methods) =>
      methods.length === 0
        ? [...counts.values()].reduce((a, b) => a + b, 0)
        : methods.reduce((sum, m) => sum + (counts.get(m) ?? 0), 0),
    reset: () => counts.clear(),
    async settled() {
      do {
        await Promise.allSettled(underWay);
        // What a finished call sets off starts within this turn.
        await new Promise((r) => setTimeout(r, 0));
      } while (underWay.size > 0);
    },
    get failing() {
      return control.failing;
    },
    set failing(value) {
      control.failing = value;
    },
    hold(method) {
      if (STREAMS.has(method)) throw new TypeError(`${method} is a stream`);
      let reached = () => {};
      let release = () => {};
      const hold = {
        reached: () => reached(),
        gate: new Promise<void>((resolve) => (release = resolve)),
      };
      held.set(method, hold);
      return {
        reached: new Promise<void>((resolve) => (reached = resolve)),
        release: () => {
          if (held.get(method) === hold) held.delete(method);
          release();
        },
      };
    },
    addKey: (name, options) => storeKey(inner, name, options),
    [Symbol.asyncDispose]: () => inner.close(),
  };
}

/** The items of `items`, with the whole iteration tracked as one call under way. */
async function* trackIterable<T>(
  items: AsyncIterable<T>,
  track: (promise: Promise<unknown>) => Promise<unknown>,
): AsyncGenerator<T> {
  let finish = () => {};
  track(new Promise<void>((resolve) => (finish = resolve)));
  try {
    yield* items;
  } finally {
    finish();
  }
}
