/**
 * Locks another session holds, named for the operator who must end it: a
 * lock wait that fails as itself before the statement's timeout, and the
 * `store_busy` error naming who holds the tables an opening (`schema.ts`)
 * waited for.
 *
 * @module
 */

import { StoreUnavailableError } from "../errors.ts";
import type { Sql, Tx } from "./connection.ts";

/** A database session, as an operator finds it in `pg_stat_activity`. */
interface DatabaseSession {
  /** Its backend's process id, as `pg_terminate_backend` takes it. */
  pid: number;
  /** The application name it connected with, when it gave one. */
  application?: string;
  /** Its client's address; absent over a Unix socket. */
  address?: string;
}

/** A session in one phrase: `database session 4242 (psql) from 10.0.0.5`. */
function describeSession(session: DatabaseSession): string {
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
 * psql, a console paused mid-change, a running pg_dump.
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
    : "another session (a transaction left open in psql, a paused console, a running pg_dump) kept its tables locked; end it or let it finish, then start again";
  return new StoreUnavailableError("store_busy", `${options.what}: ${why}`, {
    cause: options.cause,
  });
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
