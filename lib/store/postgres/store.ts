/**
 * The PostgreSQL store's opener: pool (`connection.ts`), schema brought up to
 * date (`schema.ts`), and the key store on the seam's entries (`entries.ts`),
 * shared by several server instances and the console.
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
 * Opens the store at `url`, schema brought up to date first. `StoreOpenError`
 * for a newer or foreign schema; `StoreUnavailableError` when unreachable.
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
