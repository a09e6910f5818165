/**
 * The Deno KV backend: the seam's primitives (lib/store/backend.ts) on
 * Deno KV, and with `kv/`, the only code that touches it. The layout is
 * described in `kv/_layout.ts`, the import in `kv/_import.ts`.
 *
 * Every change is one `atomic()` that `check()`s every entry the change
 * read and the revision, so two admins generating at the same moment cannot
 * share an id or a name; a conflict or a locked database file is retried
 * with backoff.
 *
 * @module
 */

import { pathExists } from "../util/exists.ts";
import { DEFAULT_KV_PATH } from "./location.ts";
import type { HashRead, StoreBackend, StoredInstance } from "./backend.ts";
import { withUsage } from "./backend.ts";
import { QUIET_ACTIONS } from "./change.ts";
import { ImportStateError } from "./errors.ts";
import { KeyService } from "./keys.ts";
import type { AuditEntry, KeyRecord, NetworkUse, RefusedUse } from "./types.ts";
import { changeIn } from "./kv/_change.ts";
import { discardIn, ensureIndexed, stageIn } from "./kv/_import.ts";
import {
  auditKey,
  AUTH_REVISION,
  commitRetrying,
  counted,
  dueKey,
  IMPORT_REVISION,
  IMPORTING,
  indexKeys,
  instanceKey,
  keyByHash,
  keyById,
  keyByName,
  lastUsedKey,
  networksKey,
  refusedKey,
  REVISION,
  sameKey,
  storedRecord,
  unreadable,
} from "./kv/_layout.ts";

export { REVISION } from "./kv/_layout.ts";

/** The key store on Deno KV, as {@linkcode openKvStore} opens it. */
export type KvKeyStore = KeyService;

/**
 * Opens (creating its folder when missing) a KV store at a path, ":memory:"
 * or URL. A file store is made private whatever the umask: its folder 0700,
 * the file and SQLite's companions 0600, as they hold every key's hash and
 * every integrator's e-mail.
 */
export async function openKvStore(path: string): Promise<KvKeyStore> {
  return new KeyService(new KvBackend(await openKv(path)));
}

