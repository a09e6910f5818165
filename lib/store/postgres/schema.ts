/**
 * The PostgreSQL schema: 1.0's baseline, created in one transaction, and
 * the steps of later versions, each recorded in `store_schema`.
 *
 * Tables:
 * - `entries`: the seam's entries (lib/store/entries.ts), one row each: the
 *   key's bytes (`_key_codec.ts`, ordered as Deno KV orders keys), the value
 *   as JSON text (`json`, which unlike `jsonb` keeps any string, NUL included: `{"v": …}`, or `{"u64": "…"}` for a counter) and the
 *   versionstamp of the commit that wrote it, from `entry_versionstamps`.
 *   What each entry holds is the layout's (lib/store/layout/_keys.ts), the
 *   same on Deno KV.
 * - `store_schema`: the versions applied.
 *
 * A database holding no `store_schema` but one of the tables below was not
 * made by 1.0 or later (every layout before 1.0 recorded its version in
 * `schema_version`) and is refused, never converted.
 *
 * @module
 */

import { bounded } from "../../util/bounded.ts";
import { StoreOpenError } from "../errors.ts";
import { failLockWaitsFirst, isHeldTable, tablesHeld } from "./_locks.ts";
import {
  asUnavailable,
  callTimeoutMs,
  connect,
  type PostgresStoreOptions,
  type Sql,
} from "./connection.ts";

/** The schema a database was at, and the one it is at now. */
export interface MigrateResult {
  from: number;
  to: number;
}

/**
 * The database holds a schema newer than this code knows. The message names
 * the operator's fix, as the server and the console both print it.
 */
export class SchemaVersionError extends StoreOpenError {
  override name = "SchemaVersionError";
  /** The database's schema version. */
  readonly found: number;
  /** The newest version this code knows. */
  readonly known: number;

  constructor(found: number, known: number) {
    super(
      "schema_too_new",
      `The key store's schema is at version ${found}, newer than the ${known} this service knows; upgrade the service or point DATABASE_URL at another database`,
    );
    this.found = found;
    this.known = known;
  }
}

/**
 * The schema, one step per version, applied in order in one transaction and
 * never edited once released: a change is a new step at the end.
 */
const STEPS: readonly string[] = [
  // 1: 1.0's baseline.
  `
  CREATE TABLE entries (
    key bytea PRIMARY KEY,
    value json NOT NULL,
    versionstamp bigint NOT NULL
  );
  CREATE SEQUENCE entry_versionstamps;
  `,
];

/** The newest schema version this code knows. */
export const SCHEMA_VERSION: number = STEPS.length;

/**
 * Tables whose presence without `store_schema` means a database this code
 * did not make: the baseline's own, and the version table of every layout
 * before 1.0.
 */
const FOREIGN_TABLES = ["schema_version", "entries", "entry_versionstamps"];

/** The tables an opening reads or a step changes, named when held. */
const STORE_TABLES = ["store_schema", "entries"];

/**
 * Creates or upgrades the schema of the database at `url`; safe to run again
 * and from several processes at once. Throws {@linkcode SchemaVersionError}
 * when the database is newer than this code.
 */
export async function migrate(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<MigrateResult> {
  const sql = connect(url, { ...options, maxConnections: 1 });
  try {
    return await bounded(migrateWith(sql), callTimeoutMs(options));
  } catch (error) {
    throw error instanceof StoreOpenError
      ? error
      : asUnavailable(error, "The key store cannot be migrated");
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/**
 * Brings the schema of the database behind `sql` up to date in one
 * transaction; the caller bounds the time it may take.
 */
export async function migrateWith(sql: Sql): Promise<MigrateResult> {
  const stage = { queued: true };
  try {
    return await sql.begin(async (tx) => {
      // One opening at a time, even when several instances start together.
      await tx`SELECT pg_advisory_xact_lock(hashtext('keys: schema migration'))`;
      stage.queued = false;
      await failLockWaitsFirst(tx);
      const present = new Set(
        (await tx<{ name: string }[]>`
          SELECT name FROM unnest(string_to_array(
            ${["store_schema", ...FOREIGN_TABLES].join(",")}, ',')) name
          WHERE to_regclass(name) IS NOT NULL`).map((row) => row.name),
      );
      if (!present.has("store_schema")) {
        const foreign = FOREIGN_TABLES.find((name) => present.has(name));
        if (foreign) {
          throw new StoreOpenError(
            "schema_unknown",
            `The key store's database holds a table ${foreign} that this service did not create (a store from before 1.0, which it does not read, or another program's); point DATABASE_URL at another database`,
          );
        }
        await tx`
          CREATE TABLE store_schema (
            version integer PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
          )`;
      }
      const [{ version }] = await tx<{ version: number }[]>`
        SELECT coalesce(max(version), 0)::int AS version FROM store_schema`;
      if (version > SCHEMA_VERSION) {
        throw new SchemaVersionError(version, SCHEMA_VERSION);
      }
      for (let next = version + 1; next <= SCHEMA_VERSION; next++) {
        await tx.unsafe(STEPS[next - 1]);
        await tx`INSERT INTO store_schema (version) VALUES (${next})`;
      }
      return { from: version, to: SCHEMA_VERSION };
    }) as MigrateResult;
  } catch (error) {
    // A table held past the lock timeout, or the advisory lock held past
    // the statement timeout by another opener that such a table holds up.
    if (!isHeldTable(error, stage.queued)) throw error;
    throw await tablesHeld(sql, STORE_TABLES, {
      what: "The key store's schema could not be checked",
      queued: stage.queued,
      cause: error,
    });
  }
}
