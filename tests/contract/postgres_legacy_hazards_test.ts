/**
 * What an older version's database may hold or be going through when this
 * version first opens it: more rows than one read should take, times
 * JavaScript cannot hold, a session holding its tables, a clock set back
 * after the upgrade. Each ends in the keys moved whole or in one line that
 * names the thing to fix, with nothing moved.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { LegacyConversionError } from "../../lib/store/postgres/_legacy.ts";
import { migrateWith } from "../../lib/store/postgres/schema.ts";
import {
  openPostgresStore,
  type OpenWait,
} from "../../lib/store/postgres/store.ts";
import { StoreUnavailableError } from "../../lib/store/errors.ts";
import { until } from "../support/wait.ts";
import {
  freshDatabase,
  NO_DATABASE,
  type TestDatabase,
} from "../support/postgres.ts";
import {
  legacyDatabase,
  olderLeasesEnd,
  recordOlderLeases,
} from "../support/legacy_postgres.ts";

/** More than two pages of the move's reads (it reads 2,000 rows at a time). */
const MANY = 4321;

/**
 * `MANY` more keys and audit lines, numbered on from the fixture's without a
 * gap (so that a page boundary that loses or repeats a row shows), the last
 * three keys at the top of the id range; returns the ids and the audit
 * lines' details in the order they must arrive.
 */
async function manyLegacyRows(
  database: TestDatabase,
): Promise<{ ids: number[]; details: string[] }> {
  await database.query(`
    INSERT INTO keys (id, name, name_key, email, status, hash, hint,
        created_at)
      SELECT CASE WHEN i > ${MANY - 3} THEN 2147483647 - ${MANY} + i
          ELSE 3 + i END,
        'site-' || i, 'site-' || i, 'ops@example.com', 'valid',
        encode(sha256(('key ' || i)::bytea), 'hex'), 'isk_…' || i,
        '2026-01-01T00:00:00Z'
      FROM generate_series(1, ${MANY}) i;
    INSERT INTO audit (seq, at, action, key_id, actor, detail)
      SELECT 6 + i, '2026-03-01T00:00:00Z'::timestamptz
          + i * interval '1 second', 'create', 1, 'ops@host', 'line ' || i
      FROM generate_series(1, ${MANY}) i;
    UPDATE meta SET last_key_id = 2147483647`);
  const ids = Array.from(
    { length: 3 + MANY },
    (_, i) => i < MANY ? i + 1 : 2147483647 - (MANY + 2 - i),
  );
  return {
    ids,
    details: Array.from({ length: MANY }, (_, i) => `line ${i + 1}`),
  };
}

Deno.test({
  name:
    "postgres legacy: thousands of keys and audit lines, ids up to 2^31 - 1, move whole, in order, none lost or repeated at a page boundary, and the move reports its progress up to every row",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await legacyDatabase(database);
    const expected = await manyLegacyRows(database);
    const seen: OpenWait[] = [];
    // Every row reported, so that the count can be followed to its end.
    const store = await openPostgresStore(database.url, {
      reportEveryMs: 0,
      onWait: (wait) => seen.push(wait),
    });
    try {
      const keys = await Array.fromAsync(store.list({ includeRevoked: true }));
      assert.deepEqual(
        keys.map((key) => key.id).sort((a, b) => a - b),
        expected.ids,
      );
      const details: string[] = [];
      for await (const line of store.audit()) {
        if (line.detail?.startsWith("line ")) details.push(line.detail);
      }
      assert.deepEqual(details, expected.details);
    } finally {
      await store.close();
    }
    const moving = seen.filter((wait) => wait.reason === "moving");
    const total = 3 + MANY + 6 + MANY;
    assert.deepEqual(moving[0], { reason: "moving", moved: 0, total });
    assert.deepEqual(moving.at(-1), { reason: "moving", moved: total, total });
    for (let i = 1; i < moving.length; i++) {
      const [before, after] = [moving[i - 1], moving[i]];
      if (before.reason !== "moving" || after.reason !== "moving") continue;
      assert.ok(after.moved > before.moved, "progress only goes forward");
    }
  },
});

