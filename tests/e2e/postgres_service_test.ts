/**
 * The service on PostgreSQL as its users run it: server instances and the
 * console as separate processes from the deno.json tasks, sharing one
 * database, and a database that goes away and comes back under them.
 */

import assert from "node:assert/strict";
import { LEASE_MS } from "../../lib/auth/lease.ts";
import {
  createKey,
  freePort,
  keys,
  runTask,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { check } from "../support/http.ts";
import { GIVE_UP_MS } from "../support/wait.ts";
import { freshDatabase, NO_DATABASE, ownCluster } from "../support/postgres.ts";

Deno.test({
  name:
    "keys created by console processes on several machines at once get distinct ids from the shared database",
  ignore: NO_DATABASE,
  async fn() {
    using dir = tempDir();
    await using database = await freshDatabase();
    const env = { DATABASE_URL: database.url };
    const made = await Promise.all(
      Array.from(
        { length: 8 },
        (_, i) => createKey(dir.path, `site-${i}`, undefined, env),
      ),
    );
    assert.deepEqual(
      made.map((k) => k.id).sort((a, b) => a - b),
      [1, 2, 3, 4, 5, 6, 7, 8],
    );
  },
});

Deno.test({
  name:
    "while the database is down requests get 503 with Retry-After quickly once the lease has run out, never 401, and 200 again once it is back, without restarting the service",
  ignore: NO_DATABASE,
  async fn() {
    using dir = tempDir();
    await using cluster = await ownCluster(dir.path);
    const env = { DATABASE_URL: cluster.url };
    await using server = await startServer(dir.path, env);
    const { key } = await createKey(dir.path, "outage", undefined, env);
    assert.equal((await check(server.url, key)).status, 200);

    await cluster.stop();
    // Every read a lease may rest on was sent before the stop returned.
    const stopped = performance.now();
    // Known keys are answered from memory for what is left of the lease
    // (lib/auth/lease.ts), never longer; then every request reads the store.
    let unavailable = 0;
    while (unavailable < 5) {
      const started = performance.now();
      const down = await check(server.url, key);
      const elapsed = performance.now() - started;
      if (down.status === 200) {
        assert.equal(unavailable, 0, "a 200 after a 503: a lease renewed");
        // Judged by when the request was sent: the server decided later
        // still, so nothing but the lease is added, however busy the
        // machine (a bound from when the stop began, or from the answer,
        // would count a slow pg_ctl or a slow answer against the lease).
        const since = started - stopped;
        assert.ok(
          since < LEASE_MS,
          `200 for a request sent ${
            Math.round(since)
          } ms after the database stopped, past the lease`,
        );
        await new Promise((resolve) => setTimeout(resolve, 50));
        continue;
      }
      assert.equal(down.status, 503, down.body);
      assert.ok(down.headers.get("retry-after"), "Retry-After on 503");
      // Quickly: a request-path read gives up after 2 s (readTimeoutMs in
      // lib/store/postgres/connection.ts), against a stopped database at
      // once; the rest is room for a busy machine, and still far below
      // the 15 s a call without that limit would take.
      assert.ok(elapsed < 5000, `503 took ${Math.round(elapsed)} ms`);
      unavailable++;
    }

    await cluster.start();
    // Only ends a server that never recovers: the pool retries at least
    // every 0.5 s (lib/store/postgres/connection.ts).
    const deadline = Date.now() + GIVE_UP_MS;
    let status = 0;
    while (status !== 200) {
      status = (await check(server.url, key)).status;
      assert.notEqual(
        status,
        401,
        "an outage must never look like a bad key",
      );
      if (status !== 200) {
        assert.ok(
          Date.now() < deadline,
          `still ${status} after ${GIVE_UP_MS / 1000} s`,
        );
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  },
});

Deno.test("a bad DATABASE_URL stops the start with one line naming the variable, never repeating the password", async () => {
  using dir = tempDir();
  for (
    const [url, problem] of [
      ["mysql://app:s3cret-pw@db.example/keys", /scheme is mysql:/],
      ["postgres://db.example:5432/keys", /names no user/],
      ["postgres://app:s3cret-pw@db.example/keys?sslmode=bogus", /sslmode/],
      ["not a url s3cret-pw", /not a URL/],
    ] as const
  ) {
    const result = await runTask("start", {
      cwd: dir.path,
      env: { DATABASE_URL: url, PORT: "0" },
    });
    assert.equal(result.code, 1);
    const line = result.stderr.trim();
    assert.match(line, /^DATABASE_URL must be a URL such as postgres:\/\//);
    assert.match(line, problem);
    assert.ok(!line.includes("\n") && !line.includes("s3cret-pw"), line);
  }
});

Deno.test("the console and the server facing a database that is not running fail at once with one line naming the address and DATABASE_URL, exit code 1", async () => {
  using dir = tempDir();
  const port = freePort();
  const env = {
    DATABASE_URL: `postgres://app:s3cret-pw@127.0.0.1:${port}/keys`,
  };
  const expected =
    `Nothing accepts connections at 127.0.0.1:${port}, where DATABASE_URL points: start PostgreSQL there, or fix the host and port in DATABASE_URL`;
  const started = performance.now();
  const result = await keys(dir.path, ["list"], env);
  assert.equal(result.code, 1);
  assert.equal(result.stderr.trim(), expected);
  assert.ok(performance.now() - started < 10_000);
  const json = await keys(dir.path, ["list", "--json"], env);
  assert.equal(JSON.parse(json.stdout).error.code, "store_unavailable");
  const start = await runTask("start", {
    cwd: dir.path,
    env: { ...env, PORT: "0", HOST: "127.0.0.1" },
  });
  assert.equal(start.code, 1);
  assert.equal(start.stderr.trim(), expected);
  assert.ok(!(result.stderr + start.stderr).includes("s3cret-pw"));
});

Deno.test({
  name:
    "a role or database PostgreSQL does not have stops the console and the server with one line naming it, DATABASE_URL and the fix",
  ignore: NO_DATABASE,
  async fn() {
    using dir = tempDir();
    await using database = await freshDatabase();
    const suffix = crypto.randomUUID().slice(0, 8);
    const noRole = new URL(database.url);
    noRole.username = `nouser_${suffix}`;
    const noDatabase = new URL(database.url);
    noDatabase.pathname = `/nodb_${suffix}`;
    const cases: [URL, string][] = [
      [
        noRole,
        `PostgreSQL does not let user nouser_${suffix} connect (no such role, or no pg_hba.conf entry for it): create the role (createuser nouser_${suffix}), allow it in pg_hba.conf, or fix the user in DATABASE_URL`,
      ],
      [
        noDatabase,
        `PostgreSQL has no database nodb_${suffix}: create it (createdb -O ${
          decodeURIComponent(noDatabase.username)
        } nodb_${suffix}) or fix the database in DATABASE_URL`,
      ],
    ];
    for (const [url, expected] of cases) {
      const env = { DATABASE_URL: url.href };
      const console = await keys(dir.path, ["list"], env);
      assert.equal(console.code, 1);
      assert.equal(console.stderr.trim(), expected);
      const start = await runTask("start", {
        cwd: dir.path,
        env: { ...env, PORT: "0", HOST: "127.0.0.1" },
      });
      assert.equal(start.code, 1);
      assert.equal(start.stderr.trim(), expected);
    }
  },
});

Deno.test({
  name:
    "a database the console and the server cannot open until its operator acts (a layout from before 1.0, a newer schema) stops both with one line naming it, console code schema_unknown or schema_too_new",
  ignore: NO_DATABASE,
  async fn() {
    using dir = tempDir();
    await using refused = await freshDatabase();
    await refused.query(`
      CREATE TABLE schema_version (version integer PRIMARY KEY);
      INSERT INTO schema_version (version) VALUES (7);
      CREATE TABLE keys (id bigint PRIMARY KEY, hash text NOT NULL)`);
    await using newer = await freshDatabase();
    const opened = await keys(dir.path, ["list"], {
      DATABASE_URL: newer.url,
    });
    assert.equal(opened.code, 0, opened.stderr);
    await newer.query("INSERT INTO store_schema (version) VALUES (99)");
    for (
      const [database, code, line] of [
        [
          refused,
          "schema_unknown",
          /^The key store's database holds a table schema_version that this service did not create .*; point DATABASE_URL at another database$/,
        ],
        [
          newer,
          "schema_too_new",
          /^The key store's schema is at version 99, newer than the \d+ this service knows; upgrade the service or point DATABASE_URL at another database$/,
        ],
      ] as const
    ) {
      const env = { DATABASE_URL: database.url };
      const listed = await keys(dir.path, ["list"], env);
      assert.equal(listed.code, 1);
      assert.match(listed.stderr.trim(), line);
      const json = await keys(dir.path, ["list", "--json"], env);
      assert.equal(JSON.parse(json.stdout).error.code, code);
      const start = await runTask("start", {
        cwd: dir.path,
        env: { ...env, PORT: "0", HOST: "127.0.0.1" },
      });
      assert.equal(start.code, 1);
      assert.match(start.stderr.trim(), line);
    }
  },
});
