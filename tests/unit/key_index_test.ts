/**
 * Invented keys are cheap to refuse: the in-memory index of lib/auth/key_index.ts
 * answers for keys that exist nowhere without a store read, and never
 * refuses a key the store holds at the moment of the request.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { KeyLookup } from "../../lib/auth/key_lookup.ts";
import { KeyIndex } from "../../lib/auth/key_index.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import type { KeyStore } from "../../lib/store/types.ts";
import { tempDir } from "../support/processes.ts";

/** The store with a count of every call the lookup makes of it. */
function counting(store: KeyStore) {
  const calls: Record<string, number> = {};
  const proxy = new Proxy(store, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        calls[String(name)] = (calls[String(name)] ?? 0) + 1;
        return value.apply(target, args);
      };
    },
  });
  return { store: proxy, calls };
}

const actor = { actor: "test" };

/** A KV store that closes itself at the end of the scope. */
async function kvAt(path: string) {
  const store = await openKvStore(path);
  return Object.assign(store, {
    [Symbol.asyncDispose]: () => store.close(),
  });
}

async function addKey(store: KeyStore, name: string) {
  const fresh = generateApiKey();
  const record = await store.create({
    name,
    email: "ops@example.com",
    hash: fresh.hash,
    hint: fresh.hint,
  }, actor);
  return { ...fresh, id: record.id };
}

Deno.test("1 000 checksum-valid invented keys are refused without a single per-key store read", async () => {
  using dir = tempDir();
  await using kv = await kvAt(`${dir.path}/keys.db`);
  const real = await addKey(kv, "real");
  const { store, calls } = counting(kv);
  const lookup = new KeyLookup(store);
  assert.equal((await lookup.authenticate(real.key)).ok, true);
  const before = calls.findByHashAt ?? 0;
  const results = await Promise.all(
    Array.from(
      { length: 1000 },
      () => lookup.authenticate(generateApiKey().key),
    ),
  );
  assert.ok(results.every((r) => !r.ok && r.reason === "unknown"));
  assert.equal((calls.findByHashAt ?? 0) - before, 0, "no record read");
  assert.equal(calls.findByHash ?? 0, 0);
  assert.equal(calls.keyHashes, 1, "the index was built once, not per key");
});

Deno.test("a key created by another process just before the request is found at once", async () => {
  using dir = tempDir();
  const path = `${dir.path}/keys.db`;
  await using server = await kvAt(path);
  await using admin = await kvAt(path); // a second handle: the console
  const lookup = new KeyLookup(server);
  await addKey(admin, "first");
  assert.equal(
    (await lookup.authenticate(generateApiKey().key)).ok,
    false,
    "the index is warm",
  );
  for (let i = 0; i < 20; i++) {
    const fresh = await addKey(admin, `new-${i}`);
    const result = await lookup.authenticate(fresh.key);
    assert.ok(result.ok, `key ${fresh.id} refused right after create returned`);
    assert.equal(result.record.id, fresh.id);
  }
});

Deno.test("catching up reads only keys newer than the index, and rebuilds after an import", async () => {
  using dir = tempDir();
  await using store = await kvAt(`${dir.path}/keys.db`);
  const refreshes: { rebuilt: boolean; read: number }[] = [];
  const index = new KeyIndex(store, { onRefresh: (r) => refreshes.push(r) });
  for (let i = 0; i < 5; i++) await addKey(store, `k${i}`);
  assert.equal(
    await index.mayExist("0".repeat(64), await store.revision()),
    false,
  );
  await addKey(store, "k5");
  assert.equal(
    await index.mayExist("0".repeat(64), await store.revision()),
    false,
  );
  assert.deepEqual(refreshes, [
    { rebuilt: true, read: 5 },
    { rebuilt: false, read: 1 },
  ]);
  assert.equal(index.size, 6);
});
