/**
 * The PostgreSQL schema: 1.0's baseline, created in one transaction and
 * recorded in `store_schema`. Tables:
 * - `entries`: the seam's entries (lib/store/entries.ts), one row each: the
 *   key's bytes (`_key_codec.ts`, ordered as Deno KV orders keys), the value
 *   as JSON text (`json`, which unlike `jsonb` keeps any string, NUL
 *   included: `{"v": …}`, or `{"u64": "…"}` for a counter) and the
 *   versionstamp of the commit that wrote it, from `entry_versionstamps`.
 *   What each entry holds is the layout's (lib/store/layout/_keys.ts), the
 *   same on Deno KV.
 * - `store_schema`: the version applied.
 *
 * A database with no `store_schema` but one of the tables below was not made
 * by 1.0 or later (every earlier layout recorded `schema_version`) and is
 * refused, never converted.
 * @module
 */

import { bounded } from "../../util/bounded.ts";
import { StoreOpenError, StoreUnavailableError } from "../errors.ts";
import {
  asUnavailable,
  callTimeoutMs,
  connect,
  type PostgresStoreOptions,
  type Sql,
} from "./connection.ts";

/** The database's schema is newer than this code; the message names the operator's fix. */
export class SchemaVersionError extends StoreOpenError {
  override name = "SchemaVersionError";

  /** `found`: the database's schema version; `known`: the newest this code knows. */
  constructor(readonly found: number, readonly known: number) {
    super(
      "schema_too_new",
      `The key store's schema is at version ${found}, newer than the ${known} this service knows; upgrade the service or point DATABASE_URL at another database`,
    );
  }
}

/** 1.0's baseline: the only schema there is. */
const BASELINE = `
  CREATE TABLE entries (
    key bytea PRIMARY KEY,
    value json NOT NULL,
    versionstamp bigint NOT NULL
  );
  CREATE SEQUENCE entry_versionstamps;
  `;

/** The newest schema version this code knows. */
export const SCHEMA_VERSION = 1;

/** Without `store_schema`, these mean a database this code did not make. */
const FOREIGN_TABLES = ["schema_version", "entries", "entry_versionstamps"];

/** The tables an opening reads or creates, named when held. */
const STORE_TABLES = ["store_schema", "entries"];

/**
 * Creates the schema of the database at `url` if missing; safe to rerun, and
 * from several processes at once. Throws {@linkcode SchemaVersionError} when
 * the database is newer than this code. Returns its version before and now.
 */
export async function migrate(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<{ from: number; to: number }> {
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

/** Brings the schema up to date in one transaction; the caller bounds its time. */
export async function migrateWith(
  sql: Sql,
): Promise<{ from: number; to: number }> {
  let queued = true;
  try {
    return await sql.begin(async (tx) => {
      // One opening at a time, even when several instances start together.
      await tx`SELECT pg_advisory_xact_lock(hashtext('keys: schema migration'))`;
      queued = false;
      // A lock wait fails as itself before the statement's own timeout
      // does, so that the failure can name the holder.
      await tx`SELECT set_config('lock_timeout', (extract(epoch FROM
        current_setting('statement_timeout')::interval) * 800)::bigint::text,
        true)`;
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
      if (version === 0) {
        await tx.unsafe(BASELINE);
        await tx`INSERT INTO store_schema (version) VALUES (${SCHEMA_VERSION})`;
      }
      return { from: version, to: SCHEMA_VERSION };
    }) as { from: number; to: number };
  } catch (error) {
    // A table held past the lock timeout (55P03), or, while still queued,
    // the advisory lock held past the statement timeout (57014) by another
    // opener that such a table holds up.
    const code = (error as { code?: unknown } | null)?.code;
    if (code !== "55P03" && !(queued && code === "57014")) throw error;
    throw await tablesHeld(sql, { queued, cause: error });
  }
}

/**
 * The `store_busy` error for the store's tables held past the lock timeout,
 * naming the sessions that hold them and wait for nothing themselves (one
 * that waits is held up by another, the one to end): a transaction left
 * open in psql, a console paused mid-change, a running pg_dump.
 */
async function tablesHeld(
  sql: Sql,
  options: { queued: boolean; cause: unknown },
): Promise<StoreUnavailableError> {
  const holders = await sql<
    { pid: number; application: string | null; address: string | null }[]
  >`
    SELECT DISTINCT a.pid, a.application_name AS application,
      host(a.client_addr) AS address
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.granted AND a.pid <> pg_backend_pid()
      AND l.relation IN (SELECT to_regclass(name)::oid
        FROM unnest(string_to_array(${STORE_TABLES.join(",")}, ',')) name)
      AND NOT EXISTS (
        SELECT 1 FROM pg_locks w WHERE w.pid = a.pid AND NOT w.granted)
    ORDER BY a.pid`.catch(() => []);
  const sessions = holders.map(({ pid, application, address }) =>
    `database session ${pid}${application ? ` (${application})` : ""}${
      address ? ` from ${address}` : ""
    }`
  );
  const end = holders.length === 1
    ? `end it (SELECT pg_terminate_backend(${holders[0].pid}))`
    : "end them (SELECT pg_terminate_backend(pid) for each)";
  const why = holders.length > 0
    ? `${
      sessions.join(", ")
    } kept its tables locked; ${end} or let it finish, then start again`
    : options.queued
    ? "another process upgrading it took longer than the statement timeout; start again once it has finished"
    : "another session (a transaction left open in psql, a paused console, a running pg_dump) kept its tables locked; end it or let it finish, then start again";
  return new StoreUnavailableError(
    "store_busy",
    `The key store's schema could not be checked: ${why}`,
    { cause: options.cause },
  );
}
