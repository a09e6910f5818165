/**
 * `keys import` as an attacker drives it, with a server running on the same
 * store: an import fed slowly through a FIFO and failing on a bad line, one
 * killed with SIGKILL half-way, two at once, and an export full of long
 * revoke reasons. On both stores; PostgreSQL shows as ignored without
 * TEST_DATABASE_URL.
 */

import assert from "node:assert/strict";
import { generateApiKey, KEY_PATTERN } from "../../lib/auth/api_key.ts";
import { exportTo, importFrom } from "../../lib/console/backup/mod.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import { openPostgresStore } from "../../lib/store/postgres/store.ts";
import { newRecord } from "../../lib/store/records.ts";
import type { KeyStore } from "../../lib/store/types.ts";
import {
  createKey,
  keys,
  startServer,
  taskArgs,
  taskCommand,
  tempDir,
} from "../support/processes.ts";
import { check } from "../support/http.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";
import { rawEntries } from "../support/raw_entries.ts";
import { until } from "../support/wait.ts";

type StoreEnv = Record<string, string>;

/** Whether an import is under way on the test's store, seen from outside it. */
type ImportProbe = () => Promise<boolean>;

/**
 * Registers a test on both stores; `env` selects the store for every task,
 * and `importing` tells whether an import has begun: an event to wait for,
 * where a sleep guessed at how soon a console starts and begins.
 */
function onBothStores(
  name: string,
  fn: (env: StoreEnv, cwd: string, importing: ImportProbe) => Promise<void>,
): void {
  Deno.test(`kv store: ${name}`, async () => {
    using dir = tempDir();
    await fn({}, dir.path, marked({ path: `${dir.path}/data/keys.db` }));
  });
  Deno.test({
    name: `postgres store: ${name}`,
    ignore: NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using database = await freshDatabase();
      const importing = marked({ url: database.url });
      await fn({ DATABASE_URL: database.url }, dir.path, importing);
    },
  });
}

/** Whether the marker an import sets before its first batch is there (lib/store/layout/_import.ts). */
function marked(where: { path: string } | { url: string }): ImportProbe {
  return async () => {
    await using entries = await rawEntries(where);
    return (await entries.get(["importing"])).value !== null;
  };
}

/** No lock-out: the tests send many refused keys from one address on purpose. */
const SERVER_ENV = { LOCKOUT_MAX_FAILURES: "1000000" };

const HEADER = JSON.stringify({
  format: "integration-service-keys",
  version: 3,
  exportedAt: new Date().toISOString(),
});

/** Export lines of `count` valid keys with ids from `first`, and the keys. */
function exportLines(
  count: number,
  first = 1,
): { lines: string[]; keys: string[] } {
  const lines: string[] = [];
  const made: string[] = [];
  for (let id = first; id < first + count; id++) {
    const fresh = generateApiKey();
    made.push(fresh.key);
    lines.push(JSON.stringify({
      type: "key",
      record: newRecord(id, {
        name: `installation-${id}`,
        email: `ops-${id}@example.com`,
        hash: fresh.hash,
        hint: fresh.hint,
      }, new Date()),
    }));
  }
  return { lines, keys: made };
}

/** `keys import FILE` started, not awaited. */
function spawnImport(
  cwd: string,
  args: string[],
  env: StoreEnv,
): Deno.ChildProcess {
  return taskCommand("keys", { cwd, args: ["import", ...args], env }).spawn();
}

/** A FIFO under ./data and its writing end, opened once the import reads it. */
async function fifo(
  cwd: string,
  name: string,
): Promise<{ path: string; open(): Promise<WritableWriter> }> {
  await Deno.mkdir(`${cwd}/data`, { recursive: true });
  const path = `${cwd}/data/${name}`;
  const made = await new Deno.Command("mkfifo", { args: [path] }).output();
  assert.ok(made.success, "mkfifo failed");
  return {
    path: `./data/${name}`,
    async open() {
      const file = await Deno.open(path, { write: true });
      const encoder = new TextEncoder();
      return {
        async write(lines: string[]) {
          const bytes = encoder.encode(lines.map((l) => l + "\n").join(""));
          for (let done = 0; done < bytes.length;) {
            done += await file.write(bytes.subarray(done));
          }
        },
        close: () => file.close(),
      };
    },
  };
}

