/**
 * The entries' layout is recorded in every store, so that a store written by
 * a newer version is refused rather than misread, on Deno KV and PostgreSQL
 * alike (lib/store/layout/backend.ts, claimLayout).
 */

import assert from "node:assert/strict";
import { LAYOUT_VERSION } from "../../lib/store/layout/backend.ts";
import { LAYOUT } from "../../lib/store/layout/_keys.ts";
import { keys, runTask, tempDir } from "../support/processes.ts";
import { freshDatabase, NO_DATABASE, testStore } from "../support/postgres.ts";
import { rawEntries } from "../support/raw_entries.ts";

const NEWER =
  /^The key store's layout is at version 2, where this service knows 1; upgrade the service, or point DENO_KV_PATH or DATABASE_URL at another store$/;

for (const postgres of [false, true]) {
  Deno.test({
    name: `${
      postgres ? "PostgreSQL" : "Deno KV"
    }: a store records its layout when first opened, and one a newer version wrote stops the console and the server with one line naming both versions`,
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
        assert.equal((await entries.get(LAYOUT)).value, LAYOUT_VERSION);
        await entries.atomic().set(LAYOUT, LAYOUT_VERSION + 1).commit();
      }
      const refused = await keys(dir.path, ["list"], env);
      assert.equal(refused.code, 1);
      assert.match(refused.stderr.trim(), NEWER);
      const json = await keys(dir.path, ["list", "--json"], env);
      assert.equal(JSON.parse(json.stdout).error.code, "schema_too_new");
      const start = await runTask("start", {
        cwd: dir.path,
        env: { ...env, PORT: "0", HOST: "127.0.0.1" },
      });
      assert.equal(start.code, 1);
      assert.match(start.stderr.trim(), NEWER);
      await using entries = await rawEntries(where);
      assert.equal((await entries.get(LAYOUT)).value, LAYOUT_VERSION + 1);
    },
  });
}
