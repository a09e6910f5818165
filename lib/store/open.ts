/**
 * The opener: the one module that names both stores, and picks the one the
 * configuration asks for. Each is loaded only when asked for, so the KV path
 * never loads the PostgreSQL driver.
 * @module
 */

import type { StoreLocation } from "./location.ts";
import { StoreInputError } from "./errors.ts";
import type { KeyService } from "./keys.ts";

/** Opens the store the configuration names. */
export async function openStore(
  location: StoreLocation,
): Promise<KeyService> {
  if (location.kind === "kv") {
    const { openKvStore } = await import("./kv.ts");
    return await openKvStore(location.path);
  }
  if (location.kind === "postgres") {
    // Loaded only here, so that the KV path never loads the driver.
    const { openPostgresStore } = await import("./postgres/store.ts");
    return await openPostgresStore(location.url);
  }
  const unknown: never = location;
  const kind = (unknown as { kind: string }).kind;
  throw new StoreInputError(
    "store_kind_unsupported",
    `Store kind ${kind} is not supported`,
  );
}
