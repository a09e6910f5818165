/**
 * The Deno KV backend: {@linkcode Entries} is what Deno KV already is, so this
 * only opens the file privately and waits out SQLite's write lock, which
 * another process (a console beside the server) may hold.
 * @module
 */

import { pathExists } from "../util/exists.ts";
// The seam's types by one name, as Deno KV's are by `Deno.`.
import type * as Seam from "./entries.ts";
import { StoreUnavailableError } from "./errors.ts";
import type { KeyService } from "./keys.ts";
import { backoff, busy, MAX_TRIES } from "./layout/_keys.ts";
import { openEntryStore } from "./layout/backend.ts";
import { DEFAULT_KV_PATH } from "./location.ts";

/** The key store on Deno KV, as {@linkcode openKvStore} opens it. */
export type KvKeyStore = KeyService;

/**
 * Opens a KV store at a path (its folder created), ":memory:" or URL. A file
 * store is private whatever the umask (folder 0700, files 0600): it holds
 * every hash and e-mail.
 */
export async function openKvStore(path: string): Promise<KvKeyStore> {
  return await openEntryStore(new KvEntries(await openKv(path)));
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

/** {@linkcode Seam.Entries} on an open Deno KV database. */
export class KvEntries implements Seam.Entries {
  #kv: Deno.Kv;
  #closed = false;

  constructor(kv: Deno.Kv) {
    this.#kv = kv;
  }

  // Deno KV's entries are the seam's, but for key parts the layout never
  // writes (booleans, bytes): hence the casts.
  get<T>(key: Seam.EntryKey): Promise<Seam.Entry<T>> {
    return this.#reading(() => this.#kv.get<T>(key as Deno.KvKey)) as Promise<
      Seam.Entry<T>
    >;
  }

  getMany<T extends readonly unknown[]>(
    keys: readonly [...{ [K in keyof T]: Seam.EntryKey }],
  ): Promise<{ [K in keyof T]: Seam.Entry<T[K]> }> {
    return this.#reading(() =>
      this.#kv.getMany(keys as unknown as Deno.KvKey[])
    ) as unknown as Promise<{ [K in keyof T]: Seam.Entry<T[K]> }>;
  }

  async *list<T>(
    selector: Seam.Selector,
    options: { limit?: number; batchSize?: number } = {},
  ): AsyncIterable<Seam.Present<T>> {
    try {
      yield* this.#kv.list<T>(
        selector as Deno.KvListSelector,
        options,
      ) as AsyncIterable<Seam.Present<T>>;
    } catch (error) {
      throw unreadable(error);
    }
  }

  atomic(): Seam.Atomic {
    return new _KvAtomic(this.#kv.atomic());
  }

  close(): Promise<void> {
    if (!this.#closed) this.#kv.close();
    this.#closed = true;
    return Promise.resolve();
  }

  async #reading<T>(read: () => Promise<T>): Promise<T> {
    try {
      return await read();
    } catch (error) {
      throw unreadable(error);
    }
  }
}

/** One Deno KV atomic operation, its commit retried while the file is locked. */
class _KvAtomic implements Seam.Atomic {
  #op: Deno.AtomicOperation;

  constructor(op: Deno.AtomicOperation) {
    this.#op = op;
  }

  check(...checks: Seam.Check[]): this {
    this.#op.check(...checks as Deno.AtomicCheck[]);
    return this;
  }

  set(key: Seam.EntryKey, value: unknown): this {
    this.#op.set(key as Deno.KvKey, value);
    return this;
  }

  delete(key: Seam.EntryKey): this {
    this.#op.delete(key as Deno.KvKey);
    return this;
  }

  async commit(): Promise<Seam.CommitResult> {
    for (let tries = 1;; tries++) {
      try {
        const result = await this.#op.commit();
        return result.ok
          ? { ok: true as const, versionstamp: result.versionstamp }
          : { ok: false as const };
      } catch (error) {
        if (!isLocked(error)) throw error;
        if (tries >= MAX_TRIES) throw busy(error);
      }
      await backoff(tries);
    }
  }
}

/**
 * SQLite's "database is locked": another connection holds the write lock.
 * Read from the error's text, as nothing else tells it: Deno (2.9) throws a
 * plain TypeError, no `code`, `Deno.errors` class or cause (checked by holding
 * the lock from a second process). Use a class or code once Deno gives one.
 */
function isLocked(error: unknown): boolean {
  return String(error).includes("database is locked");
}

/** The store cannot be read: an outage, never "no such key". */
function unreadable(cause: unknown): StoreUnavailableError {
  return new StoreUnavailableError(
    "store_unavailable",
    "The key store cannot be read",
    { cause },
  );
}
