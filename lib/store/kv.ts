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
 * - `["networks", id]` → NetworkUse[], `["refused", id]` → RefusedUse[]:
 *   where the key was used from and where it was refused, apart from the
 *   record like `last_used` (a network's first use is audited, and so moves
 *   the revision, as every audit line does)
 * - `["import_revision"]` → KvU64, the revision at which an import last
 *   began or ended (see `importRevision()`)
 * - `["importing"]` → {@linkcode ImportMarker} while an import runs or after
 *   one was interrupted: every lookup then finds no key and every change is
 *   refused, until the import completes or is aborted
 *
 * Every change is one `atomic()` that `check()`s every entry it read, so two
 * admins generating at the same moment cannot share an id or a name; a
 * conflict or a locked database file is retried with backoff.
 *
 * An import cannot be one atomic operation, so it writes in batches under the
 * `["importing"]` marker. The marker is set with a revision bump on an empty
 * store, every batch checks that the marker is still its own, and the marker
 * goes with another bump when the import completes or has been wiped again.
 * Since lookups read the marker in the same snapshot as the record, no key of
 * an unfinished import ever authenticates, and since the revision and the
 * import revision are never wiped, a revision never repeats.
 *
 * @module
 */

import { readRegistration } from "./registrations.ts";
import { pathExists } from "../_exists.ts";
import { DEFAULT_KV_PATH } from "../config.ts";
import { ImportChecker } from "./_import_check.ts";
import {
  ImportItemError,
  ImportStateError,
  KeyCollisionError,
  KeyIdsExhaustedError,
  KeyNotFoundError,
  NameTakenError,
  RotateRevokedError,
  StoreInputError,
  StoreUnavailableError,
} from "./errors.ts";
import {
  AUDIT_DETAIL,
  expiryMs,
  exportItems,
  MAX_KEY_ID,
  nameKey,
  newRecord,
  normalizeEmail,
  normalizeName,
  refuseRetiring,
  retiredRecord,
  revokedRecord,
  rotateDetail,
  rotation,
  withLifecycle,
} from "./records.ts";
import {
  allowFromDetail,
  appendRefused,
  byKey,
  mergeNetworks,
  networkDetail,
  normalizeAllowFrom,
} from "./usage_lists.ts";
import type {
  AuditEntry,
  ChangeOptions,
  ExportItem,
  ExposeOptions,
  InstanceInfo,
  InstanceRecord,
  KeyChanges,
  KeyRecord,
  KeyStore,
  NetworkUse,
  NewKeyInput,
  RefusedUse,
  RetireOptions,
  RevokeOptions,
  RevokeResult,
  RotateOptions,
  RotateResult,
} from "./types.ts";

const keyById = (id: number) => ["keys", id] as const;
const keyByHash = (hash: string) => ["keys_by_hash", hash] as const;
const keyByName = (name: string) => ["keys_by_name", nameKey(name)] as const;
const KEY_ID_COUNTER = ["counters", "key_id"] as const;
/** Bumped by every change; exported for the tests that prove caches see it. */
export const REVISION = ["revision"] as const;
const auditKey = (revision: bigint) => ["audit", revision] as const;
const lastUsedKey = (id: number) => ["last_used", id] as const;
const networksKey = (id: number) => ["networks", id] as const;
const refusedKey = (id: number) => ["refused", id] as const;
const IMPORTING = ["importing"] as const;
const IMPORT_REVISION = ["import_revision"] as const;
const instanceKey = (id: string) => ["instances", id] as const;
/**
 * Secondary indexes, so that the console's housekeeping reads only what is
 * due: a valid key's deadline (`["due", ms, id]`) and a key in a rotation's
 * overlap under its replacement (`["replaced_by", replacement, id]`). An
 * entry may outlive what it says (a key revoked or rotated since): readers
 * check the record and delete the stale entry.
 */
const dueKey = (ms: number, id: number) => ["due", ms, id] as const;
const replacedByKey = (replacement: number, id: number) =>
  ["replaced_by", replacement, id] as const;
/** Present once the indexes above cover every key (a store from before them has none). */
const INDEXED = ["indexed"] as const;
/** Beyond this many changed keys a reader forgets everything instead. */
const MAX_CHANGES = 1000;
/**
 * Audited changes that alter nothing a request reads (a first use from a
 * network, a key seen in a URL): a server keeps its cached record.
 */
const QUIET_ACTIONS: ReadonlySet<string> = new Set(["network", "expose"]);
/**
 * What survives a wipe, so that revisions only ever grow, and so that the
 * servers' registrations, which an import waits on, stay.
 */
