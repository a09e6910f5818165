/**
 * The PostgreSQL schema as an opening finds it: none yet (1.0's baseline is
 * created in one transaction), one from before 1.0 or of another program
 * (refused, never converted), or one a session holds locked.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import {
  StoreOpenError,
  StoreUnavailableError,
} from "../../lib/store/errors.ts";
import { migrate, SCHEMA_VERSION } from "../../lib/store/postgres/schema.ts";
import { openPostgresStore } from "../../lib/store/postgres/store.ts";
import { until } from "../support/wait.ts";
import {
  freshDatabase,
  NO_DATABASE,
  type TestDatabase,
} from "../support/postgres.ts";

Deno.test({
  name:
    "postgres schema: a fresh database gets 1.0's schema and its version in one transaction",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await (await openPostgresStore(database.url)).close();
    assert.deepEqual(
      (await database.query("SELECT version FROM store_schema")).map((row) =>
        row.version
      ),
      [SCHEMA_VERSION],
    );
    // Every object of the schema and the version's row were written by the
    // one transaction that created them.
    const writers = await database.query(`
      SELECT xmin::text FROM pg_class WHERE relname IN
        ('entries', 'entries_pkey', 'entry_versionstamps', 'store_schema')
      UNION SELECT xmin::text FROM store_schema`);
    assert.equal(writers.length, 1, JSON.stringify(writers));
  },
});

/** Layouts an opening must refuse, as SQL that builds them. */
const FOREIGN_LAYOUTS: [label: string, table: string, sql: string][] = [
  [
    "a table per kind of row, from before 1.0",
    "schema_version",
    `CREATE TABLE schema_version (version integer PRIMARY KEY,
       applied_at timestamptz NOT NULL DEFAULT now());
     INSERT INTO schema_version (version) SELECT generate_series(1, 7);
     CREATE TABLE meta (revision bigint NOT NULL);
     CREATE TABLE keys (id bigint PRIMARY KEY, hash text NOT NULL)`,
  ],
  [
    "entries at a pre-release version 1",
    "schema_version",
    `CREATE TABLE schema_version (version integer PRIMARY KEY);
     INSERT INTO schema_version (version) VALUES (1);
     CREATE TABLE entries (key bytea PRIMARY KEY, value json NOT NULL,
       versionstamp bigint NOT NULL)`,
  ],
  [
    "another program's table of the same name",
    "entries",
    "CREATE TABLE entries (id serial PRIMARY KEY, body text)",
  ],
];

for (const [label, table, sql] of FOREIGN_LAYOUTS) {
  Deno.test({
    name:
      `postgres schema: a database holding ${label} is refused with one line naming the table and the fix, and left as it was`,
    ignore: NO_DATABASE,
    async fn() {
      await using database = await freshDatabase();
      await database.query(sql);
      for (
        const attempt of [
          () => openPostgresStore(database.url),
          () => migrate(database.url),
        ]
      ) {
        await assert.rejects(attempt(), (error: Error) => {
          assert.ok(error instanceof StoreOpenError, String(error));
          assert.equal(error.code, "schema_unknown");
          assert.equal(
            error.message,
            `The key store's database holds a table ${table} that this service did not create (a store from before 1.0, which it does not read, or another program's); point DATABASE_URL at another database`,
          );
          return true;
        });
      }
      const [{ created }] = await database.query(
        "SELECT to_regclass('store_schema') IS NOT NULL AS created",
      );
      assert.equal(created, false);
    },
  });
}

/**
 * A session holding `table` locked in an open transaction, as a restore or
 * a change by hand in psql would, until its rollback.
 */
async function lockedBySession(database: TestDatabase, table: string) {
  const psql = postgres(database.url, { max: 1, onnotice: () => {} });
  const session = await psql.reserve();
  const [{ pid }] = await session<{ pid: number }[]>`
    SELECT pg_backend_pid() AS pid`;
  await session`BEGIN`;
  await session.unsafe(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`);
  return {
    pid,
    rollback: async () => void await session`ROLLBACK`,
    async [Symbol.asyncDispose]() {
      session.release();
      await psql.end();
    },
  };
}

/** Asserts `error` is store_busy naming session `pid`, and how to end it. */
function namesHolder(error: unknown, pid: number): boolean {
  assert.ok(error instanceof StoreUnavailableError, String(error));
  assert.equal(error.code, "store_busy");
  assert.equal(
    error.message,
    `The key store's schema could not be checked: database session ${pid} (postgres.js) from 127.0.0.1 kept its tables locked; end it (SELECT pg_terminate_backend(${pid})) or let it finish, then start again`,
  );
  return true;
}

Deno.test({
  name:
    "postgres schema: a session holding the schema's table stops the opening with one line naming that session, and once it is gone the opening runs",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await migrate(database.url);
    {
      await using psql = await lockedBySession(database, "store_schema");
      await assert.rejects(
        openPostgresStore(database.url, { statementTimeoutMs: 1000 }),
        (error) => namesHolder(error, psql.pid),
      );
      await psql.rollback();
    }
    await (await openPostgresStore(database.url)).close();
  },
});

Deno.test({
  name:
    "postgres schema: a process queued behind an opening that a session holds up names that session, not the opening it waits behind",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await migrate(database.url);
    await using psql = await lockedBySession(database, "store_schema");
    // Waits for the table far longer than the one queued behind it waits.
    const first = openPostgresStore(database.url, {
      statementTimeoutMs: 60_000,
    });
    first.catch(() => {});
    await until(async () => {
      const [row] = await database.query(`
        SELECT count(*)::int AS n FROM pg_locks
        WHERE NOT granted AND relation IS NOT NULL AND database = (
          SELECT oid FROM pg_database WHERE datname = current_database())`);
      return Number(row.n) > 0;
    }, "the first opening to wait for the table");
    await assert.rejects(
      openPostgresStore(database.url, { statementTimeoutMs: 1000 }),
      (error) => namesHolder(error, psql.pid),
    );
    await psql.rollback();
    await (await first).close();
  },
});
