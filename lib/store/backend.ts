/**
 * What the rules about keys need of storage, and nothing more. Every rule
 * (what a creation, a revocation, a rotation, a retirement, a usage note
 * is) lives above this interface, once, in `changes.ts` and `keys.ts`, as do
 * the import's (`import.ts`), the change feed's (`feed.ts`) and the
 * registry's (`registrations.ts`); below it, storage reads consistently,
 * commits one change atomically, stages an import out of sight and
 * publishes it in one step, and keeps registrations under a version it
 * compares and sets.
 *
 * It has one implementation, `layout/backend.ts`, written once over the
 * seam's entries (`entries.ts`): a database is added by implementing the
 * seam, not this; docs/design.md ("What a third backend must implement")
 * says how.
 *
 * @module
 */

import type { Alters, AuditLine, ChangeKind, Committed } from "./change.ts";
import type {
  AuditEntry,
  ChangeOptions,
  InstanceInfo,
  InstanceRegistry,
  KeyRecord,
  NetworkUse,
  RefusedUse,
} from "./types.ts";

/** The usage lists kept apart from a key's record. */
export interface UsageLists {
  networks: NetworkUse[];
  refused: RefusedUse[];
}

/**
 * What a change reads: each read becomes a check of the change's atomic
 * commit (lib/store/layout/_change.ts), so a change decides on data that
 * still holds when it commits, or is tried again.
 */
export interface ChangeReads {
  /** Key `id`'s record as stored (no last use, no usage lists); null when none. */
  get(id: number): Promise<KeyRecord | null>;
  /** The id of the valid key, not in an overlap, holding this name (compared by `nameKey`). */
  nameHolder(name: string): Promise<number | null>;
  /** Whether any key, valid or revoked, has this hash. */
  hashTaken(hash: string): Promise<boolean>;
  /** The next key id, handed out once per call; saved when the change commits. */
  nextId(): Promise<number>;
  /** Key `id`'s usage lists; null when no such key. */
  usage(id: number): Promise<UsageLists | null>;
}

/** A write a change makes, applied in order when it commits. */
export type Write =
  | { kind: "insert" | "update"; record: KeyRecord }
  | { kind: "usage"; id: number; lists: Partial<UsageLists> };

/**
 * One change being made: its reads, its time, and the writes and audit
 * lines it collects, which the backend applies atomically. Nothing written
 * is read back before the commit, in any backend.
 */
export class ChangeDraft<A extends Alters> implements ChangeReads {
  /** What the change alters, as declared. */
  readonly alters: A;
  /** The time of the change, for the records and the audit lines alike. */
  readonly at: Date;
  readonly writes: Write[] = [];
  readonly lines: AuditLine<A>[] = [];
  #reads: ChangeReads;

  constructor(alters: A, reads: ChangeReads, options: { at?: Date } = {}) {
    this.alters = alters;
    this.#reads = reads;
    this.at = options.at ?? new Date();
  }

  get(id: number): Promise<KeyRecord | null> {
    return this.#reads.get(id);
  }

  nameHolder(name: string): Promise<number | null> {
    return this.#reads.nameHolder(name);
  }

  hashTaken(hash: string): Promise<boolean> {
    return this.#reads.hashTaken(hash);
  }

  nextId(): Promise<number> {
    return this.#reads.nextId();
  }

  usage(id: number): Promise<UsageLists | null> {
    return this.#reads.usage(id);
  }

  /** Stores a new record. */
  insert(record: KeyRecord): void {
    this.writes.push({ kind: "insert", record });
  }

  /** Rewrites a stored record. */
  update(record: KeyRecord): void {
    this.writes.push({ kind: "update", record });
  }

  /** Rewrites one or both of key `id`'s usage lists. */
  putUsage(id: number, lists: Partial<UsageLists>): void {
    this.writes.push({ kind: "usage", id, lists });
  }

  /**
   * Appends an audit line, numbered by the next revision: a property, not a
   * method, so that the compiler checks the line's action against `A`.
   */
  readonly audit = (line: AuditLine<A>): void => {
    this.lines.push(line);
  };

