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

import { StoreInputError } from "../errors.ts";
import type { KeyStore } from "../types.ts";
import type { Sql } from "./connection.ts";
import { LegacyConversionError, LegacyRows } from "./_legacy_rows.ts";
import {
  advisoryHolder,
  type DatabaseSession,
  failLockWaitsFirst,
  isHeldTable,
  tablesHeld,
} from "./_locks.ts";
import { OLDER_WAIT_LIMIT_MS } from "./schema.ts";

export { LegacyConversionError };

/** The tables migration 8 renamed, dropped once their contents moved. */
const LEGACY_TABLES = [
  "legacy_last_used",
  "legacy_key_usage",
  "legacy_audit",
  "legacy_keys",
  "legacy_meta",
];

/** Who the conversion's audit line names. */
const ACTOR = "schema conversion (version 8)";

/** A wait an opening makes before it returns, for its caller to report. */
export type OpenWait =
  | { reason: "older_leases"; ms: number }
  | {
    reason: "moving";
    /** Rows of the older version's tables moved so far. */
    moved: number;
    /** Rows to move: keys and audit lines. */
    total: number;
  }
  | {
    reason: "conversion";
    /** How long this opening has waited so far. */
    waitedMs: number;
    /** The session holding the conversion, when the database shows it. */
    holder?: DatabaseSession;
  };

/** How {@linkcode convertLegacy} and {@linkcode olderLeasesEnded} report a wait. */
export interface OpenWaitOptions {
  /**
   * Called when the opening has to wait, before it does, and again every
   * {@linkcode REPORT_EVERY_MS} while a conversion (its own or another's)
   * keeps it waiting.
   */
  onWait?: (wait: OpenWait) => void;
  /** How often a long conversion is reported again; {@linkcode REPORT_EVERY_MS} unless set. */
  reportEveryMs?: number;
}

/** The conversion's lock, held by the one process moving the rows. */
const CONVERSION_LOCK = "keys: legacy conversion";

/** How often a process waiting for another's conversion asks again. */
const LOCK_POLL_MS = 200;

/** How often a long wait for another's conversion is reported again. */
export const REPORT_EVERY_MS = 10_000;

/**
 * Moves the legacy tables' keys and audit lines into `store`, once, and
 * drops them; nothing to do when there are none. Several processes may
 * open the store at once: one converts, the others wait for it, as long as
 * it takes (a large store's import is not bounded) and without a statement
 * timeout, which a lock wait would be subject to.
 */
export async function convertLegacy(
  sql: Sql,
  store: KeyStore,
  options: OpenWaitOptions = {},
): Promise<void> {
  if (!await hasLegacy(sql)) return;
  const session = await sql.reserve();
  try {
    await lockConversion(session, options);
    try {
      if (!await hasLegacy(session)) return;
      await moveOnce(session, store, options);
    } finally {
      await session`SELECT pg_advisory_unlock(hashtext(${CONVERSION_LOCK}))`;
    }
  } finally {
    session.release();
  }
}

/**
 * Takes the conversion's lock, asking again until it is free: a process
 * that dies while converting lets it go with its connection.
 */
async function lockConversion(sql: Sql, options: OpenWaitOptions) {
  const started = performance.now();
  const due = reportDue(options);
  for (;;) {
    const [{ locked }] = await sql<{ locked: boolean }[]>`
      SELECT pg_try_advisory_lock(hashtext(${CONVERSION_LOCK})) AS locked`;
    if (locked) return;
    if (options.onWait && due()) {
      const waitedMs = performance.now() - started;
      const holder = await advisoryHolder(sql, CONVERSION_LOCK);
      options.onWait({
        reason: "conversion",
        waitedMs: Math.round(waitedMs),
        ...holder && { holder },
      });
    }
    await delay(LOCK_POLL_MS);
  }
}

/**
 * Returns once the leases of the servers of an older version, registered
 * when the upgrade dropped their registrations, have run out (by the
 * database's clock, which every opener shares). Until then such a server
 * may still answer from the keys it read before the upgrade, and a change
 * made now, a revocation above all, would not reach it: no change waits
 * for a server it cannot see.
 */
