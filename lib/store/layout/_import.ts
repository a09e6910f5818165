/**
 * The import and its discard; every item is checked (`_import_check.ts`) as
 * it streams in. Not atomic, an import writes in batches under the
 * `["importing"]` marker: set with a revision bump on an empty store, checked
 * by every batch, removed with another bump (and the import's audit line) once
 * complete or wiped again. Lookups read the marker in the record's snapshot,
 * so no key of an unfinished import authenticates; revisions are never wiped,
 * so none repeats.
 * @module
 */

import { ImportChecker } from "../_import_check.ts";
import { type ChangeKind, Committed } from "../change.ts";
import {
  ImportItemError,
  ImportStateError,
  StoreInputError,
} from "../errors.ts";
import type {
  AuditEntry,
  ChangeOptions,
  ExportItem,
  KeyRecord,
} from "../types.ts";
import type { Atomic, Check, Entries, EntryKey, KeyPart } from "../entries.ts";
import {
  auditKey,
  AUTH_REVISION,
  authStampKey,
  backoff,
  busy,
  counted,
  hintChange,
  holdsName,
  IMPORT_REVISION,
  IMPORTING,
  indexKeys,
  KEY_ID_COUNTER,
  keyByHash,
  keyById,
  keyByName,
  lastUsedKey,
  LAYOUT,
  MAX_TRIES,
  networksKey,
  refusedKey,
  REVISION,
  storedRecord,
} from "./_keys.ts";

/** The value under `["importing"]`. */
interface ImportMarker {
  /** Unique per import or abort, so two can never mistake each other's marker. */
  token: string;
  state: "importing" | "aborting";
  startedAt: string;
  actor: string;
}

/**
 * What a wipe keeps: the revisions, which only grow, the servers'
 * registrations, and the webhook endpoints and outbox, which are no key's.
 */
const META_KEYS = new Set<KeyPart>([
  REVISION[0],
  AUTH_REVISION[0],
  "instances",
  IMPORTING[0],
  IMPORT_REVISION[0],
  LAYOUT[0],
  "webhooks",
  "webhook_due",
  "webhook_done",
]);

/**
 * Budgets of one atomic batch, about half KV's limits (1000 mutations, 800
 * KiB, 80 KiB of keys), in bytes so long texts can't overflow.
 */
const BATCH_LIMITS = { mutations: 500, bytes: 400 * 1024, keyBytes: 40 * 1024 };

const IMPORT: ChangeKind<"authentication"> = {
  name: "importAll",
  alters: "authentication",
};
const ABORT: ChangeKind<"authentication"> = {
  name: "abortImport",
  alters: "authentication",
};

/** Restores checked `items` into the empty store under a new marker; see the module. */
export async function importIn(
  kv: Entries,
  items: AsyncIterable<ExportItem>,
  options: ChangeOptions,
): Promise<Committed<{ keys: number; audit: number }, "authentication">> {
  const ours = await beginImport(kv, options);
  const batch = new _Batch(kv, ours);
  try {
    const checker = new ImportChecker();
    const counts = { keys: 0, audit: 0 };
    for await (const item of items) {
      if (item.type === "key") {
        await stageRecord(batch, checker.record(item.record));
        counts.keys++;
      } else if (item.type === "audit") {
        const entry = checker.audit(item.entry);
        await batch.set(auditKey(BigInt(++counts.audit)), entry);
      } else {
        throw new ImportItemError((item as { type: unknown }).type);
      }
    }
    checker.finish();
    await batch.flush();
    const line: AuditEntry = {
      at: new Date().toISOString(),
      action: "import",
      keyId: 0,
      actor: options.actor,
      detail: `${counts.keys} keys and ${counts.audit} audit lines`,
    };
    const revision = await unmark(
      kv,
      ours,
      BigInt(counts.audit),
      (op, at) =>
        op.set(KEY_ID_COUNTER, new Deno.KvU64(BigInt(checker.maxId)))
          .set(auditKey(at), line),
    );
    return new Committed(IMPORT, revision, counts);
  } catch (error) {
    try {
      await wipe(kv, ours);
    } catch {
      // The marker stays, so no key works and every change is refused
      // until "keys import --abort"; the error that matters is the first.
    }
    throw error;
  }
}

/** Ends an unfinished import: a new marker, then the wipe. False when there was none. */
export async function abortIn(
  kv: Entries,
  options: ChangeOptions,
): Promise<Committed<boolean, "authentication">> {
  for (let tries = 1;; tries++) {
    const [current, marker] = await kv.getMany<[Deno.KvU64, unknown]>([
      REVISION,
      IMPORTING,
    ]);
    if (marker.value === null) {
      return new Committed(ABORT, counted(current), false);
    }
    // A new token first: the import, if it still runs, fails at its next
    // batch instead of writing into the store being emptied.
    const revision = counted(current) + 1n;
    const res = await moveRevision(kv.atomic().check(current, marker), revision)
      .set(IMPORTING, newMarker("aborting", options)).commit();
    if (res.ok) {
      await hintChange(kv);
      const ours = { key: IMPORTING, versionstamp: res.versionstamp };
      return new Committed(ABORT, await wipe(kv, ours), true);
    }
    if (tries >= MAX_TRIES) throw busy();
    await backoff(tries);
  }
}

/** Sets revision, import revision and authentication revision alike. */
function moveRevision(
  op: Atomic,
  revision: bigint,
): Atomic {
  const value = new Deno.KvU64(revision);
  return op.set(REVISION, value).set(IMPORT_REVISION, value)
    .set(AUTH_REVISION, value);
}

