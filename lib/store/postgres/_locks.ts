/**
 * Locks another session holds, named for the operator who must end it: a
 * lock wait that fails as itself before the statement's timeout, the
 * `store_busy` error naming who holds the tables waited for, and the
 * session holding an advisory lock. The upgrade (`schema.ts`) and the move
 * out of an older version's tables (`_legacy.ts`) both wait on them.
 *
 * @module
 */

import { StoreUnavailableError } from "../errors.ts";
import type { Sql, Tx } from "./connection.ts";

/** A database session, as an operator finds it in `pg_stat_activity`. */
export interface DatabaseSession {
  /** Its backend's process id, as `pg_terminate_backend` takes it. */
  pid: number;
  /** The application name it connected with, when it gave one. */
  application?: string;
  /** Its client's address; absent over a Unix socket. */
  address?: string;
}

/** A session in one phrase: `database session 4242 (psql) from 10.0.0.5`. */
export function describeSession(session: DatabaseSession): string {
  return `database session ${session.pid}${
    session.application ? ` (${session.application})` : ""
  }${session.address ? ` from ${session.address}` : ""}`;
}

/** PostgreSQL's SQLSTATE for a lock not granted within `lock_timeout`. */
const LOCK_NOT_AVAILABLE = "55P03";

/** PostgreSQL's SQLSTATE for a statement cancelled, by its timeout among others. */
const QUERY_CANCELED = "57014";

/**
 * Lets a lock wait in the transaction of `tx` fail as itself before the
 * statement's own timeout does, so that the failure can name the holder.
 */
export async function failLockWaitsFirst(tx: Sql | Tx): Promise<void> {
  await tx`SELECT set_config('lock_timeout', (extract(epoch FROM
    current_setting('statement_timeout')::interval) * 800)::bigint::text,
    true)`;
}

/**
 * Whether `error` is a lock on a table held past the lock timeout, or, for
 * a process still `queued` for the migration lock, past the statement's.
 */
export function isHeldTable(error: unknown, queued = false): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === LOCK_NOT_AVAILABLE || (queued && code === QUERY_CANCELED);
}

/**
 * The `store_busy` error for `tables` held past the lock timeout, naming
 * the sessions that hold them and wait for nothing themselves (one that
 * waits is held up by another, the one to end): a transaction left open in
 * psql, a console of an older version paused mid-change, a running pg_dump.
 */
export async function tablesHeld(
  sql: Sql,
  tables: readonly string[],
  options: { what: string; queued?: boolean; cause: unknown },
): Promise<StoreUnavailableError> {
  const holders = (await sql<SessionRow[]>`
    SELECT DISTINCT a.pid, a.application_name AS application,
      host(a.client_addr) AS address
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.granted AND a.pid <> pg_backend_pid()
      AND l.relation IN (SELECT to_regclass(name)::oid
        FROM unnest(string_to_array(${tables.join(",")}, ',')) name)
      AND NOT EXISTS (
        SELECT 1 FROM pg_locks w WHERE w.pid = a.pid AND NOT w.granted)
    ORDER BY a.pid`.catch(() => [])).map(toSession);
  const end = holders.length === 1
    ? `end it (SELECT pg_terminate_backend(${holders[0].pid}))`
    : "end them (SELECT pg_terminate_backend(pid) for each)";
  const why = holders.length > 0
    ? `${
      holders.map(describeSession).join(", ")
    } kept its tables locked; ${end} or let it finish, then start again`
    : options.queued
    ? "another process upgrading it took longer than the statement timeout; start again once it has finished"
    : "another session (a transaction left open in psql, a paused console of an older version, a running pg_dump) kept its tables locked; end it or let it finish, then start again";
  return new StoreUnavailableError("store_busy", `${options.what}: ${why}`, {
    cause: options.cause,
  });
}

/**
 * The session of this database holding the advisory lock `name` (taken as
 * `pg_advisory_lock(hashtext(name))`); undefined when it is gone or not
 * visible to this role.
 */
export async function advisoryHolder(
  sql: Sql,
  name: string,
): Promise<DatabaseSession | undefined> {
  // A lock on one bigint key shows its high half as classid, its low as
  // objid; advisory locks are per database, pg_locks the whole cluster's.
  const rows = await sql<SessionRow[]>`
    SELECT a.pid, a.application_name AS application,
      host(a.client_addr) AS address
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (
        SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.classid = ((hashtext(${name})::bigint >> 32)
        & 4294967295)::bigint::oid
      AND l.objid = (hashtext(${name})::bigint & 4294967295)::oid
    LIMIT 1`.catch(() => []);
  return rows.length === 0 ? undefined : toSession(rows[0]);
}

/** A session as `pg_stat_activity` gives it: empty and null for absent. */
interface SessionRow {
  pid: number;
  application: string | null;
  address: string | null;
}

function toSession(row: SessionRow): DatabaseSession {
  return {
    pid: row.pid,
    ...row.application && { application: row.application },
    ...row.address && { address: row.address },
  };
}