async function openKv(path: string): Promise<Deno.Kv> {
  if (path === ":memory:") return await Deno.openKv(path);
  // The scheme in any case, as the configuration and the permissions read
  // it; Deno.openKv takes only a lower-case one for a URL.
  if (/^https?:\/\//i.test(path)) {
    return await Deno.openKv(
      path.replace(/^https?:/i, (scheme) => scheme.toLowerCase()),
    );
  }
  const folder = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "";
  // The service's own folder is made private; a folder the operator chose,
  // such as /var/lib, keeps its mode unless created here (the files in it
  // are private either way).
  const own =
    path.replace(/^\.\//, "") === DEFAULT_KV_PATH.replace(/^\.\//, "");
  if (folder !== "" && (own || !await pathExists(folder))) {
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
  return kv;
}

/** {@linkcode StoreBackend} on Deno KV. */
export class KvBackend implements StoreBackend {
  #kv: Deno.Kv;
  #closed = false;
  /** One atomic change: `kv/_change.ts`. */
  readonly change: StoreBackend["change"];
  /** An import in batches under a marker: `kv/_import.ts`. */
  readonly stageImport: StoreBackend["stageImport"];
  readonly discardImport: StoreBackend["discardImport"];

  constructor(kv: Deno.Kv) {
    this.#kv = kv;
    this.change = (kind, work) => changeIn(kv, kind, work);
    this.stageImport = (options, fill) => stageIn(kv, options, fill);
    this.discardImport = (options) => discardIn(kv, options);
  }

  async findByHashAt(hash: string): Promise<HashRead> {
    // getMany reads one snapshot: the record is exactly as of that
    // revision, and the import marker tells whether it may be used at all.
    const [revision, auth, marker, record] = await this.#readMany<
      [Deno.KvU64, Deno.KvU64, unknown, KeyRecord]
    >([REVISION, AUTH_REVISION, IMPORTING, keyByHash(hash)]);
    return {
      revision: counted(revision),
      // A store from before the authentication revision: every change counts.
      authRevision: auth.value === null ? counted(revision) : counted(auth),
      record: marker.value === null && record.value !== null
        ? storedRecord(record.value)
        : null,
    };
  }

  async get(id: number): Promise<KeyRecord | null> {
    const [record, used, marker, networks, refused] = await this.#kv.getMany<
      [KeyRecord, string, unknown, NetworkUse[], RefusedUse[]]
    >([
      keyById(id),
      lastUsedKey(id),
      IMPORTING,
      networksKey(id),
      refusedKey(id),
    ]);
    if (marker.value !== null) throw new ImportStateError("import_unfinished");
    return record.value && withUsage(storedRecord(record.value), {
      lastUsedAt: used.value,
      networks: networks.value ?? [],
      refused: refused.value ?? [],
    });
  }

  async getByName(name: string): Promise<KeyRecord | null> {
    const entry = await this.#read<number>(keyByName(name));
    return entry.value === null ? null : await this.get(entry.value);
  }

  async *list(
    options: { includeRevoked?: boolean } = {},
  ): AsyncIterable<KeyRecord> {
    await this.#refuseWhileImporting();
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
        // Few keys have usage lists; one read each keeps the join simple.
        const [networks, refused] = await this.#kv.getMany<
          [NetworkUse[], RefusedUse[]]
        >([networksKey(id), refusedKey(id)]);
        yield withUsage(storedRecord(entry.value), {
          lastUsedAt: !next.done && next.value.key[1] === id
            ? next.value.value
            : null,
          networks: networks.value ?? [],
          refused: refused.value ?? [],
        });
      }
    }
  }

  async *dueKeys(now: Date): AsyncIterable<number> {
    await this.#refuseWhileImporting();
    await ensureIndexed(this.#kv);
    for await (
      const entry of this.#kv.list({
        start: ["due"],
        end: dueKey(now.getTime(), Number.MAX_SAFE_INTEGER),
      })
    ) {
      const id = entry.key[2] as number;
      const record = (await this.#kv.get<KeyRecord>(keyById(id))).value;
      const current = record !== null &&
        indexKeys(storedRecord(record)).some((key) => sameKey(key, entry.key));
      if (current) {
        // The entry's time is the record's deadline, so it has passed.
        yield id;
      } else {
        // Stale: the key was revoked, rotated or given another deadline.
        await commitRetrying(this.#kv.atomic().check(entry).delete(entry.key));
      }
    }
  }

  async *predecessors(id: number): AsyncIterable<KeyRecord> {
    await this.#refuseWhileImporting();
    await ensureIndexed(this.#kv);
    for await (const entry of this.#kv.list({ prefix: ["replaced_by", id] })) {
      const record = await this.get(entry.key[2] as number);
      if (record?.status === "valid" && record.replacedBy === id) yield record;
    }
  }

  async *audit(options: { keyId?: number } = {}): AsyncIterable<AuditEntry> {
    await this.#refuseWhileImporting();
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
    return counted(await this.#read<Deno.KvU64>(REVISION));
  }

  async *keyHashes(
    options: { afterId?: number } = {},
  ): AsyncIterable<{ id: number; hash: string }> {
    if ((await this.#read(IMPORTING)).value !== null) return;
    const after = options.afterId ?? 0;
    for await (
      const entry of this.#kv.list<KeyRecord>({
        prefix: ["keys"],
        start: keyById(Math.floor(after) + 1),
      }, { batchSize: 1000 })
    ) {
      if (entry.value.id > after) {
        yield { id: entry.value.id, hash: entry.value.hash };
      }
    }
  }

  async importRevision(): Promise<bigint> {
    return counted(await this.#read<Deno.KvU64>(IMPORT_REVISION));
  }

  async recordLastUsed(uses: { id: number; at: Date }[]): Promise<void> {
    // getMany() reads at most 10 keys.
    for (let start = 0; start < uses.length; start += 10) {
      const chunk = uses.slice(start, start + 10);
      for (let attempt = 0; attempt < 3; attempt++) {
        const keys = chunk.map(({ id }) => lastUsedKey(id));
        const stored = await this.#kv.getMany<string[]>(keys);
        const op = this.#kv.atomic();
        let writes = 0;
        stored.forEach((entry, i) => {
          const { at } = chunk[i];
          if (entry.value !== null && Date.parse(entry.value) >= +at) return;
          op.check(entry).set(keys[i], at.toISOString());
          writes++;
        });
        if (writes === 0 || (await op.commit()).ok) break;
      }
    }
  }

  async putInstance(
    stored: StoredInstance,
    options: { version?: string } = {},
  ): Promise<string | null> {
    const key = instanceKey(stored.id);
    const op = this.#kv.atomic();
    if (options.version !== undefined) {
      op.check({ key, versionstamp: options.version });
    }
    const res = await commitRetrying(op.set(key, stored));
    return res.ok ? res.versionstamp : null;
  }

  async pollInstance(
    id: string,
  ): Promise<{ revision: bigint; version: string | null }> {
    const [revision, instance] = await this.#readMany<[Deno.KvU64, unknown]>(
      [REVISION, instanceKey(id)],
    );
    return { revision: counted(revision), version: instance.versionstamp };
  }

  async readInstances(): Promise<
    { id: string; version: string; stored: unknown }[]
  > {
    const found = [];
    try {
      for await (const entry of this.#kv.list({ prefix: ["instances"] })) {
        const id = entry.key[1];
        // Not a key this store writes: no server can hold a lease on it.
        if (typeof id !== "string") continue;
        found.push({ id, version: entry.versionstamp, stored: entry.value });
      }
    } catch (error) {
      throw unreadable(error);
    }
    return found;
  }

  async removeInstance(
    id: string,
    options: { version?: string } = {},
  ): Promise<boolean> {
    const key = instanceKey(id);
    const op = this.#kv.atomic();
    if (options.version !== undefined) {
      op.check({ key, versionstamp: options.version });
    }
    return (await commitRetrying(op.delete(key))).ok;
  }

  async auditSince(after: bigint): ReturnType<StoreBackend["auditSince"]> {
    const [current, imported] = await this.#readMany<
      [Deno.KvU64, Deno.KvU64]
    >([REVISION, IMPORT_REVISION]);
    const revision = counted(current);
    const kv = this.#kv;
    // Every line up to `revision` was committed with its revision bump, so
    // the list holds every change up to it.
    async function* keyIds(): AsyncIterable<number> {
      try {
        const lines = kv.list<AuditEntry>({
          start: auditKey(after + 1n),
          end: auditKey(revision + 1n),
        });
        for await (const { value } of lines) {
          if (!(QUIET_ACTIONS as string[]).includes(value.action)) {
            yield value.keyId;
          }
        }
      } catch (error) {
        throw unreadable(error);
      }
    }
    const replaced = counted(imported) > after;
    return { revision, replaced, keyIds: keyIds(), complete: true };
  }

  close(): Promise<void> {
    // Closing twice is harmless, as with the PostgreSQL store.
    if (!this.#closed) this.#kv.close();
    this.#closed = true;
    return Promise.resolve();
  }

  async #readMany<T extends readonly unknown[]>(
    keys: readonly [...{ [K in keyof T]: Deno.KvKey }],
  ): Promise<{ [K in keyof T]: Deno.KvEntryMaybe<T[K]> }> {
    try {
      return await this.#kv.getMany<T>(keys, { consistency: "strong" });
    } catch (error) {
      throw unreadable(error);
    }
  }

  async #read<T>(key: Deno.KvKey): Promise<Deno.KvEntryMaybe<T>> {
    return (await this.#readMany<[T]>([key]))[0];
  }

  async #refuseWhileImporting(): Promise<void> {
    if ((await this.#read(IMPORTING)).value !== null) {
      throw new ImportStateError("import_unfinished");
    }
  }
}
