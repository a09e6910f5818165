/**
 * The behaviour every {@linkcode KeyStore} must show, written once and run
 * against each store implementation.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { KeyLookup } from "../../lib/auth/key_lookup.ts";
import { LastUsedRecorder } from "../../lib/usage/last_used.ts";
import { keyLineAudit } from "../../lib/store/key_line.ts";
import {
  ImportKeyError,
  ImportStateError,
  KeyNotFoundError,
  StoreInputError,
} from "../../lib/store/errors.ts";
import { lineRoot, newRecord } from "../../lib/store/records.ts";
import type { ExportItem, KeyRecord, KeyStore } from "../../lib/store/types.ts";

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

/** A key and the record an export would hold for it. */
export function importedKey(
  id: number,
  status: "valid" | "revoked" = "valid",
): { key: string; record: KeyRecord } {
  const fresh = generateApiKey();
  const record = newRecord(id, {
    name: `imported-${id}`,
    email: `ops-${id}@example.com`,
    hash: fresh.hash,
    hint: fresh.hint,
  }, new Date());
  return {
    key: fresh.key,
    record: status === "valid" ? record : {
      ...record,
      status,
      revokedAt: record.createdAt,
      revokedReason: "left",
    },
  };
}

/**
 * Audit lines enough that a store writing an import in batches has written
 * the keys before them by the time it has taken them all: the import hands
 * the backend batches of 500 items (lib/store/import.ts) and keeps the last
 * partial one until its input ends, and Deno KV's backend commits a batch
 * once it passes 500 mutations, so the keys' commit needs two full batches
 * after them. (450 lines, as before, left every key in memory: a test
 * pausing there never saw a staged key.)
 */
export function fillerLines(count = 1_000): ExportItem[] {
  return Array.from({ length: count }, () => ({
    type: "audit" as const,
    entry: {
      at: new Date().toISOString(),
      action: "create" as const,
      keyId: 1,
      actor: ACTOR,
      detail: null,
    },
  }));
}

/**
 * An import that stops after `pauseAfter` items until `go()` is called, like
 * a FIFO whose writer is slow; `go(error)` makes it fail there instead.
 */
export function pausedImport(
  items: ExportItem[],
  pauseAfter: number,
): {
  items: AsyncIterable<ExportItem>;
  paused: Promise<void>;
  go(error?: Error): void;
} {
  const paused = Promise.withResolvers<void>();
  const resume = Promise.withResolvers<Error | undefined>();
  return {
    items: (async function* () {
      for (const [index, item] of items.entries()) {
        if (index === pauseAfter) {
          paused.resolve();
          const error = await resume.promise;
          if (error) throw error;
        }
        yield item;
      }
      if (pauseAfter >= items.length) {
        paused.resolve();
        const error = await resume.promise;
        if (error) throw error;
      }
    })(),
    paused: paused.promise,
    go: (error) => resume.resolve(error),
  };
}

