/**
 * A PostgreSQL database as an older version left it (a table per kind of
 * row, schema 7), with its keys, and the older servers registered in it,
 * for the tests of the upgrade to this version's entries.
 *
 * @module
 */

import postgres from "postgres";
import { generateApiKey, type NewApiKey } from "../../lib/auth/api_key.ts";
import { migrateWith } from "../../lib/store/postgres/schema.ts";
import type { TestDatabase } from "./postgres.ts";

/** The last schema with a table per kind of row. */
const LAST_LEGACY_VERSION = 7;

/** Three keys as schema 7 held them: one in use, one revoked, one rotated in. */
export async function legacyDatabase(
  database: TestDatabase,
): Promise<NewApiKey[]> {
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

/** The longest lease a server of versions 4 to 7 could claim. */
export const OLDER_LEASE_MS = 3000;

/** The database's clock, read now, in epoch milliseconds. */
export async function databaseNow(database: TestDatabase): Promise<number> {
  const [row] = await database.query(
    "SELECT extract(epoch FROM clock_timestamp()) * 1000 AS at",
  );
  return Number(row.at);
}

/** When the recorded older leases end, in epoch milliseconds; null: none. */
export async function olderLeasesEnd(
  database: TestDatabase,
): Promise<number | null> {
  const [row] = await database.query(
    "SELECT extract(epoch FROM max(ends_at)) * 1000 AS at FROM older_leases",
  );
  return row.at === null ? null : Number(row.at);
}

/** Registers a server of an older version, as it did itself, with `leaseMs`. */
export async function registerOlderServer(
  database: TestDatabase,
  leaseMs: number,
): Promise<void> {
  await database.query(`
    INSERT INTO instances (id, host, pid, started_at, lease_ms, acked)
    VALUES ('older-server', 'old-host', 4242, now(), ${leaseMs}, 6)`);
}

/**
 * A database of this version whose upgrade recorded older leases ending
 * `fromNowMs` after the database's clock reads now; returns when they end.
 */
export async function recordOlderLeases(
  database: TestDatabase,
  fromNowMs: number,
): Promise<number> {
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  try {
    await migrateWith(sql);
  } finally {
    await sql.end();
  }
  await database.query(`INSERT INTO older_leases (ends_at)
    VALUES (clock_timestamp() + interval '${fromNowMs} milliseconds')`);
  return (await olderLeasesEnd(database))!;
}
