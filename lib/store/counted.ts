/**
 * Counts a store's calls by method, so an operator (and the benchmark) sees
 * what the traffic costs the database: with leases, requests for known keys
 * cost no read, and the store's load follows servers and changes, not traffic.
 * Exported as the `integration.store.calls` metric and in the server's last
 * log line.
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
export function counted(store: KeyService): CountedStore {
  const counts: Partial<Record<keyof KeyStore, number>> = {};
  const onCall = (method: keyof KeyStore) => {
    counts[method] = (counts[method] ?? 0) + 1;
    calls.add(1, { method });
  };
  return { store: store.with({ onCall }), counts: () => ({ ...counts }) };
}