/** Registers the contract tests for one store. */
export function storeContract(label: string, open: OpenEmptyStore): void {
  const test = (name: string, fn: (store: KeyStore) => Promise<void>) =>
    Deno.test(`${label}: ${name}`, async () => {
      await using store = await open();
      await fn(store);
    });

  test("model: dueKeys() names exactly the valid keys past their deadline, and predecessors() the overlaps under a key, whatever changes came before", async (store) => {
    const now = Date.now();
    const at = (minutes: number) =>
      new Date(now + minutes * 60_000).toISOString();
    // Deadlines in the past and the future, changed by rotations and ended
    // by revocations: the index must follow each.
    const step = fc.oneof(
      fc.record({
        kind: fc.constant("create" as const),
        minutes: fc.option(fc.integer({ min: -90, max: 90 })),
      }),
      fc.record({ kind: fc.constant("revoke" as const), pick: fc.nat() }),
      fc.record({
        kind: fc.constant("rotate" as const),
        pick: fc.nat(),
        overlap: fc.option(fc.integer({ min: -30, max: 30 })),
      }),
    );
    let names = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(step, { maxLength: 8 }), async (steps) => {
        for (const s of steps) {
          const valid = (await collect(store.list())).filter((r) =>
            r.replacedBy === null
          );
          if (s.kind === "create") {
            await store.create({
              ...input(`due-${++names}`),
              expiresAt: s.minutes === null ? null : at(s.minutes),
            }, { actor: ACTOR });
          } else if (valid.length > 0) {
            const target = valid[s.pick % valid.length];
            if (s.kind === "revoke") {
              await store.revoke(target.id, { actor: ACTOR });
            } else {
              const { hash, hint } = input("x");
              await store.rotate(target.id, { hash, hint, expiresAt: null }, {
                actor: ACTOR,
                ...(s.overlap === null ? {} : { overlapUntil: at(s.overlap) }),
              }).catch((error) => {
                // A key whose own deadline has passed cannot be rotated.
                if (!(error instanceof StoreInputError)) throw error;
              });
            }
          }
        }
        const when = new Date(now);
        const all = await collect(store.list({ includeRevoked: true }));
        const expected = all.filter((r) =>
          r.status === "valid" && r.expiresAt !== null &&
          Date.parse(r.expiresAt) <= when.getTime()
        ).map((r) => r.id).sort((a, b) => a - b);
        const due = (await collect(store.dueKeys(when))).sort((a, b) => a - b);
        assert.deepEqual(due, expected);
        for (const record of all) {
          const under = all.filter((r) =>
            r.status === "valid" && r.replacedBy === record.id
          ).map((r) => r.id);
          const found = (await collect(store.predecessors(record.id))).map((
            r,
          ) => r.id);
          assert.deepEqual(found.sort(), under.sort());
        }
      }),
      { numRuns: 12 },
    );
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

  test("a key line's audit is the whole history across rotations, whichever of its ids is asked", async (store) => {
    const a = await store.create(input("line"), { actor: ACTOR });
    const other = await store.create(input("other"), { actor: ACTOR });
    const { created: c } = await store.rotate(a.id, generateApiKey(), {
      actor: ACTOR,
    });
    await store.revoke(other.id, { actor: ACTOR, reason: "left" });
    const { created: d } = await store.rotate(c.id, generateApiKey(), {
      actor: ACTOR,
    });
    await store.markExposed(c.id, { actor: ACTOR, from: "192.0.2.1" });
    await store.revoke(d.id, { actor: ACTOR, reason: "decommissioned" });
    const expected = [
      ["create", a.id],
      ["rotate", a.id],
      ["rotate", c.id],
      ["expose", c.id],
      ["revoke", d.id],
    ];
    for (const id of [a.id, c.id, d.id]) {
      let line: number[] = [];
      const entries = await collect(
        keyLineAudit(store, id, { onLine: (ids) => line = ids }),
      );
      assert.deepEqual(
        entries.map((e) => [e.action, e.keyId]),
        expected,
        `asked for key ${id}`,
      );
      assert.deepEqual(line, [a.id, c.id, d.id]);
    }
    assert.deepEqual(
      (await collect(keyLineAudit(store, other.id))).map((e) => e.action),
      ["create", "revoke"],
    );
  });

  test("a key line's audit shows the import that brought its keys in, and no import before its creation", async (store) => {
    const a = await store.create(input("line"), { actor: ACTOR });
    const { created: b } = await store.rotate(a.id, generateApiKey(), {
      actor: ACTOR,
    });
    const items = await collect(store.exportAll());
    await using target = await open();
    await target.importAll(
      (async function* () {
        yield* items;
      })(),
      { actor: ACTOR },
    );
    const later = await target.create(input("later"), { actor: ACTOR });
    const { created: c } = await target.rotate(b.id, generateApiKey(), {
      actor: ACTOR,
    });
    assert.deepEqual(
      (await collect(keyLineAudit(target, c.id))).map((e) => [
        e.action,
        e.keyId,
      ]),
      [["create", a.id], ["rotate", a.id], ["import", 0], ["rotate", b.id]],
    );
    assert.deepEqual(
      (await collect(keyLineAudit(target, later.id))).map((e) => e.action),
      ["create"],
    );
    // A file that held the keys without their history: the import is
    // where the line begins.
    await using bare = await open();
    await bare.importAll(
      (async function* () {
        yield* items.filter((item) => item.type === "key");
      })(),
      { actor: ACTOR },
    );
    assert.deepEqual(
      (await collect(keyLineAudit(bare, b.id))).map((e) => e.action),
      ["import"],
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
      authRevision: r1,
    });
    await store.revoke(a.id, { actor: ACTOR });
    const seen = await store.findByHashAt(a.hash);
    assert.ok(seen.revision > r1);
    assert.equal(seen.record?.status, "revoked");
    assert.deepEqual(await store.findByHashAt(generateApiKey().hash), {
      record: null,
      revision: seen.revision,
      authRevision: seen.revision,
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
    const at = new Date(Date.parse(b.createdAt) + 1234);
    await store.recordLastUsed([{ id: b.id, at }]);
    assert.equal(await store.revision(), before);
    assert.equal((await store.get(b.id))?.lastUsedAt, at.toISOString());
    assert.equal((await store.get(a.id))?.lastUsedAt, null);
    const listed = await collect(store.list());
    assert.deepEqual(listed.map((r) => r.lastUsedAt), [null, at.toISOString()]);
  });

  test("recordLastUsed() keeps the later time when an earlier one is written after it, as two servers on one store flush", async (store) => {
    const key = await store.create(input("a"), { actor: ACTOR });
    const later = new Date(Date.parse(key.createdAt) + 50_000);
    const earlier = new Date(Date.parse(key.createdAt) + 20_000);
    // One server flushes its use at +50 s; another, whose first use in its
    // minute was at +20 s, flushes after it.
    await store.recordLastUsed([{ id: key.id, at: later }]);
    await store.recordLastUsed([{ id: key.id, at: earlier }]);
    assert.equal((await store.get(key.id))?.lastUsedAt, later.toISOString());
    assert.deepEqual(
      (await collect(store.list())).map((r) => r.lastUsedAt),
      [later.toISOString()],
    );
  });

  test("lastUsedAt is never before createdAt, never after the last real use and at most a minute behind it", async (store) => {
    const MINUTE = 60_000;
    let run = 0;
    await fc.assert(
      fc.asyncProperty(
        // Milliseconds after the key's creation; negative ones are a server
        // whose clock runs behind the console's.
        fc.array(fc.integer({ min: -5 * MINUTE, max: 3 * 60 * MINUTE }), {
          minLength: 1,
          maxLength: 30,
        }),
        async (offsets) => {
          const key = await store.create(input(`used-${++run}`), {
            actor: ACTOR,
          });
          const created = Date.parse(key.createdAt);
          const uses = offsets.map((offset) => created + offset)
            .sort((x, y) => x - y);
          const recorder = new LastUsedRecorder(store, { flushMs: 3_600_000 });
          for (const at of uses) recorder.used(key.id, at);
          await recorder.close();
          const last = uses[uses.length - 1];
          const listed = (await collect(store.list())).find((r) =>
            r.id === key.id
          );
          for (
            const shown of [
              (await store.get(key.id))?.lastUsedAt,
              listed?.lastUsedAt,
            ]
          ) {
            assert.ok(shown, "a used key shows a last use");
            const at = Date.parse(shown);
            assert.ok(at >= created, `${shown} is before ${key.createdAt}`);
            assert.ok(
              at <= Math.max(created, last),
              `${shown} is after the last use ${new Date(last).toISOString()}`,
            );
            assert.ok(
              at > last - MINUTE,
              `${shown} is a minute or more behind ${
                new Date(last).toISOString()
              }`,
            );
          }
        },
      ),
      { numRuns: 40, endOnFailure: true },
    );
  });

  test("a last use written before the key's creation shows as its creation", async (store) => {
    const key = await store.create(input("early"), { actor: ACTOR });
    // What a server whose clock runs 30 s behind the console's writes for
    // a key used as soon as it was made.
    const at = new Date(Date.parse(key.createdAt) - 30_000);
    await store.recordLastUsed([{ id: key.id, at }]);
    assert.equal((await store.get(key.id))?.lastUsedAt, key.createdAt);
    assert.deepEqual(
      (await collect(store.list())).map((r) => r.lastUsedAt),
      [key.createdAt],
    );
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

  test("setAllowFrom() is audited, moves the revision and reaches the request path's read; the same ranges again change nothing", async (store) => {
    const key = await store.create(input("a"), { actor: ACTOR });
    assert.equal(key.allowFrom, null);
    const before = await store.revision();
    const set = await store.setAllowFrom(
      key.id,
      ["192.0.2.7", "2001:DB8::/32"],
      { actor: ACTOR },
    );
    assert.deepEqual(set.record.allowFrom, ["192.0.2.7/32", "2001:db8::/32"]);
    assert.equal(set.changed, true);
    const after = await store.findByHashAt(key.hash);
    assert.ok(after.revision > before);
    assert.deepEqual(after.record?.allowFrom, [
      "192.0.2.7/32",
      "2001:db8::/32",
    ]);
    const again = await store.setAllowFrom(key.id, [
      "192.0.2.7/32",
      "2001:db8::/32",
    ], {
      actor: ACTOR,
    });
    assert.equal(again.changed, false);
    assert.equal(await store.revision(), after.revision);
    await store.setAllowFrom(key.id, null, { actor: ACTOR });
    assert.equal((await store.get(key.id))?.allowFrom, null);
    const lines = (await collect(store.audit({ keyId: key.id })))
      .filter((e) => e.action === "allow_from").map((e) => e.detail);
    assert.deepEqual(lines, [
      "usable only from 192.0.2.7/32, 2001:db8::/32",
      "usable from anywhere",
    ]);
    await assert.rejects(
      store.setAllowFrom(key.id, ["10.0.0.1/8"], { actor: ACTOR }),
      StoreInputError,
    );
    await assert.rejects(
      store.setAllowFrom(99, null, { actor: ACTOR }),
      KeyNotFoundError,
    );
  });

  test("create() with allowFrom stores the canonical ranges and says so in the audit", async (store) => {
    const key = await store.create({
      ...input("a"),
      allowFrom: ["10.1.0.0/16"],
    }, {
      actor: ACTOR,
    });
    assert.deepEqual((await store.findByHash(key.hash))?.allowFrom, [
      "10.1.0.0/16",
    ]);
    const [line] = await collect(store.audit({ keyId: key.id }));
    assert.equal(line.detail, "usable only from 10.1.0.0/16");
  });

  test("rotate() gives the replacement the old key's allowFrom, with or without an overlap", async (store) => {
    const key = await store.create({
      ...input("a"),
      allowFrom: ["10.1.0.0/16", "2001:db8::/48"],
    }, { actor: ACTOR });
    const plain = await store.rotate(key.id, generateApiKey(), {
      actor: ACTOR,
    });
    assert.deepEqual(plain.created.allowFrom, ["10.1.0.0/16", "2001:db8::/48"]);
    const overlapped = await store.rotate(plain.created.id, generateApiKey(), {
      actor: ACTOR,
      overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
      untilFirstUse: true,
    });
    for (const record of [overlapped.created, overlapped.revoked]) {
      assert.deepEqual(record.allowFrom, ["10.1.0.0/16", "2001:db8::/48"]);
    }
    // What the request path reads, not only what rotate() returned.
    const stored = await store.findByHashAt(overlapped.created.hash);
    assert.deepEqual(stored.record?.allowFrom, [
      "10.1.0.0/16",
      "2001:db8::/48",
    ]);
  });

  test("rotate() of a key whose predecessor is still in its overlap revokes the predecessor in the same change, and every key of the line names the line's first key", async (store) => {
    const a = await store.create(
      { ...input("a"), rateLimit: { count: 5, windowSeconds: 60 } },
      { actor: ACTOR },
    );
    const overlap = {
      actor: ACTOR,
      overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
    };
    const b = (await store.rotate(a.id, generateApiKey(), overlap)).created;
    const second = await store.rotate(b.id, generateApiKey(), overlap);
    const c = second.created;
    assert.equal(second.retired?.id, a.id);
    const third = await store.rotate(c.id, generateApiKey(), overlap);
    const d = third.created;
    assert.equal(third.retired?.id, b.id);
    // What the request path reads: two keys of the line work, each on its
    // own count and on the line's, that of the first key.
    const line = await Promise.all(
      [a, b, c, d].map(async (key) =>
        (await store.findByHashAt(key.hash)).record!
      ),
    );
    assert.deepEqual(line.map((record) => record.status), [
      "revoked",
      "revoked",
      "valid",
      "valid",
    ]);
    assert.deepEqual(line.map(lineRoot), [a.id, a.id, a.id, a.id]);
    assert.deepEqual(line.map((record) => record.rateCounter), [
      null,
      a.id,
      a.id,
      a.id,
    ]);
    assert.match(line[0].revokedReason ?? "", new RegExp(`key ${b.id}\\b`));
    const revokes = (await collect(store.audit()))
      .filter((entry) => entry.action === "revoke")
      .map((entry) => entry.keyId);
    assert.deepEqual(revokes, [a.id, b.id]);
  });

  test("setRateLimit() is an authentication change: audited, it moves the authentication revision and the change feed; the same limit again changes nothing", async (store) => {
    const key = await store.create(input("a"), { actor: ACTOR });
    assert.equal(key.rateLimit, null);
    const before = await store.findByHashAt(key.hash);
    const set = await store.setRateLimit(
      key.id,
      { count: 600, windowSeconds: 60 },
      { actor: ACTOR },
    );
    assert.equal(set.changed, true);
    assert.deepEqual(set.record.rateLimit, { count: 600, windowSeconds: 60 });
    const after = await store.findByHashAt(key.hash);
    assert.ok(after.revision > before.revision);
    assert.ok(after.authRevision > before.authRevision);
    assert.deepEqual(after.record?.rateLimit, {
      count: 600,
      windowSeconds: 60,
    });
    const feed = await store.changesSince(before.revision);
    assert.ok(feed.rebuild || feed.keyIds.includes(key.id));
    const again = await store.setRateLimit(
      key.id,
      { count: 600, windowSeconds: 60 },
      { actor: ACTOR },
    );
    assert.equal(again.changed, false);
    assert.equal(await store.revision(), after.revision);
    await store.setRateLimit(key.id, null, { actor: ACTOR });
    assert.equal((await store.get(key.id))?.rateLimit, null);
    const lines = (await collect(store.audit({ keyId: key.id })))
      .filter((e) => e.action === "rate_limit").map((e) => e.detail);
    assert.deepEqual(lines, ["600 requests per 60 s", "no rate limit"]);
    await assert.rejects(
      store.setRateLimit(key.id, { count: 0, windowSeconds: 60 }, {
        actor: ACTOR,
      }),
      StoreInputError,
    );
    await assert.rejects(
      store.setRateLimit(99, null, { actor: ACTOR }),
      KeyNotFoundError,
    );
  });

  test("setRateLimit() on a key of a rotation in its overlap sets both keys in one change, one audit line each; a retired or revoked predecessor is left as it is", async (store) => {
    const limit = { count: 10, windowSeconds: 60 };
    const first = await store.create({ ...input("a"), rateLimit: limit }, {
      actor: ACTOR,
    });
    const until = new Date(Date.now() + 3_600_000).toISOString();
    const { created } = await store.rotate(first.id, generateApiKey(), {
      actor: ACTOR,
      overlapUntil: until,
    });
    // From the new key: the old one, still working, follows.
    const down = await store.setRateLimit(created.id, {
      count: 5,
      windowSeconds: 60,
    }, { actor: ACTOR });
    assert.equal(down.changed, true);
    assert.equal(down.partner?.id, first.id);
    // One change: both records carry its revision.
    const [a, b] = await Promise.all(
      [first.hash, created.hash].map((hash) => store.findByHashAt(hash)),
    );
    assert.equal(a.authRevision, b.authRevision);
    for (const id of [first.id, created.id]) {
      assert.deepEqual((await store.get(id))?.rateLimit, {
        count: 5,
        windowSeconds: 60,
      });
      const lines = (await collect(store.audit({ keyId: id })))
        .filter((e) => e.action === "rate_limit").map((e) => e.detail);
      assert.deepEqual(lines, ["5 requests per 60 s"]);
    }
    // From the old key: the new one follows.
    const up = await store.setRateLimit(first.id, null, { actor: ACTOR });
    assert.equal(up.partner?.id, created.id);
    assert.equal((await store.get(created.id))?.rateLimit, null);
    // A partner already at that limit is no change.
    const same = await store.setRateLimit(first.id, null, { actor: ACTOR });
    assert.equal(same.changed, false);
    assert.equal(same.partner, null);
    // Rotated again, the first key is retired: the line's other working
    // key is the newest, not the first.
    const next = await store.rotate(created.id, generateApiKey(), {
      actor: ACTOR,
      overlapUntil: until,
    });
    const third = await store.setRateLimit(next.created.id, limit, {
      actor: ACTOR,
    });
    assert.equal(third.partner?.id, created.id);
    assert.equal((await store.get(first.id))?.rateLimit, null);
    // Revoked at once, the old key is no partner.
    const plain = await store.create({ ...input("b"), rateLimit: limit }, {
      actor: ACTOR,
    });
    const done = await store.rotate(plain.id, generateApiKey(), {
      actor: ACTOR,
    });
    const alone = await store.setRateLimit(done.created.id, null, {
      actor: ACTOR,
    });
    assert.equal(alone.partner, null);
    assert.deepEqual((await store.get(plain.id))?.rateLimit, limit);
  });

  test("create() with a rate limit stores it, says so in the audit, and rotate() hands it to the replacement", async (store) => {
    const key = await store.create({
      ...input("a"),
      rateLimit: { count: 10, windowSeconds: 1 },
    }, { actor: ACTOR });
    assert.deepEqual((await store.findByHash(key.hash))?.rateLimit, {
      count: 10,
      windowSeconds: 1,
    });
    const [line] = await collect(store.audit({ keyId: key.id }));
    assert.equal(line.detail, "10 requests per 1 s");
    const plain = await store.rotate(key.id, generateApiKey(), {
      actor: ACTOR,
    });
    assert.deepEqual(plain.created.rateLimit, { count: 10, windowSeconds: 1 });
    const overlapped = await store.rotate(plain.created.id, generateApiKey(), {
      actor: ACTOR,
      overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
    });
    const stored = await store.findByHashAt(overlapped.created.hash);
    assert.deepEqual(stored.record?.rateLimit, { count: 10, windowSeconds: 1 });
  });

  test("exportAll() then importAll() carries the rate limit and its audit line; a record without one imports without a limit", async (store) => {
    const key = await store.create(input("a"), { actor: ACTOR });
    await store.setRateLimit(key.id, { count: 5, windowSeconds: 3600 }, {
      actor: ACTOR,
    });
    const items = await collect(store.exportAll());
    await using target = await open();
    await target.importAll(
      (async function* () {
        yield* items;
      })(),
      { actor: ACTOR },
    );
    assert.deepEqual((await target.findByHashAt(key.hash)).record?.rateLimit, {
      count: 5,
      windowSeconds: 3600,
    });
    assert.ok(
      (await collect(target.audit({ keyId: key.id })))
        .some((e) => e.action === "rate_limit"),
    );
    await using older = await open();
    const { record } = importedKey(1);
    await older.importAll(
      (async function* () {
        yield { type: "key" as const, record: { ...record, rateLimit: null } };
      })(),
      { actor: ACTOR },
    );
    assert.equal((await older.get(1))?.rateLimit, null);
  });

  test("recordNetworkUses() audits a network's first use only, moves the revision only then, and keeps five networks", async (store) => {
    const key = await store.create(input("a"), { actor: ACTOR });
    const t = (s: number) => new Date(Date.parse(key.createdAt) + s * 1000);
    const first = await store.recordNetworkUses([
      { id: key.id, network: "192.0.2.0/24", at: t(1) },
      { id: key.id, network: "192.0.2.0/24", at: t(2) },
      { id: 999, network: "192.0.2.0/24", at: t(2) },
    ]);
    assert.deepEqual(first, [{ id: key.id, network: "192.0.2.0/24" }]);
    const revision = await store.revision();
    const second = await store.recordNetworkUses([
      { id: key.id, network: "192.0.2.0/24", at: t(3) },
    ]);
    assert.deepEqual(second, []);
    assert.equal(
      await store.revision(),
      revision,
      "a known network moves nothing",
    );
    assert.deepEqual((await store.get(key.id))?.networks, [{
      network: "192.0.2.0/24",
      firstSeenAt: t(1).toISOString(),
      lastSeenAt: t(3).toISOString(),
    }]);
    for (let i = 1; i <= 6; i++) {
      await store.recordNetworkUses([
        { id: key.id, network: `2001:db8:${i}::/48`, at: t(10 + i) },
      ]);
    }
    const networks = (await store.get(key.id))!.networks;
    assert.deepEqual(
      networks.map((n) => n.network),
      [2, 3, 4, 5, 6].map((i) => `2001:db8:${i}::/48`),
    );
    const audited = (await collect(store.audit({ keyId: key.id })))
      .filter((e) => e.action === "network");
    assert.equal(audited.length, 7);
    assert.equal(audited[0].detail, "first used from 192.0.2.0/24");
    assert.equal(audited[0].actor, "server");
    // The record the request path caches is untouched by usage.
    assert.deepEqual((await store.findByHashAt(key.hash)).record?.networks, []);
  });

  test("recordNetworkUses() audits every new network of one flush, not only the five it keeps, even more than one commit can hold", async (store) => {
    const key = await store.create(input("a"), { actor: ACTOR });
    const t0 = Date.parse(key.createdAt);
    // Past Deno KV's 1,000 mutations in one atomic commit.
    const uses = Array.from({ length: 1100 }, (_, i) => ({
      id: key.id,
      network: `198.${51 + (i >> 8)}.${i & 255}.0/24`,
      at: new Date(t0 + i),
    }));
    const reported = await store.recordNetworkUses(uses);
    assert.deepEqual(
      reported.map((r) => r.network).sort(),
      uses.map((u) => u.network).sort(),
    );
    const audited = (await collect(store.audit({ keyId: key.id })))
      .filter((e) => e.action === "network").map((e) => e.detail).sort();
    assert.deepEqual(
      audited,
      uses.map((u) => `first used from ${u.network}`).sort(),
    );
    assert.equal((await store.get(key.id))!.networks.length, 5);
  });

  test("recordRefusedUses() keeps the latest ten, oldest first, without moving the revision", async (store) => {
    const key = await store.create(input("a"), { actor: ACTOR });
    const revision = await store.revision();
    const t0 = Date.parse(key.createdAt);
    await store.recordRefusedUses(
      Array.from({ length: 8 }, (_, i) => ({
        id: key.id,
        address: `198.51.100.${i}`,
        at: new Date(t0 + i),
      })),
    );
    await store.recordRefusedUses(
      Array.from({ length: 8 }, (_, i) => ({
        id: key.id,
        address: `2001:db8::${i + 8}`,
        at: new Date(t0 + 8 + i),
      })),
    );
    await store.recordRefusedUses([{
      id: 999,
      address: "::1",
      at: new Date(),
    }]);
    assert.equal(await store.revision(), revision);
    const refused = (await store.get(key.id))!.refusedUses;
    assert.equal(refused.length, 10);
    assert.equal(refused[0].address, "198.51.100.6");
    assert.equal(refused[9].address, "2001:db8::15");
    assert.equal(refused[9].at, new Date(t0 + 15).toISOString());
    assert.deepEqual((await collect(store.list()))[0].refusedUses, refused);
  });

  test("exportAll() then importAll() carries allowFrom, networks and refused uses", async (store) => {
    const key = await store.create({
      ...input("a"),
      allowFrom: ["192.0.2.0/24"],
    }, {
      actor: ACTOR,
    });
    const at = new Date(Date.parse(key.createdAt) + 1000);
    await store.recordNetworkUses([{
      id: key.id,
      network: "192.0.2.0/24",
      at,
    }]);
    await store.recordRefusedUses([{ id: key.id, address: "203.0.113.9", at }]);
    const items = await collect(store.exportAll());
    await using target = await open();
    await target.importAll(
      (async function* () {
        yield* items;
      })(),
      { actor: ACTOR },
    );
    const copied = await target.get(key.id);
    assert.deepEqual(copied, await store.get(key.id));
    assert.deepEqual(copied?.allowFrom, ["192.0.2.0/24"]);
    assert.equal(copied?.networks.length, 1);
    assert.equal(copied?.refusedUses[0].address, "203.0.113.9");
    assert.deepEqual(
      (await target.findByHashAt(key.hash)).record?.allowFrom,
      ["192.0.2.0/24"],
    );
  });

  test("importAll() refuses a record missing a field, naming it, and leaves the store empty", async (store) => {
    const { record } = importedKey(1);
    for (
      const field of [
        "expiresAt",
        "rotatedFrom",
        "rateCounter",
        "allowFrom",
        "rateLimit",
        "networks",
      ] as const
    ) {
      const { [field]: _gone, ...partial } = record;
      await assert.rejects(
        store.importAll(
          (async function* () {
            yield { type: "key" as const, record: partial as KeyRecord };
          })(),
          { actor: ACTOR },
        ),
        (e: Error) =>
          e instanceof ImportKeyError && e.defect === "field_missing" &&
          e.recordField === field,
        field,
      );
      assert.deepEqual(await collect(store.exportAll()), [], field);
    }
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

  test("keyHashes() streams every key, valid and revoked, after an id in id order", async (store) => {
    const made: KeyRecord[] = [];
    for (let i = 0; i < 12; i++) {
      made.push(await store.create(input(`k${i}`), { actor: ACTOR }));
    }
    await store.revoke(3, { actor: ACTOR });
    const { created } = await store.rotate(4, generateApiKey(), {
      actor: ACTOR,
    });
    made.push(created);
    assert.deepEqual(
      await collect(store.keyHashes()),
      made.map((r) => ({ id: r.id, hash: r.hash })),
    );
    assert.deepEqual(
      await collect(store.keyHashes({ afterId: 10 })),
      made.slice(10).map((r) => ({ id: r.id, hash: r.hash })),
    );
    assert.deepEqual(await collect(store.keyHashes({ afterId: 13 })), []);
  });

  test("importRevision() is 0 until an import, then the revision it completed at", async (store) => {
    assert.equal(await store.importRevision(), 0n);
    const a = importedKey(1);
    await store.importAll(
      (async function* () {
        yield { type: "key" as const, record: a.record };
      })(),
      { actor: ACTOR },
    );
    const imported = await store.importRevision();
    assert.equal(imported, await store.revision());
    assert.ok(imported > 0n);
    await store.create(input("b"), { actor: ACTOR });
    assert.equal(await store.importRevision(), imported);
    assert.ok(await store.revision() > imported);
  });

  test("abortImport() with no import unfinished changes nothing", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    const revision = await store.revision();
    assert.equal(await store.abortImport({ actor: ACTOR }), false);
    assert.equal(await store.revision(), revision);
    assert.deepEqual(await store.get(a.id), a);
  });

  test("no key of an import authenticates before it completes, nor after it fails, through a caching lookup", async (store) => {
    const lookup = new KeyLookup(store);
    const a = importedKey(1);
    const b = importedKey(2);
    const items: ExportItem[] = [
      { type: "key", record: a.record },
      { type: "key", record: b.record },
      ...fillerLines(),
    ];
    const run = pausedImport(items, items.length);
    const importing = store.importAll(run.items, { actor: ACTOR });
    await run.paused;
    const before = await store.revision();
    assert.equal((await lookup.authenticate(a.key)).ok, false);
    assert.equal((await lookup.authenticate(b.key)).ok, false);
    run.go(new StoreInputError("import_bad_audit", "line 3 is bad"));
    await assert.rejects(importing, StoreInputError);
    assert.ok(await store.revision() >= before);
    assert.equal((await lookup.authenticate(a.key)).ok, false);
    assert.deepEqual(await collect(store.list({ includeRevoked: true })), []);
    // The store is as before: the next import or create starts afresh.
    const next = await store.create(input("c"), { actor: ACTOR });
    assert.equal(next.id, 1);
    assert.equal((await lookup.authenticate(a.key)).ok, false);
  });

  test("a completed import's keys authenticate at once through a lookup that cached them as unknown", async (store) => {
    const lookup = new KeyLookup(store);
    const a = importedKey(1);
    const r = importedKey(2, "revoked");
    assert.equal((await lookup.authenticate(a.key)).ok, false);
    const items: ExportItem[] = [
      { type: "key", record: a.record },
      { type: "key", record: r.record },
      ...fillerLines(),
    ];
    const run = pausedImport(items, items.length);
    const importing = store.importAll(run.items, { actor: ACTOR });
    await run.paused;
    assert.equal((await lookup.authenticate(a.key)).ok, false);
    // A server started meanwhile has nothing cached that could hide it.
    assert.equal((await new KeyLookup(store).authenticate(a.key)).ok, false);
    run.go();
    await importing;
    assert.equal((await lookup.authenticate(a.key)).ok, true);
    assert.deepEqual(await lookup.authenticate(r.key), {
      ok: false,
      reason: "revoked",
    });
  });

  test("a key of an unfinished import is not found by its hash, the read a request's lookup makes, until the import is published", async (store) => {
    const a = importedKey(1);
    const items: ExportItem[] = [
      { type: "key", record: a.record },
      ...fillerLines(),
    ];
    // Paused after every line: a store that writes in batches has staged
    // the key's batch by now (see fillerLines), and only publishing is left.
    const run = pausedImport(items, items.length);
    const importing = store.importAll(run.items, { actor: ACTOR });
    await run.paused;
    // The record and the import marker are read together: a staged key
    // must not be handed to a lookup that missed the marker elsewhere
    // (its index of hashes), nor to a console command asking about a key.
    assert.equal((await store.findByHashAt(a.record.hash)).record, null);
    assert.equal(await store.findByHash(a.record.hash), null);
    run.go();
    assert.deepEqual(await importing, { keys: 1, audit: fillerLines().length });
    const found = await store.findByHashAt(a.record.hash);
    assert.equal(found.record?.id, 1);
    assert.equal(found.record?.status, "valid");
    assert.equal((await store.findByHash(a.record.hash))?.id, 1);
  });

  test("a second import while one runs is refused at once, and only the first one's keys land", async (store) => {
    const first = [1, 2, 3].map((id) => importedKey(id));
    const second = [1, 2, 3, 4].map((id) => importedKey(id));
    const run = pausedImport(
      first.map((k) => ({ type: "key" as const, record: k.record })),
      2,
    );
    const importing = store.importAll(run.items, { actor: ACTOR });
    await run.paused;
    const started = Date.now();
    await assert.rejects(
      store.importAll(
        (async function* () {
          for (const k of second) {
            yield { type: "key" as const, record: k.record };
          }
        })(),
        { actor: ACTOR },
      ),
      (e: Error) =>
        e instanceof ImportStateError && e.code === "import_unfinished",
    );
    // At once: the first import is paused and only goes on below, so a
    // second that waited for it would never end; one that waited out a
    // lock instead would take PostgreSQL's lock_timeout (5 s), which this
    // bound stays below with room for a busy machine.
    assert.ok(Date.now() - started < 3000, "the second import waited");
    await assert.rejects(
      store.create(input("z"), { actor: ACTOR }),
      ImportStateError,
    );
    run.go();
    assert.deepEqual(await importing, { keys: 3, audit: 0 });
    assert.deepEqual(
      (await collect(store.keyHashes())).map((k) => k.hash),
      first.map((k) => k.record.hash),
    );
  });

  test("importAll() refuses ids outside 1 to 2^31-1, duplicate ids and duplicate hashes, leaving the store empty", async (store) => {
    const lookup = new KeyLookup(store);
    const a = importedKey(1);
    const cases: [string, KeyRecord[]][] = [
      ["an id of 2^53-1", [a.record, {
        ...importedKey(2).record,
        id: Number.MAX_SAFE_INTEGER,
      }]],
      ["an id of 2^31", [a.record, { ...importedKey(2).record, id: 2 ** 31 }]],
      ["an id of 1.5", [a.record, { ...importedKey(2).record, id: 1.5 }]],
      ["a duplicate id", [a.record, { ...importedKey(1).record }]],
      ["a duplicate hash", [a.record, {
        ...importedKey(2).record,
        hash: a.record.hash,
      }]],
    ];
    for (const [what, records] of cases) {
      await assert.rejects(
        store.importAll(
          (async function* () {
            for (const record of records) {
              yield { type: "key" as const, record };
            }
          })(),
          { actor: ACTOR },
        ),
        StoreInputError,
        what,
      );
      assert.deepEqual(
        await collect(store.list({ includeRevoked: true })),
        [],
        what,
      );
      assert.equal((await lookup.authenticate(a.key)).ok, false, what);
    }
    const ok = importedKey(2 ** 31 - 1);
    await store.importAll(
      (async function* () {
        yield { type: "key" as const, record: ok.record };
      })(),
      { actor: ACTOR },
    );
    await assert.rejects(
      store.create(input("next"), { actor: ACTOR }),
      StoreInputError,
    );
    assert.equal((await lookup.authenticate(ok.key)).ok, true);
  });

  test("rotate() with an overlap keeps the old key valid until its deadline, beside its replacement", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    const until = new Date(Date.now() + 3_600_000).toISOString();
    const fresh = generateApiKey();
    const { revoked: old, created } = await store.rotate(a.id, fresh, {
      actor: ACTOR,
      overlapUntil: until,
    });
    assert.equal(old.status, "valid");
    assert.equal(old.expiresAt, until);
    assert.equal(old.replacedBy, created.id);
    assert.equal(created.retires, null);
    assert.equal((await store.findByHash(a.hash))?.status, "valid");
    assert.equal((await store.getByName("a"))?.id, created.id);
    assert.equal(
      (await collect(store.list())).map((r) => r.id).join(),
      `${a.id},${created.id}`,
    );
    const [, rotation] = await collect(store.audit());
    assert.equal(rotation.action, "rotate");
    assert.match(rotation.detail!, new RegExp(`until ${until}`));
    assert.deepEqual(
      (await collect(keyLineAudit(store, created.id))).map((e) => e.keyId),
      [a.id, a.id],
    );
    await assert.rejects(
      store.rotate(a.id, generateApiKey(), { actor: ACTOR }),
      StoreInputError,
    );
    // Not yet due: retiring by the deadline changes nothing.
    assert.equal(
      (await store.retire(a.id, { actor: "server", cause: "deadline" }))
        .changed,
      false,
    );
    // The replacement can be revoked on its own; the old key keeps its overlap.
    await store.revoke(created.id, { actor: ACTOR });
    assert.equal((await store.get(a.id))?.status, "valid");
    await store.create(input("a"), { actor: ACTOR });
  });

  test("retire() revokes a key past its expiresAt once, as of that time, with the reason expired", async (store) => {
    const past = new Date(Date.now() - 1000).toISOString();
    const a = await store.create({ ...input("a"), expiresAt: past }, {
      actor: ACTOR,
    });
    assert.equal(a.expiresAt, past);
    const revision = await store.revision();
    const first = await store.retire(a.id, {
      actor: "expiry",
      cause: "deadline",
    });
    assert.equal(first.changed, true);
    assert.equal(first.record.status, "revoked");
    assert.equal(first.record.revokedAt, past);
    assert.equal(first.record.revokedReason, "expired");
    assert.ok(await store.revision() > revision);
    assert.equal(
      (await store.retire(a.id, { actor: "expiry", cause: "deadline" }))
        .changed,
      false,
    );
    const last = (await collect(store.audit())).at(-1)!;
    assert.deepEqual([last.action, last.actor, last.detail], [
      "revoke",
      "expiry",
      "expired",
    ]);
    // The name is free again.
    await store.create(input("a"), { actor: ACTOR });
  });

  test("retire() at a replacement's first use revokes the key it retires, once, and spends the link", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    const { created } = await store.rotate(a.id, generateApiKey(), {
      actor: ACTOR,
      overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
      untilFirstUse: true,
    });
    assert.equal(created.retires, a.id);
    const result = await store.retire(created.id, {
      actor: "server",
      cause: "first_use",
    });
    assert.equal(result.changed, true);
    assert.equal(result.record.id, a.id);
    assert.equal(
      (await store.findByHash(a.hash))?.revokedReason,
      `replaced by key ${created.id}, which was first used`,
    );
    assert.equal((await store.get(created.id))?.retires, null);
    assert.equal((await store.get(created.id))?.status, "valid");
    const revision = await store.revision();
    assert.equal(
      (await store.retire(created.id, { actor: "server", cause: "first_use" }))
        .changed,
      false,
    );
    assert.equal(await store.revision(), revision);
    const last = (await collect(store.audit())).at(-1)!;
    assert.deepEqual([last.action, last.keyId, last.actor], [
      "revoke",
      a.id,
      "server",
    ]);
  });

  test("an export carries expiresAt, replacedBy and retires, and an import restores them", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    const later = new Date(Date.now() + 86_400_000).toISOString();
    await store.create({ ...input("b"), expiresAt: later }, { actor: ACTOR });
    await store.rotate(a.id, generateApiKey(), {
      actor: ACTOR,
      overlapUntil: later,
      untilFirstUse: true,
    });
    const items = await collect(store.exportAll());
    await using target = await open();
    await target.importAll(
      (async function* () {
        yield* items;
      })(),
      { actor: ACTOR },
    );
    const restored = await collect(target.list({ includeRevoked: true }));
    assert.deepEqual(
      restored.map((r) => [r.id, r.expiresAt, r.replacedBy, r.retires]),
      [[1, later, 3, null], [2, later, null, null], [3, null, null, 1]],
    );
    assert.equal((await target.getByName("a"))?.id, 3);
  });

  test("importAll() refuses rotation links no rotation writes, and leaves the store empty", async (store) => {
    const later = new Date(Date.now() + 86_400_000).toISOString();
    const old = importedKey(1).record;
    const replacement = importedKey(2).record;
    const unrelated = importedKey(3).record;
    const cases: [string, KeyRecord[]][] = [
      ["a key that retires itself", [{ ...old, retires: 1 }]],
      ["a key that replaces itself", [{
        ...old,
        replacedBy: 1,
        expiresAt: later,
      }]],
      ["a valid key in an overlap without a deadline", [
        { ...old, name: replacement.name, replacedBy: 2 },
        replacement,
      ]],
      ["a key that retires one it does not replace", [
        old,
        unrelated,
        { ...replacement, retires: 3 },
      ]],
    ];
    for (const [what, records] of cases) {
      await assert.rejects(
        store.importAll(
          (async function* () {
            for (const record of records) {
              yield { type: "key", record } as ExportItem;
            }
          })(),
          { actor: ACTOR },
        ),
        StoreInputError,
        what,
      );
      assert.deepEqual(await collect(store.exportAll()), [], what);
    }
    // The links a rotation does write still import.
    await store.importAll(
      (async function* () {
        yield {
          type: "key",
          record: {
            ...old,
            name: replacement.name,
            replacedBy: 2,
            expiresAt: later,
          },
        } as ExportItem;
        yield {
          type: "key",
          record: { ...replacement, retires: 1 },
        } as ExportItem;
      })(),
      { actor: ACTOR },
    );
    assert.equal((await store.get(2))?.retires, 1);
  });

  test("importAll() takes the rate-limit counts a rotation line shares, and refuses a count or predecessor outside the line, leaving the store empty", async (store) => {
    const a = await store.create(input("a"), { actor: ACTOR });
    const other = await store.create(input("other"), { actor: ACTOR });
    let last = a;
    for (let i = 0; i < 3; i++) {
      last = (await store.rotate(last.id, generateApiKey(), { actor: ACTOR }))
        .created;
    }
    const items = await collect(store.exportAll());
    const keys = items.flatMap((item) =>
      item.type === "key" ? [item.record] : []
    );
    // a, other, then b, c and d rotated from a, b and c: all of a's line.
    assert.deepEqual(keys.map(lineRoot), [1, null, 1, 1, 1]);
    await using target = await open();
    await target.importAll(
      (async function* () {
        yield* items;
      })(),
      { actor: ACTOR },
    );
    assert.deepEqual(
      (await collect(target.list({ includeRevoked: true }))).map(lineRoot),
      [1, null, 1, 1, 1],
    );
    const changed = (id: number, fields: Partial<KeyRecord>) =>
      keys.map((k) => k.id === id ? { ...k, ...fields } : k);
    const cases: [string, KeyRecord[], string][] = [
      [
        "a count shared with another line's key",
        changed(5, {
          rateCounter: other.id,
        }),
        "rateCounter",
      ],
      [
        "a count shared with a later key of the line",
        changed(4, {
          rateCounter: 5,
        }),
        "rateCounter",
      ],
      [
        "a predecessor missing from the import",
        keys.filter((k) => k.id !== 4),
        "rotatedFrom",
      ],
      [
        "a predecessor with a later id",
        changed(3, { rotatedFrom: 5 }),
        "rotatedFrom",
      ],
      // A stranger's key claimed as the predecessor, which names another
      // replacement: its count would follow, now or at the next rotation.
      [
        "a stranger's key claimed as predecessor, with its count",
        changed(other.id, { rotatedFrom: a.id, rateCounter: a.id }),
        "rotatedFrom",
      ],
      [
        "a stranger's key claimed as predecessor alone",
        changed(other.id, { rotatedFrom: a.id }),
        "rotatedFrom",
      ],
    ];
    await using empty = await open();
    for (const [what, records, field] of cases) {
      await assert.rejects(
        empty.importAll(
          (async function* () {
            for (const record of records) {
              yield { type: "key", record } as ExportItem;
            }
          })(),
          { actor: ACTOR },
        ),
        (e: Error) =>
          e instanceof ImportKeyError && e.defect === "link_invalid" &&
          e.recordField === field,
        what,
      );
      assert.deepEqual(await collect(empty.exportAll()), [], what);
    }
  });

  test("importAll() takes a line written by 1.1, whose keys alternate between two counts, and its next rotation names the line's first key on both live keys", async (store) => {
    const a = await store.create(
      { ...input("a"), rateLimit: { count: 5, windowSeconds: 60 } },
      { actor: ACTOR },
    );
    const overlap = {
      actor: ACTOR,
      overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
    };
    let last = a;
    for (let i = 0; i < 3; i++) {
      last = (await store.rotate(last.id, generateApiKey(), overlap)).created;
    }
    // What 1.1 wrote for a, b, c, d: none, none, a's count, b's count.
    const written11 = [null, null, 1, 2];
    const items = (await collect(store.exportAll())).map((item) =>
      item.type === "key"
        ? {
          ...item,
          record: {
            ...item.record,
            rateCounter: written11[item.record.id - 1],
          },
        }
        : item
    );
    await using target = await open();
    await target.importAll(
      (async function* () {
        yield* items;
      })(),
      { actor: ACTOR },
    );
    const d = (await target.get(4))!;
    assert.equal(d.rateCounter, 2);
    assert.equal(d.status, "valid");
    const { created, retired } = await target.rotate(
      d.id,
      generateApiKey(),
      overlap,
    );
    assert.equal(retired?.id, 3);
    const live = await Promise.all(
      [d.id, created.id].map(async (id) => (await target.get(id))!),
    );
    assert.deepEqual(live.map((record) => record.status), ["valid", "valid"]);
    assert.deepEqual(live.map((record) => record.rateCounter), [1, 1]);
    assert.deepEqual(live.map(lineRoot), [1, 1]);
  });
}
