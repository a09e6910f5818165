/**
 * The PostgreSQL store: {@linkcode KeyStore} on a database that several
 * server instances and the console share. The tables are described in
 * `schema.ts`; time limits and outages are `connection.ts`'s.
 *
 * Every change is one transaction: the change, the revision bump and its
 * audit line, or nothing. An import is one transaction too, so servers see
 * none of it until it commits, and a failed or killed one leaves nothing;
 * an advisory lock refuses a second import while one runs. Reads on the
 * request path go to the database every time, and give up within a bounded
 * time with `StoreUnavailableError` rather than wait on a database
 * that is gone; the pool reconnects by itself once it is back.
 *
 * @module
 */

import type postgres from "postgres";
import { ImportChecker } from "../_import_check.ts";
import {
  ImportItemError,
  ImportStateError,
  KeyCollisionError,
  KeyIdsExhaustedError,
  KeyNotFoundError,
  NameTakenError,
  RotateRevokedError,
  StoreInputError,
} from "../errors.ts";
import {
  AUDIT_DETAIL,
  exportItems,
  MAX_KEY_ID,
  nameKey,
  newRecord,
  normalizeEmail,
  normalizeName,
  refuseRetiring,
  retiredRecord,
  revokedRecord,
  rotateDetail,
  rotation,
} from "../records.ts";
import {
  allowFromDetail,
  appendRefused,
  byKey,
  mergeNetworks,
  networkDetail,
  normalizeAllowFrom,
} from "../usage_lists.ts";
import type {
  AuditEntry,
  ChangeOptions,
  ExportItem,
  ExposeOptions,
  InstanceInfo,
  InstanceRecord,
  KeyChanges,
  KeyRecord,
  KeyStatus,
  KeyStore,
  NetworkUse,
  NewKeyInput,
  RefusedUse,
  RetireOptions,
  RevokeOptions,
  RevokeResult,
  RotateOptions,
  RotateResult,
} from "../types.ts";
import { bounded } from "../../_bounded.ts";
import { readRegistration } from "../registrations.ts";
import {
  asUnavailable,
  callTimeoutMs,
  connect,
  Pool,
  type PostgresStoreOptions,
  type Sql,
} from "./connection.ts";
import { migrateWith, SchemaVersionError } from "./schema.ts";

/** Rows per statement when listing or importing. */
const BATCH = 500;
/** Rows per statement when streaming ids and hashes for an index. */
const HASH_BATCH = 5000;
/** Beyond this many changed keys a reader forgets everything instead. */
const MAX_CHANGES = 1000;
type Tx = postgres.TransactionSql;

interface KeyRow {
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
  /**
   * Never before created_at: the queries raise an earlier time (a server
   * clock behind the console's, a version that rounded down) to it.
   */
  last_used_at?: Date | null;
  allow_from: string[] | null;
  /** From `key_usage`, where get() and list() join it. */
  networks?: NetworkUse[] | null;
  refused?: RefusedUse[] | null;
}

interface AuditRow {
  seq: string;
  at: Date;
  action: AuditEntry["action"];
  key_id: string;
  actor: string;
  detail: string | null;
}

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
    throw error instanceof SchemaVersionError
      ? error
      : asUnavailable(error, "The key store cannot be opened");
  }
  return new PostgresKeyStore(new Pool(sql, options));
}

/** {@linkcode KeyStore} on PostgreSQL. */
export class PostgresKeyStore implements KeyStore {
  #pool: Pool;
  #sql: Sql;

  /** Takes over a pool whose database is already migrated; see {@linkcode openPostgresStore}. */
  constructor(pool: Pool) {
    this.#pool = pool;
    this.#sql = pool.sql;
  }

