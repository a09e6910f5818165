/**
 * What the console says about a change is what the store holds, on every
 * path issue 18 found it did not: a change given up on while stalled, a
 * broken server registration, and Ctrl-C during the wait for servers.
 *
 * The real console runs as a child process; the tests wait for its lines
 * and for events in the store, never for a fixed time.
 */

import assert from "node:assert/strict";
import postgres from "postgres";
import { hashApiKey } from "../../lib/auth/api_key.ts";
import { openPostgresStore } from "../../lib/store/postgres/store.ts";
import {
  createKey,
  keys,
  type ServerProcess,
  startServer,
  taskCommand,
  tempDir,
} from "../support/processes.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";
import { type RawEntries, rawEntries } from "../support/raw_entries.ts";
import { until } from "../support/wait.ts";

const LIMITED_CONSOLE =
  new URL("../support/console_with_limits.ts", import.meta.url).pathname;

/** A console child process whose stderr can be waited on line by line. */
interface RunningConsole {
  process: Deno.ChildProcess;
  /** Resolves with stderr so far once `pattern` matches it. */
  printed(pattern: RegExp): Promise<string>;
  /** Waits for the exit; the code and everything printed. */
  finished(): Promise<{ code: number; stdout: string; stderr: string }>;
}

/** The console, giving up on a change after `args[0]` ms (and on nothing else). */
function spawnConsole(
  args: string[],
  options: { cwd: string; env: Record<string, string> },
): RunningConsole {
  return watched(
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", LIMITED_CONSOLE, ...args],
      cwd: options.cwd,
      env: options.env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }),
  );
}

/** Spawns `command`, whose stdout and stderr are piped. */
function watched(command: Deno.Command): RunningConsole {
  const process = command.spawn();
  let stderr = "";
  const waiting: { pattern: RegExp; resolve: (text: string) => void }[] = [];
  const settle = () => {
    for (const waiter of [...waiting]) {
      if (waiter.pattern.test(stderr)) {
        waiting.splice(waiting.indexOf(waiter), 1);
        waiter.resolve(stderr);
      }
    }
  };
  const collect = async (stream: ReadableStream<Uint8Array>) => {
    let text = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      text += chunk;
    }
    return text;
  };
  const stdout = collect(process.stdout);
  const stderrDone = (async () => {
    for await (
      const chunk of process.stderr.pipeThrough(new TextDecoderStream())
    ) {
      stderr += chunk;
      settle();
    }
  })();
  return {
    process,
    printed(pattern) {
      return new Promise((resolve, reject) => {
        waiting.push({ pattern, resolve });
        settle();
        stderrDone.then(() => {
          if (waiting.some((waiter) => waiter.pattern === pattern)) {
            reject(
              new Error(
                `the console exited without printing ${pattern}:\n${stderr}`,
              ),
            );
          }
        });
      });
    },
    async finished() {
      const [status, out] = await Promise.all([process.status, stdout]);
      await stderrDone;
      return { code: status.code, stdout: out, stderr };
    },
  };
}

Deno.test({
  name:
    "PostgreSQL: a rotation stalled by a row lock and given up on says what the store holds, and the store still holds it once the lock is released",
  ignore: NO_DATABASE,
  async fn() {
    using dir = tempDir();
    await using database = await freshDatabase();
    const env = { DATABASE_URL: database.url };
    const old = await createKey(dir.path, "stalled", undefined, env);
    // Another session holds the table every commit writes.
    const holder = postgres(database.url, { max: 1, onnotice: () => {} });
    let release!: () => void;
    const released = new Promise<void>((resolve) => release = resolve);
    let locked!: () => void;
    const lockHeld = new Promise<void>((resolve) => locked = resolve);
    const holding = holder.begin(async (tx) => {
      await tx`LOCK TABLE entries IN EXCLUSIVE MODE`;
      locked();
      await released;
    });
    try {
      await lockHeld;
      const console = spawnConsole(["300", "rotate", "stalled", "--yes"], {
        cwd: dir.path,
        env,
      });
      // The console has given up and said so; only now may the rotation
      // go on, if anything still runs it.
      const said = await console.printed(/\n/);
      release();
      await holding;
      const result = await console.finished();
      assert.equal(result.code, 1, said);
      // Every connection of the console has ended: nothing of it can
      // commit any more.
      await until(async () =>
        (await database.query(
          "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'integration-service'",
        )).length === 0, "the end of the console's connections");
      const store = await openPostgresStore(database.url);
      try {
        const written = await store.findByHash(hashApiKey(result.stdout));
        const before = await store.get(old.id);
        assert.equal(
          written,
          null,
          "the key the console said to discard is stored",
        );
        assert.equal(before?.status, "valid", "the old key was revoked");
        assert.equal(before?.replacedBy, null);
        assert.match(result.stderr, /was not stored and does not work/);
        assert.match(result.stderr, /cancelled and nothing changed/);
        assert.match(
          result.stderr,
          new RegExp(`key ${old.id} is unchanged and still valid`),
        );
      } finally {
        await store.close();
      }
    } finally {
      release();
      await holding.catch(() => {});
      await holder.end();
    }
  },
});

/** The stores a test runs on; PostgreSQL's are ignored without a database. */
const STORES = [
  { label: "KV", postgres: false },
  { label: "PostgreSQL", postgres: true },
] as const;