interface WritableWriter {
  write(lines: string[]): Promise<void>;
  close(): void;
}

async function finished(
  child: Deno.ChildProcess,
): Promise<{ code: number; stderr: string }> {
  const out = await child.output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

/**
 * A server on the store, and `keys import` of 600 keys fed through a FIFO
 * up to its last line and given time to write them; the import still waits
 * for the rest of its file. Disposing it stops the server.
 */
async function importUnderWay(
  env: StoreEnv,
  cwd: string,
  importing: ImportProbe,
) {
  const server = await startServer(cwd, { ...env, ...SERVER_ENV });
  const { lines, keys: made } = exportLines(600);
  const pipe = await fifo(cwd, "pipe.jsonl");
  const importer = spawnImport(cwd, [pipe.path], env);
  const writer = await pipe.open();
  // The FIFO holds 64 KiB: once this write returns, the import has read
  // (and written in batches) all but the last few lines of 240 KiB.
  await writer.write([HEADER, ...lines]);
  await until(importing, "the import to begin", { everyMs: 100 });
  return {
    server,
    made,
    importer,
    writer,
    [Symbol.asyncDispose]: () => server[Symbol.asyncDispose](),
  };
}

onBothStores(
  "a key fed half-way through a FIFO import is refused by a running server, and stays refused after the import fails on a bad line",
  async (env, cwd, importing) => {
    await using run = await importUnderWay(env, cwd, importing);
    const { server, made, importer, writer } = run;
    for (const key of [made[0], made[299], made[599]]) {
      assert.equal((await check(server.url, key)).status, 401, "half-imported");
    }
    await writer.write(['{"type":"key","record":{"id":"bad"}}']);
    writer.close();
    const result = await finished(importer);
    assert.equal(result.code, 1, result.stderr);
    assert.match(result.stderr, /^Line 602 of \.\/data\/pipe\.jsonl: /);
    const list = await keys(cwd, ["list", "--all", "--json"], env);
    assert.equal(list.code, 0, list.stderr);
    assert.equal(list.stdout.trim(), "[]");
    for (const key of [made[0], made[599]]) {
      assert.equal((await check(server.url, key)).status, 401, "after failure");
    }
  },
);

onBothStores(
  "an import killed half-way leaves no key of it working, and after it is resolved a new key 1 is the only one that works",
  async (env, cwd, importing) => {
    await using run = await importUnderWay(env, cwd, importing);
    const { server, made, importer, writer } = run;
    importer.kill("SIGKILL");
    await finished(importer);
    writer.close();
    assert.equal((await check(server.url, made[0])).status, 401);

    // Either the store is as before, or it refuses changes until --abort.
    const refused = await keys(cwd, [
      "create",
      "--name",
      "x",
      "--email",
      "x@example.com",
    ], env);
    if (refused.code !== 0) {
      assert.equal(refused.code, 1);
      assert.match(
        refused.stderr.trim(),
        /^An import into this store is running or was interrupted, and no key works until it ends; .*run "keys import --abort"/,
      );
      assert.equal(
        refused.stdout,
        "",
        "a key was printed for a refused create",
      );
      const list = await keys(cwd, ["list", "--all"], env);
      assert.equal(list.code, 1, "the store listed keys while refusing them");
      const aborted = await keys(cwd, ["import", "--abort"], env);
      assert.equal(aborted.code, 0, aborted.stderr);
      assert.match(aborted.stderr, /^Aborted the unfinished import/);
      const created = await createKey(cwd, "berlin-erp", undefined, env);
      assert.equal(created.id, 1);
      assert.equal((await check(server.url, created.key)).status, 200);
    } else {
      const again = await keys(cwd, ["import", "--abort"], env);
      assert.equal(again.code, 0, again.stderr);
      assert.match(again.stderr, /^No import was unfinished/);
    }
    for (const key of [made[0], made[1], made[599]]) {
      assert.equal(
        (await check(server.url, key)).status,
        401,
        "imported key 1",
      );
    }
    const listed = JSON.parse(
      (await keys(cwd, ["list", "--all", "--json"], env)).stdout,
    );
    assert.equal(listed.length, 1);
  },
);

onBothStores(
  "a second import while one runs exits 1 at once, and the store ends with the first one's keys only",
  async (env, cwd, importing) => {
    await using server = await startServer(cwd, { ...env, ...SERVER_ENV });
    const first = exportLines(250);
    const second = exportLines(100);
    const pipe = await fifo(cwd, "first.jsonl");
    const importer = spawnImport(cwd, [pipe.path], env);
    const writer = await pipe.open();
    await writer.write([HEADER, ...first.lines.slice(0, 200)]);
    await until(importing, "the import to begin", { everyMs: 100 });
    await Deno.writeTextFile(
      `${cwd}/data/second.jsonl`,
      [
        HEADER,
        ...second.lines,
        JSON.stringify({ type: "end", keys: 100, audit: 0 }),
      ].join("\n") + "\n",
    );
    let firstEnded = false;
    importer.status.then(() => firstEnded = true);
    const other = await finished(
      spawnImport(cwd, ["./data/second.jsonl"], env),
    );
    assert.equal(other.code, 1, other.stderr);
    assert.match(
      other.stderr.trim(),
      /^An import into this store is running or was interrupted/,
    );
    // At once: it ended while the first still waits for the rest of its
    // file, which only comes below. How soon a console starts is up to the
    // machine, so that is what is checked rather than a time.
    assert.equal(firstEnded, false, "the second import waited for the first");
    await writer.write([
      ...first.lines.slice(200),
      JSON.stringify({ type: "end", keys: 250, audit: 0 }),
    ]);
    writer.close();
    const result = await finished(importer);
    assert.equal(result.code, 0, result.stderr);
    const listed = JSON.parse(
      (await keys(cwd, ["list", "--all", "--json"], env)).stdout,
    );
    assert.equal(listed.length, 250);
    assert.equal((await check(server.url, first.keys[249])).status, 200);
    assert.equal((await check(server.url, second.keys[0])).status, 401);
  },
);

onBothStores(
  "an import stopped by Ctrl-C or SIGTERM undoes what it wrote, says so in one line and exits as the signal would; the store is as before, with no --abort to run",
  async (env, cwd) => {
    await using server = await startServer(cwd, { ...env, ...SERVER_ENV });
    for (const [signal, code] of [["SIGINT", 130], ["SIGTERM", 143]] as const) {
      // Its own process group, as a shell gives a command, so that the
      // signal reaches the launcher and the console at once, as Ctrl-C does.
      const importer = new Deno.Command("setsid", {
        args: [
          Deno.execPath(),
          ...taskArgs("keys", { cwd, env }),
          "import",
          "-",
        ],
        cwd,
        env,
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
      }).spawn();
      let stderr = "";
      const read = importer.stderr.pipeThrough(new TextDecoderStream())
        .pipeTo(new WritableStream({ write: (text) => void (stderr += text) }));
      const stdout = new Response(importer.stdout).text();
      const first = exportLines(500);
      // An export as long as the import takes to report progress, however
      // fast the machine: fed until the import is gone, so that the signal
      // comes while it reads and writes, as it would on a file.
      const fed = (async () => {
        const writer = importer.stdin.getWriter();
        const encoder = new TextEncoder();
        try {
          await writer.write(
            encoder.encode([HEADER, ...first.lines].join("\n") + "\n"),
          );
          for (let id = 501;; id += 500) {
            const lines = exportLines(500, id).lines;
            await writer.write(encoder.encode(lines.join("\n") + "\n"));
          }
        } catch (error) {
          if (!(error instanceof Deno.errors.BrokenPipe)) throw error;
        }
      })();
      await until(
        () => / so far…\n/.test(stderr),
        "the import's progress line",
      );
      Deno.kill(-importer.pid, signal);
      const status = await importer.status;
      await Promise.all([read, fed]);
      const list = await keys(cwd, ["list", "--all", "--json"], env);
      assert.equal(list.code, 0, `${signal}: ${list.stderr}`);
      assert.equal(list.stdout.trim(), "[]");
      const abort = await keys(cwd, ["import", "--abort"], env);
      assert.match(abort.stderr, /^No import was unfinished/, signal);
      assert.equal((await check(server.url, first.keys[0])).status, 401);

      const said = stderr.trim().split("\n").filter((l) =>
        !/ so far…$/.test(l)
      );
      assert.equal(status.code, code, `${signal}: ${stderr}`);
      assert.equal(said.length, 1, `${signal}: ${stderr}`);
      assert.match(said[0], /^Import interrupted; /, signal);
      assert.equal(await stdout, "");
      assert.doesNotMatch(stderr, KEY_PATTERN);
    }
    const created = await createKey(cwd, "berlin-erp", undefined, env);
    assert.equal(created.id, 1);
    assert.equal((await check(server.url, created.key)).status, 200);
    assert.doesNotMatch(server.output(), KEY_PATTERN);
  },
);

onBothStores(
  "an export of keys revoked with the longest reasons imports again",
  async (env, cwd) => {
    const open = (): Promise<KeyStore> =>
      env.DATABASE_URL
        ? openPostgresStore(env.DATABASE_URL)
        : openKvStore(`${cwd}/data/source.db`);
    await Deno.mkdir(`${cwd}/data`, { recursive: true });
    const source = await open();
    const count = 600;
    // Two bytes a character wherever a store counts them; the longest
    // reason an import takes, by an admin whose USER is as long as allowed.
    const reason = "ж".repeat(1000);
    const actor = `${"ж".repeat(250)}@host`;
    try {
      for (let i = 1; i <= count; i++) {
        const made = generateApiKey();
        await source.create({
          name: `installation-${i}`,
          email: `ops-${i}@example.com`,
          hash: made.hash,
          hint: made.hint,
        }, { actor: "tester" });
      }
      for (let i = 1; i <= count; i++) {
        await source.revoke(i, { actor, reason });
      }
      const summary = await exportTo(source, `${cwd}/data/backup.jsonl`, {
        actor: "tester",
      });
      assert.deepEqual([summary.keys, summary.audit], [count, 2 * count]);
    } finally {
      await source.close();
    }
    let target: KeyStore;
    let database: AsyncDisposable | undefined;
    if (env.DATABASE_URL) {
      const fresh = await freshDatabase();
      database = fresh;
      target = await openPostgresStore(fresh.url);
    } else {
      target = await openKvStore(`${cwd}/data/target.db`);
    }
    try {
      const imported = await importFrom(target, `${cwd}/data/backup.jsonl`, {
        actor: "tester",
      });
      assert.deepEqual([imported.keys, imported.audit], [count, 2 * count]);
      const listed = await Array.fromAsync(
        target.list({ includeRevoked: true }),
      );
      assert.equal(listed.length, count);
      assert.ok(listed.every((r) => r.revokedReason === reason));
      const audit = await Array.fromAsync(target.audit());
      assert.equal(audit.filter((e) => e.actor === actor).length, count);
    } finally {
      await target.close();
      await database?.[Symbol.asyncDispose]();
    }
  },
);