const META_KEYS = new Set<Deno.KvKeyPart>([
  REVISION[0],
  "instances",
  IMPORTING[0],
  IMPORT_REVISION[0],
]);
/**
 * Budgets of one atomic operation during an import or a wipe, about half of
 * KV's limits (1000 mutations, 800 KiB in all, 80 KiB of keys), counted in
 * bytes so that long texts cannot push a batch over them.
 */
const BATCH_LIMITS = { mutations: 500, bytes: 400 * 1024, keyBytes: 40 * 1024 };

/** The value under `["importing"]`; older versions stored `true`. */
interface ImportMarker {
  /** Unique per import or abort, so two can never mistake each other's marker. */
  token: string;
  state: "importing" | "aborting";
  startedAt: string;
  actor: string;
}

/**
 * Opens (creating its folder when missing) a KV store at a path, ":memory:"
 * or URL. A file store is made private whatever the umask: its folder 0700,
 * the file and SQLite's companions 0600, as they hold every key's hash and
 * every integrator's e-mail.
 */
export async function openKvStore(path: string): Promise<KvKeyStore> {
  if (path === ":memory:") return new KvKeyStore(await Deno.openKv(path));
  // The scheme in any case, as the configuration and the permissions read
  // it; Deno.openKv takes only a lower-case one for a URL.
  if (/^https?:\/\//i.test(path)) {
    const url = path.replace(/^https?:/i, (scheme) => scheme.toLowerCase());
    return new KvKeyStore(await Deno.openKv(url));
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
  return new KvKeyStore(kv);
}

/** {@linkcode KeyStore} on Deno KV. */
export class KvKeyStore implements KeyStore {
  #kv: Deno.Kv;
  #closed = false;

  constructor(kv: Deno.Kv) {
    this.#kv = kv;
  }

  async findByHash(hash: string): Promise<KeyRecord | null> {
    return (await this.findByHashAt(hash)).record;
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
    return record.value && withLifecycle({
      ...withUsageFields(record.value),
      lastUsedAt: notBefore(used.value, record.value),
      networks: networks.value ?? [],
      refusedUses: refused.value ?? [],
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
        const lastUsedAt = !next.done && next.value.key[1] === id
          ? notBefore(next.value.value, entry.value)
          : null;
        // Few keys have usage lists; one read each keeps the join simple.
        const [networks, refused] = await this.#kv.getMany<
          [NetworkUse[], RefusedUse[]]
        >([networksKey(id), refusedKey(id)]);
        yield withLifecycle({
          ...withUsageFields(entry.value),
          lastUsedAt,
          networks: networks.value ?? [],
          refusedUses: refused.value ?? [],
        });
      }
    }
  }

  async create(input: NewKeyInput, options: ChangeOptions): Promise<KeyRecord> {
    const name = normalizeName(input.name);
    const email = normalizeEmail(input.email);
    const allowFrom = input.allowFrom
      ? normalizeAllowFrom(input.allowFrom)
      : null;
    return await this.#change(async (at, revision) => {
      const [counter, byName, byHash] = await this.#kv.getMany<
        [Deno.KvU64, number, KeyRecord]
      >([KEY_ID_COUNTER, keyByName(name), keyByHash(input.hash)]);
      if (byName.value !== null) throw new NameTakenError(name, byName.value);
      if (byHash.value !== null) {
        throw new KeyCollisionError();
      }
      const record = newRecord(
        nextId(counter),
        { ...input, name, email, allowFrom },
        at,
      );
      const op = this.#kv.atomic().check(counter, byName, byHash)
        .set(KEY_ID_COUNTER, new Deno.KvU64(BigInt(record.id)));
      putRecord(op, record);
      op.set(keyByName(name), record.id);
      audit(op, at, revision, {
        action: "create",
        keyId: record.id,
        ...options,
        detail: allowFrom === null ? null : allowFromDetail(allowFrom),
      });
      return { op, result: record };
    });
  }

  revoke(id: number, options: RevokeOptions): Promise<RevokeResult> {
    return this.#change<RevokeResult>(async (at, revision) => {
      const current = await this.#kv.get<KeyRecord>(keyById(id));
      if (current.value === null) throw new KeyNotFoundError(id);
      if (current.value.status === "revoked") {
        return { op: null, result: { record: current.value, changed: false } };
      }
      const record = revokedRecord(current.value, at, options.reason);
      const op = this.#kv.atomic().check(current);
      putRecord(op, record);
      await this.#releaseName(op, record);
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
    replacement: Pick<NewKeyInput, "hash" | "hint" | "expiresAt">,
    options: RotateOptions,
  ): Promise<RotateResult> {
    return this.#change(async (at, revision) => {
      const current = await this.#kv.get<KeyRecord>(keyById(id));
      if (current.value === null) throw new KeyNotFoundError(id);
      if (current.value.status === "revoked") {
        throw new RotateRevokedError(id);
      }
      refuseRetiring(withLifecycle(current.value));
      const [counter, byHash] = await this.#kv.getMany<
        [Deno.KvU64, KeyRecord]
      >([KEY_ID_COUNTER, keyByHash(replacement.hash)]);
      if (byHash.value !== null) {
        throw new KeyCollisionError();
      }
      const { created, old } = rotation(
        withLifecycle(current.value),
        newRecord(nextId(counter), {
          ...replacement,
          name: current.value.name,
          email: current.value.email,
        }, at),
        { at, ...options },
      );
      const op = this.#kv.atomic().check(current, counter, byHash)
        .set(KEY_ID_COUNTER, new Deno.KvU64(BigInt(created.id)));
      putRecord(op, old);
      putRecord(op, created);
      op.set(keyByName(created.name), created.id);
      audit(op, at, revision, {
        action: "rotate",
        keyId: id,
        actor: options.actor,
        detail: rotateDetail(created.id, options),
      });
      return { op, result: { revoked: old, created } };
    });
  }

  retire(id: number, options: RetireOptions): Promise<RevokeResult> {
    return this.#change<RevokeResult>(async (at, revision) => {
      const self = await this.#kv.get<KeyRecord>(keyById(id));
      if (self.value === null) throw new KeyNotFoundError(id);
      const firstUse = options.cause === "first_use";
      const targetId = firstUse ? self.value.retires ?? null : id;
      if (targetId === null) {
        return { op: null, result: { record: self.value, changed: false } };
      }
      const target = targetId === id
        ? self
        : await this.#kv.get<KeyRecord>(keyById(targetId));
      const op = this.#kv.atomic().check(self);
      if (target !== self) op.check(target);
      // The link is spent whatever became of the old key, so the write
      // happens once.
      if (firstUse) putRecord(op, { ...self.value, retires: null });
      const record = target.value &&
        retiredRecord(
          withLifecycle(target.value),
          at,
          firstUse ? self.value : undefined,
        );
      if (record === null) {
        return firstUse
          ? { op, result: { record: self.value, changed: false } }
          : { op: null, result: { record: self.value, changed: false } };
      }
      putRecord(op, record);
      await this.#releaseName(op, record);
      audit(op, at, revision, {
        action: "revoke",
        keyId: record.id,
        actor: options.actor,
        detail: record.revokedReason,
      });
      return { op, result: { record, changed: true } };
    });
  }

  /** Frees a revoked key's name, unless a replacement holds it by now. */
  async #releaseName(
    op: Deno.AtomicOperation,
    record: KeyRecord,
  ): Promise<void> {
    const byName = await this.#kv.get<number>(keyByName(record.name));
    op.check(byName);
    if (byName.value === record.id) op.delete(keyByName(record.name));
  }

  async *dueKeys(now: Date): AsyncIterable<number> {
    await this.#refuseWhileImporting();
    await this.#ensureIndexed();
    const until = now.getTime();
    for await (
      const entry of this.#kv.list({
        start: ["due"],
        end: dueKey(until, Number.MAX_SAFE_INTEGER),
      })
    ) {
      const id = entry.key[2] as number;
      const record = (await this.#kv.get<KeyRecord>(keyById(id))).value;
      const current = record !== null &&
        indexKeys(withLifecycle(record)).some((key) => sameKey(key, entry.key));
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
    await this.#ensureIndexed();
    for await (const entry of this.#kv.list({ prefix: ["replaced_by", id] })) {
      const record = await this.get(entry.key[2] as number);
      if (
        record !== null && record.status === "valid" &&
        record.replacedBy === id
      ) {
        yield record;
      }
    }
  }

  /**
   * Builds the due and replaced-by indexes of a store written before they
   * existed: one scan, once per store, then never again.
   */
  async #ensureIndexed(): Promise<void> {
    if ((await this.#read(INDEXED)).value !== null) return;
    const guard = await this.#kv.get(IMPORTING);
    const batch = new _Batch(this.#kv, guard);
    for await (
      const entry of this.#kv.list<KeyRecord>({ prefix: ["keys"] }, {
        batchSize: 500,
      })
    ) {
      for (const key of indexKeys(withLifecycle(entry.value))) {
        await batch.set(key, true);
      }
    }
    await batch.set(INDEXED, true);
    await batch.flush();
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
    return (await this.#read<Deno.KvU64>(REVISION)).value?.value ?? 0n;
  }

  async findByHashAt(
    hash: string,
  ): Promise<{ record: KeyRecord | null; revision: bigint }> {
    // getMany reads one snapshot: the record is exactly as of that
    // revision, and the import marker tells whether it may be used at all.
    const entries = await this.#readMany<[Deno.KvU64, unknown, KeyRecord]>([
      REVISION,
      IMPORTING,
      keyByHash(hash),
    ]);
    return {
      revision: entries[0].value?.value ?? 0n,
      record: entries[1].value === null && entries[2].value !== null
        ? withLifecycle(withUsageFields(entries[2].value))
        : null,
    };
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
    return (await this.#read<Deno.KvU64>(IMPORT_REVISION)).value?.value ?? 0n;
  }

  markExposed(id: number, options: ExposeOptions): Promise<boolean> {
    return this.#change<boolean>(async (at, revision) => {
      const current = await this.#kv.get<KeyRecord>(keyById(id));
      if (current.value === null) throw new KeyNotFoundError(id);
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

  async setAllowFrom(
    id: number,
    allowFrom: string[] | null,
    options: ChangeOptions,
  ): Promise<{ record: KeyRecord; changed: boolean }> {
    const wanted = allowFrom === null ? null : normalizeAllowFrom(allowFrom);
    return await this.#change<{ record: KeyRecord; changed: boolean }>(
      async (at, revision) => {
        const current = await this.#kv.get<KeyRecord>(keyById(id));
        if (current.value === null) throw new KeyNotFoundError(id);
        const record = { ...withUsageFields(current.value), allowFrom: wanted };
        if (sameRanges(current.value.allowFrom ?? null, wanted)) {
          return { op: null, result: { record, changed: false } };
        }
        const op = this.#kv.atomic().check(current);
        putRecord(op, record);
        audit(op, at, revision, {
          action: "allow_from",
          keyId: id,
          actor: options.actor,
          detail: allowFromDetail(wanted),
        });
        return { op, result: { record, changed: true } };
      },
    );
  }

  async recordNetworkUses(
    uses: Iterable<{ id: number; network: string; at: Date }>,
  ): Promise<{ id: number; network: string }[]> {
    const added: { id: number; network: string }[] = [];
    for (const [id, group] of byKey(uses)) {
      for (let tries = 1; tries <= 5; tries++) {
        const [current, marker, record, listed] = await this.#kv.getMany<
          [Deno.KvU64, unknown, KeyRecord, NetworkUse[]]
        >([REVISION, IMPORTING, keyById(id), networksKey(id)]);
        if (marker.value !== null || record.value === null) break;
        const merged = mergeNetworks(listed.value ?? [], group);
        const op = this.#kv.atomic().check(listed, record, marker)
          .set(networksKey(id), merged.networks);
        if (merged.added.length > 0) {
          // Audit lines are keyed by revision: one revision per line.
          let revision = current.value?.value ?? 0n;
          const at = new Date();
          for (const network of merged.added) {
            audit(op, at, ++revision, {
              action: "network",
              keyId: id,
              actor: "server",
              detail: networkDetail(network),
            });
          }
          op.check(current).set(REVISION, new Deno.KvU64(revision));
        }
        let ok = false;
        try {
          ok = (await op.commit()).ok;
        } catch (error) {
          if (!isLocked(error)) throw error;
        }
        if (ok) {
          for (const network of merged.added) added.push({ id, network });
          break;
        }
        await backoff(tries);
      }
    }
    return added;
  }

  async recordRefusedUses(
    uses: Iterable<{ id: number; address: string; at: Date }>,
  ): Promise<void> {
    for (const [id, group] of byKey(uses)) {
      for (let tries = 1; tries <= 5; tries++) {
        const [record, listed] = await this.#kv.getMany<
          [KeyRecord, RefusedUse[]]
        >([keyById(id), refusedKey(id)]);
        if (record.value === null) break;
        const op = this.#kv.atomic().check(record, listed)
          .set(refusedKey(id), appendRefused(listed.value ?? [], group));
        if ((await commitRetrying(op)).ok) break;
        await backoff(tries);
      }
    }
  }

  /**
   * Keeps the latest time of each key, as PostgreSQL's greatest() does:
   * two servers on one file flush independently, and the one flushing last
   * may hold the earlier use.
   */
  async recordLastUsed(
    uses: Iterable<{ id: number; at: Date }>,
  ): Promise<void> {
    const latest = new Map<number, number>();
    for (const { id, at } of uses) {
      latest.set(id, Math.max(latest.get(id) ?? -Infinity, at.getTime()));
    }
    const ids = [...latest.keys()];
    // getMany() reads at most 10 keys.
    for (let start = 0; start < ids.length; start += 10) {
      const chunk = ids.slice(start, start + 10);
      for (let attempt = 0; attempt < 3; attempt++) {
        const stored = await this.#kv.getMany<string[]>(chunk.map(lastUsedKey));
        const op = this.#kv.atomic();
        let writes = 0;
        stored.forEach((entry, i) => {
          const at = latest.get(chunk[i])!;
          if (entry.value !== null && Date.parse(entry.value) >= at) return;
          op.check(entry).set(
            lastUsedKey(chunk[i]),
            new Date(at).toISOString(),
          );
          writes++;
        });
        if (writes === 0 || (await op.commit()).ok) break;
      }
    }
  }

  exportAll(): AsyncIterable<ExportItem> {
    return exportItems(this);
  }

  async importAll(
    items: AsyncIterable<ExportItem>,
    options: ChangeOptions,
  ): Promise<{ keys: number; audit: number }> {
    const ours = await this.#beginImport(options);
    try {
      const checker = new ImportChecker();
      const counts = await this.#writeImport(items, ours, checker);
      await this.#finishImport(
        ours,
        { ...counts, maxId: checker.maxId },
        options,
      );
      return counts;
    } catch (error) {
      try {
        await this.#wipe(ours);
      } catch {
        // The marker stays, so no key works and every change is refused
        // until "keys import --abort"; the error that matters is the first.
      }
      throw error;
    }
  }

  async abortImport(options: ChangeOptions): Promise<boolean> {
    for (let tries = 1;; tries++) {
      const [current, marker] = await this.#kv.getMany<
        [Deno.KvU64, unknown]
      >([REVISION, IMPORTING]);
      if (marker.value === null) return false;
      // A new token first: the import, if it still runs, fails at its next
      // batch instead of writing into the store being emptied.
      const revision = (current.value?.value ?? 0n) + 1n;
      const op = this.#kv.atomic().check(current, marker)
        .set(IMPORTING, newMarker("aborting", options))
        .set(REVISION, new Deno.KvU64(revision))
        .set(IMPORT_REVISION, new Deno.KvU64(revision));
      const res = await commitRetrying(op);
      if (res.ok) {
        await this.#wipe({ key: IMPORTING, versionstamp: res.versionstamp });
        return true;
      }
      if (tries >= MAX_TRIES) {
        throw new StoreUnavailableError(
          "store_busy",
          `The key store stayed busy through ${MAX_TRIES} attempts; try again`,
        );
      }
      await backoff(tries);
    }
  }

  /** Sets the marker on an empty store, or refuses; returns the marker's check. */
  async #beginImport(options: ChangeOptions): Promise<Deno.AtomicCheck> {
    const [current, marker] = await this.#kv.getMany<[Deno.KvU64, unknown]>([
      REVISION,
      IMPORTING,
    ]);
    // Another import's marker is never taken over: it may still be running.
    if (marker.value !== null) throw new ImportStateError("import_unfinished");
    if (!(await this.#isEmpty())) {
      throw new StoreInputError("import_not_empty", "The store is not empty");
    }
    const revision = (current.value?.value ?? 0n) + 1n;
    // Every change moves the revision, so checking it proves the store is
    // still as empty as it was just seen.
    const op = this.#kv.atomic().check(current, marker)
      .set(IMPORTING, newMarker("importing", options))
      .set(REVISION, new Deno.KvU64(revision))
      .set(IMPORT_REVISION, new Deno.KvU64(revision));
    const start = await commitRetrying(op);
    if (!start.ok) {
      if ((await this.#kv.get(IMPORTING)).value !== null) {
        throw new ImportStateError("import_unfinished");
      }
      throw new StoreInputError(
        "import_raced",
        "The store changed while the import began",
      );
    }
    return { key: IMPORTING, versionstamp: start.versionstamp };
  }

  async #writeImport(
    items: AsyncIterable<ExportItem>,
    ours: Deno.AtomicCheck,
    checker: ImportChecker,
  ): Promise<{ keys: number; audit: number }> {
    const counts = { keys: 0, audit: 0 };
    const batch = new _Batch(this.#kv, ours);
    for await (const item of items) {
      if (item.type === "key") {
        const record = checker.record(item.record);
        const stored = {
          ...record,
          lastUsedAt: null,
          networks: [],
          refusedUses: [],
        };
        await batch.set(keyById(record.id), stored);
        await batch.set(keyByHash(record.hash), stored);
        for (const key of indexKeys(withLifecycle(stored))) {
          await batch.set(key, true);
        }
        if (record.status === "valid" && record.replacedBy === null) {
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
        counts.keys++;
      } else if (item.type === "audit") {
        await batch.set(
          auditKey(BigInt(++counts.audit)),
          checker.audit(item.entry),
        );
      } else {
        throw new ImportItemError((item as { type: unknown }).type);
      }
    }
    checker.finish();
    await batch.flush();
    return counts;
  }

  /** Publishes the import: the marker goes and the revision moves in one step. */
  async #finishImport(
    ours: Deno.AtomicCheck,
    counts: { keys: number; audit: number; maxId: number },
    options: ChangeOptions,
  ): Promise<void> {
    const current = await this.#kv.get<Deno.KvU64>(REVISION);
    // Above the imported audit lines, numbered 1, 2, 3 …, and above every
    // revision the store ever had.
    const revision = bigMax(current.value?.value ?? 0n, BigInt(counts.audit)) +
      1n;
    const op = this.#kv.atomic().check(ours, current)
      .set(KEY_ID_COUNTER, new Deno.KvU64(BigInt(counts.maxId)))
      .set(REVISION, new Deno.KvU64(revision))
      .set(IMPORT_REVISION, new Deno.KvU64(revision))
      // Every imported record wrote its index entries.
      .set(INDEXED, true)
      .delete(IMPORTING);
    audit(op, new Date(), revision, {
      action: "import",
      keyId: 0,
      actor: options.actor,
      detail: `${counts.keys} keys and ${counts.audit} audit lines`,
    });
    if (!(await commitRetrying(op)).ok) {
      throw new ImportStateError("import_aborted");
    }
  }

  async #isEmpty(): Promise<boolean> {
    for (const prefix of [["keys"], ["keys_by_hash"], ["audit"]]) {
      for await (const _ of this.#kv.list({ prefix }, { limit: 1 })) {
        return false;
      }
    }
    return true;
  }

  /**
   * Deletes all but the revisions while holding the marker `ours`, then
   * removes the marker with a revision bump: the store is as before the
   * import. Stops with ImportStateError when the marker was taken over.
   */
  async #wipe(ours: Deno.AtomicCheck): Promise<void> {
    const batch = new _Batch(this.#kv, ours);
    for await (const entry of this.#kv.list({ prefix: [] })) {
      if (META_KEYS.has(entry.key[0] as string)) continue;
      await batch.delete(entry.key);
    }
    await batch.flush();
    const current = await this.#kv.get<Deno.KvU64>(REVISION);
    const revision = (current.value?.value ?? 0n) + 1n;
    const done = await commitRetrying(
      this.#kv.atomic().check(ours, current)
        .set(REVISION, new Deno.KvU64(revision))
        .set(IMPORT_REVISION, new Deno.KvU64(revision))
        .delete(IMPORTING),
    );
    if (!done.ok) throw new ImportStateError("import_aborted");
  }

  async #refuseWhileImporting(): Promise<void> {
    if ((await this.#read(IMPORTING)).value !== null) {
      throw new ImportStateError("import_unfinished");
    }
  }

  async registerInstance(info: InstanceInfo): Promise<string> {
    const res = await commitRetrying(
      this.#kv.atomic().set(instanceKey(info.id), storedInstance(info)),
    );
    if (!res.ok) throw new Error("unreachable: an unchecked write conflicted");
    return res.versionstamp;
  }

  async renewInstance(
    info: InstanceInfo,
    version: string,
  ): Promise<string | null> {
    const key = instanceKey(info.id);
    const res = await commitRetrying(
      this.#kv.atomic().check({ key, versionstamp: version })
        .set(key, storedInstance(info)),
    );
    return res.ok ? res.versionstamp : null;
  }

  async pollInstance(
    id: string,
  ): Promise<{ revision: bigint; version: string | null }> {
    const [revision, instance] = await this.#readMany<[Deno.KvU64, unknown]>(
      [REVISION, instanceKey(id)],
    );
    return {
      revision: revision.value?.value ?? 0n,
      version: instance.versionstamp,
    };
  }

  async instances(): Promise<InstanceRecord[]> {
    const found: InstanceRecord[] = [];
    try {
      for await (
        const entry of this.#kv.list<unknown>({ prefix: ["instances"] })
      ) {
        const id = entry.key[1];
        // Not a key this store writes: no server can hold a lease on it.
        if (typeof id !== "string") continue;
        found.push(
          readRegistration(entry.value, { id, version: entry.versionstamp }),
        );
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

  async changesSince(revision: bigint): Promise<KeyChanges> {
    const [current, imported] = await this.#readMany<
      [Deno.KvU64, Deno.KvU64]
    >([REVISION, IMPORT_REVISION]);
    const now = current.value?.value ?? 0n;
    // Ids may have been reused by an import: nothing known before it holds.
    if (revision < 0n || (imported.value?.value ?? 0n) > revision) {
      return { revision: now, keyIds: [], rebuild: true };
    }
    const keyIds = new Set<number>();
    try {
      // Every line up to `now` was committed with its revision bump, so
      // the list holds every change up to `now`.
      for await (
        const entry of this.#kv.list<AuditEntry>({
          start: auditKey(revision + 1n),
          end: auditKey(now + 1n),
        })
      ) {
        if (QUIET_ACTIONS.has(entry.value.action)) continue;
        keyIds.add(entry.value.keyId);
        if (keyIds.size > MAX_CHANGES) {
          return { revision: now, keyIds: [], rebuild: true };
        }
      }
    } catch (error) {
      throw unreadable(error);
    }
    return { revision: now, keyIds: [...keyIds], rebuild: false };
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

  close(): Promise<void> {
    // Closing twice is harmless, as with the PostgreSQL store.
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    this.#kv.close();
    return Promise.resolve();
  }

  async #read<T>(key: Deno.KvKey): Promise<Deno.KvEntryMaybe<T>> {
    try {
      return await this.#kv.get<T>(key, { consistency: "strong" });
    } catch (error) {
      throw unreadable(error);
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
      const [current, marker] = await this.#kv.getMany<
        [Deno.KvU64, unknown]
      >([REVISION, IMPORTING]);
      // The import sets the marker with a revision bump, so the check of
      // `current` below also fails a change that raced its start.
      if (marker.value !== null) {
        throw new ImportStateError("import_unfinished");
      }
      const revision = (current.value?.value ?? 0n) + 1n;
      const { op, result } = await attempt(new Date(), revision);
      if (op === null) return result;
      try {
        const res = await op.check(current)
          .set(REVISION, new Deno.KvU64(revision)).commit();
        if (res.ok) return result;
      } catch (error) {
        // Another process holds the SQLite write lock: wait and go again.
        if (!isLocked(error)) throw error;
      }
      if (tries >= MAX_TRIES) {
        throw new StoreUnavailableError(
          "store_busy",
          `The key store stayed busy through ${MAX_TRIES} attempts; try again`,
        );
      }
      await backoff(tries);
    }
  }
}

