/**
 * The PostgreSQL store: the only module that talks to PostgreSQL, so that
 * several server instances and the console can share one set of keys.
 *
 * Tables (created by {@linkcode migrate}, versioned in `schema_version`):
 * - `meta`: one row holding the revision and the last key id handed out.
 *   Every change locks it first (`SELECT … FOR UPDATE`), so changes are
 *   totally ordered, ids come out 1, 2, 3 … and the audit follows that order.
 * - `keys`: one row per key, valid or revoked; `hash` is unique, and a partial
 *   unique index keeps `name_key` unique among valid keys.
 * - `audit`: one row per change, keyed by the revision it produced.
 * - `last_used`: when a key last authenticated, apart from `keys` so that it
 *   neither moves the revision nor waits on the `meta` lock.
 *
 * Every change is one transaction: the change, the revision bump and its
 * audit line, or nothing. An import is one transaction too, so servers see
 * none of it until it commits, and a failed or killed one leaves nothing;
 * an advisory lock refuses a second import while one runs. Reads on the request path go to the database every
 * time, and give up within a bounded time with
 * {@linkcode StoreUnavailableError} rather than wait on a database that is
 * gone; the pool reconnects by itself once it is back.
 *
 * @module
 */

import postgres from "postgres";
import { ImportChecker } from "./_import_check.ts";
import {
  AUDIT_DETAIL,
  type AuditEntry,
  cannotRotateRevoked,
  type ChangeOptions,
  type ExportItem,
  exportItems,
  type ExposeOptions,
  ImportStateError,
  keyCollision,
  keyIdsExhausted,
  keyNotFound,
  type KeyRecord,
  type KeyStatus,
  type KeyStore,
  MAX_KEY_ID,
  nameKey,
  nameTaken,
  type NewKeyInput,
  newRecord,
  normalizeEmail,
  normalizeName,
  revokedRecord,
  type RevokeOptions,
  type RevokeResult,
  rotatedRecord,
  type RotateResult,
  StoreInputError,
  StoreUnavailableError,
} from "./store.ts";

/** Tuning of the connection pool and its time limits. */
export interface PostgresStoreOptions {
  /** Connections the pool may open; 10 unless set. */
  maxConnections?: number;
  /** Seconds to wait for a new connection; 3 unless set. */
  connectTimeoutSeconds?: number;
  /**
   * Milliseconds a request-path read (`findByHash`, `findByHashAt`,
   * `revision`) may take before it fails as unavailable; 2000 unless set.
   */
  readTimeoutMs?: number;
  /** Milliseconds any other call may take before it fails as unavailable; 15000 unless set. */
  timeoutMs?: number;
  /** Milliseconds the server lets one statement run or wait for a lock; 5000 unless set. */
  statementTimeoutMs?: number;
}

/** The schema a database was at, and the one it is at now. */
export interface MigrateResult {
  from: number;
  to: number;
}

/** The database holds a schema this code cannot use. */
export class SchemaVersionError extends Error {
  override name = "SchemaVersionError";
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
];

/** The newest schema version this code knows. */
export const SCHEMA_VERSION: number = MIGRATIONS.length;

/** Rows per statement when listing or importing. */
const BATCH = 500;
/** Rows per statement when streaming ids and hashes for an index. */
const HASH_BATCH = 5000;
/** Request-path reads allowed to wait at once, so that an outage cannot pile up work without bound. */
const MAX_PENDING_READS = 1000;

type Sql = postgres.Sql;
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
  last_used_at?: Date | null;
}

interface AuditRow {
  seq: string;
  at: Date;
  action: AuditEntry["action"];
  key_id: string;
  actor: string;
  detail: string | null;
}

interface Limits {
  readTimeoutMs: number;
  timeoutMs: number;
}

/**
 * Opens a store on the PostgreSQL database at `url`, bringing its schema up
 * to date first. Throws {@linkcode SchemaVersionError} when the database is
 * newer than this code, and {@linkcode StoreUnavailableError} when it cannot
 * be reached.
 */
