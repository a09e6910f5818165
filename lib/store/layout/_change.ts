/**
 * The one way a key changes: a draft's reads checked, its writes, audit lines
 * and revision moves in one atomic commit, retried on a conflict.
 * @module
 */

import { ChangeDraft, type UsageLists } from "../backend.ts";
import { type Alters, type ChangeKind, Committed } from "../change.ts";
import { ImportStateError, KeyIdsExhaustedError } from "../errors.ts";
import { MAX_KEY_ID } from "../records.ts";
import type { KeyRecord, NetworkUse, RefusedUse } from "../types.ts";
import type { Atomic, Check, Entries, Entry, EntryKey } from "../entries.ts";
import { sameKey } from "../entries.ts";
import type { EndpointList } from "../webhook_types.ts";
import { ENDPOINTS, markKey, queueEvents } from "./_webhooks.ts";
import {
  auditKey,
  AUTH_REVISION,
  authRevisionOf,
  authStampKey,
  backoff,
  busy,
  counted,
  hintChange,
  holdsName,
  IMPORT_REVISION,
  IMPORTING,
  KEY_ID_COUNTER,
  keyByHash,
  keyById,
  keyByName,
  MAX_TRIES,
  networksKey,
  putRecord,
  refusedKey,
  REVISION,
} from "./_keys.ts";

/**
 * Makes one change on `entries`: the draft's reads and the revision become
 * the commit's checks, or `work` runs again.
 */
export async function changeIn<T, A extends Alters>(
  kv: Entries,
  kind: ChangeKind<A>,
  work: (draft: ChangeDraft<A>) => Promise<T>,
): Promise<Committed<T, A>> {
  for (let tries = 1;; tries++) {
    const [current, marker, hooks] = await kv.getMany<
      [Deno.KvU64, unknown, EndpointList]
    >([REVISION, IMPORTING, ENDPOINTS]);
    // The import sets the marker with a revision bump, so the check of
    // `current` below also fails a change that raced its start.
    if (marker.value !== null) {
      throw new ImportStateError("import_unfinished");
    }
    const draft = new _Draft(kind.alters, kv);
    const result = await work(draft);
    const before = counted(current);
    const op = kv.atomic().check(current);
    if (
      draft.writes.length === 0 && draft.marks.length === 0 &&
      draft.lines.length === 0
    ) {
      // Nothing to write, yet the answer rests on what the draft read, and
      // is settled at the last change that altered those records (not the
      // store's: another key's, owed by a silent server, is no part of it),
      // only once a commit checking the revision confirms that nothing was
      // committed between reading it and the records (a first use's
      // retirement that another server made just then, found done here,
      // must be waited for at its own revision).
      const settled = kind.alters === "authentication"
        ? await draft.restsOn(before)
        : before;
      await draft.addTo(op, before);
      if ((await op.commit()).ok) return new Committed(kind, settled, result);
      if (tries >= MAX_TRIES) throw busy();
      await backoff(tries);
      continue;
    }
    const revision = before + BigInt(draft.moves);
    // The outbox in the same commit: an event is sent if and only if the
    // change that raised it was made.
    await queueEvents(op, draft, hooks);
    await draft.addTo(op, revision);
    for (const { seq, entry } of draft.numbered(before)) {
      op.set(auditKey(seq), entry);
    }
    if (revision > before) {
      op.set(REVISION, new Deno.KvU64(revision));
      if (kind.alters === "authentication") {
        op.set(AUTH_REVISION, new Deno.KvU64(revision));
      }
    }
    if ((await op.commit()).ok) {
      if (revision > before) await hintChange(kv);
      return new Committed(kind, revision, result);
    }
    if (tries >= MAX_TRIES) throw busy();
    await backoff(tries);
  }
}

/** A draft on `entries`: each read becomes a check, each write a mutation. */
class _Draft<A extends Alters> extends ChangeDraft<A> {
  #kv: Entries;
  #op: Check[] = [];
  /** The records `get` found, for `restsOn`. */
  #read: KeyRecord[] = [];
  #lastId: number | null = null;

  constructor(alters: A, kv: Entries) {
    super(alters);
    this.#kv = kv;
  }

  async get(id: number): Promise<KeyRecord | null> {
    const record = this.#checked(await this.#kv.get<KeyRecord>(keyById(id)))
      .value;
    if (record !== null) this.#read.push(record);
    return record;
  }

