/**
 * The seam's entries (lib/store/entries.ts) in one PostgreSQL table:
 * `entries (key bytea, value json, versionstamp bigint)`, keys encoded so
 * that the index orders them as Deno KV does (`_key_codec.ts`).
 *
 * Every read is one statement, so a `getMany` is one snapshot. Every
 * commit is one transaction that first takes a lock all commits share:
 * the checks it then compares cannot be raced, even a check that an entry
 * is still absent, which no row lock could hold. Commits are short (the
 * reads a change decides on were made before it), so the lock is held for
 * a few statements.
 *
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
import { decodeKey, encodeKey, prefixBounds } from "./_key_codec.ts";

/** The lock every commit takes (transaction-scoped); "entries" in ASCII. */
const COMMIT_LOCK = 0x656e7472;

/** Rows per statement when listing, unless the caller asks for fewer. */
const BATCH = 500;

/** The channel of change notices. */
const CHANNEL = "key_store_changes";

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
      const row = found.get(toHex(encoded[i]));
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
    let lower: Uint8Array;
    let inclusive: boolean;
    let upper: Uint8Array;
    if ("prefix" in selector) {
      const bounds = prefixBounds(selector.prefix);
      upper = bounds.before;
      inclusive = selector.start !== undefined;
      lower = inclusive ? encodeKey(selector.start!) : bounds.after;
    } else {
      [lower, inclusive, upper] = [
        encodeKey(selector.start),
        true,
        encodeKey(selector.end),
      ];
    }
    let left = options.limit ?? Infinity;
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
          key: decodeKey(fromHex(row.hex)),
          value: fromJson(row.value) as T,
          versionstamp: stamp(row.versionstamp),
        };
      }
      left -= rows.length;
      if (rows.length < count) return;
      [lower, inclusive] = [fromHex(rows[rows.length - 1].hex), false];
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
    this.#writes.set(toHex(encodeKey(key)), { value: toJson(value) });
    return this;
  }

  delete(key: EntryKey): this {
    this.#writes.set(toHex(encodeKey(key)), null);
    return this;
  }

  commit(): Promise<CommitResult> {
    const checks = this.#checks.map((check) => ({
      hex: toHex(encodeKey(check.key)),
      versionstamp: check.versionstamp,
    }));
    const sets = [...this.#writes].flatMap(([k, write]) =>
      write === null ? [] : [{ k, v: write.value }]
    );
    const deletes = [...this.#writes].flatMap(([k, write]) =>
      write === null ? [k] : []
    );
    const checked = json(checks.map((check) => check.hex));
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
      if (deletes.length > 0) {
        await tx`
          DELETE FROM entries WHERE key IN (
            SELECT decode(h, 'hex')
            FROM json_array_elements_text(${json(deletes)}::text::json) h)`;
      }
      if (sets.length > 0) {
        await tx`
          INSERT INTO entries (key, value, versionstamp)
          SELECT decode(m->>'k', 'hex'), (m->>'v')::json, ${next}::bigint
          FROM json_array_elements(${json(sets)}::text::json) m
          ON CONFLICT (key) DO UPDATE
            SET value = EXCLUDED.value, versionstamp = EXCLUDED.versionstamp`;
      }
      return { ok: true, versionstamp: stamp(next) };
    });
  }
}

/**
 * A value as stored: `{"v": …}` for JSON data, `{"u64": "…"}` for a
 * counter, so that no value can pass for the other. Anything JSON would
 * change or drop is refused at once rather than stored altered.
 */
function toJson(value: unknown): string {
  if (value instanceof Deno.KvU64) return json({ u64: value.value.toString() });
  return json(
    { v: value },
    function (this: Record<string, unknown>, key, part) {
      // The holder's own value: a Date has already become text in `part`.
      const original = this[key];
      const plain = typeof original !== "object" || original === null ||
        Array.isArray(original) ||
        [Object.prototype, null].includes(Object.getPrototypeOf(original));
      if (
        original === undefined || typeof original === "bigint" ||
        typeof original === "function" || typeof original === "symbol" ||
        (typeof original === "number" && !Number.isFinite(original)) || !plain
      ) {
        throw new TypeError(
          `A stored value cannot hold ${typeof original} ${key}`,
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

function json(
  value: unknown,
  replacer?: (
    this: Record<string, unknown>,
    key: string,
    value: unknown,
  ) => unknown,
): string {
  return JSON.stringify(value, replacer);
}

/** A versionstamp as Deno KV writes one: 20 hexadecimal digits. */
function stamp(decimal: string): string {
  return BigInt(decimal).toString(16).padStart(20, "0");
}

function toHex(bytes: Uint8Array): string {
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, "0")).join(
    "",
  );
}

function fromHex(hex: string): Uint8Array {
  const bytes = new Uint8Array(hex.length / 2);
  for (let i = 0; i < bytes.length; i++) {
    bytes[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  }
  return bytes;
}