export async function olderLeasesEnded(
  sql: Sql,
  options: OpenWaitOptions = {},
): Promise<void> {
  for (let asked = 0;; asked++) {
    const [{ ms }] = await sql<{ ms: number }[]>`
      SELECT ceil(greatest(0, extract(epoch FROM
        max(ends_at) - clock_timestamp()) * 1000))::float8 AS ms
      FROM older_leases`;
    if (!(ms > 0)) return;
    const wait = Math.min(ms, OLDER_WAIT_LIMIT_MS);
    if (asked === 0) options.onWait?.({ reason: "older_leases", ms: wait });
    await delay(wait);
    if (ms > OLDER_WAIT_LIMIT_MS) {
      // Further off than any lease it counts could be: the database's clock
      // was set back since (or the row was written by hand). It was written
      // before this opening read it, so having waited the longest lease
      // since, every lease it counts is over, whatever the clock says now;
      // removed, so that no later opening waits on it again.
      await sql`DELETE FROM older_leases`;
      return;
    }
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

async function hasLegacy(sql: Sql): Promise<boolean> {
  const [{ found }] = await sql<{ found: boolean }[]>`
    SELECT to_regclass('legacy_keys') IS NOT NULL AS found`;
  return found;
}

/**
 * Moves the legacy rows in and drops their tables, in one transaction that
 * holds them: no one writes them meanwhile, every page reads the snapshot
 * they were counted in, and the drop is made only once the import is in.
 */
async function moveOnce(
  session: Sql,
  store: KeyStore,
  options: OpenWaitOptions,
): Promise<void> {
  await session`BEGIN ISOLATION LEVEL REPEATABLE READ`;
  try {
    // Idle while the import writes a page through the store's other
    // connections, which a slow database may stretch past the pool's
    // idle-in-transaction limit; a process that hangs here is named to
    // whoever waits for it (lockConversion), with how to end it.
    await session`SET LOCAL idle_in_transaction_session_timeout = 0`;
    await failLockWaitsFirst(session);
    // All of it at once, before any of it is moved: a session still holding
    // one of them is named now, not after the import at the drop.
    await session.unsafe(
      `LOCK TABLE ${LEGACY_TABLES.join(", ")} IN ACCESS EXCLUSIVE MODE`,
    ).catch(async (error) => {
      if (!isHeldTable(error)) throw error;
      // Out of the failed transaction first, so that pg_locks can be read.
      await session`ROLLBACK`;
      throw await tablesHeld(session, LEGACY_TABLES, {
        what:
          "The key store could not be moved out of an older version's tables",
        cause: error,
      });
    });
    const [{ count }] = await session<{ count: number }[]>`
      SELECT (SELECT count(*) FROM legacy_keys)
        + (SELECT count(*) FROM legacy_audit) AS count`;
    const total = Number(count);
    if (total > 0) {
      const rows = new LegacyRows(session, total, {
        onRow: progress(total, options),
      });
      await importOnce(store, rows);
    }
    await session.unsafe(`DROP TABLE ${LEGACY_TABLES.join(", ")}`);
    await session`COMMIT`;
  } catch (error) {
    await session`ROLLBACK`.catch(() => {});
    throw error;
  }
}

/**
 * Imports the legacy rows. A conversion that died half-way left its import
 * unfinished, which is discarded first; one that died after publishing left
 * the store full, and only the drop remains.
 */
async function importOnce(store: KeyStore, rows: LegacyRows): Promise<void> {
  await store.abortImport({ actor: ACTOR });
  try {
    await store.importAll(rows.items(), { actor: ACTOR });
  } catch (error) {
    if (error instanceof StoreInputError && error.code === "import_not_empty") {
      return;
    }
    // An item the import refused: the store is as before, and so are the
    // tables. Anything else (an outage) is passed on as it is.
    if (error instanceof StoreInputError) {
      throw new LegacyConversionError(error, rows.current);
    }
    throw error;
  }
}

/**
 * Reports the move when it starts and every {@linkcode REPORT_EVERY_MS}
 * after; returns what the items call with the rows moved so far.
 */
function progress(
  total: number,
  options: OpenWaitOptions,
): (moved: number) => void {
  const due = reportDue(options);
  const report = (moved: number) => {
    if (due()) options.onWait?.({ reason: "moving", moved, total });
  };
  report(0);
  return report;
}

/**
 * True at its first call, then at most once every `reportEveryMs`: how
 * often a long conversion, one's own or another's, is reported.
 */
function reportDue(options: OpenWaitOptions): () => boolean {
  const every = options.reportEveryMs ?? REPORT_EVERY_MS;
  let last = -Infinity;
  return () => {
    const now = performance.now();
    if (now - last < every) return false;
    last = now;
    return true;
  };
}