  /**
   * The last change that altered the authentication of a record read
   * (`authRevisionOf`); `none` when none was read. Its reads become checks.
   */
  async restsOn(none: bigint): Promise<bigint> {
    if (this.#read.length === 0) return none;
    const [auth, imported] = await this.#kv.getMany<[Deno.KvU64, Deno.KvU64]>(
      [AUTH_REVISION, IMPORT_REVISION],
    );
    let latest = 0n;
    for (const { hash } of this.#read) {
      const [stored, stamp] = await this.#kv.getMany<[KeyRecord, Deno.KvU64]>(
        [keyByHash(hash), authStampKey(hash)],
      );
      const at = authRevisionOf(this.#checked(stored), this.#checked(stamp), {
        auth: this.#checked(auth),
        imported: this.#checked(imported),
      });
      if (at > latest) latest = at;
    }
    return latest;
  }

  async nameHolder(name: string): Promise<number | null> {
    return this.#checked(await this.#kv.get<number>(keyByName(name))).value;
  }

  async hashTaken(hash: string): Promise<boolean> {
    return this.#checked(await this.#kv.get(keyByHash(hash))).value !== null;
  }

  async nextId(): Promise<number> {
    if (this.#lastId === null) {
      const counter = await this.#kv.get<Deno.KvU64>(KEY_ID_COUNTER);
      this.#lastId = Number(counted(this.#checked(counter)));
    }
    if (this.#lastId >= MAX_KEY_ID) throw new KeyIdsExhaustedError(MAX_KEY_ID);
    return ++this.#lastId;
  }

  async usage(id: number): Promise<UsageLists | null> {
    const [record, networks, refused] = await this.#kv.getMany<
      [KeyRecord, NetworkUse[], RefusedUse[]]
    >([keyById(id), networksKey(id), refusedKey(id)]);
    for (const entry of [record, networks, refused]) {
      this.#checked<unknown>(entry);
    }
    if (record.value === null) return null;
    return { networks: networks.value ?? [], refused: refused.value ?? [] };
  }

  async mark(parts: (string | number)[]): Promise<unknown> {
    return this.#checked(await this.#kv.get(markKey(parts))).value;
  }

  /**
   * Adds the checks of every read, then the draft's writes, to `op`, which
   * commits at `revision`: the stamp of each record an authentication
   * change writes. A usage note keeps the stamp the record had.
   */
  async addTo(op: Atomic, revision: bigint): Promise<void> {
    for (const { parts, value } of this.marks) op.set(markKey(parts), value);
    // Name entries follow the records: held by a valid key not in an
    // overlap, freed when the key that held one gives it up.
    const names = new Map<string, { key: EntryKey; id: number | null }>();
    for (const write of this.writes) {
      if (write.kind === "usage") {
        const { networks, refused } = write.lists;
        if (networks) op.set(networksKey(write.id), networks);
        if (refused) op.set(refusedKey(write.id), refused);
        continue;
      }
      const record = write.record;
      putRecord(op, record, {
        authRevision: this.alters === "authentication"
          ? revision
          : await this.#keptStamp(record),
      });
      let key: EntryKey;
      try {
        key = keyByName(record.name);
      } catch {
        continue; // A name no entry can hold (an imported revoked key's).
      }
      const slot = JSON.stringify(key);
      if (holdsName(record)) {
        names.set(slot, { key, id: record.id });
      } else if (!names.has(slot)) {
        const entry = this.#checked(await this.#kv.get<number>(key));
        if (entry.value === record.id) names.set(slot, { key, id: null });
      } else if (names.get(slot)!.id === record.id) {
        names.set(slot, { key, id: null });
      }
    }
    for (const { key, id } of names.values()) {
      if (id === null) op.delete(key);
      else op.set(key, id);
    }
    if (this.#lastId !== null) {
      op.set(KEY_ID_COUNTER, new Deno.KvU64(BigInt(this.#lastId)));
    }
    op.check(...this.#op);
  }

  /**
   * The stamp of `record` as stored, when it was written with the record (not
   * by 1.1, nor by hand), for a usage note to write again beside it; read as
   * checks, though any change between would move the revision anyway.
   */
  async #keptStamp(record: KeyRecord): Promise<bigint | undefined> {
    const [stored, stamp] = await this.#kv.getMany<[KeyRecord, Deno.KvU64]>([
      keyByHash(record.hash),
      authStampKey(record.hash),
    ]);
    this.#checked(stored);
    this.#checked(stamp);
    return stamp.versionstamp !== null &&
        stamp.versionstamp === stored.versionstamp
      ? counted(stamp)
      : undefined;
  }

  #checked<T>(entry: Entry<T>): Entry<T> {
    if (!this.#op.some((seen) => sameKey(seen.key, entry.key))) {
      this.#op.push(entry);
    }
    return entry;
  }
}
