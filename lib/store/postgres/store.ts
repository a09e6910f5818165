/**
 * The PostgreSQL store's opener: the pool (`connection.ts`), the schema
 * brought up to date (`schema.ts`), and the key store on the seam's entries
 * (`entries.ts`), which several server instances and the console share.
 *
 * @module
 */

import { bounded } from "../../util/bounded.ts";
import { StoreOpenError } from "../errors.ts";
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
import { migrateWith } from "./schema.ts";

/**
 * Opens a store on the PostgreSQL database at `url`, bringing its schema up
 * to date first. Throws `StoreOpenError` when the database's schema is
 * newer than this code or its tables are not this code's, and
 * `StoreUnavailableError` when it cannot be reached.
 */
export async function openPostgresStore(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<KeyService> {
  const sql = connect(url, options);
  try {
    await bounded(migrateWith(sql), callTimeoutMs(options));
  } catch (error) {
    await sql.end({ timeout: 1 });
    throw error instanceof StoreOpenError ? error : openFailure(error, url);
  }
  try {
    return await openEntryStore(new PostgresEntries(new Pool(sql, options)));
  } catch (error) {
    throw error instanceof StoreOpenError ? error : openFailure(error, url);
  }
}
