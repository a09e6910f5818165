/**
 * The opener: the one module that names both stores, and picks the one the
 * configuration asks for. Each is loaded only when asked for, so the KV path
 * never loads the PostgreSQL driver.
 *
 * @module
 */

import type { StoreLocation } from "./location.ts";
import { StoreInputError } from "./errors.ts";
import type { KeyService } from "./keys.ts";
import type { OpenWait } from "./postgres/store.ts";

export type { OpenWait };
// A pure phrase, not the driver: the KV path may load it.
export { type DatabaseSession, describeSession } from "./postgres/_locks.ts";

/** What an opening reports while it waits (PostgreSQL only). */
export interface OpenStoreOptions {
  /**
   * Called when the opening waits: for another process moving an older
   * version's tables, or for that version's servers' leases to run out.
   */
  onWait?: (wait: OpenWait) => void;
}

/** Opens the store the configuration names. */
export async function openStore(
  location: StoreLocation,
  options: OpenStoreOptions = {},
): Promise<KeyService> {
  if (location.kind === "kv") {
    const { openKvStore } = await import("./kv.ts");
    return await openKvStore(location.path);
  }
  if (location.kind === "postgres") {
    // Loaded only here, so that the KV path never loads the driver.
    const { openPostgresStore } = await import("./postgres/store.ts");
    return await openPostgresStore(location.url, { onWait: options.onWait });
  }
  const unknown: never = location;
  const kind = (unknown as { kind: string }).kind;
  throw new StoreInputError(
    "store_kind_unsupported",
    `Store kind ${kind} is not supported`,
  );
}
