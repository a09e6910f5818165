/**
 * A cache miss waits for the servers to know the last change that altered
 * the key read (and what that change linked), not the store's last change:
 * with one server registered and silent (frozen, crashed), a change to
 * another key leaves a never-used valid key answered at once, while a change
 * to that key itself is still waited for. On Deno KV and PostgreSQL.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { StoreInputError } from "../../lib/store/errors.ts";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { KeyLookup } from "../../lib/auth/key_lookup.ts";
import { Lease, LEASE_MS } from "../../lib/auth/lease.ts";
import { counted } from "../../lib/store/counted.ts";
import { acknowledged } from "../../lib/store/acknowledged.ts";
import type { KeyService } from "../../lib/store/keys.ts";
import type { KeyStore } from "../../lib/store/types.ts";
import { keyByHash, keyById } from "../../lib/store/layout/_keys.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import { type RawEntries, rawEntries } from "../support/raw_entries.ts";
import { importedKey } from "../support/store_contract.ts";
import { freshDatabase, registerWithDatabase } from "../support/postgres.ts";
import { openPostgresStore } from "../../lib/store/postgres/store.ts";
import { until } from "../support/wait.ts";

type Shared = {
  open(): Promise<KeyService>;
  /** The store's entries, reached behind it as another writer would. */
  entries(): Promise<RawEntries>;
} & AsyncDisposable;

const ACTOR = "tester@host";
const ACTOR_OPTIONS = { actor: ACTOR };

function fresh(name: string) {
  const made = generateApiKey();
  return {
    key: made.key,
    input: {
      name,
      email: `${name}@example.com`,
      hash: made.hash,
      hint: made.hint,
    },
  };
}

/** A server's lookup in this process, its store calls counted. */
async function server(shared: Shared) {
  const wrapped = counted(await shared.open());
  const lease = new Lease(wrapped.store, { pollMs: 5 });
  const lookup = new KeyLookup(wrapped.store, { lease });
  await lease.start();
  return {
    lookup,
    count: (method: keyof KeyStore) => wrapped.counts()[method] ?? 0,
    async [Symbol.asyncDispose]() {
      await lease.stop();
      await wrapped.store.close();
    },
  };
}

/**
 * Registers a server that acknowledged everything so far and then says
 * nothing more, with a whole lease: a reader that waited for it would wait
 * that lease out and remove its registration.
 */
async function silentServer(raw: KeyStore): Promise<void> {
  const revision = await raw.revision();
  await raw.registerInstance({
    id: "silent",
    host: "test",
    pid: 1,
    startedAt: new Date().toISOString(),
    leaseMs: LEASE_MS,
    acked: revision,
  });
}

async function silent(raw: KeyStore) {
  return (await raw.instances()).find((i) => i.id === "silent");
}

/** Asserts that `key` is answered 200 and the silent server never waited out. */
async function answeredUnwaited(
  shared: Shared,
  raw: KeyStore,
  key: string,
): Promise<void> {
  const owed = await raw.revision();
  await using reader = await server(shared);
  assert.equal((await reader.lookup.authenticate(key)).ok, true);
  // Had the reader waited for the silent server, it would have waited its
  // lease out and removed (or tried to remove) its registration.
  assert.equal(reader.count("removeInstance"), 0, "the lease was waited out");
  const after = await silent(raw);
  assert.ok(
    after !== undefined && after.acked < owed,
    "the silent server keeps its registration, still owing the changes",
  );
}

/**
 * Asserts that `key` is answered only once the silent server acknowledges
 * revision `due`, while it still owes every later one.
 */
async function answeredOnAcknowledgement(
  shared: Shared,
  raw: KeyStore,
  key: string,
  due: bigint,
): Promise<void> {
  await using reader = await server(shared);
  let answered = false;
  const answer = Promise.resolve(reader.lookup.authenticate(key)).then(
    (result) => {
      answered = true;
      return result;
    },
  );
  await until(
    () => answered || reader.count("instances") > 0,
    "the reader waits on the registrations",
  );
  assert.equal(answered, false, "answered while the change was owed");
  const owing = (await silent(raw))!;
  await raw.renewInstance({ ...owing, acked: due }, owing.version);
  assert.equal((await answer).ok, true);
  assert.equal(reader.count("removeInstance"), 0, "the lease was waited out");
  const after = await silent(raw);
  assert.ok(
    after !== undefined && (after.acked < await raw.revision() ||
      due === await raw.revision()),
    "answered on the revision due, with any later ones still owed",
  );
}