/** A time JavaScript cannot hold, where it sits, and the SQL that corrects it. */
const UNHOLDABLE_TIMES = [{
  row: "legacy_keys (id = 2)",
  column: "created_at",
  set: "UPDATE keys SET created_at = 'infinity' WHERE id = 2",
  fix: "UPDATE legacy_keys SET created_at = '2026-01-02' WHERE id = 2",
}, {
  row: "legacy_keys (id = 3)",
  column: "expires_at",
  set: "UPDATE keys SET expires_at = '290000-01-01' WHERE id = 3",
  fix: "UPDATE legacy_keys SET expires_at = NULL WHERE id = 3",
}, {
  row: "legacy_last_used (key_id = 1)",
  column: "at",
  set: "UPDATE last_used SET at = '-infinity' WHERE key_id = 1",
  fix: "DELETE FROM legacy_last_used WHERE key_id = 1",
}, {
  row: "legacy_audit (seq = 4)",
  column: "at",
  set: "UPDATE audit SET at = 'infinity' WHERE seq = 4",
  fix: "UPDATE legacy_audit SET at = '2026-01-03' WHERE seq = 4",
}];

for (const { row, column, set, fix } of UNHOLDABLE_TIMES) {
  Deno.test({
    name:
      `postgres legacy: ${row}'s ${column} at a time JavaScript cannot hold stops the opening naming the row and the column, moves nothing, and corrected with SQL moves`,
    ignore: NO_DATABASE,
    async fn() {
      await using database = await freshDatabase();
      const keys = await legacyDatabase(database);
      await database.query(set);
      await assert.rejects(openPostgresStore(database.url), (error) => {
        assert.ok(error instanceof LegacyConversionError, String(error));
        assert.equal(error.code, "legacy_conversion_failed");
        assert.ok(
          error.message.includes(`(${row}: ${column} is not a time`),
          error.message,
        );
        assert.equal(error.row, row);
        assert.match(error.message, /correct that row with SQL/);
        return true;
      });
      const [counts] = await database.query(`
        SELECT (SELECT count(*)::int FROM legacy_keys) AS keys,
          (SELECT count(*)::int FROM legacy_audit) AS audit`);
      assert.deepEqual(counts, { keys: 3, audit: 6 });
      await database.query(fix);
      const store = await openPostgresStore(database.url);
      try {
        for (const [at, key] of keys.entries()) {
          assert.equal((await store.findByHash(key.hash))?.id, at + 1);
        }
      } finally {
        await store.close();
      }
    },
  });
}

Deno.test({
  name:
    "postgres legacy: times in the years 1 to 99, before 1901 in a zone whose offset had seconds, and with fractions of a millisecond move as the older version read them",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const keys = await legacyDatabase(database);
    await database.query(`
      UPDATE keys SET expires_at = '0049-01-01T00:00:00Z',
        created_at = '1890-01-01T00:00:00Z' WHERE id = 1;
      UPDATE keys SET created_at = '0012-06-30T12:00:00Z',
        expires_at = '9999-12-31 23:59:59.999999+00' WHERE id = 2;
      UPDATE keys SET created_at = '1969-12-31 23:59:59.9995+00',
        expires_at = '2600-01-01 00:00:00.999999+00' WHERE id = 3;
      ALTER DATABASE ${new URL(database.url).pathname.slice(1)}
        SET timezone = 'Europe/Amsterdam'`);
    const store = await openPostgresStore(database.url);
    try {
      const times = await Promise.all(
        keys.map((key) => store.findByHash(key.hash)),
      );
      assert.deepEqual(
        times.map((record) => [record?.expiresAt, record?.createdAt]),
        [
          ["0049-01-01T00:00:00.000Z", "1890-01-01T00:00:00.000Z"],
          ["9999-12-31T23:59:59.999Z", "0012-06-30T12:00:00.000Z"],
          ["2600-01-01T00:00:00.999Z", "1969-12-31T23:59:59.999Z"],
        ],
      );
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name:
    "postgres legacy: a key joined to two last uses (a primary key dropped by hand) at a page boundary is refused by name, not split across pages",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await legacyDatabase(database);
    await manyLegacyRows(database);
    // Key 2000 ends the first page.
    await database.query(`
      ALTER TABLE last_used DROP CONSTRAINT last_used_pkey;
      INSERT INTO last_used (key_id, at) VALUES
        (2000, '2026-02-01T00:00:00Z'), (2000, '2026-02-02T00:00:00Z')`);
    await assert.rejects(openPostgresStore(database.url), (error) => {
      assert.ok(error instanceof LegacyConversionError, String(error));
      assert.equal(error.row, "legacy_keys (id = 2000)");
      return true;
    });
  },
});

/**
 * A transaction left open in psql, having read `table`: the pid of its
 * session, and how to end it; disposed, it ends with the test.
 */
