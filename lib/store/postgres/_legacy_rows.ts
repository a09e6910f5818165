/**
 * The rows of a database written by a version with one table per kind of
 * row (schema 1 to 7), read as an export's items for the one-time move
 * (`_legacy.ts`): a page at a time, times read exactly, and any row the
 * move refuses named as an operator's SQL finds it.
 *
 * @module
 */

import { withUsage } from "../backend.ts";
import { StoreOpenError } from "../errors.ts";
import { storedRateLimit } from "../rate_limits.ts";
import type { AuditEntry, ExportItem, KeyRecord } from "../types.ts";
import type { Sql } from "./connection.ts";

/**
 * The older version's tables hold what the store's import refuses, so
 * nothing was moved: they stay as they were, and no key works until the
 * operator corrects the row named. An older release cannot help: the
 * schema is already past what it knows.
 */
export class LegacyConversionError extends StoreOpenError {
  override name = "LegacyConversionError";
  /** The row refused, as `legacy_keys (id = 3)`; null when no one row is. */
  readonly row: string | null;

  constructor(cause: unknown, row: string | null = null) {
    const reason = cause instanceof Error ? cause.message : String(cause);
    super(
      "legacy_conversion_failed",
      `The key store's tables from an older version cannot be moved into this version's entries (${
        row === null ? "" : `${row}: `
      }${reason}); nothing was moved and the legacy_* tables are unchanged: correct that row with SQL (psql), then start again`,
      { cause },
    );
    this.row = row;
  }
}

/**
 * Rows per read of a legacy table: however large the table, each read ends
 * well within the statement timeout and holds only this many rows.
 */
export const PAGE_ROWS = 2000;

/** The largest time JavaScript holds, in milliseconds either side of 1970. */
const TIME_LIMIT_MS = 8.64e15;

/** The legacy tables' rows, read in the caller's transaction. */
export class LegacyRows {
  /** The row the import was last given: the one it refused, if it refuses. */
  current: string | null = null;
  /** Rows read so far, keys and audit lines. */
  read = 0;
  #sql: Sql;
  #total: number;
  #onRow: (read: number) => void;

  /**
   * `total` is what the tables hold, counted in the same snapshot; the items
   * end in a refusal if the reads come to any other number.
   */
  constructor(
    sql: Sql,
    total: number,
    options: { onRow?: (read: number) => void } = {},
  ) {
    this.#sql = sql;
    this.#total = total;
    this.#onRow = options.onRow ?? (() => {});
  }

  /** Keys in id order, then the audit log in its order, as an export has them. */
  async *items(): AsyncIterable<ExportItem> {
    for await (const row of this.#keys()) {
      this.current = `legacy_keys (id = ${row.id})`;
      yield { type: "key", record: toRecord(row) };
      this.#onRow(++this.read);
    }
    for await (const row of this.#audit()) {
      this.current = `legacy_audit (seq = ${row.seq})`;
      yield {
        type: "audit",
        entry: {
          at: instant(row.at, this.current, "at")!,
          action: row.action,
          keyId: Number(row.key_id),
          actor: row.actor,
          detail: row.detail,
        },
      };
      this.#onRow(++this.read);
    }
    this.current = null;
    if (this.read !== this.#total) {
      throw new LegacyConversionError(
        `the reads came to ${this.read} rows of the ${this.#total} the tables hold`,
      );
    }
  }

