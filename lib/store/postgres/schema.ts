/**
 * The PostgreSQL schema: its tables, created and upgraded by numbered
 * migrations recorded in `schema_version`.
 *
 * Tables, since migration 8:
 * - `entries`: the seam's entries (lib/store/entries.ts), one row each: the
 *   key's bytes (`_key_codec.ts`, ordered as Deno KV orders keys), the value
 *   as JSON text (`json`, which unlike `jsonb` keeps any string, NUL included: `{"v": …}`, or `{"u64": "…"}` for a counter) and the
 *   versionstamp of the commit that wrote it, from `entry_versionstamps`.
 *   What each entry holds is the layout's (lib/store/layout/_keys.ts), the
 *   same on Deno KV.
 * - `schema_version`: the migrations applied.
 * - `older_leases`: when the leases of the servers an upgrade from a table
 *   per kind found registered run out; every opener waits for that moment.
 *
 * Migrations 1 to 7 built a table per kind of row (`meta`, `keys`, `audit`,
 * `last_used`, `instances`, `key_usage`); they stay as released, so that a
 * database of any age comes up to date the same way, and 8 renames those
 * tables `legacy_*` for `_legacy.ts` to move into `entries` and drop.
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
  type Tx,
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
 * The schema, one step per version, applied in order and never edited once
 * released: a change is a new step.
 */
const MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE meta (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    revision bigint NOT NULL DEFAULT 0,
    last_key_id bigint NOT NULL DEFAULT 0
  );
  INSERT INTO meta DEFAULT VALUES;
  CREATE TABLE keys (
    id bigint PRIMARY KEY CHECK (id > 0),
    name text NOT NULL,
    name_key text NOT NULL,
    email text NOT NULL,
    status text NOT NULL CHECK (status IN ('valid', 'revoked')),
    hash text NOT NULL UNIQUE CHECK (hash ~ '^[0-9a-f]{64}$'),
    hint text NOT NULL,
    created_at timestamptz NOT NULL,
    revoked_at timestamptz,
    revoked_reason text,
    exposed_at timestamptz,
    exposed_from text
  );
  CREATE UNIQUE INDEX keys_valid_name_key ON keys (name_key)
    WHERE status = 'valid';
  CREATE TABLE last_used (
    key_id bigint PRIMARY KEY REFERENCES keys (id) ON DELETE CASCADE,
    at timestamptz NOT NULL
  );
  CREATE TABLE audit (
    seq bigint PRIMARY KEY,
    at timestamptz NOT NULL,
    action text NOT NULL
      CHECK (action IN ('create', 'revoke', 'rotate', 'expose', 'import')),
    key_id bigint NOT NULL,
    actor text NOT NULL,
    detail text
  );
  CREATE INDEX audit_by_key ON audit (key_id, seq);
  `,
  // 2: lifetimes and rotations with an overlap. A retiring key stays valid
  // beside its replacement, so only keys not being replaced hold a name.
  `
  ALTER TABLE keys ADD COLUMN expires_at timestamptz,
    ADD COLUMN replaced_by bigint, ADD COLUMN retires bigint;
  DROP INDEX keys_valid_name_key;
  CREATE UNIQUE INDEX keys_valid_name_key ON keys (name_key)
    WHERE status = 'valid' AND replaced_by IS NULL;
  `,
  // 3: where a key may be used from, and where it was used from.
  `
  ALTER TABLE keys ADD COLUMN allow_from jsonb;
  CREATE TABLE key_usage (
    key_id bigint PRIMARY KEY REFERENCES keys (id) ON DELETE CASCADE,
    networks jsonb NOT NULL DEFAULT '[]',
    refused jsonb NOT NULL DEFAULT '[]'
  );
  ALTER TABLE audit DROP CONSTRAINT audit_action_check;
  ALTER TABLE audit ADD CONSTRAINT audit_action_check
    CHECK (action IN ('create', 'revoke', 'rotate', 'expose', 'import',
      'allow_from', 'network'));
  `,
  // 4: the servers' registrations, which every change waits on, and a
  // notice at every revision, so that they need not poll to hear of one.
  `
  CREATE TABLE instances (
    id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL,
    lease_ms integer NOT NULL CHECK (lease_ms > 0),
    acked bigint NOT NULL,
    version bigint NOT NULL DEFAULT 1
  );
  CREATE FUNCTION notify_key_change() RETURNS trigger LANGUAGE plpgsql AS $fn$
  BEGIN
    PERFORM pg_notify('key_store_changes', NEW.revision::text);
    RETURN NULL;
  END
  $fn$;
  CREATE TRIGGER meta_revision_notice AFTER UPDATE OF revision ON meta
    FOR EACH ROW WHEN (NEW.revision IS DISTINCT FROM OLD.revision)
    EXECUTE FUNCTION notify_key_change();
  `,
  // 5: the console's housekeeping reads only what is due, and a revoke finds
  // the keys still in an overlap under it without a scan.
  `
  CREATE INDEX keys_due ON keys (expires_at)
    WHERE status = 'valid' AND expires_at IS NOT NULL;
  CREATE INDEX keys_replaced_by ON keys (replaced_by)
    WHERE status = 'valid' AND replaced_by IS NOT NULL;
  `,
  // 6: the revision of the last change that altered authentication, which
  // a server that read a record waits for, apart from usage notes that move
  // the revision only. It starts at the revision: every change so far counts.
  `
  ALTER TABLE meta ADD COLUMN auth_revision bigint;
  UPDATE meta SET auth_revision = revision;
  ALTER TABLE meta ALTER COLUMN auth_revision SET NOT NULL;
  `,
  // 7: a rate limit per key ({count, windowSeconds}; null: none), set and
  // changed by an audited change of its own.
  `
  ALTER TABLE keys ADD COLUMN rate_limit jsonb;
  ALTER TABLE audit DROP CONSTRAINT audit_action_check;
  ALTER TABLE audit ADD CONSTRAINT audit_action_check
    CHECK (action IN ('create', 'revoke', 'rotate', 'expose', 'import',
      'allow_from', 'rate_limit', 'network'));
  `,
  // 8: the seam's entries in one table (entries.ts), which the one layout
  // above the seam fills as it fills Deno KV. The tables of 1 to 7 are
  // renamed, so that a server of an older version still running fails
  // closed on its next read, and their rows are moved in by _legacy.ts.
  `
  CREATE TABLE entries (
    key bytea PRIMARY KEY,
    value json NOT NULL,
    versionstamp bigint NOT NULL
  );
  CREATE SEQUENCE entry_versionstamps;
  DROP TRIGGER meta_revision_notice ON meta;
  DROP FUNCTION notify_key_change();
  DROP TABLE instances;
  ALTER TABLE meta RENAME TO legacy_meta;
  ALTER TABLE keys RENAME TO legacy_keys;
  ALTER TABLE audit RENAME TO legacy_audit;
  ALTER TABLE last_used RENAME TO legacy_last_used;
  ALTER TABLE key_usage RENAME TO legacy_key_usage;
  `,
  // 9: when the leases of an older version's servers, whose registrations
  // 8 dropped, have run out. Until then such a server may still answer from
  // what it read before 8, so every opener waits for this moment before it
  // makes a change (_legacy.ts); migrateWith fills it in.
  `
  CREATE TABLE older_leases (ends_at timestamptz NOT NULL);
  `,
];

/** The step that drops the registrations of the servers of versions 4 to 7. */
const DROPS_REGISTRATIONS = 8;

/** The step that records when those servers' leases end. */
const RECORDS_LEASES = 9;

/** The newest schema version this code knows. */
export const SCHEMA_VERSION: number = MIGRATIONS.length;

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
    throw error instanceof SchemaVersionError
      ? error
      : asUnavailable(error, "The key store cannot be migrated");
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/**
 * Brings the schema of the database behind `sql` up to date (or only up to
 * version `to`, as a test builds an older database), in one transaction;
 * the caller bounds the time it may take.
 */
export async function migrateWith(
  sql: Sql,
  options: { to?: number } = {},
): Promise<MigrateResult> {
  const target = options.to ?? SCHEMA_VERSION;
  const stage = { queued: true };
  try {
    return await migrateOnce(sql, target, stage);
  } catch (error) {
    // A table held past the lock timeout, or the advisory lock held past
    // the statement timeout by another opener that such a table holds up.
    if (!isHeldTable(error, stage.queued)) throw error;
    throw await tablesHeld(sql, OLDER_TABLES, {
      what: "The key store's schema could not be upgraded",
      queued: stage.queued,
      cause: error,
    });
  }
}

/** The tables of schema 1 to 7, which migration 8 renames. */
const OLDER_TABLES = [
  "meta",
  "keys",
  "audit",
  "last_used",
  "instances",
  "key_usage",
];

async function migrateOnce(
  sql: Sql,
  target: number,
  stage: { queued: boolean },
): Promise<MigrateResult> {
  return await sql.begin(async (tx) => {
    // One migration at a time, even when several instances start together.
    await tx`SELECT pg_advisory_xact_lock(hashtext('keys: schema migration'))`;
    stage.queued = false;
    await failLockWaitsFirst(tx);
    await tx`
      CREATE TABLE IF NOT EXISTS schema_version (
        version integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`;
    const [{ version }] = await tx<{ version: number }[]>`
      SELECT coalesce(max(version), 0)::int AS version FROM schema_version`;
    if (version > SCHEMA_VERSION) {
      throw new SchemaVersionError(version, SCHEMA_VERSION);
    }
    let leaseMs = 0;
    for (let next = version + 1; next <= target; next++) {
      if (next === DROPS_REGISTRATIONS && version >= 4) {
        leaseMs = await longestLease(tx);
      }
      await tx.unsafe(MIGRATIONS[next - 1]);
      await tx`INSERT INTO schema_version (version) VALUES (${next})`;
    }
    if (leaseMs > 0 && target >= RECORDS_LEASES) {
      // From the clock, not the transaction's start: a lease renewed while
      // this transaction waited for its locks runs from later. The commit
      // follows within the margin.
      await tx`
        INSERT INTO older_leases (ends_at) VALUES (clock_timestamp()
          + ${leaseMs + LEASE_MARGIN_MS} * interval '1 millisecond')`;
    }
    return { from: version, to: Math.max(version, target) };
  }) as MigrateResult;
}

/**
 * Added to an older server's lease: its clock and the database's agree on
 * a few seconds' duration within far less, and the commit follows at once.
 */
const LEASE_MARGIN_MS = 250;

/**
 * The longest lease an older version's server could still claim: versions
 * 4 to 7 refused a longer one (their lib/auth/lease.ts) and their changes
 * waited no longer, so a larger `lease_ms`, written by hand or by a broken
 * server, cannot stretch the wait past what they would have honoured.
 */
const OLDER_LEASE_LIMIT_MS = 3000;

/**
 * The longest an opening may need to wait after `older_leases` was written:
 * no lease it counts ends later than this after its writing.
 */
export const OLDER_WAIT_LIMIT_MS: number = OLDER_LEASE_LIMIT_MS +
  LEASE_MARGIN_MS;

/**
 * The longest lease an older version's server registered, in milliseconds;
 * 0 when none is registered. A registration stays until its server stops
 * cleanly, so one that crashed costs a wait it did not need, never a
 * missed one.
 */
async function longestLease(tx: Tx): Promise<number> {
  // Held until the commit: an older server that registers or renews after
  // this read would otherwise start a lease no one waits for, since the
  // table is dropped without looking again. It now waits, then fails with
  // the dropped table and stops answering.
  await tx`LOCK TABLE instances IN SHARE MODE`;
  const [{ lease }] = await tx<{ lease: number }[]>`
    SELECT least(coalesce(max(lease_ms), 0), ${OLDER_LEASE_LIMIT_MS})::int
      AS lease FROM instances`;
  return lease;
}