async function openTransaction(database: TestDatabase, table: string) {
  const psql = postgres(database.url, { max: 1, onnotice: () => {} });
  const session = await psql.reserve();
  const [{ pid }] = await session<{ pid: number }[]>`
    SELECT pg_backend_pid() AS pid`;
  await session`BEGIN`;
  await session.unsafe(`SELECT count(*) FROM ${table}`);
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
function namesHolder(error: unknown, pid: number, what: string): boolean {
  assert.ok(error instanceof StoreUnavailableError, String(error));
  assert.equal(error.code, "store_busy");
  assert.equal(
    error.message,
    `${what}: database session ${pid} (postgres.js) from 127.0.0.1 kept its tables locked; end it (SELECT pg_terminate_backend(${pid})) or let it finish, then start again`,
  );
  return true;
}

/** What a held upgrade and a held move say first. */
const UPGRADE = "The key store's schema could not be upgraded";
const MOVE =
  "The key store could not be moved out of an older version's tables";

Deno.test({
  name:
    "postgres legacy: a process queued behind an upgrade that a session holds up names that session, not the upgrade it waits behind",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await legacyDatabase(database);
    await using psql = await openTransaction(database, "keys");
    // The upgrade, which waits for the table far longer than the one queued
    // behind it waits for the upgrade.
    const upgrade = openPostgresStore(database.url, {
      statementTimeoutMs: 60_000,
    });
    upgrade.catch(() => {});
    await until(async () => {
      const [row] = await database.query(`
        SELECT count(*)::int AS n FROM pg_locks
        WHERE NOT granted AND relation IS NOT NULL AND database = (
          SELECT oid FROM pg_database WHERE datname = current_database())`);
      return Number(row.n) > 0;
    }, "the upgrade to wait for the table");
    await assert.rejects(
      openPostgresStore(database.url, { statementTimeoutMs: 1000 }),
      (error) => namesHolder(error, psql.pid, UPGRADE),
    );
    await psql.rollback();
    const store = await upgrade;
    await store.close();
  },
});

Deno.test({
  name:
    "postgres legacy: a session holding an older version's table stops the upgrade with one line naming that session, and once it is gone the upgrade runs",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const keys = await legacyDatabase(database);
    {
      // A transaction left open in psql, having read the keys.
      await using psql = await openTransaction(database, "keys");
      await assert.rejects(
        openPostgresStore(database.url, { statementTimeoutMs: 1000 }),
        (error) => namesHolder(error, psql.pid, UPGRADE),
      );
      await psql.rollback();
    }
    const store = await openPostgresStore(database.url);
    try {
      assert.equal((await store.findByHash(keys[0].hash))?.id, 1);
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name:
    "postgres legacy: a session holding a legacy_* table stops the move before any of it is imported, naming that session, and once it is gone the move runs",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const keys = await legacyDatabase(database);
    // Renamed, not yet moved: an opening that stopped right after the
    // migration, while an operator reads (or mends) a row with psql.
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      await migrateWith(sql);
    } finally {
      await sql.end();
    }
    {
      await using psql = await openTransaction(database, "legacy_audit");
      const [{ entries }] = await database.query(
        "SELECT count(*)::int AS entries FROM entries",
      );
      for (let attempt = 0; attempt < 2; attempt++) {
        await assert.rejects(
          openPostgresStore(database.url, { statementTimeoutMs: 1000 }),
          (error) => namesHolder(error, psql.pid, MOVE),
        );
      }
      // Nothing of it was imported, not even in part.
      const [{ after }] = await database.query(
        "SELECT count(*)::int AS after FROM entries",
      );
      assert.equal(after, entries);
      await psql.rollback();
    }
    const store = await openPostgresStore(database.url);
    try {
      assert.equal((await store.findByHash(keys[0].hash))?.id, 1);
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name:
    "postgres legacy: an older lease recorded to end an hour from now (a clock set back, a hand-written row) costs one opening at most the longest lease, and none after it",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await recordOlderLeases(database, 3_600_000);
    const seen: OpenWait[] = [];
    const store = await openPostgresStore(database.url, {
      onWait: (wait) => seen.push(wait),
    });
    await store.close();
    assert.equal(seen.length, 1, JSON.stringify(seen));
    assert.ok(
      seen[0].reason === "older_leases" && seen[0].ms <= 3250,
      JSON.stringify(seen),
    );
    assert.equal(await olderLeasesEnd(database), null);
    const after: OpenWait[] = [];
    const again = await openPostgresStore(database.url, {
      onWait: (wait) => after.push(wait),
    });
    await again.close();
    assert.deepEqual(after, []);
  },
});
