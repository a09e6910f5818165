/**
 * The one-time move of a database written by a version with one table per
 * kind of row (schema versions 1 to 7) into `entries`. Migration 8 renames
 * those tables `legacy_*`, so a server of an older version still running
 * fails closed (its reads fail, it answers 503) instead of authenticating
 * from rows no change reaches any more; this module then imports their
 * contents through the store's own import, which checks every item and
 * publishes nothing until all of it is in, and drops them.
 *
 * @module
 */

import { withUsage } from "../backend.ts";
import { StoreInputError } from "../errors.ts";
import { storedRateLimit } from "../rate_limits.ts";
import type { AuditEntry, ExportItem, KeyRecord, KeyStore } from "../types.ts";
import type { Sql } from "./connection.ts";

/** The tables migration 8 renamed, dropped once their contents moved. */
const LEGACY_TABLES = [
  "legacy_last_used",
  "legacy_key_usage",
  "legacy_audit",
  "legacy_keys",
  "legacy_meta",
];

/**
 * The older version's tables hold what the store's import refuses, so
 * nothing was moved: they stay as they were, and no key works until the
 * operator fixes the rows named or moves the store by export and import.
 */
export class LegacyConversionError extends Error {
  override name = "LegacyConversionError";
  readonly code = "legacy_conversion_failed";

  constructor(cause: unknown) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(
      `The key store's tables from an older version cannot be moved into this version's entries (${reason}); nothing was moved and the legacy_* tables are unchanged: fix the row named there, or export the keys with the older version and import them into an empty database`,
      { cause },
    );
  }
}

/** Who the conversion's audit line names. */
const ACTOR = "schema conversion (version 8)";

/**
 * Moves the legacy tables' keys and audit lines into `store`, once, and
 * drops them; nothing to do when there are none. Several processes may
 * open the store at once: one converts, the others wait for it.
 */
export async function convertLegacy(sql: Sql, store: KeyStore): Promise<void> {
  if (!await hasLegacy(sql)) return;
  const session = await sql.reserve();
  try {
    await session`SELECT pg_advisory_lock(hashtext('keys: legacy conversion'))`;
    try {
      if (!await hasLegacy(session)) return;
      const [{ count }] = await session<{ count: number }[]>`
        SELECT (SELECT count(*) FROM legacy_keys)
          + (SELECT count(*) FROM legacy_audit) AS count`;
      if (Number(count) > 0) await importOnce(session, store);
      await session.unsafe(`DROP TABLE ${LEGACY_TABLES.join(", ")}`);
    } finally {
      await session`SELECT pg_advisory_unlock(hashtext('keys: legacy conversion'))`;
    }
  } finally {
    session.release();
  }
}

async function hasLegacy(sql: Sql): Promise<boolean> {
  const [{ found }] = await sql<{ found: boolean }[]>`
    SELECT to_regclass('legacy_keys') IS NOT NULL AS found`;
  return found;
}

/**
 * Imports the legacy rows. A conversion that died half-way left its import
 * unfinished, which is discarded first; one that died after publishing left
 * the store full, and only the drop remains.
 */
async function importOnce(sql: Sql, store: KeyStore): Promise<void> {
  await store.abortImport({ actor: ACTOR });
  try {
    await store.importAll(legacyItems(sql), { actor: ACTOR });
  } catch (error) {
    if (error instanceof StoreInputError && error.code === "import_not_empty") {
      return;
    }
    // An item the import refused: the store is as before, and so are the
    // tables. Anything else (an outage) is passed on as it is.
    if (error instanceof StoreInputError) {
      throw new LegacyConversionError(error);
    }
    throw error;
  }
}

/** The legacy rows as an export's items: keys in id order, then the audit log. */
async function* legacyItems(sql: Sql): AsyncIterable<ExportItem> {
  const keys = await sql<LegacyKey[]>`
    SELECT k.*, u.at AS last_used_at, g.networks, g.refused
    FROM legacy_keys k LEFT JOIN legacy_last_used u ON u.key_id = k.id
      LEFT JOIN legacy_key_usage g ON g.key_id = k.id
    ORDER BY k.id`;
  for (const row of keys) yield { type: "key", record: toRecord(row) };
  const audit = await sql<
    LegacyAudit[]
  >`SELECT * FROM legacy_audit ORDER BY seq`;
  for (const row of audit) {
    yield {
      type: "audit",
      entry: {
        at: row.at.toISOString(),
        action: row.action,
        keyId: Number(row.key_id),
        actor: row.actor,
        detail: row.detail,
      },
    };
  }
}

/** A row of `legacy_keys`, with its last use and usage lists joined. */
interface LegacyKey {
  id: string;
  name: string;
  email: string;
  status: KeyRecord["status"];
  hash: string;
  hint: string;
  created_at: Date;
  revoked_at: Date | null;
  revoked_reason: string | null;
  exposed_at: Date | null;
  exposed_from: string | null;
  expires_at: Date | null;
  replaced_by: string | null;
  retires: string | null;
  allow_from: string[] | null;
  rate_limit: KeyRecord["rateLimit"];
  last_used_at: Date | null;
  networks: KeyRecord["networks"] | null;
  refused: KeyRecord["refusedUses"] | null;
}

/** A row of `legacy_audit`. */
interface LegacyAudit {
  at: Date;
  action: AuditEntry["action"];
  key_id: string;
  actor: string;
  detail: string | null;
}

function toRecord(row: LegacyKey): KeyRecord {
  const time = (value: Date | null) => value?.toISOString() ?? null;
  const id = (value: string | null) => value === null ? null : Number(value);
  return withUsage({
    id: Number(row.id),
    name: row.name,
    email: row.email,
    status: row.status,
    hash: row.hash,
    hint: row.hint,
    createdAt: row.created_at.toISOString(),
    revokedAt: time(row.revoked_at),
    revokedReason: row.revoked_reason,
    exposedAt: time(row.exposed_at),
    exposedFrom: row.exposed_from,
    lastUsedAt: null,
    expiresAt: time(row.expires_at),
    replacedBy: id(row.replaced_by),
    retires: id(row.retires),
    allowFrom: row.allow_from,
    rateLimit: storedRateLimit(row.rate_limit),
    networks: [],
    refusedUses: [],
  }, {
    lastUsedAt: time(row.last_used_at),
    networks: row.networks ?? [],
    refused: row.refused ?? [],
  });
}