  async findByHash(hash: string): Promise<KeyRecord | null> {
    const rows = await this.#pool.read(() =>
      this.#sql<KeyRow[]>`SELECT * FROM keys WHERE hash = ${hash}`
    );
    return rows.length === 0 ? null : toRecord(rows[0], false);
  }

  async findByHashAt(
    hash: string,
  ): Promise<{ record: KeyRecord | null; revision: bigint }> {
    // One statement reads one snapshot: the record is exactly as of that revision.
    const [row] = await this.#pool.read(() =>
      this.#sql<
        (Omit<KeyRow, "id"> & { id: string | null; revision: string })[]
      >`
        SELECT k.*, m.revision FROM meta m LEFT JOIN keys k ON k.hash = ${hash}`
    );
    return {
      revision: BigInt(row.revision),
      record: row.id === null ? null : toRecord(row as KeyRow, false),
    };
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

  abortImport(_options: ChangeOptions): Promise<boolean> {
    // A transaction that did not commit has left nothing behind to undo.
    return Promise.resolve(false);
  }

  async revision(): Promise<bigint> {
    const [row] = await this.#pool.read(() =>
      this.#sql<{ revision: string }[]>`SELECT revision FROM meta`
    );
    return BigInt(row.revision);
  }

  /**
   * Key rows with what is written apart from them (last use, usage), as
   * get(), getByName() and list() read them: one statement, so a column
   * added to one cannot be missed by another.
   */
  #records() {
    return this.#sql`
      SELECT k.*,
        CASE WHEN u.at < k.created_at THEN k.created_at ELSE u.at END
          AS last_used_at, g.networks, g.refused
      FROM keys k LEFT JOIN last_used u ON u.key_id = k.id
        LEFT JOIN key_usage g ON g.key_id = k.id`;
  }

  async get(id: number): Promise<KeyRecord | null> {
    if (!Number.isSafeInteger(id)) return null;
    const rows = await this.#pool.call(() =>
      this.#sql<KeyRow[]>`${this.#records()} WHERE k.id = ${id}`
    );
    return rows.length === 0 ? null : toRecord(rows[0], true);
  }

  async getByName(name: string): Promise<KeyRecord | null> {
    const key = nameKey(name);
    const rows = await this.#pool.call(() =>
      this.#sql<KeyRow[]>`
        ${this.#records()}
        WHERE k.name_key = ${key} AND k.status = 'valid'
          AND k.replaced_by IS NULL`
    );
    return rows.length === 0 ? null : toRecord(rows[0], true);
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
      for (const row of rows) yield toRecord(row, true);
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
    for (const row of rows) yield toRecord(row, true);
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

  async create(input: NewKeyInput, options: ChangeOptions): Promise<KeyRecord> {
    const name = normalizeName(input.name);
    const email = normalizeEmail(input.email);
    const allowFrom = input.allowFrom
      ? normalizeAllowFrom(input.allowFrom)
      : null;
    return await this.#change(async ({ tx, at, nextId }) => {
      const key = nameKey(name);
      const [byName] = await tx<{ id: string }[]>`
        SELECT id FROM keys WHERE name_key = ${key} AND status = 'valid'
          AND replaced_by IS NULL`;
      if (byName) throw new NameTakenError(name, Number(byName.id));
      await refuseCollision(tx, input.hash);
      const record = newRecord(
        nextId(),
        { ...input, name, email, allowFrom },
        at,
      );
      await insertKey(tx, record);
      await saveLifecycle(tx, record);
      return {
        result: record,
        audit: {
          action: "create",
          keyId: record.id,
          actor: options.actor,
          detail: allowFrom === null ? null : allowFromDetail(allowFrom),
        },
      };
    });
  }

  async revoke(id: number, options: RevokeOptions): Promise<RevokeResult> {
    return await this.#change<RevokeResult>(async ({ tx, at }) => {
      const current = await currentRecord(tx, id);
      if (current.status === "revoked") {
        return { result: { record: current, changed: false }, audit: null };
      }
      const record = revokedRecord(current, at, options.reason);
      await saveRevocation(tx, record);
      return {
        result: { record, changed: true },
        audit: {
          action: "revoke",
          keyId: id,
          actor: options.actor,
          detail: options.reason ?? null,
        },
      };
    });
  }

  async rotate(
    id: number,
    replacement: Pick<NewKeyInput, "hash" | "hint" | "expiresAt">,
    options: RotateOptions,
  ): Promise<RotateResult> {
    return await this.#change(async ({ tx, at, nextId }) => {
      const current = await currentRecord(tx, id);
      if (current.status === "revoked") {
        throw new RotateRevokedError(id);
      }
      refuseRetiring(current);
      await refuseCollision(tx, replacement.hash);
      const { created, old } = rotation(
        current,
        newRecord(nextId(), {
          ...replacement,
          name: current.name,
          email: current.email,
        }, at),
        { at, ...options },
      );
      // Revoke (or mark as replaced) first: the partial unique index then
      // lets the name pass on.
      await saveRevocation(tx, old);
      await saveLifecycle(tx, old);
      await insertKey(tx, created);
      await saveLifecycle(tx, created);
      return {
        result: { revoked: old, created },
        audit: {
          action: "rotate",
          keyId: id,
          actor: options.actor,
          detail: rotateDetail(created.id, options),
        },
      };
    });
  }

  async retire(id: number, options: RetireOptions): Promise<RevokeResult> {
    return await this.#change<RevokeResult>(async ({ tx, at }) => {
      const self = await currentRecord(tx, id);
      const firstUse = options.cause === "first_use";
      const targetId = firstUse ? self.retires : id;
      const unchanged = {
        result: { record: self, changed: false },
        audit: null,
      };
      if (targetId === null) return unchanged;
      // The link is spent whatever became of the old key, so the write
      // happens once.
      if (firstUse) await tx`UPDATE keys SET retires = NULL WHERE id = ${id}`;
      const [row] = await tx<
        KeyRow[]
      >`SELECT * FROM keys WHERE id = ${targetId}`;
      const record = row &&
        retiredRecord(toRecord(row, false), at, firstUse ? self : undefined);
      if (!record) return unchanged;
      await saveRevocation(tx, record);
      return {
        result: { record, changed: true },
        audit: {
          action: "revoke",
          keyId: record.id,
          actor: options.actor,
          detail: record.revokedReason,
        },
      };
    });
  }

  async markExposed(id: number, options: ExposeOptions): Promise<boolean> {
    return await this.#change(async ({ tx, at }) => {
      const current = await currentRecord(tx, id);
      if (current.exposedAt !== null) return { result: false, audit: null };
      await tx`
        UPDATE keys SET exposed_at = ${at}, exposed_from = ${options.from}
        WHERE id = ${id}`;
      return {
        result: true,
        audit: {
          action: "expose",
          keyId: id,
          actor: options.actor,
          detail: AUDIT_DETAIL.expose(options.from),
        },
      };
    });
  }

  async setAllowFrom(
    id: number,
    allowFrom: string[] | null,
    options: ChangeOptions,
  ): Promise<{ record: KeyRecord; changed: boolean }> {
    const wanted = allowFrom === null ? null : normalizeAllowFrom(allowFrom);
    return await this.#change<
      { record: KeyRecord; changed: boolean }
    >(async ({ tx }) => {
      const current = await currentRecord(tx, id);
      const record = { ...current, allowFrom: wanted };
      if (JSON.stringify(current.allowFrom) === JSON.stringify(wanted)) {
        return { result: { record, changed: false }, audit: null };
      }
      await tx`
        UPDATE keys SET allow_from = ${jsonOrNull(wanted)}::text::jsonb
        WHERE id = ${id}`;
      return {
        result: { record, changed: true },
        audit: {
          action: "allow_from",
          keyId: id,
          actor: options.actor,
          detail: allowFromDetail(wanted),
        },
      };
    });
  }

  async recordNetworkUses(
    uses: Iterable<{ id: number; network: string; at: Date }>,
  ): Promise<{ id: number; network: string }[]> {
    const added: { id: number; network: string }[] = [];
    for (const [id, group] of byKey(uses)) {
      const result = await this.#pool.transaction(async (tx) => {
        const listed = await lockUsage(tx, id);
        if (listed === null) return [];
        const merged = mergeNetworks(listed.networks, group);
        if (merged.added.length > 0) {
          // Audit lines are numbered by revision: a first use takes `meta`
          // as a change does, one revision per line. Usage rows are locked
          // before `meta` and changes never lock them, so no deadlock.
          const [free] = await tx<{ free: boolean }[]>`
              SELECT pg_try_advisory_xact_lock_shared(${IMPORT_LOCK}) AS free`;
          if (!free.free) return [];
          const [meta] = await tx<{ revision: string }[]>`
              SELECT revision FROM meta FOR UPDATE`;
          let revision = BigInt(meta.revision);
          const at = new Date();
          for (const network of merged.added) {
            await insertAudit(tx, (++revision).toString(), at, {
              action: "network",
              keyId: id,
              actor: "server",
              detail: networkDetail(network),
            });
          }
          await tx`UPDATE meta SET revision = ${revision.toString()}`;
        }
        await tx`
            UPDATE key_usage
            SET networks = ${JSON.stringify(merged.networks)}::text::jsonb
            WHERE key_id = ${id}`;
        return merged.added;
      });
      for (const network of result) added.push({ id, network });
    }
    return added;
  }

  async recordRefusedUses(
    uses: Iterable<{ id: number; address: string; at: Date }>,
  ): Promise<void> {
    for (const [id, group] of byKey(uses)) {
      await this.#pool.transaction(async (tx) => {
        const listed = await lockUsage(tx, id);
        if (listed === null) return;
        const refused = appendRefused(listed.refused, group);
        await tx`
            UPDATE key_usage SET refused = ${
          JSON.stringify(refused)
        }::text::jsonb
            WHERE key_id = ${id}`;
      });
    }
  }

  async recordLastUsed(
    uses: Iterable<{ id: number; at: Date }>,
  ): Promise<void> {
    const all = [...uses].filter((use) => Number.isSafeInteger(use.id))
      .map((use) => ({ id: use.id, at: use.at.toISOString() }));
    for (let start = 0; start < all.length; start += BATCH) {
      const batch = JSON.stringify(all.slice(start, start + BATCH));
      // Sorted by id so that instances flushing at once lock rows in one
      // order and cannot deadlock; the latest time wins whoever writes last.
      await this.#pool.call(() =>
        this.#sql`
          INSERT INTO last_used (key_id, at)
          SELECT u.id, max(u.at)
          FROM jsonb_to_recordset(${batch}::text::jsonb) AS u(id bigint, at timestamptz)
          JOIN keys k ON k.id = u.id
          GROUP BY u.id ORDER BY u.id
          ON CONFLICT (key_id) DO UPDATE
          SET at = greatest(last_used.at, excluded.at)`
      );
    }
  }

  exportAll(): AsyncIterable<ExportItem> {
    return exportItems(this);
  }

  async importAll(
    items: AsyncIterable<ExportItem>,
    options: ChangeOptions,
  ): Promise<{ keys: number; audit: number }> {
    // One transaction: a failure anywhere rolls the whole import back. No
    // overall deadline, as a large import takes its time; each statement
    // still has the server's.
    return await this.#pool.transaction(async (tx) => {
      await lockForImport(tx);
      const [state] = await tx<{ empty: boolean; revision: string }[]>`
          SELECT NOT EXISTS (SELECT 1 FROM keys)
            AND NOT EXISTS (SELECT 1 FROM audit)
            AND NOT EXISTS (SELECT 1 FROM last_used)
            AND NOT EXISTS (SELECT 1 FROM key_usage) AS empty,
            m.revision
          FROM meta m FOR UPDATE`;
      if (!state.empty) {
        throw new StoreInputError(
          "import_not_empty",
          "The store is not empty",
        );
      }
      const counts = await writeImport(tx, items);
      const at = new Date();
      // Above the imported audit lines and every revision the store had.
      const revision = (bigMax(BigInt(state.revision), BigInt(counts.audit)) +
        1n).toString();
      await tx`
          UPDATE meta SET revision = ${revision}, last_key_id = ${counts.maxId}`;
      await insertAudit(tx, revision, at, {
        action: "import",
        keyId: 0,
        actor: options.actor,
        detail: `${counts.keys} keys and ${counts.audit} audit lines`,
      });
      return { keys: counts.keys, audit: counts.audit };
    }, { timeoutMs: null });
  }

  async registerInstance(info: InstanceInfo): Promise<string> {
    const [row] = await this.#pool.call(() =>
      this.#sql<{ version: string }[]>`
        INSERT INTO instances (id, host, pid, started_at, lease_ms, acked)
        VALUES (${info.id}, ${info.host}, ${info.pid}, ${info.startedAt},
          ${info.leaseMs}, ${info.acked.toString()})
        RETURNING version`
    );
    return row.version;
  }

  async renewInstance(
    info: InstanceInfo,
    version: string,
  ): Promise<string | null> {
    const rows = await this.#pool.call(() =>
      this.#sql<{ version: string }[]>`
        UPDATE instances SET acked = ${info.acked.toString()},
          lease_ms = ${info.leaseMs}, version = version + 1
        WHERE id = ${info.id} AND version = ${version}
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

  async instances(): Promise<InstanceRecord[]> {
    const rows = await this.#pool.call(() =>
      this.#sql<
        {
          id: string;
          host: string;
          pid: number;
          started_at: Date;
          lease_ms: number;
          acked: string;
          version: string;
        }[]
      >`SELECT * FROM instances ORDER BY started_at, id`
    );
    return rows.map((row) =>
      readRegistration({
        host: row.host,
        pid: row.pid,
        startedAt: row.started_at,
        leaseMs: row.lease_ms,
        acked: row.acked,
      }, { id: row.id, version: row.version })
    );
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

  async changesSince(revision: bigint): Promise<KeyChanges> {
    const after = revision < 0n ? "-1" : revision.toString();
    // One statement, one snapshot: every line up to the revision read.
    const [row] = await this.#pool.read(() =>
      this.#sql<
        {
          revision: string;
          key_ids: string;
          lines: string;
          imported: boolean;
        }[]
      >`
        SELECT m.revision,
          coalesce(string_agg(DISTINCT c.key_id::text, ','), '') AS key_ids,
          count(c.key_id) AS lines,
          coalesce(bool_or(c.key_id = 0 AND c.action = 'import'), false) AS imported
        FROM meta m
        LEFT JOIN LATERAL (
          SELECT key_id, action FROM audit
          WHERE seq > ${after} AND seq <= m.revision
            AND action NOT IN ('network', 'expose')
          ORDER BY seq LIMIT ${MAX_CHANGES + 1}
        ) c ON true
        GROUP BY m.revision`
    );
    const now = BigInt(row.revision);
    if (revision < 0n || row.imported || Number(row.lines) > MAX_CHANGES) {
      return { revision: now, keyIds: [], rebuild: true };
    }
    // A list in text: the driver is told no array types (fetch_types: false).
    const keyIds = row.key_ids === "" ? [] : row.key_ids.split(",").map(Number);
    return { revision: now, keyIds, rebuild: false };
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

  /**
   * Runs `work` in one transaction that holds the `meta` row, then, when
   * `work` returns an audit line, moves the revision and writes the line
   * under it. `work` reads everything afresh under the lock, so it decides on
   * current data.
   */
  #change<T>(
    work: (draft: Draft) => Promise<{ result: T; audit: AuditLine | null }>,
  ): Promise<T> {
    return this.#pool.transaction(async (tx) => {
      // Refused at once while an import holds the store, rather than after
      // the lock timeout with a message that blames the database.
      const [free] = await tx<{ free: boolean }[]>`
          SELECT pg_try_advisory_xact_lock_shared(${IMPORT_LOCK}) AS free`;
      if (!free.free) throw new ImportStateError("import_unfinished");
      const [meta] = await tx<{ revision: string; last_key_id: string }[]>`
          SELECT revision, last_key_id FROM meta FOR UPDATE`;
      let lastId = Number(meta.last_key_id);
      const at = new Date();
      const { result, audit } = await work({
        tx,
        at,
        nextId: () => {
          if (lastId >= MAX_KEY_ID) {
            throw new KeyIdsExhaustedError(MAX_KEY_ID);
          }
          return ++lastId;
        },
      });
      if (audit !== null) {
        const revision = (BigInt(meta.revision) + 1n).toString();
        await tx`
            UPDATE meta SET revision = ${revision}, last_key_id = ${lastId}`;
        await insertAudit(tx, revision, at, audit);
      }
      return result;
    });
  }
}

