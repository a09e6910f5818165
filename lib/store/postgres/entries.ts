/**
 * The seam's entries (lib/store/entries.ts) in one PostgreSQL table,
 * `entries (key bytea, value json, versionstamp bigint)`, keys encoded so the
 * index orders them as Deno KV does (`_key_codec.ts`).
 *
 * Every read is one statement, so a `getMany` is one snapshot. Every commit
 * is one transaction that first takes a lock all commits share, so its checks
 * cannot be raced, even that an entry is still absent, which no row lock could
 * hold. Commits are short (a change's reads come before), so the lock is held
 * for a few statements.
 * @module
 */

import type {
  Atomic,
  Check,
  CommitResult,
  Entries,
  Entry,
  EntryKey,
  Present,
  Selector,
} from "../entries.ts";
import type { Pool } from "./connection.ts";
import {
  compareBytes,
  decodeKey,
  encodeKey,
  prefixBounds,
} from "./_key_codec.ts";

/** The lock every commit takes (transaction-scoped); "entries" in ASCII. */
const COMMIT_LOCK = 0x656e7472;

/** Rows per statement when listing, unless the caller asks for fewer. */
const BATCH = 500;

/** The channel of change notices. */
const CHANNEL = "key_store_changes";

/** Keys one `getMany` may read, as in Deno KV. */
const MAX_GET_MANY = 10;

interface Row {
  hex: string;
  value: string;
  versionstamp: string;
}

/** {@linkcode Entries} on the `entries` table of a migrated database. */
export class PostgresEntries implements Entries {
  #pool: Pool;

  constructor(pool: Pool) {
    this.#pool = pool;
  }

  async get<T>(key: EntryKey): Promise<Entry<T>> {
    return (await this.getMany<[T]>([key]))[0];
  }

  async getMany<T extends readonly unknown[]>(
    keys: readonly [...{ [K in keyof T]: EntryKey }],
  ): Promise<{ [K in keyof T]: Entry<T[K]> }> {
    if (keys.length > MAX_GET_MANY) {
      throw new TypeError(`Too many keys (max ${MAX_GET_MANY})`);
    }
    const sql = this.#pool.sql;
    const encoded = keys.map((key) => encodeKey(key));
    const rows = await this.#pool.read(() =>
      sql<Row[]>`
        SELECT encode(key, 'hex') AS hex, value::text AS value,
          versionstamp::text AS versionstamp
        FROM entries WHERE key IN ${sql(encoded)}`
    );
    const found = new Map(rows.map((row) => [row.hex, row]));
    return keys.map((key, i) => {
      const row = found.get(encoded[i].toHex());
      return row === undefined ? { key, value: null, versionstamp: null } : {
        key,
        value: fromJson(row.value),
        versionstamp: stamp(row.versionstamp),
      };
    }) as { [K in keyof T]: Entry<T[K]> };
  }

  async *list<T>(
    selector: Selector,
    options: { limit?: number; batchSize?: number } = {},
  ): AsyncIterable<Present<T>> {
    const sql = this.#pool.sql;
    let { lower, inclusive, upper } = range(selector);
    const limit = options.limit;
    if (limit !== undefined && !(Number.isInteger(limit) && limit > 0)) {
      throw new TypeError(`Limit must be a positive integer: ${limit}`);
    }
    let left = limit ?? Infinity;
    const batch = Math.max(1, Math.min(options.batchSize ?? BATCH, BATCH));
    while (left > 0) {
      const count = Math.min(batch, left);
      const rows = await this.#pool.call(() =>
        sql<Row[]>`
          SELECT encode(key, 'hex') AS hex, value::text AS value,
            versionstamp::text AS versionstamp
          FROM entries
          WHERE ${inclusive ? sql`key >= ${lower}` : sql`key > ${lower}`}
            AND key < ${upper}
          ORDER BY key LIMIT ${count}`
      );
      for (const row of rows) {
        yield {
          key: decodeKey(Uint8Array.fromHex(row.hex)),
          value: fromJson(row.value) as T,
          versionstamp: stamp(row.versionstamp),
        };
      }
      left -= rows.length;
      if (rows.length < count) return;
      [lower, inclusive] = [
        Uint8Array.fromHex(rows[rows.length - 1].hex),
        false,
      ];
    }
  }

  atomic(): Atomic {
    return new _PostgresAtomic(this.#pool);
  }

  async onChange(listener: () => void): Promise<() => Promise<void>> {
    // The driver keeps one connection for it and listens again after a
    // reconnect; a notice lost meanwhile is made up by the servers' polls.
    const { unlisten } = await this.#pool.call(() =>
      this.#pool.sql.listen(CHANNEL, () => listener())
    );
    return unlisten;
  }

  async hint(): Promise<void> {
    await this.#pool.call(() =>
      this.#pool.sql`SELECT pg_notify(${CHANNEL}, '')`
    );
  }

  async close(): Promise<void> {
    await this.#pool.end(2);
  }
}

/** One commit being built: checks and writes kept until `commit()`. */
class _PostgresAtomic implements Atomic {
  #pool: Pool;
  #checks: Check[] = [];
  /** The last write of each key, by its bytes in hex, in order of first write. */
  #writes = new Map<string, { value: string } | null>();

