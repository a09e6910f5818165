/**
 * Counts a store's calls by method, so an operator (and the benchmark) sees
 * what the traffic costs the database: with leases, requests for known keys
 * cost no read, and the store's load follows servers and changes, not traffic.
 * Exported as the `integration.store.calls` metric and in the server's last
 * log line. With `timed`, each call that returns a promise is timed to its
 * settling, for the store latency on `/metrics`.
 * @module
 */

import { counter } from "../util/otel.ts";
import type { KeyService } from "./keys.ts";
import type { KeyStore } from "./types.ts";

const calls = counter(
  "integration.store.calls",
  { description: "Calls made to the key store, by method" },
);

/** A store whose calls are counted, and the counts so far. */
export interface CountedStore {
  store: KeyService;
  /** Calls by method name since the store was counted. */
  counts(): Partial<Record<keyof KeyStore, number>>;
}

/** `store` with every call counted by method, including those of stores made from it. */
export function counted(
  store: KeyService,
  options: { timed?: (method: string, seconds: number) => void } = {},
): CountedStore {
  const counts: Partial<Record<keyof KeyStore, number>> = {};
  const onCall = (method: keyof KeyStore) => {
    counts[method] = (counts[method] ?? 0) + 1;
    calls.add(1, { method });
  };
  const service = store.with({ onCall });
  return {
    store: options.timed ? timedService(service, options.timed) : service,
    counts: () => ({ ...counts }),
  };
}

/**
 * `service` with each promise it returns timed, and each store `with` makes
 * timed too. The methods run on the service itself (they use private fields).
 */
function timedService(
  service: KeyService,
  timed: (method: string, seconds: number) => void,
): KeyService {
  const wrappers = new Map<PropertyKey, unknown>();
  return new Proxy(service, {
    get(target, name) {
      const value = Reflect.get(target, name, target);
      if (typeof value !== "function" || typeof name !== "string") return value;
      let wrapper = wrappers.get(name);
      if (wrapper === undefined) {
        wrapper = (...args: unknown[]) => {
          const started = performance.now();
          const result = value.apply(target, args);
          if (name === "with") return timedService(result, timed);
          if (result instanceof Promise) {
            const done = () =>
              timed(name, (performance.now() - started) / 1000);
            result.then(done, done);
          }
          return result;
        };
        wrappers.set(name, wrapper);
      }
      return wrapper;
    },
  });
}