/** What a change works with inside its transaction. */
interface Draft {
  tx: Tx;
  /** The time of the change, for the record and the audit line alike. */
  at: Date;
  /** Hands out the next key id; saved when the change commits. */
  nextId(): number;
}

type AuditLine = Omit<AuditEntry, "at">;

/** The record as of now; the caller holds the `meta` lock, so it stays so. */
async function currentRecord(tx: Tx, id: number): Promise<KeyRecord> {
  if (!Number.isSafeInteger(id)) throw new KeyNotFoundError(id);
  const [row] = await tx<KeyRow[]>`SELECT * FROM keys WHERE id = ${id}`;
  if (!row) throw new KeyNotFoundError(id);
  return toRecord(row, false);
}

async function refuseCollision(tx: Tx, hash: string): Promise<void> {
  const [taken] = await tx`SELECT 1 FROM keys WHERE hash = ${hash}`;
  if (taken) {
    throw new KeyCollisionError();
  }
}

async function insertKey(tx: Tx, record: KeyRecord): Promise<void> {
  await tx`
    INSERT INTO keys (id, name, name_key, email, status, hash, hint,
      created_at, revoked_at, revoked_reason, exposed_at, exposed_from,
      allow_from)
    VALUES (${record.id}, ${record.name}, ${nameKey(record.name)},
      ${record.email}, ${record.status}, ${record.hash}, ${record.hint},
      ${record.createdAt}, ${record.revokedAt}, ${record.revokedReason},
      ${record.exposedAt}, ${record.exposedFrom},
      ${jsonOrNull(record.allowFrom)}::text::jsonb)`;
}