/** Sets the marker on an empty store, or refuses; returns the marker's check. */
async function beginImport(
  kv: Entries,
  options: ChangeOptions,
): Promise<Check> {
  const [current, marker] = await kv.getMany<[Deno.KvU64, unknown]>([
    REVISION,
    IMPORTING,
  ]);
  // Another import's marker is never taken over: it may still be running.
  if (marker.value !== null) throw new ImportStateError("import_unfinished");
  if (!(await isEmpty(kv))) {
    throw new StoreInputError("import_not_empty", "The store is not empty");
  }
  // Every change moves the revision, so checking it proves the store is
  // still as empty as it was just seen.
  const start = await moveRevision(
    kv.atomic().check(current, marker),
    counted(current) + 1n,
  ).set(IMPORTING, newMarker("importing", options)).commit();
  if (!start.ok) {
    if ((await kv.get(IMPORTING)).value !== null) {
      throw new ImportStateError("import_unfinished");
    }
    throw new StoreInputError(
      "import_raced",
      "The store changed while the import began",
    );
  }
  await hintChange(kv);
  return { key: IMPORTING, versionstamp: start.versionstamp };
}

/** Stages one imported record: its two copies, its indexes, name and usage. */
async function stageRecord(batch: _Batch, record: KeyRecord): Promise<void> {
  const stored = storedRecord(record);
  await batch.set(keyById(record.id), stored);
  await batch.set(keyByHash(record.hash), stored);
  // The import's own revision, once published (authRevisionOf); split from
  // the record by a batch's end, it falls back to the store's.
  await batch.set(authStampKey(record.hash), new Deno.KvU64(0n));
  for (const key of indexKeys(stored)) {
    await batch.set(key, true);
  }
  if (holdsName(record)) {
    await batch.set(keyByName(record.name), record.id);
  }
  if (record.lastUsedAt) {
    await batch.set(lastUsedKey(record.id), record.lastUsedAt);
  }
  if (record.networks.length > 0) {
    await batch.set(networksKey(record.id), record.networks);
  }
  if (record.refusedUses.length > 0) {
    await batch.set(refusedKey(record.id), record.refusedUses);
  }
}

/**
 * Removes marker `ours` and moves the revisions, in one step, above `above`
 * and every revision the store ever had; `publish` adds the import's writes
 * at that revision. ImportStateError once the marker was taken over.
 */
async function unmark(
  kv: Entries,
  ours: Check,
  above: bigint,
  publish?: (op: Atomic, revision: bigint) => void,
): Promise<bigint> {
  const current = await kv.get<Deno.KvU64>(REVISION);
  const now = counted(current);
  const revision = (now > above ? now : above) + 1n;
  const op = moveRevision(kv.atomic().check(ours, current), revision)
    .delete(IMPORTING);
  publish?.(op, revision);
  if (!(await op.commit()).ok) throw new ImportStateError("import_aborted");
  await hintChange(kv);
  return revision;
}

async function isEmpty(kv: Entries): Promise<boolean> {
  for (const prefix of [["keys"], ["keys_by_hash"], ["audit"]]) {
    for await (const _ of kv.list({ prefix }, { limit: 1 })) return false;
  }
  return true;
}

/**
 * Deletes all but revisions and registrations while holding marker `ours`,
 * then removes it with a revision bump: the store is as before the import.
 * ImportStateError once the marker was taken over; returns the new revision.
 */
async function wipe(kv: Entries, ours: Check): Promise<bigint> {
  const batch = new _Batch(kv, ours);
  for await (const entry of kv.list({ prefix: [] })) {
    if (META_KEYS.has(entry.key[0] as string)) continue;
    await batch.delete(entry.key);
  }
  await batch.flush();
  return await unmark(kv, ours, 0n);
}

function newMarker(
  state: ImportMarker["state"],
  options: ChangeOptions,
): ImportMarker {
  return {
    token: crypto.randomUUID(),
    state,
    startedAt: new Date().toISOString(),
    actor: options.actor,
  };
}

/** An import's or wipe's writes, in atomic batches within KV's limits, guarded by marker. */
class _Batch {
  #kv: Entries;
  #guard: Check;
  #op: Atomic;
  #mutations = 0;
  #bytes = 0;
  #keyBytes = 0;

  constructor(kv: Entries, guard: Check) {
    this.#kv = kv;
    this.#guard = guard;
    this.#op = kv.atomic();
  }

  async set(key: EntryKey, value: unknown): Promise<void> {
    await this.#room(key, value);
    this.#op.set(key, value);
  }

  async delete(key: EntryKey): Promise<void> {
    await this.#room(key, null);
    this.#op.delete(key);
  }

  async flush(): Promise<void> {
    if (this.#mutations === 0) return;
    const result = await this.#op.check(this.#guard).commit();
    this.#op = this.#kv.atomic();
    this.#mutations = this.#bytes = this.#keyBytes = 0;
    // The marker is the only thing checked: someone aborted this import.
    if (!result.ok) throw new ImportStateError("import_aborted");
  }

  async #room(key: EntryKey, value: unknown): Promise<void> {
    // Upper bounds: UTF-8 takes at most 3 bytes per UTF-16 unit in keys,
    // and V8's serialisation at most 2 per unit of the JSON text in values.
    const keyBytes = 3 * JSON.stringify(key, bigints).length + 16;
    const bytes = keyBytes +
      2 * (JSON.stringify(value, bigints)?.length ?? 0) + 64;
    if (
      this.#mutations + 1 > BATCH_LIMITS.mutations ||
      this.#bytes + bytes > BATCH_LIMITS.bytes ||
      this.#keyBytes + keyBytes > BATCH_LIMITS.keyBytes
    ) {
      await this.flush();
    }
    this.#mutations++;
    this.#bytes += bytes;
    this.#keyBytes += keyBytes;
  }
}

function bigints(_: string, value: unknown): unknown {
  return typeof value === "bigint" ? value.toString() : value;
}
