/**
 * The PostgreSQL backend's one change primitive: a draft's reads under the
 * `meta` row's lock (or a usage row's), then its writes, audit lines and
 * revision moves in the same transaction.
 *
 * @module
 */

import {
  ChangeDraft,
  type ChangeReads,
  type UsageLists,
  type Write,
} from "../backend.ts";
import { type Alters, type ChangeKind, Committed } from "../change.ts";
import { ImportStateError, KeyIdsExhaustedError } from "../errors.ts";
import { MAX_KEY_ID, nameKey } from "../records.ts";
import type { KeyRecord } from "../types.ts";
import type { Pool, Tx } from "./connection.ts";
import {
  IMPORT_LOCK,
  insertAudit,
  insertKeys,
  jsonOrNull,
  type KeyRow,
  lockUsage,
  toRecord,
  updateKey,
} from "./_rows.ts";

/**
 * Runs `work` in one transaction, then applies its draft: the `meta` row
 * is locked by the first read that needs it (usage notes lock their own
 * row first and `meta` only to audit), so changes are totally ordered.
 */
export function changeIn<T, A extends Alters>(
  pool: Pool,
  kind: ChangeKind<A>,
  work: (draft: ChangeDraft<A>) => Promise<T>,
): Promise<Committed<T, A>> {
  return pool.transaction(async (tx) => {
    const reads = new _Reads(tx);
    const draft = new ChangeDraft(kind.alters, reads);
    const result = await work(draft);
    if (draft.moves === 0) {
      await applyWrites(tx, draft.writes);
      return new Committed(kind, await reads.revision(), result);
    }
    const meta = await reads.meta();
    await applyWrites(tx, draft.writes);
    const revision = meta.revision + BigInt(draft.moves);
    for (const { seq, entry } of draft.numbered(meta.revision)) {
      await insertAudit(tx, seq, entry);
    }
    const auth = kind.alters === "authentication";
    await tx`
      UPDATE meta SET revision = ${revision.toString()},
        last_key_id = ${meta.lastId},
        auth_revision = CASE WHEN ${auth} THEN ${revision.toString()}::bigint
          ELSE auth_revision END`;
    return new Committed(kind, revision, result);
  });
}

/** The reads of one change, inside its transaction. */
class _Reads implements ChangeReads {
  #tx: Tx;
  #meta: { revision: bigint; lastId: number } | null = null;

  constructor(tx: Tx) {
    this.#tx = tx;
  }

  /**
   * The `meta` row, locked for the rest of the transaction: every record
   * read after it stays as read. Refused at once while an import holds the
   * store, rather than after the lock timeout with a message that blames
   * the database.
   */
  async meta(): Promise<{ revision: bigint; lastId: number }> {
    if (this.#meta !== null) return this.#meta;
    const [free] = await this.#tx<{ free: boolean }[]>`
      SELECT pg_try_advisory_xact_lock_shared(${IMPORT_LOCK}) AS free`;
    if (!free.free) throw new ImportStateError("import_unfinished");
    const [row] = await this.#tx<{ revision: string; last_key_id: string }[]>`
      SELECT revision, last_key_id FROM meta FOR UPDATE`;
    this.#meta = {
      revision: BigInt(row.revision),
      lastId: Number(row.last_key_id),
    };
    return this.#meta;
  }

  /** The revision as this change found it. */
  async revision(): Promise<bigint> {
    if (this.#meta !== null) return this.#meta.revision;
    const [row] = await this.#tx<{ revision: string }[]>`
      SELECT revision FROM meta`;
    return BigInt(row.revision);
  }

  async get(id: number): Promise<KeyRecord | null> {
    await this.meta();
    if (!Number.isSafeInteger(id)) return null;
    const [row] = await this.#tx<KeyRow[]>`SELECT * FROM keys WHERE id = ${id}`;
    return row ? toRecord(row) : null;
  }

  async nameHolder(name: string): Promise<number | null> {
    await this.meta();
    const [row] = await this.#tx<{ id: string }[]>`
      SELECT id FROM keys WHERE name_key = ${nameKey(name)}
        AND status = 'valid' AND replaced_by IS NULL`;
    return row ? Number(row.id) : null;
  }

  async hashTaken(hash: string): Promise<boolean> {
    await this.meta();
    const rows = await this.#tx`SELECT 1 FROM keys WHERE hash = ${hash}`;
    return rows.length > 0;
  }

  async nextId(): Promise<number> {
    const meta = await this.meta();
    if (meta.lastId >= MAX_KEY_ID) throw new KeyIdsExhaustedError(MAX_KEY_ID);
    return ++meta.lastId;
  }

  usage(id: number): Promise<UsageLists | null> {
    // Usage rows are locked before `meta` and changes of records never lock
    // them, so no deadlock.
    return lockUsage(this.#tx, id);
  }
}

/** Applies a draft's writes, in order: an old key gives up its name first. */
async function applyWrites(tx: Tx, writes: Write[]): Promise<void> {
  for (const write of writes) {
    if (write.kind === "usage") {
      const { networks, refused } = write.lists;
      await tx`
        UPDATE key_usage
        SET networks = coalesce(${jsonOrNull(networks)}::text::jsonb, networks),
          refused = coalesce(${jsonOrNull(refused)}::text::jsonb, refused)
        WHERE key_id = ${write.id}`;
    } else if (write.kind === "insert") {
      await insertKeys(tx, [write.record]);
    } else {
      await updateKey(tx, write.record);
    }
  }
}
