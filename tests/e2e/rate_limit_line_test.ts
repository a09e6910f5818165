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

for (const onPostgres of [false, true]) {
  Deno.test({
    name: `${
      onPostgres ? "PostgreSQL" : "Deno KV"
    }: a 5/h key used 5 times, then rotated twice with keys rotate --overlap 1h: the newest key gets 5 × 200 and then 429, the other live key 429 (the line at 10), with the key's own policy`,
    ignore: onPostgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using database = onPostgres ? await freshDatabase() : null;
      const { env } = testStore(database, `${dir.path}/store/keys.db`);
      const created = await keys(dir.path, [
        "create",
        "--name",
        "berlin-erp",
        "--email",
        "it@example.com",
        "--rate",
        "5/h",
        "--json",
      ], env);
      assert.equal(created.code, 0, created.stderr);
      const first: { id: number; key: string } = JSON.parse(created.stdout);
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
      for (const { last } of [newest, other]) {
        assert.equal(last.headers.get("ratelimit-policy"), '"key";q=5;w=3600');
        const wait = Number(last.headers.get("retry-after"));
        assert.ok(wait >= 1 && wait <= 3600, `Retry-After ${wait}`);
      }
    },
  });
}
