/**
 * Counts the calls made to a store, by method, so that an operator (and the
 * benchmark) can see what the traffic costs the database: with leases, a
 * steady stream of requests for known keys costs no read at all, and the
 * store's load follows the number of servers and changes, not the traffic.
 *
 * The counts are exported as the `integration.store.calls` metric and
 * written in the server's last log line.
 *
 * @module
 */

import { metrics } from "@opentelemetry/api";
import type { KeyStore } from "./types.ts";

const calls = metrics.getMeter("integration-service").createCounter(
  "integration.store.calls",
  { description: "Calls made to the key store, by method" },
);

/** A store whose calls are counted, and the counts so far. */
export interface CountedStore {
  store: KeyStore;
  /** Calls by method name since the store was wrapped. */
  counts(): Record<string, number>;
}

/** Wraps `store` so that every call is counted by method. */
export function counted(store: KeyStore): CountedStore {
  const counts: Record<string, number> = {};
  const wrapped = new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (typeof value !== "function" || typeof property !== "string") {
        return value;
      }
      return (...args: unknown[]) => {
        counts[property] = (counts[property] ?? 0) + 1;
        calls.add(1, { method: property });
        return value.apply(target, args);
      };
    },
  });
  return { store: wrapped, counts: () => ({ ...counts }) };
}
