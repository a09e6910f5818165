/**
 * The Deno KV store: the only module that touches Deno KV.
 *
 * Layout (one key-builder function each, below):
 * - `["keys", id]` → KeyRecord, the primary copy
 * - `["keys_by_hash", hash]` → KeyRecord, a full copy so a request needs one read
 * - `["keys_by_name", lowercased name]` → id, for valid keys only
 * - `["counters", "key_id"]` → KvU64, the last id handed out
 * - `["revision"]` → KvU64, the sequence number of the last change: caches
 *   compare it, and every change checks it, so changes are totally ordered
 * - `["audit", revision]` → AuditEntry, so the log lists in the order of changes
 * - `["last_used", id]` → ISO time, written apart from the record so that it
 *   neither moves the revision nor contends with admin changes
 * - `["importing"]` → true while an import runs, so a failed one can be wiped
 *
 * Every change is one `atomic()` that `check()`s every entry it read, so two
 * admins generating at the same moment cannot share an id or a name; a
 * conflict or a locked database file is retried with backoff.
 *
 * @module
 */

import { checkImportedAudit, checkImportedRecord } from "./_import_check.ts";
import {
  AUDIT_DETAIL,
  type AuditEntry,
  cannotRotateRevoked,
  type ChangeOptions,
  type ExportItem,
  exportItems,
  type ExposeOptions,
  keyCollision,
  keyNotFound,
  type KeyRecord,
  type KeyStore,
  nameKey,
  nameTaken,
  type NewKeyInput,
  newRecord,
  normalizeEmail,
  normalizeName,
  revokedRecord,
  type RevokeOptions,
  type RevokeResult,
  rotatedRecord,
  type RotateResult,
  StoreInputError,
  StoreUnavailableError,
} from "./store.ts";

const keyById = (id: number) => ["keys", id] as const;
const keyByHash = (hash: string) => ["keys_by_hash", hash] as const;
const keyByName = (name: string) => ["keys_by_name", nameKey(name)] as const;
const KEY_ID_COUNTER = ["counters", "key_id"] as const;
/** Bumped by every change; exported for the tests that prove caches see it. */
export const REVISION = ["revision"] as const;
const auditKey = (revision: bigint) => ["audit", revision] as const;
const lastUsedKey = (id: number) => ["last_used", id] as const;
const IMPORTING = ["importing"] as const;
const IMPORT_REVISION = ["import_revision"] as const;
/** Mutations per atomic operation during an import, well under KV's limit. */
const IMPORT_BATCH = 400;

/**
 * Opens (creating its folder when missing) a KV store at a path, ":memory:"
 * or URL. A file store is made private whatever the umask: its folder 0700,
 * the file and SQLite's companions 0600, as they hold every key's hash and
 * every integrator's e-mail.
 */
export async function openKvStore(path: string): Promise<KvKeyStore> {
  if (path === ":memory:" || /^https?:\/\//.test(path)) {
    return new KvKeyStore(await Deno.openKv(path));
  }
  const folder = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "";
  if (folder !== "") {
    await Deno.mkdir(folder, { recursive: true, mode: 0o700 });
    await Deno.chmod(folder, 0o700);
  }
  // Created before SQLite opens it, so it is never readable by others even
  // for a moment; SQLite then gives -wal and -shm the file's own mode.
  (await Deno.open(path, { create: true, write: true, mode: 0o600 })).close();
  await Deno.chmod(path, 0o600);
  const kv = await Deno.openKv(path);
  for (const companion of [`${path}-wal`, `${path}-shm`, `${path}-journal`]) {
    try {
      await Deno.chmod(companion, 0o600);
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    }
  }
  return new KvKeyStore(kv);
}

/** {@linkcode KeyStore} on Deno KV. */
export class KvKeyStore implements KeyStore {
  #kv: Deno.Kv;

  constructor(kv: Deno.Kv) {
    this.#kv = kv;
  }

