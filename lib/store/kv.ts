/**
 * The Deno KV backend: {@linkcode Entries} is what Deno KV already is, so this
 * only opens the file privately and waits out SQLite's write lock, which
 * another process (a console beside the server) may hold.
 * @module
 */

import { pathExists } from "../util/exists.ts";
import { bounded, DeadlineError } from "../util/bounded.ts";
// The seam's types by one name, as Deno KV's are by `Deno.`.
import type * as Seam from "./entries.ts";
import { StoreUnavailableError } from "./errors.ts";
import type { KeyService } from "./keys.ts";
import { backoff, busy, MAX_TRIES } from "./layout/_keys.ts";
import { openEntryStore } from "./layout/backend.ts";
import { DEFAULT_KV_PATH } from "./location.ts";

/**
 * The longest one read or one commit (its retries on a locked file included)
 * may take, as PostgreSQL's calls (callTimeoutMs): a Deno KV call can block
 * rather than fail while another process is frozen mid-write (issue 29).
 */
export const KV_CALL_TIMEOUT_MS = 15_000;

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
  const kv = await openFile(path);
  for (const companion of [`${path}-wal`, `${path}-shm`, `${path}-journal`]) {
    try {
      await Deno.chmod(companion, 0o600);
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    }
  }
  return kv;
}

/**
 * Deno.openKv on a file, as an outage when SQLite cannot open it: another
 * process holding its WAL locks (one frozen mid-checkpoint) makes the open
 * block, then fail with a plain Error ("locking protocol", about 10 s), so
 * the console's change names the store, not an unknown failure.
 */
async function openFile(path: string): Promise<Deno.Kv> {
  const opening = Deno.openKv(path);
  try {
    return await bounded(opening, KV_CALL_TIMEOUT_MS);
  } catch (error) {
    // Deno's own classes (a permission, a missing folder) keep their words.
    const sqlite = error instanceof DeadlineError ||
      (error instanceof Error &&
        Object.getPrototypeOf(error) === Error.prototype);
    if (!sqlite) throw error;
    // An open that answers after all is closed, not leaked.
    opening.then((late) => late.close(), () => {});
    throw new StoreUnavailableError(
      "store_unavailable",
      `The key store ${path} could not be opened (${
        (error as Error).message
      }); if another process holds it locked (a server or console stopped with SIGSTOP), resume or stop it, else check the file, then try again`,
      { cause: error },
    );
  }
}

/** {@linkcode Seam.Entries} on an open Deno KV database. */
export class KvEntries implements Seam.Entries {
  #kv: Deno.Kv;
  #closed = false;
  #timeoutMs: number;

  /** `timeoutMs`: {@linkcode KV_CALL_TIMEOUT_MS} unless set (tests shorten it). */
  constructor(kv: Deno.Kv, options: { timeoutMs?: number } = {}) {
    this.#kv = kv;
    this.#timeoutMs = options.timeoutMs ?? KV_CALL_TIMEOUT_MS;
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
    const entries = this.#kv.list<T>(
      selector as Deno.KvListSelector,
      options,
    ) as AsyncIterableIterator<Seam.Present<T>>;
    try {
      for (;;) {
        // Each batch bounded alone: a long listing is no hang.
        const next = await bounded(entries.next(), this.#timeoutMs);
        if (next.done) return;
        yield next.value;
      }
    } catch (error) {
      throw unreadable(error);
    } finally {
      // A reader that stopped early, or gave up on a batch, lets it go.
      entries.return?.().catch(() => {});
    }
  }

  atomic(): Seam.Atomic {
    return new _KvAtomic(this.#kv.atomic(), this.#timeoutMs);
  }

  close(): Promise<void> {
    if (!this.#closed) this.#kv.close();
    this.#closed = true;
    return Promise.resolve();
  }

  async #reading<T>(read: () => Promise<T>): Promise<T> {
    try {
      return await bounded(read(), this.#timeoutMs);
    } catch (error) {
      throw unreadable(error);
    }
  }
}

/** One Deno KV atomic operation, its commit retried while the file is locked. */
class _KvAtomic implements Seam.Atomic {
  #op: Deno.AtomicOperation;
  #timeoutMs: number;

  constructor(op: Deno.AtomicOperation, timeoutMs: number) {
    this.#op = op;
    this.#timeoutMs = timeoutMs;
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

  /**
   * Retried while the file is locked, all within the call's time: a commit
   * that has not answered by then may yet land (it is atomic, so whole or
   * not at all), so it is `change_unconfirmed`, never retried.
   */
  async commit(): Promise<Seam.CommitResult> {
    const deadline = performance.now() + this.#timeoutMs;
    for (let tries = 1;; tries++) {
      try {
        const result = await bounded(
          this.#op.commit(),
          Math.max(0, deadline - performance.now()),
        );
        return result.ok
          ? { ok: true as const, versionstamp: result.versionstamp }
          : { ok: false as const };
      } catch (error) {
        if (error instanceof DeadlineError) {
          throw new StoreUnavailableError(
            "change_unconfirmed",
            `The key store did not confirm a commit within ${this.#timeoutMs} ms`,
            { cause: error, timeoutMs: this.#timeoutMs },
          );
        }
        if (!isLocked(error)) throw error;
        if (tries >= MAX_TRIES || performance.now() >= deadline) {
          throw busy(error);
        }
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
