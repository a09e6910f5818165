import { changeIn } from "../../lib/store/layout/_change.ts";
import { REVISION } from "../../lib/store/layout/_keys.ts";
import { NO_WAIT } from "../../lib/store/change.ts";
import { retireKey } from "../../lib/store/changes.ts";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import assert from "node:assert/strict";
import { KvEntries, openKvStore } from "../../lib/store/kv.ts";
import { leaseContract } from "../support/lease_contract.ts";
import { sharedKvFile } from "../support/kv_shared.ts";
import { storeContract } from "../support/store_contract.ts";
import { storeKey } from "../support/stored_keys.ts";

storeContract("kv store", async () => {
  const store = await openKvStore(":memory:");
  return Object.assign(store, { [Symbol.asyncDispose]: () => store.close() });
});

// The tests that wait out a whole lease are in kv_lease_waits_test.ts.
leaseContract("kv store", sharedKvFile, "quick");

Deno.test("kv store: every change bumps the revision that caches watch", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/keys.db`;
    const store = await openKvStore(path);
    const kv = await Deno.openKv(path);
    const revision = async () =>
      (await kv.get<Deno.KvU64>(REVISION)).value?.value ?? 0n;
    const before = await revision();
    const { record } = await storeKey(store, "a");
    const afterCreate = await revision();
    await store.revoke(record.id, { actor: "t" });
    const afterRevoke = await revision();
    assert.ok(afterCreate > before && afterRevoke > afterCreate);
    kv.close();
    await store.close();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("kv store: a change that finds nothing to do reports the revision its reads rest on, even when another process committed between them", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const path = `${dir}/keys.db`;
    const a = await openKvStore(path);
    const old = await storeKey(a, "linked");
    const { created } = await a.rotate(
      old.record.id,
      { ...generateApiKey(), expiresAt: null },
      {
        actor: "tester",
        overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
        untilFirstUse: true,
      },
    );
    await a.close();
    const kv = await Deno.openKv(path);
    const other = await openKvStore(path);
    try {
      let theirs = -1n;
      // B reads the revision, then, before it reads the new key's record,
      // A (another process) commits the first use's retirement.
      const mine = await changeIn(
        new KvEntries(kv),
        { name: "retire", alters: "authentication" },
        async (draft) => {
          if (theirs < 0n) {
            await other.retire(created.id, {
              actor: "server",
              cause: "first_use",
            });
            theirs = await other.revision();
          }
          return await retireKey(draft, created.id, {
            actor: "server",
            cause: "first_use",
          });
        },
      );
      assert.equal((await mine.settle(NO_WAIT)).changed, false);
      assert.ok(
        mine.revision >= theirs,
        `found nothing to do at revision ${mine.revision}, yet read a record of revision ${theirs}`,
      );
    } finally {
      kv.close();
      await other.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