export async function openPostgresStore(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<PostgresKeyStore> {
  const sql = connect(url, options);
  const limits = {
    readTimeoutMs: options.readTimeoutMs ?? 2000,
    timeoutMs: options.timeoutMs ?? 15_000,
  };
  try {
    await bounded(migrateWith(sql), limits.timeoutMs);
  } catch (error) {
    await sql.end({ timeout: 1 });
    throw asUnavailable(error, "The key store cannot be opened");
  }
  return new PostgresKeyStore(sql, limits);
}

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
    return await bounded(migrateWith(sql), options.timeoutMs ?? 15_000);
  } catch (error) {
    throw asUnavailable(error, "The key store cannot be migrated");
  } finally {
    await sql.end({ timeout: 1 });
  }
}

/** Settings the driver reads but its types leave out. */
const UNTYPED_SETTINGS = { sslnegotiation: null, max_pipeline: 100 };

function connect(url: string, options: PostgresStoreOptions): Sql {
  const parsed = new URL(url);
  const query = parsed.searchParams;
  const sslmode = query.get("sslmode");
  const user = decodeURIComponent(parsed.username);
  const password = decodeURIComponent(parsed.password);
  const statementTimeout = options.statementTimeoutMs ?? 5000;
  // Every setting is given here, even the defaults: the driver reads a PG*
  // environment variable for each one left out, which the tasks' --allow-env
  // would refuse.
  return postgres(url, {
    user,
    pass: () => password,
    database: decodeURIComponent(parsed.pathname.slice(1)) || user,
    port: Number(parsed.port || 5432),
    max: options.maxConnections ?? 10,
    ssl: sslmode === null || sslmode === "disable"
      ? false
      : sslmode as "require" | "prefer" | "allow" | "verify-full",
    connect_timeout: options.connectTimeoutSeconds ?? 3,
    idle_timeout: 0,
    max_lifetime: 60 * 30,
    // The driver's own backoff grows to 20 s between attempts, which would
    // keep the service down long after the database is back.
    backoff: (attempt: number) => Math.min(0.05 * 2 ** attempt, 0.5),
    keep_alive: 30,
    prepare: true,
    debug: false,
    fetch_types: false,
    publications: "alltables",
    // Only a primary: reads must see every committed change.
    target_session_attrs: "read-write",
    onnotice: () => {},
    ...UNTYPED_SETTINGS,
    connection: {
      application_name: "integration-service",
      statement_timeout: statementTimeout,
      lock_timeout: statementTimeout,
      idle_in_transaction_session_timeout: 60_000,
    },
  });
}

async function migrateWith(sql: Sql): Promise<MigrateResult> {
  return await sql.begin(async (tx) => {
    // One migration at a time, even when several instances start together.
    await tx`SELECT pg_advisory_xact_lock(hashtext('keys: schema migration'))`;
    await tx`
      CREATE TABLE IF NOT EXISTS schema_version (
        version integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`;
    const [{ version }] = await tx<{ version: number }[]>`
      SELECT coalesce(max(version), 0)::int AS version FROM schema_version`;
    if (version > SCHEMA_VERSION) {
      throw new SchemaVersionError(
        `The key store's schema is at version ${version}, newer than the ${SCHEMA_VERSION} this service knows; upgrade the service or point DATABASE_URL at another database`,
      );
    }
    for (let next = version + 1; next <= SCHEMA_VERSION; next++) {
      await tx.unsafe(MIGRATIONS[next - 1]);
      await tx`INSERT INTO schema_version (version) VALUES (${next})`;
    }
    return { from: version, to: SCHEMA_VERSION };
  }) as MigrateResult;
}

/** {@linkcode KeyStore} on PostgreSQL. */
export class PostgresKeyStore implements KeyStore {
  #sql: Sql;
  #limits: Limits;
  #pendingReads = 0;

  /** Takes over a pool whose database is already migrated; see {@linkcode openPostgresStore}. */
  constructor(sql: Sql, limits: Limits) {
    this.#sql = sql;
    this.#limits = limits;
  }

