/**
 * What the rules about keys need of storage, and no more: every rule lives
 * above it, once (`changes.ts`, `keys.ts`, `registrations.ts`). Storage reads
 * consistently, commits one change atomically, imports out of sight and
 * publishes in one step, and keeps registrations under a compare-and-set
 * version. Its one implementation, `layout/backend.ts`, is written over the
 * seam (`entries.ts`): a database is added by implementing the seam
 * (docs/design.md, "The store: one seam, two backends").
 * @module
 */

import type { Alters, AuditLine, ChangeKind, Committed } from "./change.ts";
import type {
  AuditEntry,
  ChangeOptions,
  ExportItem,
  InstanceInfo,
  KeyRecord,
  KeyStore,
  NetworkUse,
  RefusedUse,
} from "./types.ts";
import type { WebhookStore } from "./webhook_types.ts";
import type { Raised } from "./webhooks.ts";
import type { ShareStore } from "./rate_shares.ts";

/** The usage lists kept apart from a key's record. */
export interface UsageLists {
  networks: NetworkUse[];
  refused: RefusedUse[];
}

/** A write a change makes, applied in order when it commits. */
export type Write =
  | { kind: "insert" | "update"; record: KeyRecord }
  | { kind: "usage"; id: number; lists: Partial<UsageLists> };

/**
 * One change being made: its reads, its time, and the writes and audit lines
 * the backend applies atomically. Each read becomes a check of the commit
 * (lib/store/layout/_change.ts), so a change decides on data that still holds
 * when it commits, or is retried; no backend reads a write back before then.
 */
export abstract class ChangeDraft<A extends Alters> {
  readonly alters: A;
  /** The time of the change, for the records and the audit lines alike. */
  readonly at: Date = new Date();
  readonly writes: Write[] = [];
  readonly lines: AuditLine<A>[] = [];
  /** What each line's webhook event carries beyond the record (a network). */
  readonly lineFacts: (Record<string, unknown> | undefined)[] = [];
  /** Events raised without an audit line, delivered in this change's commit. */
  readonly raised: Raised[] = [];
  /** Marks set, each under `["webhook_marks", …parts]`. */
  readonly marks: { parts: (string | number)[]; value: unknown }[] = [];

  constructor(alters: A) {
    this.alters = alters;
  }

  /** Key `id`'s record as stored (no last use, no usage lists); null when none. */
  abstract get(id: number): Promise<KeyRecord | null>;
  /** The id of the valid key, not in an overlap, holding this name (compared by `nameKey`). */
  abstract nameHolder(name: string): Promise<number | null>;
  /** Whether any key, valid or revoked, has this hash. */
  abstract hashTaken(hash: string): Promise<boolean>;
  /** The next key id, handed out once per call; saved when the change commits. */
  abstract nextId(): Promise<number>;
  /** Key `id`'s usage lists; null when no such key. */
  abstract usage(id: number): Promise<UsageLists | null>;
  /** A mark of what an event raised once already; null when none. */
  abstract mark(parts: (string | number)[]): Promise<unknown>;

  /** Sets a mark, so that the event it stands for is raised once. */
  setMark(parts: (string | number)[], value: unknown): void {
    this.marks.push({ parts, value });
  }

  /** Raises an event with no audit line of its own. */
  raise(event: Raised): void {
    this.raised.push(event);
  }

  insert(record: KeyRecord): void {
    this.writes.push({ kind: "insert", record });
  }

  update(record: KeyRecord): void {
    this.writes.push({ kind: "update", record });
  }

  /** Rewrites one or both of key `id`'s usage lists. */
  putUsage(id: number, lists: Partial<UsageLists>): void {
    this.writes.push({ kind: "usage", id, lists });
  }

  /** A property, not a method, so that the compiler checks the line's action against `A`. */
  readonly audit = (
    line: AuditLine<A>,
    facts?: Record<string, unknown>,
  ): void => {
    this.lines.push(line);
    this.lineFacts.push(facts);
  };

  /** The audit lines as committed after revision `before`, each under the revision it moves to. */
  numbered(before: bigint): { seq: bigint; entry: AuditEntry }[] {
    const at = this.at.toISOString();
    return this.lines.map((line, i) => ({
      seq: before + BigInt(i + 1),
      entry: { at, ...line },
    }));
  }

  /**
   * How far the change moves the revision: one per audit line, or one for a
   * record rewritten without a line (a retirement's spent link), so every
   * write of a record a server may hold moves it; usage lists alone, none.
   */
  get moves(): number {
    if (this.lines.length > 0) return this.lines.length;
    return this.writes.some((write) => write.kind !== "usage") ? 1 : 0;
  }
}

/** Key `id`'s stored record, with what a backend keeps apart from it. */
export function withUsage(
  record: KeyRecord,
  usage: {
    lastUsedAt: string | null;
    networks: NetworkUse[] | null;
    refused: RefusedUse[] | null;
  },
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

/** A server's registration as written: the revision as decimal text. */
export type StoredInstance = Omit<InstanceInfo, "acked"> & { acked: string };

/** A database's primitives: the store's own reads; `change` is the only way to alter a key. */
export interface StoreBackend extends
  Pick<
    KeyStore,
    | "findByHashAt"
    | "get"
    | "getByName"
    | "list"
    | "dueKeys"
    | "predecessors"
    | "audit"
    | "revision"
    | "keyHashes"
    | "importRevision"
    | "pollInstance"
    | "removeInstance"
    | "changesSince"
    | "onChange"
    | "close"
  > {
  /** The webhook endpoints and outbox. */
  readonly webhooks: WebhookStore;
  /** Rate-limit shares lent between servers (lib/auth/share_ledger.ts). */
  readonly shares: ShareStore;
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
   * {@linkcode KeyStore.importAll}, not yet settled. Until it publishes,
   * readers see no key of it and changes are refused; when it fails,
   * everything staged is wiped (or, should that fail too, left unfinished
   * for `abortImport`).
   */
  importAll(
    items: AsyncIterable<ExportItem>,
    options: ChangeOptions,
  ): Promise<Committed<{ keys: number; audit: number }, "authentication">>;
  /** {@linkcode KeyStore.abortImport}, not yet settled; revisions move past every earlier one. */
  abortImport(
    options: ChangeOptions,
  ): Promise<Committed<boolean, "authentication">>;
  /**
   * Writes registration `stored.id`, if still at `version` when given (else
   * null); returns its new version.
   */
  putInstance(
    stored: StoredInstance,
    options?: { version?: string },
  ): Promise<string | null>;
  /** Every registration as stored, with its version; `stored` is unchecked. */
  readInstances(): Promise<{ id: string; version: string; stored: unknown }[]>;
}