  /**
   * A page of keys at a time, each with its last use and usage joined: the
   * page is cut on keys, so that a key joined to two rows (a primary key
   * dropped by hand) comes twice within one page, for the import to refuse.
   */
  async *#keys(): AsyncIterable<LegacyKey> {
    // Times as whole milliseconds, computed by PostgreSQL and cut as the
    // older version's reading cut them (down): the driver's reading takes
    // years 1 to 99 for 1901 to 2049, and cannot read infinity.
    for (let after: string | null = null;;) {
      const page: LegacyKey[] = await this.#sql<LegacyKey[]>`
        SELECT k.id::text AS id, k.name, k.email, k.status, k.hash, k.hint,
          floor(extract(epoch FROM k.created_at) * 1000)::float8
            AS created_at,
          floor(extract(epoch FROM k.revoked_at) * 1000)::float8
            AS revoked_at,
          k.revoked_reason,
          floor(extract(epoch FROM k.exposed_at) * 1000)::float8
            AS exposed_at,
          k.exposed_from,
          floor(extract(epoch FROM k.expires_at) * 1000)::float8
            AS expires_at,
          k.replaced_by::text AS replaced_by, k.retires::text AS retires,
          k.allow_from, k.rate_limit,
          floor(extract(epoch FROM u.at) * 1000)::float8
            AS last_used_at,
          g.networks, g.refused
        FROM (
          SELECT * FROM legacy_keys
          WHERE ${after}::bigint IS NULL OR id > ${after}::bigint
          ORDER BY id LIMIT ${PAGE_ROWS}
        ) k LEFT JOIN legacy_last_used u ON u.key_id = k.id
          LEFT JOIN legacy_key_usage g ON g.key_id = k.id
        ORDER BY k.id`;
      yield* page;
      if (new Set(page.map((row) => row.id)).size < PAGE_ROWS) return;
      after = page[page.length - 1].id;
    }
  }

  async *#audit(): AsyncIterable<LegacyAudit> {
    // Ordered by the column, not by the text it is selected as.
    for (let after: string | null = null;;) {
      const page: LegacyAudit[] = await this.#sql<LegacyAudit[]>`
        SELECT seq::text AS seq,
          floor(extract(epoch FROM at) * 1000)::float8 AS at, action,
          key_id::text AS key_id, actor, detail
        FROM legacy_audit
        WHERE ${after}::bigint IS NULL OR seq > ${after}::bigint
        ORDER BY legacy_audit.seq LIMIT ${PAGE_ROWS}`;
      yield* page;
      if (page.length < PAGE_ROWS) return;
      after = page[page.length - 1].seq;
    }
  }
}

/**
 * A time as the store holds it; null stays null. PostgreSQL holds times
 * JavaScript cannot (`infinity`, years past 275760): such a row is refused
 * by name, as the import refuses any other.
 */
function instant(
  ms: number | null,
  row: string,
  column: string,
): string | null {
  if (ms === null) return null;
  if (Number.isFinite(ms) && Math.abs(ms) <= TIME_LIMIT_MS) {
    return new Date(ms).toISOString();
  }
  throw new LegacyConversionError(
    `${column} is not a time this version can hold (infinity, or a year past 275760)`,
    row,
  );
}

/** A row of `legacy_keys`, with its last use and usage lists joined. */
interface LegacyKey {
  id: string;
  name: string;
  email: string;
  status: KeyRecord["status"];
  hash: string;
  hint: string;
  created_at: number;
  revoked_at: number | null;
  revoked_reason: string | null;
  exposed_at: number | null;
  exposed_from: string | null;
  expires_at: number | null;
  replaced_by: string | null;
  retires: string | null;
  allow_from: string[] | null;
  rate_limit: KeyRecord["rateLimit"];
  last_used_at: number | null;
  networks: KeyRecord["networks"] | null;
  refused: KeyRecord["refusedUses"] | null;
}

/** A row of `legacy_audit`. */
interface LegacyAudit {
  seq: string;
  at: number;
  action: AuditEntry["action"];
  key_id: string;
  actor: string;
  detail: string | null;
}

function toRecord(row: LegacyKey): KeyRecord {
  const where = `legacy_keys (id = ${row.id})`;
  const time = (column: keyof LegacyKey & string) =>
    instant(row[column] as number | null, where, column);
  const id = (value: string | null) => value === null ? null : Number(value);
  return withUsage({
    id: Number(row.id),
    name: row.name,
    email: row.email,
    status: row.status,
    hash: row.hash,
    hint: row.hint,
    createdAt: time("created_at")!,
    revokedAt: time("revoked_at"),
    revokedReason: row.revoked_reason,
    exposedAt: time("exposed_at"),
    exposedFrom: row.exposed_from,
    lastUsedAt: null,
    expiresAt: time("expires_at"),
    replacedBy: id(row.replaced_by),
    retires: id(row.retires),
    rotatedFrom: null,
    rateCounter: null,
    allowFrom: row.allow_from,
    rateLimit: storedRateLimit(row.rate_limit),
    networks: [],
    refusedUses: [],
  }, {
    lastUsedAt: instant(
      row.last_used_at,
      `legacy_last_used (key_id = ${row.id})`,
      "at",
    ),
    networks: row.networks ?? [],
    refused: row.refused ?? [],
  });
}