/** Each change to the key a request then uses, and that key. */
const OWN_CHANGES: {
  kind: string;
  change: (raw: KeyStore, id: number, key: string) => Promise<string>;
}[] = [
  {
    kind: "its allow-from updated",
    async change(raw, id, key) {
      await raw.setAllowFrom(id, ["127.0.0.0/8"], { actor: ACTOR });
      return key;
    },
  },
  {
    kind: "its rate limit updated",
    async change(raw, id, key) {
      await raw.setRateLimit(id, { count: 1000, windowSeconds: 60 }, {
        actor: ACTOR,
      });
      return key;
    },
  },
  {
    kind: "made by a rotation (the old key revoked at once)",
    async change(raw, id) {
      const next = fresh("next");
      await raw.rotate(id, next.input, { actor: ACTOR });
      return next.key;
    },
  },
  {
    kind:
      "an --until-first-use replacement whose first use (on another server) retired the old key",
    async change(raw, id) {
      const next = fresh("next");
      const { created } = await raw.rotate(id, next.input, {
        actor: ACTOR,
        overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
        untilFirstUse: true,
      });
      // The silent server knows the rotation, not the retirement.
      const silentNow = (await silent(raw))!;
      await raw.renewInstance(
        { ...silentNow, acked: await raw.revision() },
        silentNow.version,
      );
      await raw.retire(created.id, { actor: "server", cause: "first_use" });
      return next.key;
    },
  },
];