function jsonOrNull(value: unknown): string | null {
  return value === null || value === undefined ? null : JSON.stringify(value);
}

/**
 * The usage row of key `id`, created if missing and locked for this
 * transaction; null when no such key exists.
 */
async function lockUsage(
  tx: Tx,
  id: number,
): Promise<{ networks: NetworkUse[]; refused: RefusedUse[] } | null> {
  await tx`
    INSERT INTO key_usage (key_id) SELECT id FROM keys WHERE id = ${id}
    ON CONFLICT (key_id) DO NOTHING`;
  const [row] = await tx<{ networks: NetworkUse[]; refused: RefusedUse[] }[]>`
    SELECT networks, refused FROM key_usage WHERE key_id = ${id} FOR UPDATE`;
  return row ?? null;
}

async function saveRevocation(tx: Tx, record: KeyRecord): Promise<void> {
  await tx`
    UPDATE keys SET status = ${record.status}, revoked_at = ${record.revokedAt},
      revoked_reason = ${record.revokedReason}
    WHERE id = ${record.id}`;
}

/** The lifecycle fields (schema version 2), written apart from the rest. */
async function saveLifecycle(tx: Tx, record: KeyRecord): Promise<void> {
  if (
    record.expiresAt === null && record.replacedBy === null &&
    record.retires === null
  ) return;
  await tx`
    UPDATE keys SET expires_at = ${record.expiresAt},
      replaced_by = ${record.replacedBy}, retires = ${record.retires}
    WHERE id = ${record.id}`;
}