  /**
   * The audit lines as a commit appends them after revision `before`: each
   * under the revision it moves to, all at the change's time.
   */
  numbered(before: bigint): { seq: bigint; entry: AuditEntry }[] {
    const at = this.at.toISOString();
    return this.lines.map((line, i) => ({
      seq: before + BigInt(i + 1),
      entry: { at, ...line },
    }));
  }

  /**
   * How far the change moves the revision: one per audit line, and one for
   * a record rewritten without a line (a retirement's spent link), so that
   * every write of a record a server may hold moves it. Usage lists alone
   * move nothing.
   */
  get moves(): number {
    if (this.lines.length > 0) return this.lines.length;
    return this.writes.some((write) => write.kind !== "usage") ? 1 : 0;
  }
}

/** Key `id`'s stored record, with what a backend keeps apart from it. */
export function withUsage(
  record: KeyRecord,
  usage: { lastUsedAt: string | null } & Partial<UsageLists>,
): KeyRecord {
  return {
    ...record,
    // Never before the key's creation, which a server whose clock runs
    // behind the console's could have written.
    lastUsedAt: usage.lastUsedAt !== null &&
        Date.parse(usage.lastUsedAt) < Date.parse(record.createdAt)
      ? record.createdAt
      : usage.lastUsedAt,
    networks: usage.networks ?? [],
    refusedUses: usage.refused ?? [],
  };
}

/** What a backend's read of a record by hash answers, in one snapshot. */
export interface HashRead {
  /** The record, valid or revoked; null when none (or an import is unfinished). */
  record: KeyRecord | null;
  /** The store's revision at the read. */
  revision: bigint;
  /**
   * The revision of the last change that altered authentication, at the
   * read: a server that read the record need wait only for this one.
   */
  authRevision: bigint;
}

/** One batch of an import's checked items, in the order of the export. */
export interface ImportBatch {
  /** Records with their last use and usage lists, each to be stored whole. */
  keys: KeyRecord[];
  /** Audit lines, each under the revision it keeps: 1, 2, 3 … */
  audit: { seq: number; entry: AuditEntry }[];
}

/** An import being staged: none of it is visible to a reader until published. */
export interface StagedImport {
  /**
   * Stages one batch (it may be held back until `publish`); throws
   * `ImportStateError` `import_aborted` once the import was aborted.
   */
  write(batch: ImportBatch): Promise<void>;
  /**
   * Makes all that was staged visible in one atomic step, with the next key
   * id above `maxId` and `line` as the audit line of the revision returned,
   * {@linkcode publishedRevision} of the store's and `above`; the revision,
   * the authentication revision and the import revision all move to it.
   * Throws `ImportStateError` `import_aborted` once the import was aborted.
   */
  publish(
    line: AuditEntry,
    options: { maxId: number; above: bigint },
  ): Promise<bigint>;
}

/**
 * The revision an import publishes at: above the imported audit lines,
 * numbered up to `above`, and above every revision the store ever had.
 */
export function publishedRevision(current: bigint, above: bigint): bigint {
  return (current > above ? current : above) + 1n;
}

/** A server's registration as written: the revision as decimal text. */
export type StoredInstance = Omit<InstanceInfo, "acked"> & { acked: string };

/**
 * The primitives of a key store's database. Reads are strongly consistent;
 * `change` is the only way to alter a key.
 */
