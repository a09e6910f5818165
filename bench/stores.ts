/**
 * The stores the benchmark measures: a Deno KV file by default, or, with
 * BENCH_DATABASE_URL set to a PostgreSQL server (on 127.0.0.1: the bench
 * task may reach no other host), a fresh database per block on it, dropped
 * afterwards. Shared by the throughput rows (bench/bench.ts) and the
 * revocation rows (bench/revocation.ts), which each make their own stores.
 *
 * @module
 */

import type postgres from "postgres";
import type { StoreLocation } from "../lib/server/config.ts";
import { RATE_MAX_COUNT } from "../lib/auth/rate_limit.ts";
import type { KeyStore } from "../lib/store/types.ts";

/**
 * A key with the largest rate limit, per second, which the benchmark never
 * reaches: what a limit costs on the valid-key path.
 */
export async function addNeverLimitedKey(
  store: KeyStore,
  name: string,
  email: string,
  key: { hash: string; hint: string },
): Promise<void> {
  await store.create({
    name,
    email,
    hash: key.hash,
    hint: key.hint,
    rateLimit: { count: RATE_MAX_COUNT, windowSeconds: 1 },
  }, { actor: "bench" });
}

/** An empty store for one block of rows, and how the servers reach it. */
export interface BenchStore extends AsyncDisposable {
  /** Where the bench fills it. */
  location: StoreLocation;
  /** What a server's or the console's environment needs to use it. */
  env: Record<string, string>;
  /**
   * Transactions committed in this store's database so far, on PostgreSQL
   * (`pg_stat_database.xact_commit`); absent on a KV file, which has no
   * such count.
   */
  commits?: () => Promise<number>;
}

/** The kind of store measured: a Deno KV file, or PostgreSQL. */
export interface StoreKind {
  /** Heading of the results file. */
  title: string;
  /** Said of the store in the results file. */
  describe(): Promise<string>;
  /** A new empty store; `dir` is the servers' working folder. */
  create(dir: string): Promise<BenchStore>;
}

/** The default: the KV file where the start task keeps it, ./data/keys.db. */
export const kvKind: StoreKind = {
  title: "Benchmark results",
  describe: () => Promise.resolve("store: Deno KV file"),
  create: (dir) =>
    Promise.resolve({
      location: { kind: "kv", path: `${dir}/data/keys.db` },
      env: {},
      // The file goes with the temporary folder.
      async [Symbol.asyncDispose]() {},
    }),
};

/** A fresh database per block on the server named by `serverUrl`, dropped afterwards. */
export function postgresKind(serverUrl: string): StoreKind {
  const onServer = async <T>(
    work: (sql: postgres.Sql) => Promise<T>,
  ): Promise<T> => {
    // Loaded only here, so that the KV benchmark never loads the driver.
    const { default: connect } = await import("postgres");
    const sql = connect(serverUrl, { max: 1, onnotice: () => {} });
    try {
      return await work(sql);
    } finally {
      await sql.end();
    }
  };
  return {
    title: "Benchmark results on PostgreSQL",
    describe: () =>
      onServer(async (sql) => {
        const [row] = await sql.unsafe(
          "SELECT current_setting('server_version') AS version, current_setting('fsync') AS fsync",
        );
        return `store: PostgreSQL ${row.version} on ${
          new URL(serverUrl).host
        } (fsync ${row.fsync}), one fresh database per store size`;
      }),
    async create() {
      const name = `keys_bench_${crypto.randomUUID().replaceAll("-", "")}`;
      await onServer((sql) => sql.unsafe(`CREATE DATABASE ${name}`));
      const url = new URL(serverUrl);
      url.pathname = `/${name}`;
      return {
        location: { kind: "postgres", url: url.href },
        env: { DATABASE_URL: url.href },
        // Read through the server's own database, so that asking does not
        // count in the bench database. A backend reports its counts when
        // it goes idle (at most once a second) or exits: read after the
        // clients of interest have closed their connections.
        commits: () =>
          onServer(async (sql) => {
            const read = async () => {
              const [row] = await sql.unsafe(
                "SELECT xact_commit::text AS n FROM pg_stat_database WHERE datname = $1",
                [name],
              );
              return Number(row?.n ?? NaN);
            };
            // Until two reads apart agree: a backend that just closed may
            // still be reporting.
            let last = await read();
            for (let i = 0; i < 10; i++) {
              await new Promise((r) => setTimeout(r, 300));
              const now = await read();
              if (now === last) break;
              last = now;
            }
            return last;
          }),
        async [Symbol.asyncDispose]() {
          // FORCE: a server that did not stop cleanly may hold a connection.
          await onServer((sql) =>
            sql.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
          );
        },
      };
    },
  };
}

/** The store BENCH_DATABASE_URL asks for: PostgreSQL when set, else a KV file. */
export function benchStoreKind(databaseUrl: string | undefined): StoreKind {
  return databaseUrl === undefined ? kvKind : postgresKind(databaseUrl);
}
