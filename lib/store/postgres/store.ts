/**
 * The PostgreSQL store's opener: the pool (`connection.ts`), the schema
 * brought up to date (`schema.ts`), a database of an older version's
 * tables moved into `entries` once (`_legacy.ts`), and the key store on
 * the seam's entries (`entries.ts`), which several server instances and the
 * console share.
 *
 * @module
 */

import { bounded } from "../../util/bounded.ts";
import type { KeyService } from "../keys.ts";
import { openEntryStore } from "../layout/backend.ts";
import {
  callTimeoutMs,
  connect,
  openFailure,
  Pool,
  type PostgresStoreOptions,
} from "./connection.ts";
import { PostgresEntries } from "./entries.ts";
import {
  convertLegacy,
  olderLeasesEnded,
  type OpenWaitOptions,
} from "./_legacy.ts";
import { migrateWith, SchemaVersionError } from "./schema.ts";

/** The key store on PostgreSQL, as {@linkcode openPostgresStore} opens it. */
export type PostgresKeyStore = KeyService;

export type { OpenWait } from "./_legacy.ts";

/**
 * Opens a store on the PostgreSQL database at `url`, bringing its schema up
 * to date first, and returns once it may be changed: after an upgrade from
 * an older version, when that version's servers can no longer answer from
 * what they read before it (at most one lease, 3 s). Throws
 * {@linkcode SchemaVersionError} when the database is newer than this code,
 * and `StoreUnavailableError` when it cannot be reached.
 */
export async function openPostgresStore(
  url: string,
  options: PostgresStoreOptions & OpenWaitOptions = {},
): Promise<PostgresKeyStore> {
  const sql = connect(url, options);
  try {
    await bounded(migrateWith(sql), callTimeoutMs(options));
  } catch (error) {
    await sql.end({ timeout: 1 });
    throw error instanceof SchemaVersionError ? error : openFailure(error, url);
  }
  const store = openEntryStore(new PostgresEntries(new Pool(sql, options)));
  try {
    // Not bounded: a large store takes as long as its import does, and a
    // second process waits for the first to finish it.
    await convertLegacy(sql, store, options);
    await bounded(olderLeasesEnded(sql, options), callTimeoutMs(options));
  } catch (error) {
    await store.close();
    throw openFailure(error, url);
  }
  return store;
}
