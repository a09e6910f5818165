/**
 * `keys status` against registrations written by hand behind the store, on
 * Deno KV and PostgreSQL alike: no entry it did not write as a server's
 * registration may pass for a live server (lib/store/layout/backend.ts,
 * readInstances).
 */

import assert from "node:assert/strict";
import { keys, tempDir } from "../support/processes.ts";
import { freshDatabase, NO_DATABASE, testStore } from "../support/postgres.ts";
import { rawEntries } from "../support/raw_entries.ts";

/** A well-formed registration that no server renews. */
function registration(id: string, pid: number) {
  return {
    id,
    host: "ghost-host",
    pid,
    startedAt: new Date().toISOString(),
    leaseMs: 3000,
    acked: "0",
    release: "1.0.0",
  };
}

for (const postgres of [false, true]) {
  Deno.test({
    name: `${
      postgres ? "PostgreSQL" : "Deno KV"
    }: an entry below a registration's key, written apart from it, never makes that silent registration live: status exits 3`,
    ignore: postgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using database = postgres ? await freshDatabase() : undefined;
      const { env, location: where } = testStore(
        database,
        `${dir.path}/keys.db`,
      );
      const listed = await keys(dir.path, ["list"], env);
      assert.equal(listed.code, 0, listed.stderr);
      {
        await using entries = await rawEntries(where);
        // Two commits, two versions under one id: each listing showed the
        // id at another version, as if renewed.
        await entries.atomic()
          .set(["instances", "ghost"], registration("ghost", 4242))
          .commit();
        await entries.atomic()
          .set(["instances", "ghost", "twin"], registration("ghost", 4243))
          .commit();
      }
      const status = await keys(dir.path, ["status", "--json"], env);
      const document = JSON.parse(status.stdout);
      assert.equal(document.live, 0, status.stdout);
      assert.ok(
        document.servers.every((s: { state: string }) => s.state !== "live"),
        status.stdout,
      );
      assert.equal(status.code, 3, status.stdout);
    },
  });
}
