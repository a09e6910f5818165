/**
 * The PostgreSQL store against a real PostgreSQL (`TEST_DATABASE_URL`): the
 * shared store contract, its schema handling, and how it behaves when the
 * database stops answering.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { StoreUnavailableError } from "../../lib/store/errors.ts";
import {
  migrate,
  SCHEMA_VERSION,
  SchemaVersionError,
} from "../../lib/store/postgres/schema.ts";
import { openPostgresStore } from "../../lib/store/postgres/store.ts";
import type { KeyStore } from "../../lib/store/types.ts";
import { leaseContract } from "../support/lease_contract.ts";
import { storeContract } from "../support/store_contract.ts";
import {
  freshDatabase,
  NO_DATABASE,
  registerWithDatabase,
} from "../support/postgres.ts";

registerWithDatabase(() =>
  storeContract("postgres store", async () => {
    const database = await freshDatabase();
    try {
      const store = await openPostgresStore(database.url);
      return Object.assign(store, {
        async [Symbol.asyncDispose]() {
          await store.close();
          await database[Symbol.asyncDispose]();
        },
      });
    } catch (error) {
      await database[Symbol.asyncDispose]();
      throw error;
    }
  })
);

registerWithDatabase(() =>
  leaseContract("postgres store", async () => {
    const database = await freshDatabase();
    const opened: KeyStore[] = [];
    return {
      async open() {
        const store = await openPostgresStore(database.url);
        opened.push(store);
        return store;
      },
      async [Symbol.asyncDispose]() {
        for (const store of opened) await store.close().catch(() => {});
        await database[Symbol.asyncDispose]();
      },
    };
  })
);

const ACTOR = "tester@host";

function input(name: string) {
  const { hash, hint } = generateApiKey();
  return { name, email: `${name}@example.com`, hash, hint };
}

Deno.test({
  name:
    "postgres store: a database whose schema is newer than the code is refused with a one-line error naming the fix",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await (await openPostgresStore(database.url)).close();
    await database.query(
      `INSERT INTO store_schema (version) VALUES (${SCHEMA_VERSION + 1})`,
    );
    for (
      const attempt of [
        () => openPostgresStore(database.url),
        () => migrate(database.url),
      ]
    ) {
      await assert.rejects(attempt(), (error: Error) => {
        assert.ok(error instanceof SchemaVersionError, String(error));
        assert.equal(error.code, "schema_too_new");
        assert.deepEqual([error.found, error.known], [
          SCHEMA_VERSION + 1,
          SCHEMA_VERSION,
        ]);
        // The line the operator reads names the fix.
        assert.match(error.message, /upgrade the service/);
        assert.ok(!error.message.includes("\n"));
        assert.ok(!error.message.endsWith("."));
        return true;
      });
    }
  },
});

Deno.test({
  name:
    "postgres store: reopening, migrating again and opening from several processes at once keep the schema and the keys",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const opened = await Promise.all(
      Array.from({ length: 4 }, () => openPostgresStore(database.url)),
    );
    const key = await opened[0].create(input("a"), { actor: ACTOR });
    await Promise.all(opened.map((store) => store.close()));

    assert.deepEqual(await migrate(database.url), {
      from: SCHEMA_VERSION,
      to: SCHEMA_VERSION,
    });
    const store = await openPostgresStore(database.url);
    try {
      assert.deepEqual(await store.get(key.id), key);
      assert.equal(
        (await store.create(input("b"), { actor: ACTOR })).id,
        key.id + 1,
      );
    } finally {
      await store.close();
    }
    const versions = await database.query(
      "SELECT version FROM store_schema ORDER BY version",
    );
    assert.deepEqual(
      versions.map((row) => row.version),
      Array.from({ length: SCHEMA_VERSION }, (_, i) => i + 1),
    );
  },
});

Deno.test({
  name:
    "postgres store: migrate() on an empty database reports the versions it applied",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    assert.deepEqual(await migrate(database.url), {
      from: 0,
      to: SCHEMA_VERSION,
    });
  },
});

Deno.test({
  name:
    "postgres store: the store holds hashes only, never a key, in any entry or table",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    const store = await openPostgresStore(database.url);
    const fresh = generateApiKey();
    try {
      const record = await store.create({
        name: "a",
        email: "a@example.com",
        hash: fresh.hash,
        hint: fresh.hint,
      }, { actor: ACTOR });
      await store.rotate(record.id, generateApiKey(), { actor: ACTOR });
    } finally {
      await store.close();
    }
    // Every entry, its key's bytes as text too (a hash is a key's part),
    // and every other table whole.
    const dump = await database.query(`
      SELECT string_agg(encode(key, 'escape') || value::text, ' ') AS text
      FROM entries`);
    const tables = await database.query(`
      SELECT table_name FROM information_schema.tables
      WHERE table_schema = 'public' AND table_name <> 'entries'`);
    for (const { table_name } of tables) {
      const [{ text }] = await database.query(
        `SELECT coalesce(json_agg(t)::text, '') AS text FROM "${table_name}" t`,
      );
      assert.ok(!String(text).includes(fresh.key), `table ${table_name}`);
    }
    assert.ok(String(dump[0].text).includes(fresh.hash));
    assert.ok(!String(dump[0].text).includes(fresh.key));
  },
});

Deno.test({
  name:
    "postgres store: a database that stops answering makes every request-path read fail as unavailable within the read timeout, and reads work again once it answers",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await using proxy = freezableProxy(new URL(database.url));
    const url = new URL(database.url);
    url.port = String(proxy.port);
    const store = await openPostgresStore(url.href, {
      readTimeoutMs: 1000,
      connectTimeoutSeconds: 1,
    });
    try {
      const record = await store.create(input("a"), { actor: ACTOR });
      assert.equal((await store.findByHash(record.hash))?.id, record.id);

      proxy.freeze();
      for (
        const read of [
          () => store.findByHash(record.hash),
          () => store.findByHashAt(record.hash),
          () => store.revision(),
          () => store.findByHash(generateApiKey().hash),
        ]
      ) {
        const started = performance.now();
        await assert.rejects(read(), StoreUnavailableError);
        const elapsed = performance.now() - started;
        // The read timeout (1 s here) plus as much again for this process's
        // timers to run late on a busy machine: a read without the limit
        // would hang on the frozen proxy for good.
        assert.ok(elapsed < 2000, `gave up after ${Math.round(elapsed)} ms`);
      }

      proxy.thaw();
      const deadline = Date.now() + 10_000;
      for (;;) {
        try {
          assert.equal((await store.findByHash(record.hash))?.id, record.id);
          break;
        } catch (error) {
          if (Date.now() > deadline) throw error;
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      }
    } finally {
      await store.close();
    }
  },
});

Deno.test({
  name:
    "postgres store: a database that cannot be reached fails the open as unavailable, not as a crash",
  ignore: NO_DATABASE,
  async fn() {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = listener.addr.port;
    listener.close();
    await assert.rejects(
      openPostgresStore(`postgres://nobody@127.0.0.1:${port}/none`),
      (error: Error) =>
        error instanceof StoreUnavailableError &&
        error.code === "store_unavailable",
    );
  },
});

/**
 * A TCP proxy in front of the database that can stop passing bytes either
 * way, as a network partition or a frozen server would, and start again.
 */