  async findByHash(hash: string): Promise<KeyRecord | null> {
    const rows = await this.#read(() =>
      this.#sql<KeyRow[]>`SELECT * FROM keys WHERE hash = ${hash}`
    );
    return rows.length === 0 ? null : toRecord(rows[0], false);
  }

  async findByHashAt(
    hash: string,
  ): Promise<{ record: KeyRecord | null; revision: bigint }> {
    // One statement reads one snapshot: the record is exactly as of that revision.
    const [row] = await this.#read(() =>
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
      const rows = await this.#call(() =>
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
    const [row] = await this.#call(() =>
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
    const [row] = await this.#read(() =>
      this.#sql<{ revision: string }[]>`SELECT revision FROM meta`
    );
    return BigInt(row.revision);
  }

  async get(id: number): Promise<KeyRecord | null> {
    if (!Number.isSafeInteger(id)) return null;
    const rows = await this.#call(() =>
      this.#sql<KeyRow[]>`
        SELECT k.*, u.at AS last_used_at
        FROM keys k LEFT JOIN last_used u ON u.key_id = k.id
        WHERE k.id = ${id}`
    );
    return rows.length === 0 ? null : toRecord(rows[0], true);
  }

  async getByName(name: string): Promise<KeyRecord | null> {
    const key = nameKey(name);
    const rows = await this.#call(() =>
      this.#sql<KeyRow[]>`
        SELECT k.*, u.at AS last_used_at
        FROM keys k LEFT JOIN last_used u ON u.key_id = k.id
        WHERE k.name_key = ${key} AND k.status = 'valid'`
    );
    return rows.length === 0 ? null : toRecord(rows[0], true);
  }

  async *list(
    options: { includeRevoked?: boolean } = {},
  ): AsyncIterable<KeyRecord> {
    const all = options.includeRevoked === true;
    // Pages by id rather than a cursor, so a slow reader holds no connection.
    for (let after = 0;;) {
      const rows = await this.#call(() =>
        this.#sql<KeyRow[]>`
          SELECT k.*, u.at AS last_used_at
          FROM keys k LEFT JOIN last_used u ON u.key_id = k.id
          WHERE k.id > ${after} AND (${all} OR k.status = 'valid')
          ORDER BY k.id LIMIT ${BATCH}`
      );
      for (const row of rows) yield toRecord(row, true);
      if (rows.length < BATCH) return;
      after = Number(rows[rows.length - 1].id);
    }
  }

  async *audit(options: { keyId?: number } = {}): AsyncIterable<AuditEntry> {
    const keyId = options.keyId ?? null;
    if (keyId !== null && !Number.isSafeInteger(keyId)) return;
    for (let after = "0";;) {
      const rows = await this.#call(() =>
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
    return await this.#change(async ({ tx, at, nextId }) => {
      const key = nameKey(name);
      const [byName] = await tx<{ id: string }[]>`
        SELECT id FROM keys WHERE name_key = ${key} AND status = 'valid'`;
      if (byName) throw nameTaken(name, Number(byName.id));
      await refuseCollision(tx, input.hash);
      const record = newRecord(nextId(), { ...input, name, email }, at);
      await insertKey(tx, record);
      return {
        result: record,
        audit: {
          action: "create",
          keyId: record.id,
          actor: options.actor,
          detail: null,
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
    replacement: Pick<NewKeyInput, "hash" | "hint">,
    options: ChangeOptions,
  ): Promise<RotateResult> {
    return await this.#change(async ({ tx, at, nextId }) => {
      const current = await currentRecord(tx, id);
      if (current.status === "revoked") {
        throw cannotRotateRevoked(id);
      }
      await refuseCollision(tx, replacement.hash);
      const created = newRecord(nextId(), {
        ...replacement,
        name: current.name,
        email: current.email,
      }, at);
      const old = rotatedRecord(current, at, created.id);
      // Revoke first: the partial unique index then lets the name pass on.
      await saveRevocation(tx, old);
      await insertKey(tx, created);
      return {
        result: { revoked: old, created },
        audit: {
          action: "rotate",
          keyId: id,
          actor: options.actor,
          detail: AUDIT_DETAIL.rotate(created.id),
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

  async recordLastUsed(
    uses: Iterable<{ id: number; at: Date }>,
  ): Promise<void> {
    const all = [...uses].filter((use) => Number.isSafeInteger(use.id))
      .map((use) => ({ id: use.id, at: use.at.toISOString() }));
    for (let start = 0; start < all.length; start += BATCH) {
      const batch = JSON.stringify(all.slice(start, start + BATCH));
      // Sorted by id so that instances flushing at once lock rows in one
      // order and cannot deadlock; the latest time wins whoever writes last.
      await this.#call(() =>
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
    return await this.#call(() =>
      this.#sql.begin(async (tx) => {
        await lockForImport(tx);
        const [state] = await tx<{ empty: boolean; revision: string }[]>`
          SELECT NOT EXISTS (SELECT 1 FROM keys)
            AND NOT EXISTS (SELECT 1 FROM audit)
            AND NOT EXISTS (SELECT 1 FROM last_used) AS empty,
            m.revision
          FROM meta m FOR UPDATE`;
        if (!state.empty) {
          throw new StoreInputError(
            "The store is not empty; import only into a new store, so that no key is lost or duplicated",
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
      }) as Promise<{ keys: number; audit: number }>, { timeoutMs: null });
  }

  async close(): Promise<void> {
    await this.#sql.end({ timeout: 2 });
  }

  /**
   * A request-path read: any failure, or no answer within the read timeout,
   * is an outage, never "no such key".
   */
  async #read<T>(query: () => Promise<T>): Promise<T> {
    if (this.#pendingReads >= MAX_PENDING_READS) {
      throw new StoreUnavailableError(
        "The key store is not answering and too many reads are waiting on it",
      );
    }
    this.#pendingReads++;
    const pending = query();
    // Counted until the driver gives up, not when the caller does.
    pending.then(() => this.#pendingReads--, () => this.#pendingReads--);
    try {
      return await bounded(pending, this.#limits.readTimeoutMs);
    } catch (error) {
      throw new StoreUnavailableError("The key store cannot be read", {
        cause: error,
      });
    }
  }

  /**
   * Any other call: a lost connection or a timeout is an outage; other
   * errors pass. Without `timeoutMs` it waits as long as the server's own
   * statement timeouts let it.
   */
  async #call<T>(
    work: () => Promise<T>,
    options: { timeoutMs?: number | null; writes?: boolean } = {},
  ): Promise<T> {
    const timeoutMs = options.timeoutMs === undefined
      ? this.#limits.timeoutMs
      : options.timeoutMs;
    try {
      return timeoutMs === null
        ? await work()
        : await bounded(work(), timeoutMs);
    } catch (error) {
      if (error instanceof DeadlineError && options.writes) {
        throw new StoreUnavailableError(
          `The key store did not answer within ${timeoutMs} ms, so a change may or may not have been made; check with "keys list --all" and "keys audit" before trying again`,
          { cause: error },
        );
      }
      throw asUnavailable(error, "The key store cannot be used");
    }
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
    return this.#call(() =>
      this.#sql.begin(async (tx) => {
        // Refused at once while an import holds the store, rather than after
        // the lock timeout with a message that blames the database.
        const [free] = await tx<{ free: boolean }[]>`
          SELECT pg_try_advisory_xact_lock_shared(${IMPORT_LOCK}) AS free`;
        if (!free.free) throw new ImportStateError("import-unfinished");
        const [meta] = await tx<{ revision: string; last_key_id: string }[]>`
          SELECT revision, last_key_id FROM meta FOR UPDATE`;
        let lastId = Number(meta.last_key_id);
        const at = new Date();
        const { result, audit } = await work({
          tx,
          at,
          nextId: () => {
            if (lastId >= MAX_KEY_ID) throw keyIdsExhausted();
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
      }) as Promise<T>, { writes: true });
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

/** The database did not answer in time; the work may still be running there. */
class DeadlineError extends Error {
  override name = "DeadlineError";
}

/** Settles like `work`, or rejects with {@linkcode DeadlineError} once `ms` have passed. */
function bounded<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new DeadlineError(`no answer within ${ms} ms`)),
      ms,
    );
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}

/** Turns a lost connection, a timeout or an overloaded server into {@linkcode StoreUnavailableError}. */
function asUnavailable(error: unknown, what: string): unknown {
  if (!(error instanceof Error) || error instanceof StoreInputError) {
    return error;
  }
  if (error instanceof SchemaVersionError) return error;
  const code = (error as { code?: unknown }).code;
  const outage = error instanceof DeadlineError ||
    (typeof code === "string" && (error instanceof postgres.PostgresError
      // Connection exceptions, too many connections, timeouts and
      // shutdowns, lock waits, conflicts a retry would clear.
      ? /^(08|53|57|58)|^55P03$|^40001$|^40P01$/.test(code)
      : /^(CONNECT_TIMEOUT|CONNECTION_\w+|E[A-Z_]+)$/.test(code)));
  if (!outage) return error;
  return new StoreUnavailableError(
    `${what}: ${error.message}; check that PostgreSQL is running and that DATABASE_URL points at it, then try again`,
    { cause: error },
  );
}

/** The record as of now; the caller holds the `meta` lock, so it stays so. */
async function currentRecord(tx: Tx, id: number): Promise<KeyRecord> {
  if (!Number.isSafeInteger(id)) throw keyNotFound(id);
  const [row] = await tx<KeyRow[]>`SELECT * FROM keys WHERE id = ${id}`;
  if (!row) throw keyNotFound(id);
  return toRecord(row, false);
}

async function refuseCollision(tx: Tx, hash: string): Promise<void> {
  const [taken] = await tx`SELECT 1 FROM keys WHERE hash = ${hash}`;
  if (taken) {
    throw keyCollision();
  }
}

async function insertKey(tx: Tx, record: KeyRecord): Promise<void> {
  await tx`
    INSERT INTO keys (id, name, name_key, email, status, hash, hint,
      created_at, revoked_at, revoked_reason, exposed_at, exposed_from)
    VALUES (${record.id}, ${record.name}, ${nameKey(record.name)},
      ${record.email}, ${record.status}, ${record.hash}, ${record.hint},
      ${record.createdAt}, ${record.revokedAt}, ${record.revokedReason},
      ${record.exposedAt}, ${record.exposedFrom})`;
}

async function saveRevocation(tx: Tx, record: KeyRecord): Promise<void> {
  await tx`
    UPDATE keys SET status = 'revoked', revoked_at = ${record.revokedAt},
      revoked_reason = ${record.revokedReason}
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
  throw new ImportStateError("import-unfinished");
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
      throw new StoreInputError(
        `The import holds an item of unknown type ${
          JSON.stringify((item as { type: unknown }).type)
        }`,
      );
    }
    if (keys.length + audit.length >= BATCH) await flush();
  }
  await flush();
  return counts;
}

async function insertImportedKeys(tx: Tx, json: string): Promise<void> {
  await tx`
    INSERT INTO keys (id, name, name_key, email, status, hash, hint,
      created_at, revoked_at, revoked_reason, exposed_at, exposed_from)
    SELECT id, name, name_key, email, status, hash, hint,
      created_at, revoked_at, revoked_reason, exposed_at, exposed_from
    FROM jsonb_to_recordset(${json}::text::jsonb) AS r(id bigint, name text,
      name_key text, email text, status text, hash text, hint text,
      created_at timestamptz, revoked_at timestamptz, revoked_reason text,
      exposed_at timestamptz, exposed_from text)`;
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
    // Like the KV store, only get() and list() fill this in.
    lastUsedAt: withLastUsed ? row.last_used_at?.toISOString() ?? null : null,
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
