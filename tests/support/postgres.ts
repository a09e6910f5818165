/**
 * Test helpers for the PostgreSQL store: a fresh database per test on the
 * server named by `TEST_DATABASE_URL`, and tests that show as ignored when
 * it is unset, so that a developer without PostgreSQL still gets a green run.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { freePort } from "./processes.ts";
import type { StoreLocation } from "../../lib/store/location.ts";

/** The server the tests create their databases on; unset means skip them. */
export const TEST_DATABASE_URL: string | undefined =
  Deno.env.get("TEST_DATABASE_URL") || undefined;

/** True when the PostgreSQL tests must be registered as ignored. */
export const NO_DATABASE: boolean = TEST_DATABASE_URL === undefined;

/** A database of its own for one test, dropped when the `await using` scope ends. */
export interface TestDatabase extends AsyncDisposable {
  /** Its URL, on the same server and with the same user as `TEST_DATABASE_URL`. */
  url: string;
  /** Runs one statement on it as the test user, outside any store. */
  query(text: string): Promise<Record<string, unknown>[]>;
}

/**
 * The store a test runs on: `database` when given, else the KV file at
 * `path`; as the tasks' variables and as a location (which rawEntries and
 * openStore take alike).
 */
export function testStore(
  database: TestDatabase | null | undefined,
  path: string,
): { env: Record<string, string>; location: StoreLocation } {
  return database
    ? {
      env: { DATABASE_URL: database.url },
      location: { kind: "postgres", url: database.url },
    }
    : { env: { DENO_KV_PATH: path }, location: { kind: "kv", path } };
}

/** Creates an empty database on the test server. */
export async function freshDatabase(): Promise<TestDatabase> {
  const base = new URL(required());
  const name = `keys_test_${crypto.randomUUID().replaceAll("-", "")}`;
  await onServer((sql) => sql.unsafe(`CREATE DATABASE ${name}`));
  const url = new URL(base);
  url.pathname = `/${name}`;
  return {
    url: url.href,
    async query(text) {
      const sql = postgres(url.href, { max: 1, onnotice: () => {} });
      try {
        return [...await sql.unsafe(text)];
      } finally {
        await sql.end();
      }
    },
    async [Symbol.asyncDispose]() {
      // FORCE: a test that failed half-way may have left a connection open.
      await onServer((sql) =>
        sql.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
      );
    },
  };
}

async function onServer(
  work: (sql: postgres.Sql) => Promise<unknown>,
): Promise<void> {
  const sql = postgres(required(), { max: 1, onnotice: () => {} });
  try {
    await work(sql);
  } finally {
    await sql.end();
  }
}

function required(): string {
  if (TEST_DATABASE_URL === undefined) {
    throw new Error(
      "TEST_DATABASE_URL is not set; start PostgreSQL with scripts/postgres_test_server.sh and set it to the URL printed",
    );
  }
  return TEST_DATABASE_URL;
}

/**
 * Runs `register` with `Deno.test` registering every test as ignored when
 * there is no test database, so that shared suites written with plain
 * `Deno.test(name, fn)` show up by name as ignored.
 */
export function registerWithDatabase(register: () => void): void {
  if (!NO_DATABASE) return register();
  const test = Deno.test;
  const ignored = (name: string, fn: () => Promise<void>) =>
    test({ name, fn, ignore: true });
  Object.assign(Deno, { test: ignored });
  try {
    register();
  } finally {
    Object.assign(Deno, { test });
  }
}

const SCRIPT = new URL("../../scripts/postgres_test_server.sh", import.meta.url)
  .pathname;

/**
 * Runs scripts/postgres_test_server.sh, for a test that starts and stops a
 * PostgreSQL server of its own; returns what it printed (the URL on start).
 */
export async function postgresScript(args: string[]): Promise<string> {
  const out = await new Deno.Command("bash", {
    args: [SCRIPT, ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  assert.equal(out.code, 0, decoder.decode(out.stderr));
  return decoder.decode(out.stdout).trim();
}

/** Sends a signal to a process that may be gone already. */
export function signal(pid: number, name: Deno.Signal): void {
  try {
    Deno.kill(pid, name);
  } catch {
    // already gone
  }
}

/**
 * A throwaway PostgreSQL cluster of this test's own, which it may stop and
 * freeze without touching the one the other tests share.
 */
export async function ownCluster(folder: string): Promise<
  {
    url: string;
    stop(): Promise<void>;
    start(): Promise<void>;
    /** Every process of the cluster, the postmaster first. */
    pids(): number[];
  } & AsyncDisposable
> {
  // The script runs PostgreSQL as the postgres user, who must reach it.
  await Deno.chmod(folder, 0o755);
  const dir = `${folder}/pg`;
  const port = freePort();
  const url = await postgresScript(["start", dir, String(port)]);
  const pids = () => {
    const postmaster = Number(
      Deno.readTextFileSync(`${dir}/data/postmaster.pid`).split("\n")[0],
    );
    const children: number[] = [];
    for (const entry of Deno.readDirSync("/proc")) {
      if (!/^\d+$/.test(entry.name)) continue;
      try {
        const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
        const ppid = Number(
          stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1],
        );
        if (ppid === postmaster) children.push(Number(entry.name));
      } catch {
        // gone meanwhile
      }
    }
    return [postmaster, ...children];
  };
  return {
    url,
    stop: async () => void await postgresScript(["stop", dir]),
    start: async () => void await postgresScript(["start", dir, String(port)]),
    pids,
    async [Symbol.asyncDispose]() {
      // Thawed first, so that a failed freeze test cannot leave it stuck.
      try {
        for (const pid of pids()) signal(pid, "SIGCONT");
      } catch {
        // not running
      }
      await postgresScript(["stop", dir]);
    },
  };
}
