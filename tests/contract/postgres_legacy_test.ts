/**
 * A database written by a version with a table per kind of row (schema 7)
 * is moved into the entries the first time this version opens it: every
 * key, its last use and usage, and the audit log survive; a row the import
 * refuses leaves everything as it was; servers opening it at once convert
 * it once.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { LegacyConversionError } from "../../lib/store/postgres/_legacy.ts";
import { migrateWith } from "../../lib/store/postgres/schema.ts";
import {
  openPostgresStore,
  type OpenWait,
} from "../../lib/store/postgres/store.ts";
import type { AuditEntry, KeyStore } from "../../lib/store/types.ts";
import {
  freshDatabase,
  NO_DATABASE,
  type TestDatabase,
} from "../support/postgres.ts";
import { until } from "../support/wait.ts";
import {
  databaseNow,
  legacyDatabase,
  OLDER_LEASE_MS,
  olderLeasesEnd,
  recordOlderLeases,
  registerOlderServer,
} from "../support/legacy_postgres.ts";

async function auditOf(store: KeyStore): Promise<AuditEntry[]> {
  const lines: AuditEntry[] = [];
  for await (const line of store.audit()) lines.push(line);
  return lines;
}

async function legacyTables(database: TestDatabase): Promise<string[]> {
  const rows = await database.query(`
    SELECT table_name FROM information_schema.tables
    WHERE table_schema = 'public' AND table_name LIKE 'legacy%'
    ORDER BY table_name`);
  return rows.map((row) => String(row.table_name));
}

Deno.test({
  name:
    "postgres legacy: opening a schema 7 database moves every key, its last use, usage and the audit log into entries, and drops the old tables",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const keys = await legacyDatabase(database);
    const store = await openPostgresStore(database.url);
    try {
      const alpha = await store.findByHash(keys[0].hash);
      assert.equal(alpha?.id, 1);
      const full = await store.get(1);
      assert.equal(full?.name, "Alpha");
      assert.equal(full?.expiresAt, "2030-01-01T00:00:00.000Z");
      assert.deepEqual(full?.allowFrom, ["10.0.0.0/8"]);
      assert.deepEqual(full?.rateLimit, { count: 600, windowSeconds: 60 });
      assert.equal(full?.lastUsedAt, "2026-02-01T00:00:00.000Z");
      assert.equal(full?.networks.length, 1);
      assert.equal((await store.findByHash(keys[1].hash))?.status, "revoked");
      assert.equal((await store.get(3))?.retires, 2);

      const audit = await auditOf(store);
      assert.deepEqual(
        audit.map((line) => line.action),
        [
          "create",
          "create",
          "allow_from",
          "rotate",
          "rate_limit",
          "network",
          "import",
        ],
      );
      assert.match(audit.at(-1)!.actor, /schema conversion/);
      assert.deepEqual(await legacyTables(database), []);

      // The rules hold over what was moved: a name held stays held, and ids
      // go on from the last one.
      await assert.rejects(
        store.create({
          name: "alpha",
          email: "x@example.com",
          ...generateApiKey(),
        }, {
          actor: "t",
        }),
        (error: Error & { code?: string }) => error.code === "name_taken",
      );
      const next = await store.create(
        { name: "delta", email: "d@example.com", ...generateApiKey() },
        { actor: "t" },
      );
      assert.equal(next.id, 4);
    } finally {
      await store.close();
    }
    // Reopened, nothing is moved twice.
    const again = await openPostgresStore(database.url);
    try {
      assert.equal(
        (await auditOf(again)).filter((line) => line.action === "import")
          .length,
        1,
      );
    } finally {
      await again.close();
    }
  },
});

Deno.test({
  name:
    "postgres legacy: servers opening the old database at once move it once, and every one of them serves its keys",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const keys = await legacyDatabase(database);
    const stores = await Promise.all(
      Array.from({ length: 4 }, () => openPostgresStore(database.url)),
    );
    try {
      for (const store of stores) {
        assert.equal((await store.findByHash(keys[2].hash))?.id, 3);
      }
      const imports = (await auditOf(stores[0])).filter((line) =>
        line.action === "import"
      );
      assert.equal(imports.length, 1);
    } finally {
      await Promise.all(stores.map((store) => store.close()));
    }
  },
});

Deno.test({
  name:
    "postgres legacy: a row the import refuses stops the opening with the fix, moves nothing, keeps the old tables, and once fixed the next opening moves it",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const keys = await legacyDatabase(database);
    await database.query(
      `UPDATE keys SET email = 'not an e-mail' WHERE id = 2`,
    );
    await assert.rejects(openPostgresStore(database.url), (error: Error) => {
      assert.ok(error instanceof LegacyConversionError, String(error));
      assert.equal(error.code, "legacy_conversion_failed");
      assert.match(error.message, /legacy_\* tables are unchanged/);
      return true;
    });
    assert.equal((await legacyTables(database)).length, 5);
    const [{ count }] = await database.query(
      "SELECT count(*)::int AS count FROM legacy_keys",
    );
    assert.equal(count, 3);

    await database.query(
      `UPDATE legacy_keys SET email = 'b@example.com' WHERE id = 2`,
    );
    const store = await openPostgresStore(database.url);
    try {
      assert.equal((await store.findByHash(keys[0].hash))?.id, 1);
      assert.deepEqual(await legacyTables(database), []);
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name:
    "postgres legacy: after an upgrade over a running older server, no opening returns, so no change is made, until that server's lease has run out",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const keys = await legacyDatabase(database);
    const leaseMs = OLDER_LEASE_MS;
    await registerOlderServer(database, leaseMs);
    const waits: OpenWait[][] = [[], []];
    // The upgrading server and a console opened beside it.
    const stores = await Promise.all(
      waits.map((seen) =>
        openPostgresStore(database.url, { onWait: (wait) => seen.push(wait) })
      ),
    );
    try {
      // By the database's clock, which the older server's lease ran on
      // from before the upgrade's commit.
      const [row] = await database.query(`
        SELECT clock_timestamp() >= ends_at AS ended,
          extract(epoch FROM ends_at - v.applied_at) * 1000 AS lease
        FROM older_leases, schema_version v WHERE v.version = 8`);
      assert.equal(row.ended, true);
      assert.ok(Number(row.lease) >= leaseMs, `lease counted ${row.lease} ms`);
      for (const seen of waits) {
        const leases = seen.filter((wait) => wait.reason === "older_leases");
        assert.ok(leases.length <= 1, JSON.stringify(seen));
      }
      // Each told of a wait no longer than the lease (its report is tested
      // on its own below: how much of it is left depends on the machine).
      for (const wait of waits.flat()) {
        if (wait.reason !== "older_leases") continue;
        assert.ok(
          wait.ms > 0 && wait.ms <= leaseMs + 250,
          JSON.stringify(waits),
        );
      }
      const revoked = await stores[1].revoke(1, { actor: "t", reason: "x" });
      assert.equal(revoked.record.status, "revoked");
      assert.equal(
        (await stores[0].findByHash(keys[0].hash))?.status,
        "revoked",
      );
    } finally {
      await Promise.all(stores.map((store) => store.close()));
    }
    // Once the lease is over, an opening makes no wait.
    const seen: OpenWait[] = [];
    const later = await openPostgresStore(database.url, {
      onWait: (wait) => seen.push(wait),
    });
    await later.close();
    assert.deepEqual(seen, []);
  },
});

Deno.test({
  name:
    "postgres legacy: an upgrade with no older server registered makes no opening wait",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await legacyDatabase(database);
    const seen: OpenWait[] = [];
    const store = await openPostgresStore(database.url, {
      onWait: (wait) => seen.push(wait),
    });
    await store.close();
    // Its own move it reports; it waits for nothing else.
    assert.deepEqual(seen, [{ reason: "moving", moved: 0, total: 9 }]);
    assert.deepEqual(
      await database.query("SELECT * FROM older_leases"),
      [],
    );
  },
});

Deno.test({
  name:
    "postgres legacy: an opening waits for another process's conversion past the statement timeout, and reports the wait",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const keys = await legacyDatabase(database);
    // Another database of the same cluster, mid-conversion first: its lock
    // is its own, and its session is not the one to name.
    await using elsewhere = await freshDatabase();
    const neighbour = postgres(elsewhere.url, { max: 1, onnotice: () => {} });
    await neighbour`SELECT pg_advisory_lock(hashtext('keys: legacy conversion'))`;
    // The other process, mid-conversion: it holds the conversion's lock.
    const other = postgres(database.url, { max: 1, onnotice: () => {} });
    const session = await other.reserve();
    await session`SELECT pg_advisory_lock(hashtext('keys: legacy conversion'))`;
    const [{ pid }] = await session<{ pid: number }[]>`
      SELECT pg_backend_pid() AS pid`;
    const statementTimeoutMs = 300;
    // Reported again once it has waited past the statement timeout, as a
    // large import makes it.
    const reportEveryMs = 3 * statementTimeoutMs;
    let reportedAgain!: () => void;
    const waitedLong = new Promise<void>((resolve) => reportedAgain = resolve);
    const seen: OpenWait[] = [];
    const opening = openPostgresStore(database.url, {
      statementTimeoutMs,
      reportEveryMs,
      onWait: (wait) => {
        seen.push(wait);
        if (seen.length === 2) reportedAgain();
      },
    });
    // Failing, it fails at the await below, not as an unhandled rejection.
    opening.catch(() => {});
    try {
      await Promise.race([waitedLong, opening]);
      await session`SELECT pg_advisory_unlock(hashtext('keys: legacy conversion'))`;
    } finally {
      session.release();
      await other.end();
      await neighbour.end();
    }
    const store = await opening;
    try {
      // Then, the lock let go and the tables still there, its own move.
      const waits = seen.filter((wait) => wait.reason !== "moving");
      assert.ok(waits.length >= 2, JSON.stringify(seen));
      for (const [at, wait] of waits.entries()) {
        assert.equal(wait.reason, "conversion");
        if (wait.reason !== "conversion") continue;
        // The session an operator would end, were the conversion stuck.
        assert.equal(wait.holder?.pid, pid, JSON.stringify(wait));
        assert.ok(wait.waitedMs >= at * reportEveryMs, JSON.stringify(seen));
      }
      assert.equal((await store.findByHash(keys[0].hash))?.id, 1);
      assert.deepEqual(await legacyTables(database), []);
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name:
    "postgres legacy: an older server registering while the upgrade runs is waited for, from when it registered",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await legacyDatabase(database);
    // An older server registering: its insert is not yet committed when
    // the upgrade starts, so the upgrade cannot see it by reading.
    const older = postgres(database.url, { max: 1, onnotice: () => {} });
    const session = await older.reserve();
    let registeredAt: number;
    try {
      await session`BEGIN`;
      await session`
        INSERT INTO instances (id, host, pid, started_at, lease_ms, acked)
        VALUES ('late-server', 'old-host', 4343, now(), ${OLDER_LEASE_MS}, 6)`;
      const opening = openPostgresStore(database.url);
      opening.catch(() => {});
      // Until the upgrade is held up by the registration.
      await until(async () => {
        const [row] = await database.query(
          `SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted
            AND database = (
              SELECT oid FROM pg_database WHERE datname = current_database())`,
        );
        return Number(row.n) > 0;
      }, "the upgrade to wait for the registration");
      // Its lease starts later than the upgrade's transaction, by more than
      // the margin, so a wait counted from that start would end too soon.
      await session`SELECT pg_sleep(0.5)`;
      const [row] = await session<{ at: number }[]>`
        SELECT extract(epoch FROM clock_timestamp()) * 1000 AS at`;
      registeredAt = Number(row.at);
      await session`COMMIT`;
      const store = await opening;
      await store.close();
    } finally {
      session.release();
      await older.end();
    }
    const ends = await olderLeasesEnd(database);
    assert.ok(ends !== null, "the late registration was not counted");
    assert.ok(
      ends >= registeredAt + OLDER_LEASE_MS,
      `counted to ${ends - registeredAt} ms after it registered`,
    );
    assert.ok(await databaseNow(database) >= ends);
  },
});

Deno.test({
  name:
    "postgres legacy: a lease longer than an older version allowed is waited for as the longest it allowed, and the opening succeeds",
  ignore: NO_DATABASE,
  async fn() {
    for (const bogus of [60_000, 2_147_483_647]) {
      await using database = await freshDatabase();
      await legacyDatabase(database);
      await registerOlderServer(database, bogus);
      const before = await databaseNow(database);
      const store = await openPostgresStore(database.url);
      await store.close();
      const ends = await olderLeasesEnd(database);
      assert.ok(ends !== null);
      assert.ok(ends >= before + OLDER_LEASE_MS, `${bogus}: ${ends - before}`);
      // The longest lease an older version allowed, from within the opening:
      // half the shorter claim leaves room for the slowest upgrade.
      assert.ok(ends < before + 30_000, `${bogus}: ${ends - before} ms`);
    }
  },
});

Deno.test({
  name:
    "postgres legacy: an upgrade from schema 4, the first with registrations, waits for the older servers too",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      await migrateWith(sql, { to: 4 });
    } finally {
      await sql.end();
    }
    await registerOlderServer(database, OLDER_LEASE_MS);
    const before = await databaseNow(database);
    const store = await openPostgresStore(database.url);
    await store.close();
    const ends = await olderLeasesEnd(database);
    assert.ok(ends !== null, "the schema 4 registration was not counted");
    assert.ok(ends >= before + OLDER_LEASE_MS);
    assert.ok(await databaseNow(database) >= ends);
  },
});

Deno.test({
  name:
    "postgres legacy: an opening left with part of an older lease reports how long it waits, once, and returns after it",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const leftMs = 3000;
    const ends = await recordOlderLeases(database, leftMs);
    const seen: OpenWait[] = [];
    const store = await openPostgresStore(database.url, {
      onWait: (wait) => seen.push(wait),
    });
    await store.close();
    assert.equal(seen.length, 1, JSON.stringify(seen));
    const [wait] = seen;
    assert.ok(
      wait.reason === "older_leases" && wait.ms > 0 && wait.ms <= leftMs,
      JSON.stringify(wait),
    );
    assert.ok(await databaseNow(database) >= ends);
  },
});
