/**
 * A rotation line's rate-limit counter is negative (`lineCounter`, the first
 * key's id negated): its share record is written, read back, listed under
 * the same number and kept apart from the first key's own, on Deno KV and
 * PostgreSQL alike.
 */

import assert from "node:assert/strict";
import { lineCounter } from "../../lib/auth/rate_limit.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import { openPostgresStore } from "../../lib/store/postgres/store.ts";
import type { ShareRecord } from "../../lib/store/rate_shares.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";

/** A record of `limit`, as the ledger writes it; its extra fields pass through. */
function record(limit: number, shares: Record<string, number>): ShareRecord {
  return { limit, window: 60, shares, wants: {}, answers: {} } as
    & ShareRecord
    & Record<string, unknown>;
}

async function roundTrip(
  shares: Awaited<ReturnType<typeof openKvStore>>["shares"],
): Promise<void> {
  const line = lineCounter(7);
  assert.equal(line, -7);
  const own = await shares.put(7, record(5, { a: 5 }), null);
  const made = await shares.put(line, record(10, { a: 6, b: 4 }), null);
  assert.ok(own.ok && made.ok);
  const read = await shares.get(line);
  assert.equal(read.version, made.version);
  assert.equal(read.record?.limit, 10);
  assert.deepEqual(read.record?.shares, { a: 6, b: 4 });
  assert.equal((await shares.get(7)).record?.limit, 5);
  const listed = await shares.list();
  assert.deepEqual(listed.map((entry) => entry.counter), [line, 7]);
  // A compare-and-set on the line's version, then removal.
  const moved = await shares.put(line, record(10, { a: 10 }), read.version);
  assert.ok(moved.ok);
  assert.equal((await shares.put(line, null, read.version)).ok, false);
  assert.ok((await shares.put(line, null, moved.version)).ok);
  assert.deepEqual((await shares.list()).map((entry) => entry.counter), [7]);
}

Deno.test("Deno KV: a line's negative counter holds its own share record beside its first key's", async () => {
  const store = await openKvStore(":memory:");
  try {
    await roundTrip(store.shares);
  } finally {
    await store.close();
  }
});

Deno.test({
  name:
    "PostgreSQL: a line's negative counter holds its own share record beside its first key's",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const store = await openPostgresStore(database.url);
    try {
      await roundTrip(store.shares);
    } finally {
      await store.close();
    }
  },
});
