/**
 * The behaviour every {@linkcode KeyStore} must show, written once and run
 * against each store implementation.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../lib/api_key.ts";
import {
  KeyNotFoundError,
  type KeyRecord,
  type KeyStore,
  newRecord,
  StoreInputError,
} from "../lib/store.ts";

/** Opens an empty store; disposing it closes and removes it. */
export type OpenEmptyStore = () => Promise<KeyStore & AsyncDisposable>;

const ACTOR = "tester@host";

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const all: T[] = [];
  for await (const item of items) all.push(item);
  return all;
}

function input(name: string, email = `${name.replace(/\W/g, "")}@example.com`) {
  const { hash, hint } = generateApiKey();
  return { name, email, hash, hint };
}

/** Registers the contract tests for one store. */
export function storeContract(label: string, open: OpenEmptyStore): void {
  const test = (name: string, fn: (store: KeyStore) => Promise<void>) =>
    Deno.test(`${label}: ${name}`, async () => {
      await using store = await open();
      await fn(store);
    });

  test("create() hands out ids 1, 2, 3 and stores only the hash", async (store) => {
    const fresh = generateApiKey();
    const a = await store.create({
      name: "a",
      email: "a@example.com",
      hash: fresh.hash,
      hint: fresh.hint,
    }, { actor: ACTOR });
    const b = await store.create(input("b"), { actor: ACTOR });
    const c = await store.create(input("c"), { actor: ACTOR });
    assert.deepEqual([a.id, b.id, c.id], [1, 2, 3]);
    assert.equal(a.status, "valid");
    assert.equal(a.hash, fresh.hash);
    assert.equal(a.hint, fresh.hint);
    assert.equal(a.revokedAt, null);
    assert.ok(
      !JSON.stringify(await collect(store.list({ includeRevoked: true })))
        .includes(fresh.key),
    );
    assert.deepEqual(await store.findByHash(fresh.hash), a);
  });

  test("findByHash() returns null for a hash it never stored", async (store) => {
    await store.create(input("a"), { actor: ACTOR });
    assert.equal(await store.findByHash(generateApiKey().hash), null);
  });

  test("create() refuses a name a valid key already has, in any case", async (store) => {
    await store.create(input("Berlin ERP"), { actor: ACTOR });
    await assert.rejects(
      store.create(input("berlin erp"), { actor: ACTOR }),
      (e: Error) =>
        e instanceof StoreInputError &&
        /already used by valid key 1/.test(e.message),
    );
    assert.equal((await collect(store.list())).length, 1);
  });

  test("create() refuses a bad e-mail or empty name and writes nothing", async (store) => {
    await assert.rejects(
      store.create(input("x", "not-an-email"), { actor: ACTOR }),
      StoreInputError,
    );
    await assert.rejects(
      store.create(input("  "), { actor: ACTOR }),
      StoreInputError,
    );
    assert.deepEqual(await collect(store.list({ includeRevoked: true })), []);
    assert.deepEqual(await collect(store.audit()), []);
    assert.equal((await store.create(input("ok"), { actor: ACTOR })).id, 1);
  });

  test("revoke() makes findByHash() report revoked at once and frees the name", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    const b = await store.create(input("b"), { actor: ACTOR });
    const { record, changed } = await store.revoke(a.id, {
      actor: ACTOR,
      reason: "laptop lost",
    });
    assert.equal(changed, true);
    assert.equal(record.status, "revoked");
    assert.equal(record.revokedReason, "laptop lost");
    assert.ok(record.revokedAt !== null);
    assert.equal((await store.findByHash(a.hash))?.status, "revoked");
    assert.equal((await store.findByHash(b.hash))?.status, "valid");
    assert.equal(await store.getByName("a"), null);
    const again = await store.create(input("a"), { actor: ACTOR });
    assert.equal(again.id, 3);
  });

  test("revoke() of a revoked key changes nothing", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    const first = await store.revoke(a.id, { actor: ACTOR, reason: "one" });
    const second = await store.revoke(a.id, { actor: ACTOR, reason: "two" });
    assert.equal(second.changed, false);
    assert.deepEqual(second.record, first.record);
    assert.equal(
      (await collect(store.audit())).filter((e) => e.action === "revoke")
        .length,
      1,
    );
  });

  test("revoke() and rotate() of an unknown id throw KeyNotFoundError", async (store) => {
    await assert.rejects(store.revoke(42, { actor: ACTOR }), KeyNotFoundError);
    await assert.rejects(
      store.rotate(42, generateApiKey(), { actor: ACTOR }),
      KeyNotFoundError,
    );
  });

  test("rotate() revokes the key and creates its replacement with the same name and e-mail", async (store) => {
    const a = await store.create(input("a", "ops@example.com"), {
      actor: ACTOR,
    });
    const fresh = generateApiKey();
    const { revoked, created } = await store.rotate(a.id, fresh, {
      actor: ACTOR,
    });
    assert.equal(revoked.status, "revoked");
    assert.equal(created.id, 2);
    assert.equal(created.name, "a");
    assert.equal(created.email, "ops@example.com");
    assert.equal((await store.findByHash(a.hash))?.status, "revoked");
    assert.equal((await store.findByHash(fresh.hash))?.id, 2);
    assert.equal((await store.getByName("A"))?.id, 2);
    await assert.rejects(
      store.rotate(a.id, generateApiKey(), { actor: ACTOR }),
      StoreInputError,
    );
  });

  test("list() streams valid keys in id order, and revoked ones with includeRevoked", async (store) => {
    for (const name of ["a", "b", "c", "d"]) {
      await store.create(input(name), { actor: ACTOR });
    }
    await store.revoke(2, { actor: ACTOR });
    const ids = (records: KeyRecord[]) => records.map((r) => r.id);
    assert.deepEqual(ids(await collect(store.list())), [1, 3, 4]);
    assert.deepEqual(ids(await collect(store.list({ includeRevoked: true }))), [
      1,
      2,
      3,
      4,
    ]);
  });

  test("get() and getByName() find keys; getByName() only valid ones", async (store) => {
    const a = await store.create(input("Alpha"), { actor: ACTOR });
    assert.deepEqual(await store.get(a.id), a);
    assert.deepEqual(await store.getByName("alpha"), a);
    assert.equal(await store.get(99), null);
    await store.revoke(a.id, { actor: ACTOR });
    assert.equal(await store.getByName("Alpha"), null);
    assert.equal((await store.get(a.id))?.status, "revoked");
  });

  test("audit() records every change with who and when, oldest first", async (store) => {
    const a = await store.create(input("a"), { actor: "alice@desk" });
    await store.create(input("b"), { actor: "bob@desk" });
    await store.revoke(a.id, { actor: "alice@desk", reason: "left" });
    await store.rotate(2, generateApiKey(), { actor: "bob@desk" });
    const log = await collect(store.audit());
    assert.deepEqual(log.map((e) => [e.action, e.keyId, e.actor]), [
      ["create", 1, "alice@desk"],
      ["create", 2, "bob@desk"],
      ["revoke", 1, "alice@desk"],
      ["rotate", 2, "bob@desk"],
    ]);
    assert.equal(log[2].detail, "left");
    assert.match(log[3].detail ?? "", /replaced by key 3/);
    assert.deepEqual(
      (await collect(store.audit({ keyId: 1 }))).map((e) => e.action),
      ["create", "revoke"],
    );
  });

  test("concurrent create() calls never share an id or a name", async (store) => {
    const made = await Promise.all(
      Array.from(
        { length: 20 },
        (_, i) => store.create(input(`k${i}`), { actor: ACTOR }),
      ),
    );
    assert.deepEqual(
      made.map((r) => r.id).sort((x, y) => x - y),
      Array.from({ length: 20 }, (_, i) => i + 1),
    );
    const sameName = await Promise.allSettled(
      Array.from(
        { length: 5 },
        () => store.create(input("same"), { actor: ACTOR }),
      ),
    );
    assert.equal(sameName.filter((r) => r.status === "fulfilled").length, 1);
  });

  test("revision() moves with every change and findByHashAt() reads record and revision together", async (store) => {
    const r0 = await store.revision();
    const a = await store.create(input("a"), { actor: ACTOR });
    const r1 = await store.revision();
    assert.ok(r1 > r0);
    assert.deepEqual(await store.findByHashAt(a.hash), {
      record: a,
      revision: r1,
    });
    await store.revoke(a.id, { actor: ACTOR });
    const seen = await store.findByHashAt(a.hash);
    assert.ok(seen.revision > r1);
    assert.equal(seen.record?.status, "revoked");
    assert.deepEqual(await store.findByHashAt(generateApiKey().hash), {
      record: null,
      revision: seen.revision,
    });
  });

  test("markExposed() records the first exposure, audits it once and leaves the key valid", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    assert.equal(
      await store.markExposed(a.id, { actor: "server", from: "203.0.113.9" }),
      true,
    );
    assert.equal(
      await store.markExposed(a.id, { actor: "server", from: "198.51.100.1" }),
      false,
    );
    const record = await store.get(a.id);
    assert.equal(record?.status, "valid");
    assert.equal(record?.exposedFrom, "203.0.113.9");
    assert.ok(record?.exposedAt);
    assert.equal((await store.findByHash(a.hash))?.exposedFrom, "203.0.113.9");
    const exposes = (await collect(store.audit())).filter((e) =>
      e.action === "expose"
    );
    assert.equal(exposes.length, 1);
    assert.match(exposes[0].detail ?? "", /203\.0\.113\.9/);
  });

  test("recordLastUsed() shows in get() and list() without moving the revision", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    const b = await store.create(input("b"), { actor: ACTOR });
    const before = await store.revision();
    const at = new Date("2026-01-02T03:04:00.000Z");
    await store.recordLastUsed([{ id: b.id, at }]);
    assert.equal(await store.revision(), before);
    assert.equal((await store.get(b.id))?.lastUsedAt, at.toISOString());
    assert.equal((await store.get(a.id))?.lastUsedAt, null);
    const listed = await collect(store.list());
    assert.deepEqual(listed.map((r) => r.lastUsedAt), [null, at.toISOString()]);
  });

  test("exportAll() then importAll() into an empty store gives the same keys, audit and next id", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    const b = await store.create(input("b"), { actor: ACTOR });
    await store.revoke(a.id, { actor: ACTOR, reason: "gone" });
    await store.recordLastUsed([{
      id: b.id,
      at: new Date("2026-01-02T03:04:00.000Z"),
    }]);
    const items = await collect(store.exportAll());
    await using target = await open();
    const counts = await target.importAll(
      (async function* () {
        yield* items;
      })(),
      { actor: ACTOR },
    );
    assert.deepEqual(counts, { keys: 2, audit: 3 });
    assert.deepEqual(
      await collect(target.list({ includeRevoked: true })),
      await collect(store.list({ includeRevoked: true })),
    );
    assert.equal((await target.findByHash(b.hash))?.status, "valid");
    assert.equal((await target.findByHash(a.hash))?.status, "revoked");
    const next = await target.create(input("c"), { actor: ACTOR });
    assert.equal(next.id, 3);
    assert.deepEqual((await collect(target.audit())).map((e) => e.action), [
      "create",
      "create",
      "revoke",
      "import",
      "create",
    ]);
    await assert.rejects(
      target.create(input("b"), { actor: ACTOR }),
      StoreInputError,
    );
  });

  test("importAll() refuses a store that is not empty and changes nothing", async (store) => {
    await store.create(input("a"), { actor: ACTOR });
    const before = await collect(store.exportAll());
    const other = { ...input("z"), id: 9 };
    await assert.rejects(
      store.importAll(
        (async function* () {
          yield {
            type: "key" as const,
            record: newRecord(other.id, other, new Date()),
          };
        })(),
        { actor: ACTOR },
      ),
      (e: Error) => e instanceof StoreInputError && /not empty/.test(e.message),
    );
    assert.deepEqual(await collect(store.exportAll()), before);
  });

  test("importAll() of a broken export leaves the store empty and usable", async (store) => {
    const good = newRecord(1, input("a"), new Date());
    await assert.rejects(
      store.importAll(
        (async function* () {
          yield { type: "key" as const, record: good };
          yield {
            type: "key" as const,
            record: { ...good, id: 2, hash: "not-a-hash" },
          };
        })(),
        { actor: ACTOR },
      ),
      StoreInputError,
    );
    assert.deepEqual(await collect(store.exportAll()), []);
    assert.equal(await store.findByHash(good.hash), null);
    assert.equal((await store.create(input("b"), { actor: ACTOR })).id, 1);
  });
}
