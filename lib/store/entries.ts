/**
 * The seam every database provides, and all it provides: an ordered map of
 * entries under versionstamps, read consistently, changed by atomic
 * compare-and-set commits. Deno KV is this already (`kv.ts` only opens it and
 * waits out SQLite's write lock); PostgreSQL keeps it in one table
 * (`postgres/entries.ts`). Everything about keys is written once above it, in
 * `layout/`: records and indexes, the revision each change moves, the audit
 * log and change feed, the import's marker and the servers' registrations.
 *
 * A third backend implements {@linkcode Entries} as each member's doc
 * promises (docs/design.md, "The store: one seam, two backends"); the proof is
 * tests/contract/entries_contract_test.ts with the store and lease contracts.
 * @module
 */

/** One part of an entry's key, ordered as Deno KV orders it (strings by UTF-8 bytes). */
export type KeyPart = string | number | bigint;

/** An entry's key: its parts, compared part by part. */
export type EntryKey = readonly KeyPart[];

/** An entry as read: `value` and `versionstamp` are null when it is absent. */
export interface Entry<T = unknown> {
  key: EntryKey;
  value: T | null;
  versionstamp: string | null;
}

/** An entry that is present, as a list yields it. */
export interface Present<T = unknown> extends Entry<T> {
  value: T;
  versionstamp: string;
}

/** A condition of a commit: the entry is still at `versionstamp` (null: still absent). */
export interface Check {
  key: EntryKey;
  versionstamp: string | null;
}

/** What a commit answers: its new versionstamp, or that a check failed. */
export type CommitResult = { ok: true; versionstamp: string } | {
  ok: false;
};

/** One atomic commit: every check holds and every write is made, in order, or nothing is. */
export interface Atomic {
  check(...checks: Check[]): this;
  set(key: EntryKey, value: unknown): this;
  delete(key: EntryKey): this;
  /**
   * Commits; `{ ok: false }` when a check failed. Waits out its own
   * contention; throws `StoreUnavailableError` only when it cannot commit.
   */
  commit(): Promise<CommitResult>;
}

/** Which entries a list visits, in key order. */
export type Selector =
  | { prefix: EntryKey; start?: EntryKey }
  | { start: EntryKey; end: EntryKey };

/**
 * The primitives of a key store's database. Values are what the layout
 * writes: JSON data, and `Deno.KvU64` for counters. Every read is strongly
 * consistent: it sees every commit that completed before it began.
 */
export interface Entries {
  get<T>(key: EntryKey): Promise<Entry<T>>;
  /** Up to 10 entries, read in one snapshot. */
  getMany<T extends readonly unknown[]>(
    keys: readonly [...{ [K in keyof T]: EntryKey }],
  ): Promise<{ [K in keyof T]: Entry<T[K]> }>;
  /**
   * The entries `selector` names, in key order: every entry with the
   * prefix (at or after `start` when given), or from `start` up to and
   * not including `end`. A long list may be read in several snapshots.
   */
  list<T>(
    selector: Selector,
    options?: { limit?: number; batchSize?: number },
  ): AsyncIterable<Present<T>>;
  atomic(): Atomic;
  /**
   * Optional: calls `listener` soon after a `hint()`ed commit, from any
   * process; returns the way to stop. A hint may be lost: servers poll too.
   */
  onChange?(listener: () => void): Promise<() => Promise<void>>;
  /** Optional: tells other processes' `onChange` listeners that a change committed. */
  hint?(): Promise<void>;
  /** Releases the database; closing twice is harmless. */
  close(): Promise<void>;
}

/** Whether two keys are the same. */
export function sameKey(a: EntryKey, b: EntryKey): boolean {
  return a.length === b.length && a.every((part, i) => part === b[i]);
}