/** The advisory lock an import holds alone and every change shares. */
const IMPORT_LOCK = 0x6b657973; // "keys"

/**
 * Takes the import lock without waiting on another import: two imports at
 * once would otherwise run one after the other, and the second fail only
 * once the first is done. A change holds the lock shared for a moment only,
 * so that is waited out briefly.
 */
async function lockForImport(tx: Tx): Promise<void> {
  for (let tries = 0; tries < 20; tries++) {
    const [lock] = await tx<{ locked: boolean }[]>`
      SELECT pg_try_advisory_xact_lock(${IMPORT_LOCK}) AS locked`;
    if (lock.locked) return;
    const [other] = await tx<{ importing: boolean }[]>`
      SELECT EXISTS (
        SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database
        WHERE l.locktype = 'advisory' AND d.datname = current_database()
          AND l.objid = ${IMPORT_LOCK}::bigint::oid
          AND l.mode = 'ExclusiveLock' AND l.granted
      ) AS importing`;
    if (other.importing) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new ImportStateError("import_unfinished");
}

function bigMax(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

async function insertAudit(
  tx: Tx,
  revision: number | string,
  at: Date,
  line: AuditLine,
): Promise<void> {
  await tx`
    INSERT INTO audit (seq, at, action, key_id, actor, detail)
    VALUES (${revision}, ${at}, ${line.action}, ${line.keyId}, ${line.actor},
      ${line.detail})`;
}

async function writeImport(
  tx: Tx,
  items: AsyncIterable<ExportItem>,
): Promise<{ keys: number; audit: number; maxId: number }> {
  const counts = { keys: 0, audit: 0, maxId: 0 };
  const checker = new ImportChecker();
  let keys: Record<string, unknown>[] = [];
  let audit: Record<string, unknown>[] = [];
  const flush = async () => {
    if (keys.length > 0) await insertImportedKeys(tx, JSON.stringify(keys));
    if (audit.length > 0) await insertImportedAudit(tx, JSON.stringify(audit));
    keys = [];
    audit = [];
  };
  for await (const item of items) {
    if (item.type === "key") {
      const record = checker.record(item.record);
      keys.push({
        id: record.id,
        name: record.name,
        name_key: importedNameKey(record),
        email: record.email,
        status: record.status,
        hash: record.hash,
        hint: record.hint,
        created_at: record.createdAt,
        revoked_at: record.revokedAt,
        revoked_reason: record.revokedReason,
        exposed_at: record.exposedAt,
        exposed_from: record.exposedFrom,
        last_used_at: record.lastUsedAt,
        expires_at: record.expiresAt,
        replaced_by: record.replacedBy,
        retires: record.retires,
        allow_from: record.allowFrom,
        networks: record.networks,
        refused: record.refusedUses,
      });
      counts.keys++;
      counts.maxId = checker.maxId;
    } else if (item.type === "audit") {
      const entry = checker.audit(item.entry);
      audit.push({
        seq: ++counts.audit,
        at: entry.at,
        action: entry.action,
        key_id: entry.keyId,
        actor: entry.actor,
        detail: entry.detail,
      });
    } else {
      throw new ImportItemError((item as { type: unknown }).type);
    }
    if (keys.length + audit.length >= BATCH) await flush();
  }
  checker.finish();
  await flush();
  return counts;
}

async function insertImportedKeys(tx: Tx, json: string): Promise<void> {
  await tx`
    INSERT INTO keys (id, name, name_key, email, status, hash, hint,
      created_at, revoked_at, revoked_reason, exposed_at, exposed_from,
      expires_at, replaced_by, retires, allow_from)
    SELECT id, name, name_key, email, status, hash, hint,
      created_at, revoked_at, revoked_reason, exposed_at, exposed_from,
      expires_at, replaced_by, retires, allow_from
    FROM jsonb_to_recordset(${json}::text::jsonb) AS r(id bigint, name text,
      name_key text, email text, status text, hash text, hint text,
      created_at timestamptz, revoked_at timestamptz, revoked_reason text,
      exposed_at timestamptz, exposed_from text,
      expires_at timestamptz, replaced_by bigint, retires bigint,
      allow_from jsonb)`;
  await tx`
    INSERT INTO key_usage (key_id, networks, refused)
    SELECT id, networks, refused
    FROM jsonb_to_recordset(${json}::text::jsonb) AS r(id bigint,
      networks jsonb, refused jsonb)
    WHERE networks <> '[]'::jsonb OR refused <> '[]'::jsonb`;
  await tx`
    INSERT INTO last_used (key_id, at)
    SELECT id, last_used_at
    FROM jsonb_to_recordset(${json}::text::jsonb) AS r(id bigint,
      last_used_at timestamptz)
    WHERE last_used_at IS NOT NULL`;
}

async function insertImportedAudit(tx: Tx, json: string): Promise<void> {
  await tx`
    INSERT INTO audit (seq, at, action, key_id, actor, detail)
    SELECT seq, at, action, key_id, actor, detail
    FROM jsonb_to_recordset(${json}::text::jsonb) AS r(seq bigint, at timestamptz,
      action text, key_id bigint, actor text, detail text)`;
}

/** Only valid keys' names must be usable; a revoked key keeps whatever it had. */
function importedNameKey(record: KeyRecord): string {
  try {
    return nameKey(record.name);
  } catch {
    return record.name.toLowerCase();
  }
}

function toRecord(row: KeyRow, withLastUsed: boolean): KeyRecord {
  return {
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
    // Like the KV store, only get() and list() fill these in.
    lastUsedAt: withLastUsed ? row.last_used_at?.toISOString() ?? null : null,
    expiresAt: row.expires_at?.toISOString() ?? null,
    replacedBy: row.replaced_by === null ? null : Number(row.replaced_by),
    retires: row.retires === null ? null : Number(row.retires),
    allowFrom: row.allow_from ?? null,
    networks: withLastUsed ? row.networks ?? [] : [],
    refusedUses: withLastUsed ? row.refused ?? [] : [],
  };
}

function toAudit(row: AuditRow): AuditEntry {
  return {
    at: row.at.toISOString(),
    action: row.action,
    keyId: Number(row.key_id),
    actor: row.actor,
    detail: row.detail,
  };
}
