/**
 * The key store's one {@linkcode StoreBackend}, on any database's
 * {@linkcode Entries}: layout in `_keys.ts`, change in `_change.ts`, import in
 * `_import.ts`. Every change is one atomic commit checking every entry it read
 * and the revision, so two admins generating at once cannot share an id or a
 * name; a conflict is retried with backoff.
 * @module
 */

import type { StoreBackend, StoredInstance } from "../backend.ts";
import { withUsage } from "../backend.ts";
import { QUIET_ACTIONS } from "../change.ts";
import type { Atomic, Entries, EntryKey } from "../entries.ts";
import { sameKey } from "../entries.ts";
import { ImportStateError, StoreOpenError } from "../errors.ts";
import { KeyService } from "../keys.ts";
import type {
  AuditEntry,
  KeyChanges,
  KeyRecord,
  NetworkUse,
  RefusedUse,
} from "../types.ts";
import { changeIn } from "./_change.ts";
import { WebhookEntries } from "./_webhooks.ts";
import { ShareEntries } from "./_shares.ts";
import { abortIn, importIn } from "./_import.ts";
import {
  auditKey,
  AUTH_REVISION,
  authRevisionOf,
  authStampKey,
  busy,
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
  LAYOUT,
  MAX_TRIES,
  networksKey,
  refusedKey,
  REVISION,
} from "./_keys.ts";

/** The key service on `entries`, which it closes when closed. */
export async function openEntryStore(entries: Entries): Promise<KeyService> {
  try {
    await claimLayout(entries);
  } catch (error) {
    await entries.close().catch(() => {});
    throw error;
  }
  return new KeyService(new EntryBackend(entries));
}

/** The entries' layout this code writes; a store a newer one wrote is refused, not misread. */
export const LAYOUT_VERSION = 1;

/** Records the layout in a store that has none; refuses a newer one. */
async function claimLayout(kv: Entries): Promise<void> {
  for (let tries = 0; tries < MAX_TRIES; tries++) {
    const found = await kv.get<unknown>(LAYOUT);
    if (found.value === LAYOUT_VERSION) return;
    if (found.value !== null) {
      throw new StoreOpenError(
        "schema_too_new",
        `The key store's layout is at version ${
          JSON.stringify(found.value)
        }, where this service knows ${LAYOUT_VERSION}; upgrade the service, or point DENO_KV_PATH or DATABASE_URL at another store`,
      );
    }
    const claimed = await kv.atomic().check(found).set(LAYOUT, LAYOUT_VERSION)
      .commit();
    if (claimed.ok) return;
  }
  throw busy();
}

/** Beyond this many changed keys a reader of the changes forgets everything instead. */
const MAX_CHANGES = 1000;

export class EntryBackend implements StoreBackend {
  #kv: Entries;
  readonly change: StoreBackend["change"];
  /** An import in batches under a marker: `_import.ts`. */
  readonly importAll: StoreBackend["importAll"];
  readonly abortImport: StoreBackend["abortImport"];
  /** Present when the database tells of other processes' changes. */
  readonly onChange?: StoreBackend["onChange"];
  readonly webhooks: WebhookEntries;
  readonly shares: ShareEntries;

  constructor(kv: Entries) {
    this.#kv = kv;
    this.webhooks = new WebhookEntries(kv);
    this.shares = new ShareEntries(kv);
    this.change = (kind, work) => changeIn(kv, kind, work);
    this.importAll = (items, options) => importIn(kv, items, options);
    this.abortImport = (options) => abortIn(kv, options);
    if (kv.onChange) this.onChange = (listener) => kv.onChange!(listener);
  }