const MAX_TRIES = 60;

/** A registration as KV holds it: KV values cannot be bigints. */
type StoredInstance = Omit<InstanceInfo, "acked"> & { acked: string };

function storedInstance(info: InstanceInfo): StoredInstance {
  return { ...info, acked: info.acked.toString() };
}

function unreadable(cause: unknown): StoreUnavailableError {
  return new StoreUnavailableError(
    "store_unavailable",
    "The key store cannot be read",
    { cause },
  );
}

function backoff(tries: number): Promise<void> {
  // Full jitter keeps many writers from waking in step.
  const ceiling = Math.min(250, 2 ** Math.min(tries, 8));
  return new Promise((resolve) => setTimeout(resolve, Math.random() * ceiling));
}

function nextId(counter: Deno.KvEntryMaybe<Deno.KvU64>): number {
  const id = Number((counter.value?.value ?? 0n) + 1n);
  if (id > MAX_KEY_ID) throw new KeyIdsExhaustedError(MAX_KEY_ID);
  return id;
}

function putRecord(op: Deno.AtomicOperation, record: KeyRecord): void {
  // Last use and usage live under their own keys; the stored copies hold none.
  const stored = {
    ...withLifecycle(record),
    lastUsedAt: null,
    networks: [],
    refusedUses: [],
  };
  op.set(keyById(record.id), stored).set(keyByHash(record.hash), stored);
  for (const key of indexKeys(stored)) op.set(key, true);
}