/** A KV file in `cwd` (the console's default path), or a fresh database. */
async function storeIn(cwd: string, postgres: boolean): Promise<
  AsyncDisposable & {
    env: Record<string, string>;
    /** Writes a registration no server would write, under `id`. */
    plantBroken(id: string): Promise<void>;
    /** The ids of the registrations in the store. */
    registrations(): Promise<string[]>;
  }
> {
  const database = postgres ? await freshDatabase() : null;
  const where = database === null
    ? { path: `${cwd}/data/keys.db` }
    : { url: database.url };
  // Each reach behind the store opens and closes the entries, as a second
  // process would, so that the console under test sees what it wrote.
  const withEntries = async <T>(work: (entries: RawEntries) => Promise<T>) => {
    await using entries = await rawEntries(where);
    return await work(entries);
  };
  return {
    env: database === null ? {} : { DATABASE_URL: database.url },
    plantBroken: (id) =>
      withEntries(async (entries) => {
        // A start time no clock gives: read back, it is no date at all.
        const broken = {
          id,
          host: "web-9",
          pid: 4242,
          startedAt: "infinity",
          leaseMs: 3000,
          acked: "not a revision",
        };
        await entries.atomic().set(["instances", id], broken).commit();
      }),
    registrations: () =>
      withEntries(async (entries) => {
        const ids: string[] = [];
        for await (const entry of entries.list({ prefix: ["instances"] })) {
          ids.push(String(entry.key[1]));
        }
        return ids;
      }),
    [Symbol.asyncDispose]: async () => await database?.[Symbol.asyncDispose](),
  };
}

for (const { label, postgres: onPostgres } of STORES) {
  Deno.test({
    name:
      `${label}: a broken server registration is named and removed by the next change, and the change after it does not wait`,
    ignore: onPostgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using store = await storeIn(dir.path, onPostgres);
      const first = await createKey(dir.path, "first", undefined, store.env);
      const second = await createKey(dir.path, "second", undefined, store.env);
      await store.plantBroken("broken-1");

      const named = await keys(
        dir.path,
        ["revoke", String(first.id), "--yes"],
        store.env,
      );
      assert.equal(named.code, 0, named.stderr);
      assert.match(
        named.stderr,
        /Removed a broken server registration "broken-1"/,
      );
      assert.deepEqual(await store.registrations(), []);

      const next = await keys(
        dir.path,
        ["revoke", String(second.id), "--yes"],
        store.env,
      );
      assert.equal(next.code, 0, next.stderr);
      assert.doesNotMatch(
        next.stderr,
        /Waiting|broken|did not confirm|before confirming/,
      );
    },
  });
}

/** Sends `signal` to `pid`, which may be gone already. */
function signal(pid: number, name: Deno.Signal): void {
  try {
    Deno.kill(pid, name);
  } catch {
    // already gone
  }
}

/** The state letter of a process in /proc (T: stopped by a signal). */
function processState(pid: number): string {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
}

for (const { label, postgres: onPostgres } of STORES) {
  Deno.test({
    name:
      `${label}: Ctrl-C during the wait for a paused server says the key is revoked in the store and which server had not confirmed it, and exits 3 (--json: error wait_interrupted)`,
    ignore: onPostgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using store = await storeIn(dir.path, onPostgres);
      const target = await createKey(dir.path, "target", undefined, store.env);
      let server: ServerProcess | undefined;
      try {
        server = await startServer(dir.path, {
          HOST: "127.0.0.1",
          ...store.env,
        });
        const pid = server.process.pid;
        // Registered once it has answered from a lease it holds.
        const answer = await fetch(
          `${server.url}/api/v1/integration/connection`,
          { headers: { "X-API-Key": target.key } },
        );
        await answer.body?.cancel();
        assert.equal(answer.status, 200);
        await storeHolds(store, 1);
        signal(pid, "SIGSTOP");
        await until(
          () => Promise.resolve(processState(pid) === "T"),
          "the server's stop",
        );

        const console = watched(
          taskCommand("keys", {
            cwd: dir.path,
            args: ["revoke", String(target.id), "--yes", "--json"],
            env: store.env,
          }),
        );
        await console.printed(/Waiting up to/);
        console.process.kill("SIGINT");
        const result = await console.finished();
        assert.equal(result.code, 3, result.stderr);
        // With --json, the one value on stdout is the failure, with its code.
        assert.equal(
          JSON.parse(result.stdout).error.code,
          "wait_interrupted",
          result.stdout,
        );
        assert.match(
          result.stderr,
          new RegExp(
            `Key ${target.id} is revoked in the store; 1 server had not yet confirmed it: pid ${pid}\\b.*; it stops accepting key ${target.id} within \\d+(\\.\\d)? s, when its lease runs out`,
          ),
        );
        const shown = await keys(
          dir.path,
          ["show", String(target.id), "--json"],
          store.env,
        );
        assert.equal(JSON.parse(shown.stdout).status, "revoked");
      } finally {
        if (server !== undefined) {
          signal(server.process.pid, "SIGCONT");
          await server.stop();
        }
      }
    },
  });
}

/** Waits until the store holds `count` server registrations. */
async function storeHolds(
  store: { registrations(): Promise<string[]> },
  count: number,
): Promise<void> {
  await until(
    async () => (await store.registrations()).length === count,
    `${count} registrations`,
  );
}