  constructor(pool: Pool) {
    this.#pool = pool;
  }

  check(...checks: Check[]): this {
    this.#checks.push(...checks);
    return this;
  }

  set(key: EntryKey, value: unknown): this {
    this.#writes.set(encodeKey(key).toHex(), { value: toJson(value) });
    return this;
  }

  delete(key: EntryKey): this {
    this.#writes.set(encodeKey(key).toHex(), null);
    return this;
  }

  commit(): Promise<CommitResult> {
    const checks = this.#checks.map((check) => ({
      hex: encodeKey(check.key).toHex(),
      versionstamp: check.versionstamp,
    }));
    const writes = [...this.#writes];
    const deleted = writes.filter(([, write]) => write === null);
    const written = writes.flatMap(([k, write]) =>
      write === null ? [] : [{ k, v: write.value }]
    );
    const checked = JSON.stringify(checks.map((check) => check.hex));
    const deletes = JSON.stringify(deleted.map(([k]) => k));
    const sets = JSON.stringify(written);
    return this.#pool.transaction(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(${COMMIT_LOCK})`;
      if (checks.length > 0) {
        const rows = await tx<{ hex: string; versionstamp: string }[]>`
          SELECT encode(key, 'hex') AS hex, versionstamp::text AS versionstamp
          FROM entries WHERE key IN (
            SELECT decode(h, 'hex')
            FROM json_array_elements_text(${checked}::text::json) h)`;
        const now = new Map(
          rows.map((row) => [row.hex, stamp(row.versionstamp)]),
        );
        if (checks.some((c) => (now.get(c.hex) ?? null) !== c.versionstamp)) {
          return { ok: false };
        }
      }
      const [{ next }] = await tx<{ next: string }[]>`
        SELECT nextval('entry_versionstamps')::text AS next`;
      if (deleted.length > 0) {
        await tx`
          DELETE FROM entries WHERE key IN (
            SELECT decode(h, 'hex')
            FROM json_array_elements_text(${deletes}::text::json) h)`;
      }
      if (written.length > 0) {
        await tx`
          INSERT INTO entries (key, value, versionstamp)
          SELECT decode(m->>'k', 'hex'), (m->>'v')::json, ${next}::bigint
          FROM json_array_elements(${sets}::text::json) m
          ON CONFLICT (key) DO UPDATE
            SET value = EXCLUDED.value, versionstamp = EXCLUDED.versionstamp`;
      }
      return { ok: true, versionstamp: stamp(next) };
    });
  }
}

/**
 * The bytes a list runs over. A selector Deno KV refuses is refused alike (a
 * start outside the prefix), so layout mistakes fail on both.
 */
function range(
  selector: Selector,
): { lower: Uint8Array; inclusive: boolean; upper: Uint8Array } {
  if (!("prefix" in selector)) {
    const [lower, upper] = [encodeKey(selector.start), encodeKey(selector.end)];
    if (compareBytes(lower, upper) > 0) {
      throw new TypeError("Start key is greater than end key");
    }
    return { lower, inclusive: true, upper };
  }
  const { after, before } = prefixBounds(selector.prefix);
  if (selector.start === undefined) {
    return { lower: after, inclusive: false, upper: before };
  }
  // Between the two bounds lie exactly the longer keys under the prefix.
  const lower = encodeKey(selector.start);
  if (compareBytes(lower, after) <= 0 || compareBytes(lower, before) >= 0) {
    throw new TypeError("Start key is not in the keyspace defined by prefix");
  }
  return { lower, inclusive: true, upper: before };
}

/**
 * A value as stored: `{"v": …}`, or `{"u64": "…"}` for a counter, never
 * confused. What JSON would alter or drop is refused.
 */
function toJson(value: unknown): string {
  if (value instanceof Deno.KvU64) {
    return JSON.stringify({ u64: value.value.toString() });
  }
  return JSON.stringify(
    { v: value },
    function (this: Record<string, unknown>, key: string, part: unknown) {
      // The holder's own value: a Date has already become text in `part`.
      const original = this[key];
      const plain = typeof original !== "object" || original === null ||
        Array.isArray(original) ||
        [Object.prototype, null].includes(Object.getPrototypeOf(original));
      if (
        original === undefined || typeof original === "bigint" ||
        typeof original === "function" || typeof original === "symbol" ||
        (typeof original === "number" && !Number.isFinite(original)) ||
        Object.is(original, -0) || !plain
      ) {
        throw new TypeError(
          `A stored value cannot hold ${
            Object.is(original, -0) ? "-0" : typeof original
          } at ${JSON.stringify(key)}`,
        );
      }
      return part;
    },
  );
}

function fromJson(text: string): unknown {
  const stored = JSON.parse(text) as { v?: unknown; u64?: string };
  return stored.u64 !== undefined
    ? new Deno.KvU64(BigInt(stored.u64))
    : stored.v;
}

/** A versionstamp as Deno KV writes one: 20 hexadecimal digits. */
function stamp(decimal: string): string {
  return BigInt(decimal).toString(16).padStart(20, "0");
}
