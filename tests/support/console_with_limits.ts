/**
 * The console (admin.ts's `main`) with a shorter PostgreSQL time limit on
 * its changes than its 15 s default, for tests that stall a change and need
 * the console to give up on it soon: `deno run -A
 * tests/support/console_with_limits.ts TIMEOUT_MS COMMAND ARGS...`. Only the
 * changes' transactions get the short limit: the opening and the reads
 * before the change keep the console's own, so that however slowly the
 * machine runs, the console gives up on the stalled change and on nothing
 * before it (a 300 ms limit on everything gave up on the opening under
 * load). Any other store opens as the console opens it.
 *
 * @module
 */

import { main } from "../../admin.ts";
import { openStore } from "../../lib/store/open.ts";
import { openEntryStore } from "../../lib/store/layout/backend.ts";
import { connect, Pool, type Tx } from "../../lib/store/postgres/connection.ts";
import { PostgresEntries } from "../../lib/store/postgres/entries.ts";
import { migrateWith } from "../../lib/store/postgres/schema.ts";
import type { KeyService } from "../../lib/store/keys.ts";

/** The pool whose transactions, and nothing else, end after `changeMs`. */
class ChangesLimited extends Pool {
  #changeMs: number;

  constructor(url: string, changeMs: number) {
    super(connect(url, {}), {});
    this.#changeMs = changeMs;
  }

  override transaction<T>(
    work: (tx: Tx) => Promise<T>,
    options: { timeoutMs?: number | null } = {},
  ): Promise<T> {
    return super.transaction(work, { timeoutMs: this.#changeMs, ...options });
  }
}

/**
 * The store as openPostgresStore opens a current database (the tests' are
 * fresh: no older version's tables to move, no older servers to wait for),
 * on the pool above.
 */
async function openLimited(url: string, changeMs: number): Promise<KeyService> {
  const pool = new ChangesLimited(url, changeMs);
  try {
    await migrateWith(pool.sql);
  } catch (error) {
    await pool.end(1);
    throw error;
  }
  return await openEntryStore(new PostgresEntries(pool));
}

if (import.meta.main) {
  const [timeoutMs, ...args] = Deno.args;
  Deno.exit(
    await main(args, {
      open: (location) =>
        location.kind === "postgres"
          ? openLimited(location.url, Number(timeoutMs))
          : openStore(location),
    }),
  );
}
