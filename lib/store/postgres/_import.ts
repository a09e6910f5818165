/**
 * The PostgreSQL backend's staged import: one transaction, so servers see
 * none of it until it commits, and a failed or killed one leaves nothing;
 * it holds an advisory lock that a second import cannot take.
 *
 * @module
 */

import {
  type ImportBatch,
  publishedRevision,
  type StagedImport,
} from "../backend.ts";
import { ImportStateError, StoreInputError } from "../errors.ts";
import type { Pool, Tx } from "./connection.ts";
import { IMPORT_LOCK, insertAudit, insertKeys } from "./_rows.ts";

/**
 * Stages an import into the empty store behind `pool`: one transaction, so
 * publishing is its commit and a failure rolls all of it back.
 */
export function stageIn<T>(
  pool: Pool,
  fill: (staged: StagedImport) => Promise<T>,
): Promise<T> {
  // No overall deadline, as a large import takes its time; each statement
  // still has the server's.
  return pool.transaction(async (tx) => {
    await lockForImport(tx);
    const [state] = await tx<{ empty: boolean; revision: string }[]>`
      SELECT NOT EXISTS (SELECT 1 FROM keys)
        AND NOT EXISTS (SELECT 1 FROM audit)
        AND NOT EXISTS (SELECT 1 FROM last_used)
        AND NOT EXISTS (SELECT 1 FROM key_usage) AS empty,
        m.revision
      FROM meta m FOR UPDATE`;
    if (!state.empty) {
      throw new StoreInputError("import_not_empty", "The store is not empty");
    }
    return await fill({
      write: (batch) => writeBatch(tx, batch),
      publish: async (line, counts) => {
        const revision = publishedRevision(
          BigInt(state.revision),
          counts.above,
        );
        await tx`
          UPDATE meta SET revision = ${revision.toString()},
            auth_revision = ${revision.toString()},
            last_key_id = ${counts.maxId}`;
        await insertAudit(tx, revision, line);
        return revision;
      },
    });
  }, { timeoutMs: null });
}

/**
 * Takes the import lock without waiting on another import: two imports at
 * once would otherwise run one after the other, and the second fail only
 * once the first is done. A change holds the lock shared for a moment only,
 * so that is waited out briefly.
 */
async function lockForImport(tx: Tx): Promise<void> {
  for (let tries = 0; tries < 20; tries++) {
    const [lock] = await tx<{ locked: boolean }[]>`
      SELECT pg_try_advisory_xact_lock(${IMPORT_LOCK}) AS locked`;
    if (lock.locked) return;
    const [other] = await tx<{ importing: boolean }[]>`
      SELECT EXISTS (
        SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database
        WHERE l.locktype = 'advisory' AND d.datname = current_database()
          AND l.objid = ${IMPORT_LOCK}::bigint::oid
          AND l.mode = 'ExclusiveLock' AND l.granted
      ) AS importing`;
    if (other.importing) break;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new ImportStateError("import_unfinished");
}

async function writeBatch(tx: Tx, batch: ImportBatch): Promise<void> {
  if (batch.keys.length > 0) {
    await insertKeys(tx, batch.keys);
    const usage = JSON.stringify(batch.keys.map((record) => ({
      id: record.id,
      last_used_at: record.lastUsedAt,
      networks: record.networks,
      refused: record.refusedUses,
    })));
    await tx`
      INSERT INTO key_usage (key_id, networks, refused)
      SELECT id, networks, refused
      FROM jsonb_to_recordset(${usage}::text::jsonb) AS r(id bigint,
        networks jsonb, refused jsonb)
      WHERE networks <> '[]'::jsonb OR refused <> '[]'::jsonb`;
    await tx`
      INSERT INTO last_used (key_id, at)
      SELECT id, last_used_at
      FROM jsonb_to_recordset(${usage}::text::jsonb) AS r(id bigint,
        last_used_at timestamptz)
      WHERE last_used_at IS NOT NULL`;
  }
  if (batch.audit.length > 0) {
    const rows = JSON.stringify(batch.audit.map(({ seq, entry }) => ({
      ...entry,
      seq,
    })));
    await tx`
      INSERT INTO audit (seq, at, action, key_id, actor, detail)
      SELECT seq, at, action, "keyId", actor, detail
      FROM jsonb_to_recordset(${rows}::text::jsonb) AS r(seq bigint,
        at timestamptz, action text, "keyId" bigint, actor text, detail text)`;
  }
}
