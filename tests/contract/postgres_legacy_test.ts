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

/** The last schema with a table per kind of row. */
const LAST_LEGACY_VERSION = 7;

/** Three keys as schema 7 held them: one in use, one revoked, one rotated in. */
async function legacyDatabase(database: TestDatabase) {
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  try {
    await migrateWith(sql, { to: LAST_LEGACY_VERSION });
  } finally {
    await sql.end();
  }
  const keys = [generateApiKey(), generateApiKey(), generateApiKey()];
  await database.query(`
    UPDATE meta SET revision = 6, auth_revision = 6, last_key_id = 3;
    INSERT INTO keys (id, name, name_key, email, status, hash, hint,
        created_at, revoked_at, revoked_reason, exposed_at, exposed_from,
        expires_at, replaced_by, retires, allow_from, rate_limit)
      VALUES
      (1, 'Alpha', 'alpha', 'a@example.com', 'valid', '${keys[0].hash}',
        '${keys[0].hint}', '2026-01-01T00:00:00Z', NULL, NULL, NULL, NULL,
        '2030-01-01T00:00:00Z', NULL, NULL, '["10.0.0.0/8"]',
        '{"count": 600, "windowSeconds": 60}'),
      (2, 'beta', 'beta', 'b@example.com', 'revoked', '${keys[1].hash}',
        '${keys[1].hint}', '2026-01-02T00:00:00Z', '2026-01-03T00:00:00Z',
        'rotated', NULL, NULL, NULL, 3, NULL, NULL, NULL),
      (3, 'beta', 'beta', 'b@example.com', 'valid', '${keys[2].hash}',
        '${keys[2].hint}', '2026-01-03T00:00:00Z', NULL, NULL, NULL, NULL,
        NULL, NULL, 2, NULL, NULL);
    INSERT INTO last_used (key_id, at) VALUES (1, '2026-02-01T00:00:00Z');
    INSERT INTO key_usage (key_id, networks, refused) VALUES
      (1, '[{"network": "10.1.2.0/24", "firstSeenAt": "2026-02-01T00:00:00Z",
        "lastSeenAt": "2026-02-01T00:00:00Z"}]', '[]');
    INSERT INTO audit (seq, at, action, key_id, actor, detail) VALUES
      (1, '2026-01-01T00:00:00Z', 'create', 1, 'ops@host', NULL),
      (2, '2026-01-02T00:00:00Z', 'create', 2, 'ops@host', NULL),
      (3, '2026-01-02T00:00:01Z', 'allow_from', 1, 'ops@host', '10.0.0.0/8'),
      (4, '2026-01-03T00:00:00Z', 'rotate', 2, 'ops@host', 'replaced by 3'),
      (5, '2026-01-03T00:00:01Z', 'rate_limit', 1, 'ops@host', '600/min'),
      (6, '2026-02-01T00:00:00Z', 'network', 1, 'server', '10.1.2.0/24')`);
  return keys;
}

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

/** Registers a server of the older version, as its start-up did. */
async function registerOlderServer(database: TestDatabase, leaseMs: number) {
  await database.query(`
    INSERT INTO instances (id, host, pid, started_at, lease_ms, acked)
    VALUES ('older-server', 'old-host', 4242, now(), ${leaseMs}, 6)`);
}

Deno.test({
  name:
    "postgres legacy: after an upgrade over a running older server, no opening returns, so no change is made, until that server's lease has run out",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const keys = await legacyDatabase(database);
    // Longer than the 3 s an older server claims, so that even a busy
    // machine's upgrade is done with time left to wait.
    const leaseMs = 5000;
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
      // At least the upgrading one was told why it waited.
      assert.ok(
        waits.flat().some((wait) =>
          wait.reason === "older_leases" && wait.ms > 0 &&
          wait.ms <= leaseMs + 250
        ),
        JSON.stringify(waits),
      );
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
    assert.deepEqual(seen, []);
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
    // The other process, mid-conversion: it holds the conversion's lock.
    const other = postgres(database.url, { max: 1, onnotice: () => {} });
    const session = await other.reserve();
    await session`SELECT pg_advisory_lock(hashtext('keys: legacy conversion'))`;
    const statementTimeoutMs = 300;
    let reported!: () => void;
    const waiting = new Promise<void>((resolve) => reported = resolve);
    const seen: OpenWait[] = [];
    const opening = openPostgresStore(database.url, {
      statementTimeoutMs,
      onWait: (wait) => {
        seen.push(wait);
        if (wait.reason === "conversion") reported();
      },
    });
    // Failing, it fails at the await below, not as an unhandled rejection.
    opening.catch(() => {});
    try {
      await waiting;
      // Held past the opening's statement timeout, as a large import is.
      await new Promise((resolve) =>
        setTimeout(resolve, 3 * statementTimeoutMs)
      );
      await session`SELECT pg_advisory_unlock(hashtext('keys: legacy conversion'))`;
    } finally {
      session.release();
      await other.end();
    }
    const store = await opening;
    try {
      assert.deepEqual(seen, [{ reason: "conversion" }]);
      assert.equal((await store.findByHash(keys[0].hash))?.id, 1);
      assert.deepEqual(await legacyTables(database), []);
    } finally {
      await store.close();
    }
  },
});