function contract(label: string, openShared: () => Promise<Shared>): void {
  const test = (name: string, fn: (shared: Shared) => Promise<void>) =>
    Deno.test(`${label}: ${name}`, async () => {
      await using shared = await openShared();
      await fn(shared);
    });

  test("a change to another key leaves a never-used valid key's first request unwaited, whichever change it was", async (shared) => {
    const raw = await shared.open();
    try {
      const honest = fresh("honest");
      await raw.create(honest.input, { actor: ACTOR });
      const others = [];
      for (const name of ["o1", "o2", "o3", "o4"]) {
        others.push(await raw.create(fresh(name).input, { actor: ACTOR }));
      }
      await silentServer(raw);
      // Every kind of change to other keys, none acknowledged by the silent one.
      await raw.revoke(others[0].id, { actor: ACTOR });
      await raw.setAllowFrom(others[1].id, ["10.0.0.0/8"], { actor: ACTOR });
      await raw.rotate(others[2].id, fresh("o3b").input, {
        actor: ACTOR,
        overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
        untilFirstUse: true,
      });
      await raw.create(fresh("o5").input, { actor: ACTOR });
      await answeredUnwaited(shared, raw, honest.key);
    } finally {
      await raw.close();
    }
  });

  test("a revoked key is refused at once, without waiting for a server that has not acknowledged its revocation", async (shared) => {
    const raw = await shared.open();
    try {
      const gone = fresh("gone");
      const record = await raw.create(gone.input, { actor: ACTOR });
      await silentServer(raw);
      await raw.revoke(record.id, { actor: ACTOR });
      await using reader = await server(shared);
      const result = await reader.lookup.authenticate(gone.key);
      assert.equal(result.ok, false);
      assert.equal(reader.count("removeInstance"), 0, "a lease was waited out");
      assert.ok(await silent(raw), "no wait ran the silent server's lease out");
      // Cached: the refusal repeats with no further read.
      const reads = reader.count("findByHashAt");
      assert.equal((await reader.lookup.authenticate(gone.key)).ok, false);
      assert.equal(reader.count("findByHashAt"), reads);
    } finally {
      await raw.close();
    }
  });

  for (const { kind, change } of OWN_CHANGES) {
    test(`a key ${kind} is answered only once the silent server acknowledges that change`, async (shared) => {
      const raw = await shared.open();
      try {
        const own = fresh("own");
        const record = await raw.create(own.input, { actor: ACTOR });
        await silentServer(raw);
        const key = await change(raw, record.id, own.key);
        const changed = await raw.revision();
        // A later change to another key, which the wait needs not cover.
        const other = await raw.create(fresh("other").input, { actor: ACTOR });
        await raw.revoke(other.id, { actor: ACTOR });
        await answeredOnAcknowledgement(shared, raw, key, changed);
      } finally {
        await raw.close();
      }
    });
  }

  test("a key only marked exposed since (a usage note rewrites its record) is still not waited for on another key's change", async (shared) => {
    const raw = await shared.open();
    try {
      const honest = fresh("honest");
      const record = await raw.create(honest.input, { actor: ACTOR });
      const other = await raw.create(fresh("other").input, { actor: ACTOR });
      await raw.markExposed(record.id, { actor: "server", from: "192.0.2.7" });
      await silentServer(raw);
      await raw.revoke(other.id, { actor: ACTOR });
      await answeredUnwaited(shared, raw, honest.key);
    } finally {
      await raw.close();
    }
  });

  test("an imported key is waited for at its import, not at a later change to another key", async (shared) => {
    const raw = await shared.open();
    try {
      const imported = importedKey(1);
      await raw.importAll(
        (async function* () {
          yield { type: "key" as const, record: imported.record };
        })(),
        { actor: ACTOR },
      );
      const other = await raw.create(fresh("other").input, { actor: ACTOR });
      await silentServer(raw);
      await raw.revoke(other.id, { actor: ACTOR });
      await answeredUnwaited(shared, raw, imported.key);
    } finally {
      await raw.close();
    }
  });

  test("a change that finds nothing to do (a first use's retirement made elsewhere, a repeated revocation) waits for that key's last change, not another key's later one", async (shared) => {
    const raw = await shared.open();
    try {
      const old = await raw.create(fresh("old").input, { actor: ACTOR });
      const { created } = await raw.rotate(old.id, fresh("new").input, {
        actor: ACTOR,
        overlapUntil: new Date(Date.now() + 3_600_000).toISOString(),
        untilFirstUse: true,
      });
      // Another server's first use of the new key retired the old one.
      await raw.retire(created.id, { actor: "server", cause: "first_use" });
      const gone = await raw.create(fresh("gone").input, { actor: ACTOR });
      await raw.revoke(gone.id, { actor: ACTOR });
      const owed = await raw.create(fresh("owed").input, { actor: ACTOR });
      await silentServer(raw);
      // The silent server owes these: one to another key, one to `owed`.
      const other = await raw.create(fresh("other").input, { actor: ACTOR });
      await raw.revoke(other.id, { actor: ACTOR });
      await raw.revoke(owed.id, { actor: ACTOR });
      const waiting = waitingStore(raw);
      const retired = await waiting.store.retire(created.id, {
        actor: "server",
        cause: "first_use",
      });
      assert.equal(retired.changed, false);
      assert.equal(
        (await waiting.store.revoke(gone.id, ACTOR_OPTIONS)).changed,
        false,
      );
      // Had either waited out the silent server's lease, it would have
      // removed (or tried to remove) its registration.
      assert.equal(waiting.removals(), 0, "a lease was waited out");
      const after = await silent(raw);
      assert.ok(
        after !== undefined && after.acked < await raw.revision(),
        "neither waited out the silent server's lease",
      );
      // A revocation repeated while its first is still owed waits for it.
      let done = false;
      const repeated = waiting.store.revoke(owed.id, ACTOR_OPTIONS).then(
        (result) => {
          done = true;
          return result;
        },
      );
      const reads = waiting.reads();
      await until(() => done || waiting.reads() > reads, "the wait reads");
      assert.equal(done, false, "returned while the revocation was owed");
      await raw.renewInstance(
        { ...after, acked: await raw.revision() },
        after.version,
      );
      assert.equal((await repeated).changed, false);
      assert.equal(waiting.removals(), 0, "returned once the lease ran out");
      assert.ok(await silent(raw), "returned on the acknowledgement");
    } finally {
      await raw.close();
    }
  });

  test("property: whatever the changes, a key's authRevision moves to the change's revision exactly when that change altered its record, and never for a usage note", async (shared) => {
    const store = await shared.open();
    let names = 0;
    const op = fc.record({
      kind: fc.constantFrom(
        "create",
        "revoke",
        "allowFrom",
        "rate",
        "rotate",
        "overlap",
        "firstUse",
        "retire",
        "expose",
        "network",
      ),
      key: fc.nat(),
      on: fc.boolean(),
    });
    try {
      await fc.assert(
        fc.asyncProperty(
          fc.array(op, { minLength: 1, maxLength: 10 }),
          async (ops) => {
            const keys: { id: number; hash: string }[] = [];
            const create = async () => {
              const made = fresh(`p${names++}`);
              const record = await store.create(made.input, ACTOR_OPTIONS);
              keys.push({ id: record.id, hash: record.hash });
            };
            await create();
            await create();
            for (const { kind, key, on } of ops) {
              const before = await readAll(store, keys);
              const { id } = keys[key % keys.length];
              const known = keys.length;
              const overlapUntil = new Date(Date.now() + 3_600_000)
                .toISOString();
              try {
                if (kind === "create") await create();
                else if (kind === "revoke") {
                  await store.revoke(id, ACTOR_OPTIONS);
                } else if (kind === "allowFrom") {
                  await store.setAllowFrom(
                    id,
                    on ? ["10.0.0.0/8"] : null,
                    ACTOR_OPTIONS,
                  );
                } else if (kind === "rate") {
                  await store.setRateLimit(
                    id,
                    on ? { count: 10, windowSeconds: 60 } : null,
                    ACTOR_OPTIONS,
                  );
                } else if (kind === "retire") {
                  await store.retire(id, {
                    actor: "server",
                    cause: "first_use",
                  });
                } else if (kind === "expose") {
                  await store.markExposed(id, {
                    actor: "server",
                    from: "192.0.2.1",
                    source: on ? "report" : "url",
                  });
                } else if (kind === "network") {
                  await store.recordNetworkUses([
                    {
                      id,
                      network: `198.51.${names % 250}.0/24`,
                      at: new Date(),
                    },
                  ]);
                } else {
                  const next = fresh("unused");
                  const { created } = await store.rotate(id, next.input, {
                    ...ACTOR_OPTIONS,
                    ...(kind === "rotate"
                      ? {}
                      : { overlapUntil, untilFirstUse: kind === "firstUse" }),
                  });
                  keys.push({ id: created.id, hash: created.hash });
                }
              } catch (error) {
                if (!(error instanceof StoreInputError)) throw error;
              }
              const now = (await store.findByHashAt(fresh("none").input.hash))
                .authRevision;
              const after = await readAll(store, keys);
              keys.forEach(({ id }, i) => {
                const was = before[i];
                const is = after[i];
                if (i >= known) {
                  assert.equal(is.authRevision, now, `new key ${id} (${kind})`);
                } else if (was.record !== is.record) {
                  assert.equal(
                    is.authRevision,
                    now,
                    `key ${id} changed (${kind})`,
                  );
                } else {
                  assert.equal(
                    is.authRevision,
                    was.authRevision,
                    `key ${id} unchanged by ${kind} of key ${
                      keys[key % known].id
                    }`,
                  );
                }
              });
            }
          },
        ),
        { numRuns: 25 },
      );
    } finally {
      await store.close();
    }
  });

  test("a record written without its stamp (as version 1.1 writes one) is waited for at the store's last authentication change", async (shared) => {
    const raw = await shared.open();
    try {
      const honest = fresh("honest");
      const record = await raw.create(honest.input, { actor: ACTOR });
      const other = await raw.create(fresh("other").input, { actor: ACTOR });
      {
        // A 1.1 server rewrites the record (a first use's spent link) with
        // no stamp beside it; the stamp left is the creation's.
        await using entries = await shared.entries();
        const stored = await entries.get(keyByHash(record.hash));
        await entries.atomic().set(keyById(record.id), stored.value)
          .set(keyByHash(record.hash), stored.value).commit();
      }
      await silentServer(raw);
      await raw.revoke(other.id, { actor: ACTOR });
      await answeredOnAcknowledgement(
        shared,
        raw,
        honest.key,
        await raw.revision(),
      );
    } finally {
      await raw.close();
    }
  });
}

