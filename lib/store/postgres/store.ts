/**
 * The PostgreSQL backend: the seam's primitives (lib/store/backend.ts) on a
 * database that several server instances and the console share. The
 * tables are described in `schema.ts`; time limits and outages are
 * `connection.ts`'s; rows `_rows.ts`'s; the import `_import.ts`'s.
 *
 * Every change is one transaction that holds the `meta` row: the change,
 * the revision bump and its audit lines, or nothing. Reads on the request
 * path go to the database every time, and give up within a bounded time
 * with `StoreUnavailableError` rather than wait on a database that is
 * gone; the pool reconnects by itself once it is back.
 *
 * @module
 */

import type { HashRead, StoreBackend, StoredInstance } from "../backend.ts";
import { QUIET_ACTIONS } from "../change.ts";
import { KeyService } from "../keys.ts";
import { nameKey } from "../records.ts";
import type { AuditEntry, ChangeOptions, KeyRecord } from "../types.ts";
import { bounded } from "../../util/bounded.ts";
import {
  callTimeoutMs,
  connect,
  openFailure,
  Pool,
  type PostgresStoreOptions,
  type Sql,
} from "./connection.ts";
import { changeIn } from "./_change.ts";
import { stageIn } from "./_import.ts";
import { type AuditRow, type KeyRow, toAudit, toRecord } from "./_rows.ts";
import { migrateWith, SchemaVersionError } from "./schema.ts";

/** Rows per statement when listing. */
const BATCH = 500;
/** Rows per statement when streaming ids and hashes for an index. */
const HASH_BATCH = 5000;

/** The key store on PostgreSQL, as {@linkcode openPostgresStore} opens it. */
export type PostgresKeyStore = KeyService;

/**
 * Opens a store on the PostgreSQL database at `url`, bringing its schema up
 * to date first. Throws {@linkcode SchemaVersionError} when the database is
 * newer than this code, and `StoreUnavailableError` when it cannot
 * be reached.
 */
