/**
 * The store's entries as a test reaches behind the store to plant or read
 * them, the same way on either backend: a KV file, or a PostgreSQL database.
 */

import type { Entries } from "../../lib/store/entries.ts";
import { KvEntries } from "../../lib/store/kv.ts";
import { connect, Pool } from "../../lib/store/postgres/connection.ts";
import { PostgresEntries } from "../../lib/store/postgres/entries.ts";

/** Entries opened apart from any store, closed when the `await using` scope ends. */
export type RawEntries = Entries & AsyncDisposable;

/** Opens the entries of the KV file at `path` or of the database at `url`. */
export async function rawEntries(
  where: { path: string } | { url: string },
): Promise<RawEntries> {
  const entries: Entries = "path" in where
    ? new KvEntries(await Deno.openKv(where.path))
    : new PostgresEntries(new Pool(connect(where.url, {}), {}));
  return Object.assign(entries, {
    [Symbol.asyncDispose]: () => entries.close(),
  });
}
