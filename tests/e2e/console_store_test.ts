/**
 * The console names the store it changed (issue 31): every line that
 * changes a key says which store, `--json` carries it as a field, and a
 * change on a store no server uses is warned of once, so that a key created
 * in the wrong store is caught before it is handed out. A PostgreSQL store
 * is named by host, port and database, never with its password.
 */

import assert from "node:assert/strict";
import { keys, startServer, tempDir } from "../support/processes.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";

const NO_SERVER = /No server is running on this store/g;

/** How many times the no-server warning was printed. */
function warnings(stderr: string): number {
  return stderr.match(NO_SERVER)?.length ?? 0;
}

function escaped(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

Deno.test("a console on another store than the running server says which store it changed and warns once; on the server's store it does not warn", async () => {
  using dir = tempDir();
  const root = Deno.realPathSync(dir.path);
  const served = `${root}/served/keys.db`;
  // Relative, as an operator's shell would set it: named absolute.
  const other = { DENO_KV_PATH: "./other/keys.db" };
  const otherPath = `${root}/other/keys.db`;
  await using _server = await startServer(dir.path, { DENO_KV_PATH: served });

  const created = await keys(dir.path, [
    "create",
    "--name",
    "berlin",
    "--email",
    "ops@example.com",
  ], other);
  assert.equal(created.code, 0, created.stderr);
  // The key stays alone on stdout.
  assert.match(created.stdout, /^isk_[A-Za-z0-9_-]+\n$/);
  assert.match(
    created.stderr,
    new RegExp(
      `^Created key 1 "berlin" for ops@example\\.com in the store ${
        escaped(otherPath)
      }\\.\\n`,
    ),
  );
  assert.equal(warnings(created.stderr), 1, created.stderr);
  assert.ok(
    created.stderr.includes(
      `No server is running on this store (${otherPath}); a server started with another DENO_KV_PATH or DATABASE_URL answers 401 for this key`,
    ),
    created.stderr,
  );

  const json = await keys(dir.path, [
    "create",
    "--name",
    "hamburg",
    "--email",
    "it@example.com",
    "--json",
  ], other);
  assert.equal(json.code, 0, json.stderr);
  assert.deepEqual(JSON.parse(json.stdout).store, {
    kind: "kv",
    path: otherPath,
  });
  assert.equal(json.stdout.trimEnd().split("\n").length, 1);

  // Every other change names the store too, and warns once: each as
  // text, then (on another key) as --json.
  for (
    const [args, json] of [
      [
        ["update", "1", "--allow-from", "192.0.2.0/24", "--rate", "10/s"],
        ["update", "2", "--rate", "none"],
      ],
      [["rotate", "1", "--yes"], ["rotate", "2", "--yes"]],
      [["revoke", "3", "--yes"], ["revoke", "4", "--yes"]],
    ]
  ) {
    const changed = await keys(dir.path, args, other);
    assert.equal(changed.code, 0, changed.stderr);
    assert.equal(warnings(changed.stderr), 1, changed.stderr);
    const lines = changed.stderr.split("\n").filter((line) =>
      /^(Key \d|Revoked key|Created key)/.test(line)
    );
    assert.ok(lines.length > 0, changed.stderr);
    for (const line of lines) {
      assert.ok(line.includes(`in the store ${otherPath}`), line);
    }
    const value = await keys(dir.path, [...json, "--json"], other);
    assert.equal(value.code, 0, value.stderr);
    assert.deepEqual(JSON.parse(value.stdout).store, {
      kind: "kv",
      path: otherPath,
    });
  }

  // On the server's store: named, and no warning.
  const good = await keys(dir.path, [
    "create",
    "--name",
    "munich",
    "--email",
    "edv@example.com",
  ], { DENO_KV_PATH: served });
  assert.equal(good.code, 0, good.stderr);
  assert.match(good.stderr, new RegExp(`in the store ${escaped(served)}\\.`));
  assert.equal(warnings(good.stderr), 0, good.stderr);
  const revoked = await keys(dir.path, ["revoke", "munich", "--yes"], {
    DENO_KV_PATH: served,
  });
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.equal(warnings(revoked.stderr), 0, revoked.stderr);
});

Deno.test("an import names the store it filled, and warns when no server uses it", async () => {
  using dir = tempDir();
  const root = Deno.realPathSync(dir.path);
  const created = await keys(dir.path, [
    "create",
    "--name",
    "berlin",
    "--email",
    "ops@example.com",
  ]);
  assert.equal(created.code, 0, created.stderr);
  const exported = await keys(dir.path, ["export", "./backup.jsonl"]);
  assert.equal(exported.code, 0, exported.stderr);
  const env = { DENO_KV_PATH: "./restored/keys.db" };
  const imported = await keys(dir.path, ["import", "./backup.jsonl"], env);
  assert.equal(imported.code, 0, imported.stderr);
  assert.match(
    imported.stderr,
    new RegExp(
      `^Imported 1 key and 1 audit line into the store ${
        escaped(`${root}/restored/keys.db`)
      } from \\./backup\\.jsonl, exported at `,
    ),
  );
  assert.equal(warnings(imported.stderr), 1, imported.stderr);
});

const PASSWORD = "Zq9-Xv7:Kp@Lm/Rt3";

Deno.test({
  name:
    "on PostgreSQL every change names host:port/database, in its lines and its --json, and no output holds any part of the password",
  ignore: NO_DATABASE,
  async fn() {
    await using db = await freshDatabase();
    await using restored = await freshDatabase();
    using dir = tempDir();
    const withPassword = (url: string) => {
      const parsed = new URL(url);
      parsed.password = PASSWORD;
      return parsed;
    };
    const url = withPassword(db.url);
    const env = { DATABASE_URL: url.href };
    // The password as written, as the URL carries it, and any part of it.
    const secrets = [
      PASSWORD,
      url.password,
      ...PASSWORD.split(/[-:@/]/).filter((part) => part.length >= 3),
    ];
    const database = url.pathname.slice(1);
    const where = {
      kind: "postgres",
      host: url.hostname,
      port: Number(url.port || 5432),
      database,
    };
    const name = `PostgreSQL ${url.hostname}:${where.port}/${database}`;
    const outputs: string[] = [];
    const ok = async (
      args: string[],
      options: { json?: boolean; env?: Record<string, string> } = {},
    ) => {
      const result = await keys(
        dir.path,
        options.json ? [...args, "--json"] : args,
        options.env ?? env,
      );
      assert.equal(result.code, 0, result.stderr);
      outputs.push(result.stdout, result.stderr);
      if (options.json) {
        assert.deepEqual(JSON.parse(result.stdout).store, where, args[0]);
      } else {
        assert.ok(
          result.stderr.includes(`in the store ${name}`),
          result.stderr,
        );
        assert.equal(warnings(result.stderr), 1, result.stderr);
        assert.ok(
          result.stderr.includes(
            `No server is running on this store (${name})`,
          ),
          result.stderr,
        );
      }
      return result;
    };
    await ok(["create", "--name", "berlin", "--email", "ops@example.com"]);
    await ok(["create", "--name", "hamburg", "--email", "it@example.com"], {
      json: true,
    });
    await ok(["update", "1", "--rate", "10/s"]);
    await ok(["update", "1", "--rate", "none"], { json: true });
    await ok(["rotate", "1", "--yes"]);
    await ok(["rotate", "3", "--yes"], { json: true });
    await ok(["revoke", "2", "--yes"]);
    await ok(["revoke", "4", "--yes"], { json: true });
    const exported = await keys(dir.path, ["export", "./backup.jsonl"], env);
    assert.equal(exported.code, 0, exported.stderr);
    const into = withPassword(restored.url);
    const other = { ...where, database: into.pathname.slice(1) };
    const imported = await keys(dir.path, [
      "import",
      "./backup.jsonl",
      "--json",
    ], { DATABASE_URL: into.href });
    assert.equal(imported.code, 0, imported.stderr);
    assert.deepEqual(JSON.parse(imported.stdout).store, other);
    outputs.push(imported.stdout, imported.stderr);
    for (const printed of outputs) {
      // The keys are random, and could hold three characters of it by chance.
      const output = printed.replace(/isk_[A-Za-z0-9_-]+/g, "isk_…");
      for (const secret of secrets) {
        assert.ok(!output.includes(secret), `${secret} in:\n${output}`);
      }
    }
  },
});