export async function openPostgresStore(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<PostgresKeyStore> {
  const sql = connect(url, options);
  try {
    await bounded(migrateWith(sql), callTimeoutMs(options));
  } catch (error) {
    await sql.end({ timeout: 1 });
    throw error instanceof SchemaVersionError ? error : openFailure(error, url);
  }
  return new KeyService(new PostgresBackend(new Pool(sql, options)));
}

/** {@linkcode StoreBackend} on PostgreSQL. */
export class PostgresBackend implements StoreBackend {
  #pool: Pool;
  #sql: Sql;
  /** One transaction that holds `meta`: `_change.ts`. */
  readonly change: StoreBackend["change"];
  /** One transaction under the import lock: `_import.ts`. */
  readonly stageImport: StoreBackend["stageImport"];

  /** Takes over a pool whose database is already migrated; see {@linkcode openPostgresStore}. */
  constructor(pool: Pool) {
    this.#pool = pool;
    this.#sql = pool.sql;
    this.change = (kind, work) => changeIn(pool, kind, work);
    this.stageImport = (_options, fill) => stageIn(pool, fill);
  }

  async findByHashAt(hash: string): Promise<HashRead> {
    // One statement reads one snapshot: the record is exactly as of that revision.
    const [row] = await this.#pool.read(() =>
      this.#sql<
        (Omit<KeyRow, "id"> & {
          id: string | null;
          revision: string;
          auth_revision: string;
        })[]
      >`
        SELECT k.*, m.revision, m.auth_revision
        FROM meta m LEFT JOIN keys k ON k.hash = ${hash}`
    );
    return {
      revision: BigInt(row.revision),
      authRevision: BigInt(row.auth_revision),
      record: row.id === null ? null : toRecord(row as KeyRow),
    };
  }

  /**
   * Key rows with what is written apart from them (last use, usage), as
   * get(), getByName() and list() read them: one statement, so a column
   * added to one cannot be missed by another.
   */
  #records() {
    return this.#sql`
      SELECT k.*, u.at AS last_used_at, g.networks, g.refused
      FROM keys k LEFT JOIN last_used u ON u.key_id = k.id
        LEFT JOIN key_usage g ON g.key_id = k.id`;
  }

  async get(id: number): Promise<KeyRecord | null> {
    if (!Number.isSafeInteger(id)) return null;
    const rows = await this.#pool.call(() =>
      this.#sql<KeyRow[]>`${this.#records()} WHERE k.id = ${id}`
    );
    return rows.length === 0 ? null : toRecord(rows[0]);
  }

  async getByName(name: string): Promise<KeyRecord | null> {
    const rows = await this.#pool.call(() =>
      this.#sql<KeyRow[]>`
        ${this.#records()}
        WHERE k.name_key = ${nameKey(name)} AND k.status = 'valid'
          AND k.replaced_by IS NULL`
    );
    return rows.length === 0 ? null : toRecord(rows[0]);
  }

  async *list(
    options: { includeRevoked?: boolean } = {},
  ): AsyncIterable<KeyRecord> {
    const all = options.includeRevoked === true;
    // Pages by id rather than a cursor, so a slow reader holds no connection.
    for (let after = 0;;) {
      const rows = await this.#pool.call(() =>
        this.#sql<KeyRow[]>`
          ${this.#records()}
          WHERE k.id > ${after} AND (${all} OR k.status = 'valid')
          ORDER BY k.id LIMIT ${BATCH}`
      );
      for (const row of rows) yield toRecord(row);
      if (rows.length < BATCH) return;
      after = Number(rows[rows.length - 1].id);
    }
  }

  async *dueKeys(now: Date): AsyncIterable<number> {
    const rows = await this.#pool.call(() =>
      this.#sql<{ id: string }[]>`
        SELECT id FROM keys
        WHERE status = 'valid' AND expires_at <= ${now}
        ORDER BY id`
    );
    for (const row of rows) yield Number(row.id);
  }

  async *predecessors(id: number): AsyncIterable<KeyRecord> {
    if (!Number.isSafeInteger(id)) return;
    const rows = await this.#pool.call(() =>
      this.#sql<KeyRow[]>`
        ${this.#records()}
        WHERE k.status = 'valid' AND k.replaced_by = ${id}
        ORDER BY k.id`
    );
    for (const row of rows) yield toRecord(row);
  }

  async *audit(options: { keyId?: number } = {}): AsyncIterable<AuditEntry> {
    const keyId = options.keyId ?? null;
    if (keyId !== null && !Number.isSafeInteger(keyId)) return;
    for (let after = "0";;) {
      const rows = await this.#pool.call(() =>
        this.#sql<AuditRow[]>`
          SELECT * FROM audit
          WHERE seq > ${after} AND (${keyId}::bigint IS NULL OR key_id = ${keyId})
          ORDER BY seq LIMIT ${BATCH}`
      );
      for (const row of rows) yield toAudit(row);
      if (rows.length < BATCH) return;
      after = rows[rows.length - 1].seq;
    }
  }

  async revision(): Promise<bigint> {
    const [row] = await this.#pool.read(() =>
      this.#sql<{ revision: string }[]>`SELECT revision FROM meta`
    );
    return BigInt(row.revision);
  }

  async *keyHashes(
    options: { afterId?: number } = {},
  ): AsyncIterable<{ id: number; hash: string }> {
    for (let after = Math.floor(options.afterId ?? 0);;) {
      const rows = await this.#pool.call(() =>
        this.#sql<{ id: string; hash: string }[]>`
          SELECT id, hash FROM keys WHERE id > ${after}
          ORDER BY id LIMIT ${HASH_BATCH}`
      );
      for (const row of rows) yield { id: Number(row.id), hash: row.hash };
      if (rows.length < HASH_BATCH) return;
      after = Number(rows[rows.length - 1].id);
    }
  }

  async importRevision(): Promise<bigint> {
    // Each completed import audits itself at the revision it produced, under
    // key id 0; a failed one leaves nothing, so the newest such line says it.
    const [row] = await this.#pool.call(() =>
      this.#sql<{ seq: string | null }[]>`
        SELECT max(seq) AS seq FROM audit
        WHERE key_id = 0 AND action = 'import'`
    );
    return BigInt(row.seq ?? 0);
  }

  async recordLastUsed(uses: { id: number; at: Date }[]): Promise<void> {
    for (let start = 0; start < uses.length; start += BATCH) {
      const batch = JSON.stringify(uses.slice(start, start + BATCH));
      // In id order, so that instances flushing at once lock rows in one
      // order and cannot deadlock; the latest time wins whoever writes last.
      await this.#pool.call(() =>
        this.#sql`
          INSERT INTO last_used (key_id, at)
          SELECT u.id, u.at
          FROM jsonb_to_recordset(${batch}::text::jsonb) AS u(id bigint, at timestamptz)
          JOIN keys k ON k.id = u.id
          ORDER BY u.id
          ON CONFLICT (key_id) DO UPDATE
          SET at = greatest(last_used.at, excluded.at)`
      );
    }
  }

  async discardImport(
    _options: ChangeOptions,
  ): Promise<{ revision: bigint; discarded: boolean }> {
    // A transaction that did not commit has left nothing behind to undo.
    return { revision: await this.revision(), discarded: false };
  }

  async putInstance(
    stored: StoredInstance,
    options: { version?: string } = {},
  ): Promise<string | null> {
    const { id, acked, leaseMs } = stored;
    const rows = await this.#pool.call(() =>
      options.version === undefined
        ? this.#sql<{ version: string }[]>`
          INSERT INTO instances (id, host, pid, started_at, lease_ms, acked)
          VALUES (${id}, ${stored.host}, ${stored.pid}, ${stored.startedAt},
            ${leaseMs}, ${acked})
          RETURNING version`
        : this.#sql<{ version: string }[]>`
          UPDATE instances SET acked = ${acked}, lease_ms = ${leaseMs},
            version = version + 1
          WHERE id = ${id} AND version = ${options.version}
          RETURNING version`
    );
    return rows.length === 0 ? null : rows[0].version;
  }

  async pollInstance(
    id: string,
  ): Promise<{ revision: bigint; version: string | null }> {
    // One statement, one snapshot.
    const [row] = await this.#pool.read(() =>
      this.#sql<{ revision: string; version: string | null }[]>`
        SELECT m.revision,
          (SELECT version FROM instances WHERE id = ${id}) AS version
        FROM meta m`
    );
    return { revision: BigInt(row.revision), version: row.version };
  }

  async readInstances(): Promise<
    { id: string; version: string; stored: unknown }[]
  > {
    const rows = await this.#pool.call(() =>
      this.#sql<{ id: string; version: string }[]>`
        SELECT id, version, host, pid, started_at AS "startedAt",
          lease_ms AS "leaseMs", acked
        FROM instances ORDER BY started_at, id`
    );
    return rows.map((row) => ({
      id: row.id,
      version: row.version,
      stored: row,
    }));
  }

  async removeInstance(
    id: string,
    options: { version?: string } = {},
  ): Promise<boolean> {
    const rows = await this.#pool.call(() =>
      options.version === undefined
        ? this.#sql`DELETE FROM instances WHERE id = ${id} RETURNING id`
        : this.#sql`
          DELETE FROM instances WHERE id = ${id} AND version = ${options.version}
          RETURNING id`
    );
    return rows.length > 0;
  }

  async auditSince(
    after: bigint,
    options: { limit: number },
  ): ReturnType<StoreBackend["auditSince"]> {
    // One statement, one snapshot: every line up to the revision read.
    const [row] = await this.#pool.read(() =>
      this.#sql<{ revision: string; key_ids: string; replaced: boolean }[]>`
        SELECT m.revision,
          coalesce(string_agg(c.key_id::text, ','), '') AS key_ids,
          coalesce(bool_or(c.key_id = 0 AND c.action = 'import'), false)
            AS replaced
        FROM meta m
        LEFT JOIN LATERAL (
          SELECT key_id, action FROM audit
          WHERE seq > ${after.toString()} AND seq <= m.revision
            AND action NOT IN ${this.#sql(QUIET_ACTIONS)}
          ORDER BY seq LIMIT ${options.limit + 1}
        ) c ON true
        GROUP BY m.revision`
    );
    // A list in text: the driver is told no array types (fetch_types: false).
    const keyIds = row.key_ids === "" ? [] : row.key_ids.split(",").map(Number);
    return {
      revision: BigInt(row.revision),
      replaced: row.replaced,
      keyIds,
      complete: keyIds.length <= options.limit,
    };
  }

  async onChange(listener: () => void): Promise<() => Promise<void>> {
    // The driver keeps one connection for it and listens again after a
    // reconnect; a notice lost meanwhile is made up by the servers' polls.
    const { unlisten } = await this.#pool.call(() =>
      this.#sql.listen("key_store_changes", () => listener())
    );
    return unlisten;
  }

  async close(): Promise<void> {
    await this.#pool.end(2);
  }
}
