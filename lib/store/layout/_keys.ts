/**
 * The key store's layout on {@linkcode Entries}, whatever the database: one
 * key-builder each, and the helpers every part of the layout writes through:
 *
 * - `["keys", id]` → KeyRecord, the primary copy
 * - `["keys_by_hash", hash]` → KeyRecord, a full copy so a request needs one read
 * - `["keys_by_name", lowercased name]` → id, for valid keys not in an overlap
 * - `["counters", "key_id"]` → KvU64, the last id handed out
 * - `["revision"]` → KvU64, the sequence number of the last change: caches
 *   compare it, and every change checks it, so changes are totally ordered
 * - `["auth_revision"]` → KvU64, the revision of the last change that
 *   altered authentication
 * - `["auth_stamps", hash]` → KvU64, the revision of the last change that
 *   altered this key's authentication (0 for an imported key: the import's),
 *   written in the commit that wrote the record: it counts only while its
 *   versionstamp is the record's, so a record written without it (by 1.1,
 *   or by hand) falls back to `["auth_revision"]`
 * - `["audit", revision]` → AuditEntry, so the log lists in the order of changes
 * - `["last_used", id]` → ISO time, `["networks", id]` → NetworkUse[],
 *   `["refused", id]` → RefusedUse[]: written apart from the record, so that
 *   they neither move the revision nor contend with admin changes (a
 *   network's first use is audited, and so moves the revision)
 * - `["import_revision"]` → KvU64, the revision at which an import last
 *   began or ended; `["importing"]` → ImportMarker while an import runs or
 *   after one was interrupted
 * - `["due", ms, id]`, `["replaced_by", replacement, id]`: the console's
 *   indexes of deadlines and overlaps, written with every record
 * - `["instances", id]` → a server's registration
 * @module
 */

import { expiryMs } from "../expiry.ts";
import { nameKey } from "../records.ts";
import type { Atomic, Entries, Entry, EntryKey } from "../entries.ts";
import { StoreUnavailableError } from "../errors.ts";
import type { KeyRecord } from "../types.ts";

export const keyById = (id: number): EntryKey => ["keys", id];
export const keyByHash = (hash: string): EntryKey => ["keys_by_hash", hash];
export const keyByName = (
  name: string,
): EntryKey => ["keys_by_name", nameKey(name)];
export const KEY_ID_COUNTER = ["counters", "key_id"] as const;
/** Bumped by every change; exported for the tests that prove caches see it. */
export const REVISION = ["revision"] as const;
export const AUTH_REVISION = ["auth_revision"] as const;
export const authStampKey = (hash: string): EntryKey => ["auth_stamps", hash];
export const auditKey = (revision: bigint): EntryKey => ["audit", revision];
export const lastUsedKey = (id: number): EntryKey => ["last_used", id];
export const networksKey = (id: number): EntryKey => ["networks", id];
export const refusedKey = (id: number): EntryKey => ["refused", id];
/** The layout's version, so that a later one migrates forward or is refused. */
export const LAYOUT = ["layout"] as const;
export const IMPORTING = ["importing"] as const;
export const IMPORT_REVISION = ["import_revision"] as const;
export const instanceKey = (id: string): EntryKey => ["instances", id];
/**
 * Deadline and overlap indexes. An entry may outlive what it says: readers
 * check the record and delete it.
 */
export const dueKey = (ms: number, id: number): EntryKey => ["due", ms, id];
export const replacedByKey = (
  replacement: number,
  id: number,
): EntryKey => ["replaced_by", replacement, id];

/** Tries of one change, or of one commit on a locked file, before the store counts as busy. */
export const MAX_TRIES = 60;

/** A record as its copies are stored: last use and usage live under their own keys. */
export function storedRecord(record: KeyRecord): KeyRecord {
  return { ...record, lastUsedAt: null, networks: [], refusedUses: [] };
}

/** Whether a record holds its name: valid and not on its way out. */
export function holdsName(record: KeyRecord): boolean {
  return record.status === "valid" && record.replacedBy === null;
}

/**
 * Writes a record's two copies and the index entries it calls for, and,
 * when given, `authRevision`: the revision of the last change that altered
 * its authentication, which a cache miss waits for (`findByHashAt`).
 */
export function putRecord(
  op: Atomic,
  record: KeyRecord,
  options: { authRevision?: bigint } = {},
): void {
  const stored = storedRecord(record);
  op.set(keyById(record.id), stored).set(keyByHash(record.hash), stored);
  for (const key of indexKeys(stored)) op.set(key, true);
  if (options.authRevision !== undefined) {
    op.set(authStampKey(record.hash), new Deno.KvU64(options.authRevision));
  }
}

/**
 * The revision a reader of a record waits for: its stamp, when written with
 * it (the same versionstamp) and no older than the last import, else the
 * store's last authentication change.
 */
export function authRevisionOf(
  record: Entry<unknown>,
  stamp: Entry<Deno.KvU64>,
  store: { auth: Entry<Deno.KvU64>; imported: Entry<Deno.KvU64> },
): bigint {
  if (
    stamp.versionstamp === null || stamp.versionstamp !== record.versionstamp
  ) {
    return counted(store.auth);
  }
  const own = counted(stamp);
  const imported = counted(store.imported);
  return own > imported ? own : imported;
}

/** The index entries a record calls for (none once it is revoked). */
export function indexKeys(record: KeyRecord): EntryKey[] {
  if (record.status !== "valid") return [];
  const keys: EntryKey[] = [];
  // An unreadable deadline counts as passed (expiryMs), so it sorts first.
  const due = Math.max(0, expiryMs(record));
  if (due !== Infinity) keys.push(dueKey(due, record.id));
  if (record.replacedBy !== null) {
    keys.push(replacedByKey(record.replacedBy, record.id));
  }
  return keys;
}

/** The store stayed busy through every try; `cause` is the last try's error. */
export function busy(cause?: unknown): StoreUnavailableError {
  return new StoreUnavailableError(
    "store_busy",
    `The key store stayed busy through ${MAX_TRIES} attempts; try again`,
    { cause },
  );
}

/** Waits before try `tries + 1`; full jitter keeps many writers from waking in step. */
export function backoff(tries: number): Promise<void> {
  const ceiling = Math.min(250, 2 ** Math.min(tries, 8));
  return new Promise((resolve) => setTimeout(resolve, Math.random() * ceiling));
}

/** The value of a counter entry, 0 when absent. */
export function counted(entry: Entry<Deno.KvU64>): bigint {
  return entry.value?.value ?? 0n;
}

/**
 * Tells other processes a change committed. Only a hint (servers also poll),
 * so a failed notice never fails a committed change.
 */
export async function hintChange(kv: Entries): Promise<void> {
  try {
    await kv.hint?.();
  } catch {
    // The change is committed; the servers' polls make up the notice.
  }
}