  async findByHashAt(
    hash: string,
  ): Promise<
    { record: KeyRecord | null; revision: bigint; authRevision: bigint }
  > {
    // getMany reads one snapshot: the record is exactly as of that
    // revision, and the import marker tells whether it may be used at all.
    const [revision, auth, imported, marker, record, stamp] = await this.#kv
      .getMany<
        [Deno.KvU64, Deno.KvU64, Deno.KvU64, unknown, KeyRecord, Deno.KvU64]
      >([
        REVISION,
        AUTH_REVISION,
        IMPORT_REVISION,
        IMPORTING,
        keyByHash(hash),
        authStampKey(hash),
      ]);
    const found = marker.value === null ? record.value : null;
    return {
      revision: counted(revision),
      // The key's own last change, not the store's: a change to another
      // key leaves nothing of this one for a server to drop.
      authRevision: found === null
        ? counted(auth)
        : authRevisionOf(record, stamp, { auth, imported }),
      record: found,
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
    return record.value && withUsage(record.value, {
      lastUsedAt: used.value,
      networks: networks.value,
      refused: refused.value,
    });
  }

  async getByName(name: string): Promise<KeyRecord | null> {
    const entry = await this.#kv.get<number>(keyByName(name));
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
        yield withUsage(entry.value, {
          lastUsedAt: !next.done && next.value.key[1] === id
            ? next.value.value
            : null,
          networks: networks.value,
          refused: refused.value,
        });
      }
    }
  }

  async *dueKeys(now: Date): AsyncIterable<number> {
    await this.#refuseWhileImporting();
    for await (
      const entry of this.#kv.list({
        start: ["due"],
        end: dueKey(now.getTime(), Number.MAX_SAFE_INTEGER),
      })
    ) {
      const id = entry.key[2] as number;
      const record = (await this.#kv.get<KeyRecord>(keyById(id))).value;
      const current = record !== null &&
        indexKeys(record).some((key) => sameKey(key, entry.key));
      if (current) {
        // The entry's time is the record's deadline, so it has passed.
        yield id;
      } else {
        // Stale: the key was revoked, rotated or given another deadline.
        await this.#kv.atomic().check(entry).delete(entry.key).commit();
      }
    }
  }

  async *predecessors(id: number): AsyncIterable<KeyRecord> {
    await this.#refuseWhileImporting();
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
    return counted(await this.#kv.get<Deno.KvU64>(REVISION));
  }

  async *keyHashes(
    options: { afterId?: number } = {},
  ): AsyncIterable<{ id: number; hash: string }> {
    if ((await this.#kv.get(IMPORTING)).value !== null) return;
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
    return counted(await this.#kv.get<Deno.KvU64>(IMPORT_REVISION));
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
    const res = await this.#at(key, options.version).set(key, stored).commit();
    return res.ok ? res.versionstamp : null;
  }

  async pollInstance(
    id: string,
  ): Promise<{ revision: bigint; version: string | null }> {
    const [revision, instance] = await this.#kv.getMany<[Deno.KvU64, unknown]>(
      [REVISION, instanceKey(id)],
    );
    return { revision: counted(revision), version: instance.versionstamp };
  }

  async readInstances(): Promise<
    { id: string; version: string; stored: unknown }[]
  > {
    const found = [];
    for await (const entry of this.#kv.list({ prefix: ["instances"] })) {
      const id = entry.key[1];
      // Not a key this store writes: no server can hold a lease on it. One
      // below a registration's key would list its id twice, at two versions
      // that alternate, which a watch would take for a renewing server.
      if (typeof id !== "string" || entry.key.length !== 2) continue;
      found.push({ id, version: entry.versionstamp, stored: entry.value });
    }
    return found;
  }

  async removeInstance(
    id: string,
    options: { version?: string } = {},
  ): Promise<boolean> {
    const key = instanceKey(id);
    return (await this.#at(key, options.version).delete(key).commit()).ok;
  }

  async changesSince(after: bigint): Promise<KeyChanges> {
    const [current, imported] = await this.#kv.getMany<
      [Deno.KvU64, Deno.KvU64]
    >([REVISION, IMPORT_REVISION]);
    const revision = counted(current);
    const rebuild = { revision, keyIds: [], rebuild: true };
    // Ids may have been reused by an import: nothing known before it holds.
    if (after < 0n || counted(imported) > after) return rebuild;
    const keyIds = new Set<number>();
    // Every line up to `revision` was committed with its revision bump, so
    // the list holds every change up to it.
    const lines = this.#kv.list<AuditEntry>({
      start: auditKey(after + 1n),
      end: auditKey(revision + 1n),
    });
    for await (const { value } of lines) {
      if ((QUIET_ACTIONS as readonly string[]).includes(value.action)) continue;
      keyIds.add(value.keyId);
      if (keyIds.size > MAX_CHANGES) return rebuild;
    }
    return { revision, keyIds: [...keyIds], rebuild: false };
  }

  close(): Promise<void> {
    return this.#kv.close();
  }

  /** A commit on `key`, only if still at `version` when one is given. */
  #at(key: EntryKey, version: string | undefined): Atomic {
    const op = this.#kv.atomic();
    return version === undefined
      ? op
      : op.check({ key, versionstamp: version });
  }

  async #refuseWhileImporting(): Promise<void> {
    if ((await this.#kv.get(IMPORTING)).value !== null) {
      throw new ImportStateError("import_unfinished");
    }
  }
}