export interface StoreBackend {
  /** A record by hash with the revisions it was read at, in one snapshot. */
  findByHashAt(hash: string): Promise<HashRead>;
  /** A record by id, with last use and usage lists; null when none. */
  get(id: number): Promise<KeyRecord | null>;
  /** The valid key, not in an overlap, holding this name, with usage; null when none. */
  getByName(name: string): Promise<KeyRecord | null>;
  /** Records in id order with usage, streamed; valid only unless `includeRevoked`. */
  list(options?: { includeRevoked?: boolean }): AsyncIterable<KeyRecord>;
  /** Ids of valid keys whose deadline is at or before `now`, from an index. */
  dueKeys(now: Date): AsyncIterable<number>;
  /** Valid keys in an overlap whose replacement is key `id`, with usage. */
  predecessors(id: number): AsyncIterable<KeyRecord>;
  /** The audit log in revision order, streamed. */
  audit(options?: { keyId?: number }): AsyncIterable<AuditEntry>;
  /** The store's revision. */
  revision(): Promise<bigint>;
  /** Ids and hashes above `afterId`, in id order; nothing while an import is unfinished. */
  keyHashes(options?: { afterId?: number }): AsyncIterable<{
    id: number;
    hash: string;
  }>;
  /** The revision at which the set of keys was last replaced wholesale. */
  importRevision(): Promise<bigint>;
  /**
   * Makes one change: runs `work` on a draft whose reads are checked, then
   * in one atomic step applies its writes, appends its audit lines under
   * the revisions it moves to, moves the revision (and, for a change that
   * alters authentication, the authentication revision with it), or
   * nothing at all. A conflict runs `work` again on fresh reads. Refused
   * with `ImportStateError` while an import is unfinished.
   */
  change<T, A extends Alters>(
    kind: ChangeKind<A>,
    work: (draft: ChangeDraft<A>) => Promise<T>,
  ): Promise<Committed<T, A>>;
  /**
   * Stores each key's last use unless a later one is stored (two servers
   * flush independently, and the one flushing last may hold the earlier
   * use): no audit line, no revision. `uses` names each id once, in order.
   */
  recordLastUsed(uses: { id: number; at: Date }[]): Promise<void>;
  /**
   * Stages an import into the empty store and runs `fill` on it. Refuses a
   * store holding any key or audit line (`StoreInputError`
   * `import_not_empty`) or an import unfinished (`ImportStateError`
   * `import_unfinished`); until `fill` publishes, readers see no key of it
   * and changes are refused. When `fill` throws, everything staged is
   * discarded (or, should that fail too, left unfinished for
   * `discardImport`), and the error rethrown. `import.ts` is the one `fill`.
   */
  stageImport<T>(
    options: ChangeOptions,
    fill: (staged: StagedImport) => Promise<T>,
  ): Promise<T>;
  /**
   * Ends an unfinished import, emptying the store and moving the revisions
   * (and the import revision) past every one it had; `discarded` is false,
   * and `revision` the store's, when there was none.
   */
  discardImport(
    options: ChangeOptions,
  ): Promise<{ revision: bigint; discarded: boolean }>;
  /**
   * Writes registration `stored.id`: only if it is still at `version` when
   * one is given (then null when it is not), else as a new one. Returns the
   * new version, which every write of the registration changes.
   */
  putInstance(
    stored: StoredInstance,
    options?: { version?: string },
  ): Promise<string | null>;
  /** Every registration as stored, with its version; `stored` is unchecked. */
  readInstances(): Promise<{ id: string; version: string; stored: unknown }[]>;
  /** {@linkcode InstanceRegistry}'s: revision and version in one snapshot. */
  pollInstance: InstanceRegistry["pollInstance"];
  /** {@linkcode InstanceRegistry}'s: conditional on `version` when given. */
  removeInstance: InstanceRegistry["removeInstance"];
  /**
   * The audit log's tail after revision `after` (-1 or more), read in one
   * snapshot: the store's revision, whether the set of keys was replaced
   * wholesale (an import, an abort) after `after`, and the key ids named by
   * the lines after `after` up to that revision, in order, quiet actions
   * (`QUIET_ACTIONS`) left out. `keyIds` may stop once it has named more
   * than `limit` lines, and then `complete` is false. `feed.ts` reads it.
   */
  auditSince(after: bigint, options: { limit: number }): Promise<{
    revision: bigint;
    replaced: boolean;
    keyIds: AsyncIterable<number> | Iterable<number>;
    complete: boolean;
  }>;
  /** {@linkcode InstanceRegistry}'s: an optional hint after any change. */
  onChange?: InstanceRegistry["onChange"];
  /** Releases the database. */
  close(): Promise<void>;
}