/** The index entries a record calls for (none once it is revoked). */
function indexKeys(record: KeyRecord): Deno.KvKey[] {
  if (record.status !== "valid") return [];
  const keys: Deno.KvKey[] = [];
  // An unreadable deadline counts as passed (expiryMs), so it sorts first.
  const due = Math.max(0, expiryMs(record));
  if (due !== Infinity) keys.push(dueKey(due, record.id));
  if (record.replacedBy !== null) {
    keys.push(replacedByKey(record.replacedBy, record.id));
  }
  return keys;
}

function sameKey(a: Deno.KvKey, b: Deno.KvKey): boolean {
  return a.length === b.length && a.every((part, i) => part === b[i]);
}

/**
 * SQLite's "database is locked": another connection holds the write lock.
 * The one place that reads an error's text, because nothing else tells it:
 * Deno (2.9) throws a plain TypeError for it, with no `code`, no
 * `Deno.errors` class and no cause (checked by holding the lock from a second
 * process). Replace this with a class or code check once Deno gives one.
 */
function isLocked(error: unknown): boolean {
  return String(error).includes("database is locked");
}

/**
 * Commits `op`, waiting out other connections' write locks; every import
 * step goes through here, so that a busy store fails none of them.
 */
async function commitRetrying(
  op: Deno.AtomicOperation,
): Promise<Deno.KvCommitResult | Deno.KvCommitError> {
  for (let tries = 1;; tries++) {
    try {
      return await op.commit();
    } catch (error) {
      if (!isLocked(error) || tries >= MAX_TRIES) throw error;
    }
    await backoff(tries);
  }
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

function bigMax(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}

/**
 * One import's or wipe's writes, committed in atomic operations kept under
 * KV's limits, each checking that the import marker is still `guard`.
 */
class _Batch {
  #kv: Deno.Kv;
  #guard: Deno.AtomicCheck;
  #op: Deno.AtomicOperation;
  #mutations = 0;
  #bytes = 0;
  #keyBytes = 0;

  constructor(kv: Deno.Kv, guard: Deno.AtomicCheck) {
    this.#kv = kv;
    this.#guard = guard;
    this.#op = kv.atomic();
  }

  async set(key: Deno.KvKey, value: unknown): Promise<void> {
    await this.#room(key, value);
    this.#op.set(key, value);
  }

  async delete(key: Deno.KvKey): Promise<void> {
    await this.#room(key, null);
    this.#op.delete(key);
  }

  async flush(): Promise<void> {
    if (this.#mutations === 0) return;
    const result = await commitRetrying(this.#op.check(this.#guard));
    this.#op = this.#kv.atomic();
    this.#mutations = this.#bytes = this.#keyBytes = 0;
    // The marker is the only thing checked: someone aborted this import.
    if (!result.ok) throw new ImportStateError("import_aborted");
  }

  async #room(key: Deno.KvKey, value: unknown): Promise<void> {
    // Upper bounds: UTF-8 takes at most 3 bytes per UTF-16 unit in keys,
    // and V8's serialisation at most 2 per unit of the JSON text in values.
    const keyBytes = 3 * JSON.stringify(key, bigints).length + 16;
    const bytes = keyBytes + 2 * (JSON.stringify(value)?.length ?? 0) + 64;
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

/** A stored record with the fields an older version did not write. */
function withUsageFields(record: KeyRecord): KeyRecord {
  return {
    ...record,
    allowFrom: record.allowFrom ?? null,
    networks: [],
    refusedUses: [],
  };
}

function sameRanges(a: string[] | null, b: string[] | null): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/**
 * A last use as shown: never before the key's creation, which a server
 * whose clock runs behind the console's, or an older version that rounded
 * down to the minute, could have written.
 */
function notBefore(
  lastUsedAt: string | null,
  record: KeyRecord,
): string | null {
  if (lastUsedAt === null) return null;
  return Date.parse(lastUsedAt) < Date.parse(record.createdAt)
    ? record.createdAt
    : lastUsedAt;
}

function audit(
  op: Deno.AtomicOperation,
  at: Date,
  revision: bigint,
  entry: Omit<AuditEntry, "at" | "detail"> & { detail?: string | null },
): void {
  op.set(auditKey(revision), { at: at.toISOString(), detail: null, ...entry });
}
