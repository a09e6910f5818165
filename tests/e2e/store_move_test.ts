/**
 * Moving an installation between stores as docs/operators.md
 * describes it: `keys export` from one store, `keys import` into an empty one
 * of the other kind, then the server started on the new store. Every step is
 * a console or server process from the deno.json tasks. The PostgreSQL tests
 * show as ignored without TEST_DATABASE_URL.
 */

import assert from "node:assert/strict";
import {
  createKey,
  keys,
  type SampleInstallation,
  sampleInstallation,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { check } from "../support/http.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";

/** The settings that select a store: `{}` is the KV file in ./data. */
type StoreEnv = Record<string, string>;

const KV: StoreEnv = {};

/** The keys of an installation with a valid key, a revoked one and a rotated one. */

/** Ids and e-mails as `keys create` and `keys rotate` gave them out below. */
const SERVED = [
  { key: "valid", id: 1, email: "ops@example.com" },
  { key: "rotatedNew", id: 4, email: "edv@example.com" },
] as const;
const REFUSED = ["revoked", "rotatedOld"] as const;

async function run(cwd: string, args: string[], env: StoreEnv): Promise<void> {
  const result = await keys(cwd, args, env);
  assert.equal(result.code, 0, `keys ${args.join(" ")}: ${result.stderr}`);
}

interface AuditLine {
  action: string;
  keyId: number;
  detail: string | null;
}

async function audit(cwd: string, env: StoreEnv): Promise<AuditLine[]> {
  const result = await keys(cwd, ["audit", "--json"], env);
  assert.equal(result.code, 0, result.stderr);
  return JSON.parse(result.stdout);
}

/** Everything the store holds, as the console shows it; `import` lines left out. */
async function contents(cwd: string, env: StoreEnv): Promise<unknown> {
  const list = await keys(cwd, ["list", "--all", "--json"], env);
  assert.equal(list.code, 0, list.stderr);
  return {
    keys: JSON.parse(list.stdout),
    audit: (await audit(cwd, env)).filter((e) => e.action !== "import"),
  };
}

/** `keys export ./data/NAME` in `from`; returns the file's text. */
async function exportFrom(
  from: string,
  env: StoreEnv,
  name: string,
): Promise<string> {
  await run(from, ["export", `./data/${name}`], env);
  return await Deno.readTextFile(`${from}/data/${name}`);
}

/** Copies an export into `to`'s ./data and runs `keys import` there. */
async function importInto(
  to: string,
  env: StoreEnv,
  name: string,
  text: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  await Deno.mkdir(`${to}/data`, { recursive: true });
  await Deno.writeTextFile(`${to}/data/${name}`, text);
  return await keys(to, ["import", `./data/${name}`, "--json"], env);
}

/**
 * Starts the server on the store and checks what an integrator sees: the
 * valid keys answer with their ids and e-mails, the revoked ones get 401.
 */
async function assertServes(
  cwd: string,
  env: StoreEnv,
  made: SampleInstallation,
): Promise<void> {
  await using server = await startServer(cwd, env);
  for (const { key, id, email } of SERVED) {
    const answer = await check(server.url, made[key]);
    assert.equal(answer.status, 200, `${key}: ${answer.body}`);
    const body = JSON.parse(answer.body);
    assert.deepEqual([body.apiKeyId, body.email], [id, email], key);
  }
  for (const key of REFUSED) {
    assert.equal((await check(server.url, made[key])).status, 401, key);
  }
}

Deno.test({
  name:
    "an installation moved from Deno KV to PostgreSQL and back serves the same keys: valid ones 200 with their ids, revoked ones 401, new ids carrying on",
  ignore: NO_DATABASE,
  async fn() {
    using kvDir = tempDir();
    const made = await sampleInstallation(kvDir.path, KV);
    const toPostgres = await exportFrom(kvDir.path, KV, "move.jsonl");

    // KV → PostgreSQL, into a fresh empty database.
    using pgDir = tempDir();
    await using database = await freshDatabase();
    const pg = { DATABASE_URL: database.url };
    const imported = await importInto(pgDir.path, pg, "move.jsonl", toPostgres);
    assert.equal(imported.code, 0, imported.stderr);
    assert.deepEqual(
      [JSON.parse(imported.stdout).keys, JSON.parse(imported.stdout).audit],
      [4, 5],
    );
    assert.deepEqual(
      await contents(pgDir.path, pg),
      await contents(kvDir.path, KV),
    );
    await assertServes(pgDir.path, pg, made);
    const onPostgres = await createKey(
      pgDir.path,
      "dresden-erp",
      undefined,
      pg,
    );
    assert.equal(onPostgres.id, 5);
    // The servers audit each key's first use from a network too; the
    // changes made here are the rest.
    const pgAudit = await audit(pgDir.path, pg);
    const changes = pgAudit.filter((e) => e.action !== "network");
    assert.deepEqual(
      changes.map((e) => e.action),
      ["create", "create", "create", "revoke", "rotate", "import", "create"],
    );
    assert.equal(changes.at(-2)?.detail, "4 keys and 5 audit lines");

    // PostgreSQL → a new KV file, with the server stopped (assertServes did).
    const toKv = await exportFrom(pgDir.path, pg, "back.jsonl");
    using backDir = tempDir();
    const back = await importInto(backDir.path, KV, "back.jsonl", toKv);
    assert.equal(back.code, 0, back.stderr);
    assert.deepEqual(
      await contents(backDir.path, KV),
      await contents(pgDir.path, pg),
    );
    await assertServes(backDir.path, KV, made);
    const dresden = await keys(backDir.path, ["show", "dresden-erp", "--json"]);
    assert.equal(dresden.code, 0, dresden.stderr);
    assert.equal(JSON.parse(dresden.stdout).id, 5);
    const onKv = await createKey(backDir.path, "leipzig-erp");
    assert.equal(onKv.id, 6);
    const history = (await audit(backDir.path, KV)).filter((e) =>
      e.action !== "network"
    );
    assert.deepEqual(history.map((e) => e.action), [
      "create",
      "create",
      "create",
      "revoke",
      "rotate",
      "import",
      "create",
      "import",
      "create",
    ]);
    assert.equal(
      history.at(-2)?.detail,
      `5 keys and ${pgAudit.length} audit lines`,
    );

    // The files hold hashes and never a key.
    const every = [...Object.values(made), onPostgres.key, onKv.key];
    for (const [file, text] of [["KV", toPostgres], ["PG", toKv]]) {
      for (const key of every) {
        assert.ok(!text.includes(key), `the ${file} export holds a key`);
      }
    }
  },
});

Deno.test({
  name:
    "importing into a PostgreSQL database that already holds keys exits 1 with one line and changes nothing",
  ignore: NO_DATABASE,
  async fn() {
    using kvDir = tempDir();
    await sampleInstallation(kvDir.path, KV);
    const text = await exportFrom(kvDir.path, KV, "move.jsonl");

    using pgDir = tempDir();
    await using database = await freshDatabase();
    const pg = { DATABASE_URL: database.url };
    const existing = await createKey(pgDir.path, "leipzig-erp", undefined, pg);
    const before = await contents(pgDir.path, pg);
    const result = await importInto(pgDir.path, pg, "move.jsonl", text);
    assert.equal(result.code, 1);
    assert.match(
      result.stderr.trim(),
      /^The store is not empty; import only into a new store/,
    );
    assert.equal(result.stderr.trim().split("\n").length, 1);
    assert.deepEqual(await contents(pgDir.path, pg), before);
    assert.deepEqual(
      (await audit(pgDir.path, pg)).map((e) => e.action),
      ["create"],
    );
    await using server = await startServer(pgDir.path, pg);
    assert.equal((await check(server.url, existing.key)).status, 200);
  },
});