  async findByHash(hash: string): Promise<KeyRecord | null> {
    return (await this.#read<KeyRecord>(keyByHash(hash))).value;
  }

  async get(id: number): Promise<KeyRecord | null> {
    const [record, used] = await this.#kv.getMany<[KeyRecord, string]>([
      keyById(id),
      lastUsedKey(id),
    ]);
    return record.value && { ...record.value, lastUsedAt: used.value };
  }

  async getByName(name: string): Promise<KeyRecord | null> {
    const entry = await this.#read<number>(keyByName(name));
    return entry.value === null ? null : await this.get(entry.value);
  }

  async *list(
    options: { includeRevoked?: boolean } = {},
  ): AsyncIterable<KeyRecord> {
    // Both prefixes list in id order, so one pass over each joins them.
    const used = this.#kv.list<string>({ prefix: ["last_used"] }, {
      batchSize: 500,
    })[Symbol.asyncIterator]();
    let next = await used.next();
    for await (
      const entry of this.#kv.list<KeyRecord>({ prefix: ["keys"] }, {
        batchSize: 500,
      })
    ) {
      const id = entry.value.id;
      while (!next.done && (next.value.key[1] as number) < id) {
        next = await used.next();
      }
      if (options.includeRevoked || entry.value.status === "valid") {
        const lastUsedAt = !next.done && next.value.key[1] === id
          ? next.value.value
          : null;
        yield { ...entry.value, lastUsedAt };
      }
    }
  }

  async create(input: NewKeyInput, options: ChangeOptions): Promise<KeyRecord> {
    const name = normalizeName(input.name);
    const email = normalizeEmail(input.email);
    return await this.#change(async (at, revision) => {
      const [counter, byName, byHash] = await this.#kv.getMany<
        [Deno.KvU64, number, KeyRecord]
      >([KEY_ID_COUNTER, keyByName(name), keyByHash(input.hash)]);
      if (byName.value !== null) throw nameTaken(name, byName.value);
      if (byHash.value !== null) {
        throw keyCollision();
      }
      const record = newRecord(nextId(counter), { ...input, name, email }, at);
      const op = this.#kv.atomic().check(counter, byName, byHash)
        .set(KEY_ID_COUNTER, new Deno.KvU64(BigInt(record.id)));
      putRecord(op, record);
      op.set(keyByName(name), record.id);
      audit(op, at, revision, {
        action: "create",
        keyId: record.id,
        ...options,
      });
      return { op, result: record };
    });
  }

  revoke(id: number, options: RevokeOptions): Promise<RevokeResult> {
    return this.#change<RevokeResult>(async (at, revision) => {
      const current = await this.#kv.get<KeyRecord>(keyById(id));
      if (current.value === null) throw keyNotFound(id);
      if (current.value.status === "revoked") {
        return { op: null, result: { record: current.value, changed: false } };
      }
      const record = revokedRecord(current.value, at, options.reason);
      const op = this.#kv.atomic().check(current);
      putRecord(op, record);
      op.delete(keyByName(record.name));
      audit(op, at, revision, {
        action: "revoke",
        keyId: id,
        actor: options.actor,
        detail: options.reason ?? null,
      });
      return { op, result: { record, changed: true } };
    });
  }

  rotate(
    id: number,
    replacement: Pick<NewKeyInput, "hash" | "hint">,
    options: ChangeOptions,
  ): Promise<RotateResult> {
    return this.#change(async (at, revision) => {
      const current = await this.#kv.get<KeyRecord>(keyById(id));
      if (current.value === null) throw keyNotFound(id);
      if (current.value.status === "revoked") {
        throw cannotRotateRevoked(id);
      }
      const [counter, byHash] = await this.#kv.getMany<
        [Deno.KvU64, KeyRecord]
      >([KEY_ID_COUNTER, keyByHash(replacement.hash)]);
      if (byHash.value !== null) {
        throw keyCollision();
      }
      const created = newRecord(nextId(counter), {
        ...replacement,
        name: current.value.name,
        email: current.value.email,
      }, at);
      const old = rotatedRecord(current.value, at, created.id);
      const op = this.#kv.atomic().check(current, counter, byHash)
        .set(KEY_ID_COUNTER, new Deno.KvU64(BigInt(created.id)));
      putRecord(op, old);
      putRecord(op, created);
      op.set(keyByName(created.name), created.id);
      audit(op, at, revision, {
        action: "rotate",
        keyId: id,
        actor: options.actor,
        detail: AUDIT_DETAIL.rotate(created.id),
      });
      return { op, result: { revoked: old, created } };
    });
  }

  async *audit(options: { keyId?: number } = {}): AsyncIterable<AuditEntry> {
    for await (
      const entry of this.#kv.list<AuditEntry>({ prefix: ["audit"] }, {
        batchSize: 500,
      })
    ) {
      if (options.keyId === undefined || entry.value.keyId === options.keyId) {
        yield entry.value;
      }
    }
  }

  async revision(): Promise<bigint> {
    return (await this.#read<Deno.KvU64>(REVISION)).value?.value ?? 0n;
  }

  async *keyHashes(
    options: { afterId?: number } = {},
  ): AsyncIterable<{ id: number; hash: string }> {
    const selector = options.afterId === undefined
      ? { prefix: ["keys"] }
      : { start: keyById(options.afterId + 1), end: ["keys", Infinity] };
    try {
      for await (
        const entry of this.#kv.list<KeyRecord>(selector, { batchSize: 1000 })
      ) {
        yield { id: entry.value.id, hash: entry.value.hash };
      }
    } catch (error) {
      throw new StoreUnavailableError("The key store cannot be read", {
        cause: error,
      });
    }
  }

  async importRevision(): Promise<bigint> {
    return (await this.#read<Deno.KvU64>(IMPORT_REVISION)).value?.value ?? 0n;
  }

  async findByHashAt(
    hash: string,
  ): Promise<{ record: KeyRecord | null; revision: bigint }> {
    let entries;
    try {
      // getMany reads one snapshot: the record is exactly as of that revision.
      entries = await this.#kv.getMany<[Deno.KvU64, KeyRecord]>([
        REVISION,
        keyByHash(hash),
      ]);
    } catch (error) {
      throw new StoreUnavailableError("The key store cannot be read", {
        cause: error,
      });
    }
    return {
      revision: entries[0].value?.value ?? 0n,
      record: entries[1].value,
    };
  }

  markExposed(id: number, options: ExposeOptions): Promise<boolean> {
    return this.#change<boolean>(async (at, revision) => {
      const current = await this.#kv.get<KeyRecord>(keyById(id));
      if (current.value === null) throw keyNotFound(id);
      if (current.value.exposedAt !== null) return { op: null, result: false };
      const op = this.#kv.atomic().check(current);
      putRecord(op, {
        ...current.value,
        exposedAt: at.toISOString(),
        exposedFrom: options.from,
      });
      audit(op, at, revision, {
        action: "expose",
        keyId: id,
        actor: options.actor,
        detail: AUDIT_DETAIL.expose(options.from),
      });
      return { op, result: true };
    });
  }

  async recordLastUsed(
    uses: Iterable<{ id: number; at: Date }>,
  ): Promise<void> {
    let op = this.#kv.atomic();
    let size = 0;
    for (const { id, at } of uses) {
      op.set(lastUsedKey(id), at.toISOString());
      if (++size === IMPORT_BATCH) {
        await op.commit();
        op = this.#kv.atomic();
        size = 0;
      }
    }
    if (size > 0) await op.commit();
  }

  exportAll(): AsyncIterable<ExportItem> {
    return exportItems(this);
  }

  async importAll(
    items: AsyncIterable<ExportItem>,
    options: ChangeOptions,
  ): Promise<{ keys: number; audit: number }> {
    const marker = await this.#kv.get<boolean>(IMPORTING);
    if (marker.value) await this.#wipe(); // a previous import died half-way
    else if (!(await this.#isEmpty())) {
      throw new StoreInputError(
        "The store is not empty; import only into a new store, so that no key is lost or duplicated",
      );
    }
    const start = await this.#kv.atomic().check({
      key: REVISION,
      versionstamp: null,
    }).set(IMPORTING, true).commit();
    if (!start.ok) {
      throw new StoreInputError(
        "The store changed while the import began; run it again",
      );
    }
    try {
      const counts = await this.#writeImport(items);
      const at = new Date();
      const revision = BigInt(counts.audit + 1);
      const op = this.#kv.atomic()
        .set(KEY_ID_COUNTER, new Deno.KvU64(BigInt(counts.maxId)))
        .set(REVISION, new Deno.KvU64(revision))
        .delete(IMPORTING);
      audit(op, at, revision, {
        action: "import",
        keyId: 0,
        actor: options.actor,
        detail: `${counts.keys} keys and ${counts.audit} audit lines`,
      });
      await op.commit();
      return { keys: counts.keys, audit: counts.audit };
    } catch (error) {
      await this.#wipe();
      throw error;
    }
  }

  async #writeImport(
    items: AsyncIterable<ExportItem>,
  ): Promise<{ keys: number; audit: number; maxId: number }> {
    const counts = { keys: 0, audit: 0, maxId: 0 };
    const names = new Set<string>();
    let op = this.#kv.atomic();
    let size = 0;
    for await (const item of items) {
      if (item.type === "key") {
        const record = checkImportedRecord(item.record, names);
        const { lastUsedAt, ...stored } = record;
        putRecord(op, { ...stored, lastUsedAt: null });
        if (record.status === "valid") {
          op.set(keyByName(record.name), record.id);
        }
        if (lastUsedAt) op.set(lastUsedKey(record.id), lastUsedAt);
        counts.keys++;
        counts.maxId = Math.max(counts.maxId, record.id);
        size += 4;
      } else if (item.type === "audit") {
        op.set(
          auditKey(BigInt(++counts.audit)),
          checkImportedAudit(item.entry),
        );
        size += 1;
      } else {
        throw new StoreInputError(
          `The import holds an item of unknown type ${
            JSON.stringify((item as { type: unknown }).type)
          }`,
        );
      }
      if (size >= IMPORT_BATCH) {
        await commitOrFail(op);
        op = this.#kv.atomic();
        size = 0;
      }
    }
    if (size > 0) await commitOrFail(op);
    return counts;
  }

  async #isEmpty(): Promise<boolean> {
    for await (const _ of this.#kv.list({ prefix: [] }, { limit: 1 })) {
      return false;
    }
    return true;
  }

  async #wipe(): Promise<void> {
    let op = this.#kv.atomic();
    let size = 0;
    for await (const entry of this.#kv.list({ prefix: [] })) {
      if (entry.key[0] === IMPORTING[0]) continue;
      op.delete(entry.key);
      if (++size === IMPORT_BATCH) {
        await commitOrFail(op);
        op = this.#kv.atomic();
        size = 0;
      }
    }
    await commitOrFail(op.delete(IMPORTING));
  }

  close(): Promise<void> {
    this.#kv.close();
    return Promise.resolve();
  }

  async #read<T>(key: Deno.KvKey): Promise<Deno.KvEntryMaybe<T>> {
    try {
      return await this.#kv.get<T>(key, { consistency: "strong" });
    } catch (error) {
      throw new StoreUnavailableError("The key store cannot be read", {
        cause: error,
      });
    }
  }

  /**
   * Runs `attempt` until its atomic operation commits. `attempt` reads what it
   * needs afresh each time, so a retry after a conflict decides on current data.
   */
  async #change<T>(
    attempt: (
      at: Date,
      revision: bigint,
    ) => Promise<{ op: Deno.AtomicOperation | null; result: T }>,
  ): Promise<T> {
    for (let tries = 1;; tries++) {
      const current = await this.#kv.get<Deno.KvU64>(REVISION);
      const revision = (current.value?.value ?? 0n) + 1n;
      const { op, result } = await attempt(new Date(), revision);
      if (op === null) return result;
      try {
        const res = await op.check(current)
          .set(REVISION, new Deno.KvU64(revision)).commit();
        if (res.ok) return result;
      } catch (error) {
        // Another process holds the SQLite write lock: wait and go again.
        if (!String(error).includes("database is locked")) throw error;
      }
      if (tries >= MAX_TRIES) {
        throw new StoreUnavailableError(
          `The key store stayed busy through ${MAX_TRIES} attempts; try again`,
        );
      }
      await backoff(tries);
    }
  }
}

const MAX_TRIES = 60;

function backoff(tries: number): Promise<void> {
  // Full jitter keeps many writers from waking in step.
  const ceiling = Math.min(250, 2 ** Math.min(tries, 8));
  return new Promise((resolve) => setTimeout(resolve, Math.random() * ceiling));
}

function nextId(counter: Deno.KvEntryMaybe<Deno.KvU64>): number {
  return Number((counter.value?.value ?? 0n) + 1n);
}

function putRecord(op: Deno.AtomicOperation, record: KeyRecord): void {
  // lastUsedAt lives under its own key; the stored copies always say null.
  const stored = { ...record, lastUsedAt: null };
  op.set(keyById(record.id), stored).set(keyByHash(record.hash), stored);
}

async function commitOrFail(op: Deno.AtomicOperation): Promise<void> {
  const result = await op.commit();
  if (!result.ok) {
    throw new StoreUnavailableError(
      "A write to the key store was refused; run the command again",
    );
  }
}

function audit(
  op: Deno.AtomicOperation,
  at: Date,
  revision: bigint,
  entry: Omit<AuditEntry, "at" | "detail"> & { detail?: string | null },
): void {
  op.set(auditKey(revision), { at: at.toISOString(), detail: null, ...entry });
}