/**
 * A change that found nothing to do (a first use's retirement another server
 * made just then, a revocation repeated) through a store that waits for
 * every server, and whether its wait reached the registrations.
 */
function waitingStore(raw: KeyService) {
  let reads = 0;
  let removals = 0;
  const store = acknowledged(raw, {
    registry: {
      revision: () => raw.revision(),
      instances: () => {
        reads++;
        return raw.instances();
      },
      removeInstance: (id, options) => {
        removals++;
        return raw.removeInstance(id, options);
      },
    },
  });
  return { store, reads: () => reads, removals: () => removals };
}

/**
 * Each key's record as a request reads it (what authenticates: not its
 * first exposure) and its authRevision, in the order of `keys`.
 */
async function readAll(
  store: KeyStore,
  keys: { hash: string }[],
): Promise<{ record: string; authRevision: bigint }[]> {
  const read = [];
  for (const { hash } of keys) {
    const { record, authRevision } = await store.findByHashAt(hash);
    const { exposedAt: _at, exposedFrom: _from, ...rest } = record!;
    read.push({ record: JSON.stringify(rest), authRevision });
  }
  return read;
}

/** One KV file opened by each store apart, as processes do. */
async function kvFile(): Promise<Shared> {
  const dir = await Deno.makeTempDir();
  const opened: KeyStore[] = [];
  return {
    async open() {
      const store = await openKvStore(`${dir}/keys.db`);
      opened.push(store);
      return store;
    },
    entries: () => rawEntries({ path: `${dir}/keys.db` }),
    async [Symbol.asyncDispose]() {
      for (const store of opened) await store.close().catch(() => {});
      await Deno.remove(dir, { recursive: true });
    },
  };
}

contract("kv store", kvFile);

registerWithDatabase(() =>
  contract("postgres store", async () => {
    const database = await freshDatabase();
    const opened: KeyStore[] = [];
    return {
      async open() {
        const store = await openPostgresStore(database.url);
        opened.push(store);
        return store;
      },
      entries: () => rawEntries({ url: database.url }),
      async [Symbol.asyncDispose]() {
        for (const store of opened) await store.close().catch(() => {});
        await database[Symbol.asyncDispose]();
      },
    };
  })
);