function freezableProxy(target: URL):
  & { port: number; freeze(): void; thaw(): void }
  & AsyncDisposable {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  let gate: PromiseWithResolvers<void> | null = null;
  const conns = new Set<Deno.Conn>();
  const pumps: Promise<void>[] = [];
  const pump = async (from: Deno.Conn, to: Deno.Conn) => {
    const buffer = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await from.read(buffer);
        if (n === null) break;
        while (gate !== null) await gate.promise;
        await to.write(buffer.subarray(0, n));
      }
    } catch {
      // either side went away
    }
    for (const conn of [from, to]) {
      if (conns.delete(conn)) conn.close();
    }
  };
  const accepting = (async () => {
    for await (const client of listener) {
      const server = await Deno.connect({
        hostname: target.hostname,
        port: Number(target.port),
      });
      conns.add(client);
      conns.add(server);
      pumps.push(pump(client, server), pump(server, client));
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    freeze() {
      gate ??= Promise.withResolvers<void>();
    },
    thaw() {
      gate?.resolve();
      gate = null;
    },
    async [Symbol.asyncDispose]() {
      gate?.resolve();
      gate = null;
      listener.close();
      await accepting.catch(() => {});
      for (const conn of conns) conn.close();
      conns.clear();
      await Promise.all(pumps);
    },
  };
}
