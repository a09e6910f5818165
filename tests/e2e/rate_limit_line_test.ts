/**
 * A rotation line's rate limit end to end, on Deno KV and PostgreSQL: the
 * console's `keys rotate` twice within one window of a used key, then the
 * real server's answers to the line's two live keys. The window is an hour,
 * so a slow machine cannot let a counted request leave it during the test.
 */

import assert from "node:assert/strict";
import {
  keys,
  rotateWithOverlap,
  type ServerProcess,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { freshDatabase, NO_DATABASE, testStore } from "../support/postgres.ts";

const PATH = "/api/v1/integration/connection";

/** The statuses of `count` requests with `key`, one after another. */
async function statuses(
  server: ServerProcess,
  key: string,
  count: number,
): Promise<{ statuses: number[]; last: Response }> {
  const seen: number[] = [];
  let last: Response | undefined;
  for (let i = 0; i < count; i++) {
    last = await fetch(`${server.url}${PATH}`, {
      headers: { "X-API-Key": key },
    });
    await last.body?.cancel();
    seen.push(last.status);
  }
  return { statuses: seen, last: last! };
}

/** Creates key "berlin-erp" at `rate`, the first key of the line a test rotates. */
async function createLine(
  cwd: string,
  rate: string,
  env: Record<string, string>,
): Promise<{ id: number; key: string }> {
  const created = await keys(cwd, [
    "create",
    "--name",
    "berlin-erp",
    "--email",
    "it@example.com",
    "--rate",
    rate,
    "--json",
  ], env);
  assert.equal(created.code, 0, created.stderr);
  return JSON.parse(created.stdout);
}

for (const onPostgres of [false, true]) {
  Deno.test({
    name: `${
      onPostgres ? "PostgreSQL" : "Deno KV"
    }: a 5/h key used 5 times, then rotated twice with keys rotate --overlap 1h: the newest key gets 5 × 200 and then 429, the other live key 429 (the line at 10); each 429 states the key's policy and the line's, and names the one that refused it`,
    ignore: onPostgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using database = onPostgres ? await freshDatabase() : null;
      const { env } = testStore(database, `${dir.path}/store/keys.db`);
      const first = await createLine(dir.path, "5/h", env);
      await using server = await startServer(dir.path, env);
      assert.deepEqual(
        (await statuses(server, first.key, 5)).statuses,
        [200, 200, 200, 200, 200],
      );
      const k1 = await rotateWithOverlap(dir.path, "berlin-erp", "1h", {
        env,
      });
      const k2 = await rotateWithOverlap(dir.path, "berlin-erp", "1h", {
        env,
      });
      assert.equal(k2.replaces.id, k1.id);
      // The first key was retired by the second rotation.
      assert.equal((await statuses(server, first.key, 1)).statuses[0], 401);
      const newest = await statuses(server, k2.key, 6);
      assert.deepEqual(newest.statuses, [200, 200, 200, 200, 200, 429]);
      const other = await statuses(server, k1.key, 1);
      assert.deepEqual(other.statuses, [429]);
      // Each answer states the key's policy and its line's, and names the
      // one that refused it: the newest key's own count, the other's line.
      for (
        const [{ last }, binding] of [[newest, "key"], [other, "line"]] as const
      ) {
        assert.equal(
          last.headers.get("ratelimit-policy"),
          '"key";q=5;w=3600, "line";q=10;w=3600',
        );
        assert.match(
          last.headers.get("ratelimit")!,
          new RegExp(`^"${binding}";r=0;t=\\d+$`),
        );
        const wait = Number(last.headers.get("retry-after"));
        assert.ok(wait >= 1 && wait <= 3600, `Retry-After ${wait}`);
      }
    },
  });
}

for (const onPostgres of [false, true]) {
  Deno.test({
    name: `${
      onPostgres ? "PostgreSQL" : "Deno KV"
    }: keys update --rate 5/h on the new key of a 10/h key rotated with --overlap 1h sets both keys, says so and lists both in --json; the old key's requests then leave the never-used new key its 5 (review case a)`,
    ignore: onPostgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using database = onPostgres ? await freshDatabase() : null;
      const { env } = testStore(database, `${dir.path}/store/keys.db`);
      const first = await createLine(dir.path, "10/h", env);
      const second = await rotateWithOverlap(dir.path, "berlin-erp", "1h", {
        env,
      });
      const updated = await keys(dir.path, [
        "update",
        String(second.id),
        "--rate",
        "5/h",
        "--json",
      ], env);
      assert.equal(updated.code, 0, updated.stderr);
      const result = JSON.parse(updated.stdout);
      assert.deepEqual(result.rateLimitChanged, [second.id, first.id]);
      assert.match(
        updated.stderr,
        new RegExp(`and so has key ${first.id}\\b`),
      );
      const audit = await keys(dir.path, [
        "audit",
        String(first.id),
        "--json",
      ], env);
      assert.equal(audit.code, 0, audit.stderr);
      // The line's whole history, whichever of its keys is asked about.
      const lines: { action: string; keyId: number; detail: string }[] = JSON
        .parse(audit.stdout);
      const limits = lines.filter((l) => l.action === "rate_limit")
        .map((l) => [l.keyId, l.detail] as const);
      assert.deepEqual(
        limits.sort(),
        [
          [first.id, "5 requests per 3600 s"],
          [second.id, "5 requests per 3600 s"],
        ].sort(),
      );
      await using server = await startServer(dir.path, env);
      assert.deepEqual(
        (await statuses(server, first.key, 6)).statuses,
        [200, 200, 200, 200, 200, 429],
      );
      const fresh = await statuses(server, second.key, 6);
      assert.deepEqual(fresh.statuses, [200, 200, 200, 200, 200, 429]);
    },
  });
}
