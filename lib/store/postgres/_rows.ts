/**
 * The PostgreSQL backend's rows: how a key record and an audit line are
 * read from and written to their tables, and the advisory lock an import
 * holds alone.
 *
 * @module
 */

import { withUsage } from "../backend.ts";
import type { AuditLine } from "../change.ts";
import { nameKey } from "../records.ts";
import { storedRateLimit } from "../rate_limits.ts";
import type {
  AuditEntry,
  KeyRecord,
  KeyStatus,
  NetworkUse,
  RateLimit,
  RefusedUse,
} from "../types.ts";
import type { Tx } from "./connection.ts";

/** A row of `keys`, joined with what `records()` adds. */
export interface KeyRow {
  id: string;
  name: string;
  email: string;
  status: KeyStatus;
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
  /** From `last_used`, where get() and list() join it. */
  last_used_at?: Date | null;
  allow_from: string[] | null;
  /** Absent in a row read before migration 7: no limit. */
  rate_limit?: RateLimit | null;
  /** From `key_usage`, where get() and list() join it. */
  networks?: NetworkUse[] | null;
  refused?: RefusedUse[] | null;
}

/** A row of `audit`. */
export interface AuditRow {
  seq: string;
  at: Date;
  action: AuditEntry["action"];
  key_id: string;
  actor: string;
  detail: string | null;
}

/** The advisory lock an import holds alone and every change shares. */
export const IMPORT_LOCK = 0x6b657973; // "keys"

/** A row as a record; last use and usage lists as joined, or none. */
export function toRecord(row: KeyRow): KeyRecord {
  return withUsage({
    id: Number(row.id),
    name: row.name,
    email: row.email,
    status: row.status,
    hash: row.hash,
    hint: row.hint,
    createdAt: row.created_at.toISOString(),
    revokedAt: row.revoked_at?.toISOString() ?? null,
    revokedReason: row.revoked_reason,
    exposedAt: row.exposed_at?.toISOString() ?? null,
    exposedFrom: row.exposed_from,
    lastUsedAt: null,
    expiresAt: row.expires_at?.toISOString() ?? null,
    replacedBy: row.replaced_by === null ? null : Number(row.replaced_by),
    retires: row.retires === null ? null : Number(row.retires),
    allowFrom: row.allow_from ?? null,
    rateLimit: storedRateLimit(row.rate_limit),
    networks: [],
    refusedUses: [],
  }, {
    lastUsedAt: row.last_used_at?.toISOString() ?? null,
    networks: row.networks ?? [],
    refused: row.refused ?? [],
  });
}

/** An audit row as an entry. */
export function toAudit(row: AuditRow): AuditEntry {
  return {
    at: row.at.toISOString(),
    action: row.action,
    keyId: Number(row.key_id),
    actor: row.actor,
    detail: row.detail,
  };
}

/** JSON text for a jsonb column, or null. */
export function jsonOrNull(value: unknown): string | null {
  return value === null || value === undefined ? null : JSON.stringify(value);
}

/**
 * Stores new records, from a change or an import alike; what is kept
 * apart from them (last use, usage lists) is not written here.
 */
export async function insertKeys(tx: Tx, records: KeyRecord[]): Promise<void> {
  const json = JSON.stringify(records.map((record) => ({
    ...record,
    nameKey: storedNameKey(record),
  })));
  await tx`
    INSERT INTO keys (id, name, name_key, email, status, hash, hint,
      created_at, revoked_at, revoked_reason, exposed_at, exposed_from,
      expires_at, replaced_by, retires, allow_from, rate_limit)
    SELECT id, name, "nameKey", email, status, hash, hint,
      "createdAt", "revokedAt", "revokedReason", "exposedAt", "exposedFrom",
      "expiresAt", "replacedBy", retires, "allowFrom", "rateLimit"
    FROM jsonb_to_recordset(${json}::text::jsonb) AS r(id bigint, name text,
      "nameKey" text, email text, status text, hash text, hint text,
      "createdAt" timestamptz, "revokedAt" timestamptz, "revokedReason" text,
      "exposedAt" timestamptz, "exposedFrom" text, "expiresAt" timestamptz,
      "replacedBy" bigint, retires bigint, "allowFrom" jsonb,
      "rateLimit" jsonb)`;
}

/** Only valid keys' names must be usable; an imported revoked key keeps whatever it had. */
function storedNameKey(record: KeyRecord): string {
  try {
    return nameKey(record.name);
  } catch {
    return record.name.toLowerCase();
  }
}

/**
 * Rewrites what a change may alter of a stored record; its name, e-mail,
 * hash and creation never change.
 */
export async function updateKey(tx: Tx, record: KeyRecord): Promise<void> {
  await tx`
    UPDATE keys SET status = ${record.status},
      revoked_at = ${record.revokedAt}, revoked_reason = ${record.revokedReason},
      exposed_at = ${record.exposedAt}, exposed_from = ${record.exposedFrom},
      expires_at = ${record.expiresAt}, replaced_by = ${record.replacedBy},
      retires = ${record.retires},
      allow_from = ${jsonOrNull(record.allowFrom)}::text::jsonb,
      rate_limit = ${jsonOrNull(record.rateLimit)}::text::jsonb
    WHERE id = ${record.id}`;
}

/** Appends an audit line under revision `seq`. */
export async function insertAudit(
  tx: Tx,
  seq: bigint,
  line: AuditLine & { at: Date | string },
): Promise<void> {
  await tx`
    INSERT INTO audit (seq, at, action, key_id, actor, detail)
    VALUES (${seq.toString()}, ${line.at}, ${line.action}, ${line.keyId},
      ${line.actor}, ${line.detail})`;
}

/**
 * The usage row of key `id`, created if missing and locked for this
 * transaction; null when no such key exists.
 */
export async function lockUsage(
  tx: Tx,
  id: number,
): Promise<{ networks: NetworkUse[]; refused: RefusedUse[] } | null> {
  if (!Number.isSafeInteger(id)) return null;
  await tx`
    INSERT INTO key_usage (key_id) SELECT id FROM keys WHERE id = ${id}
    ON CONFLICT (key_id) DO NOTHING`;
  const [row] = await tx<{ networks: NetworkUse[]; refused: RefusedUse[] }[]>`
    SELECT networks, refused FROM key_usage WHERE key_id = ${id} FOR UPDATE`;
  return row ?? null;
}
