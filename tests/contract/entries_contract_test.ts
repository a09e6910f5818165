/**
 * The seam (lib/store/entries.ts) on each backend: what the layout above it
 * relies on, against Deno KV and against PostgreSQL alike, and against a
 * plain in-memory model under random sequences of writes, checks and lists.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import type { Entries, EntryKey } from "../../lib/store/entries.ts";
import { KvEntries } from "../../lib/store/kv.ts";
import { connect, Pool } from "../../lib/store/postgres/connection.ts";
import { PostgresEntries } from "../../lib/store/postgres/entries.ts";
import { migrate } from "../../lib/store/postgres/schema.ts";
import {
  freshDatabase,
  NO_DATABASE,
  registerWithDatabase,
} from "../support/postgres.ts";

type Opened = Entries & AsyncDisposable;

/** Keys whose parts at each position share a type, as the layout writes them. */
const ORDERED: EntryKey[] = [
  ["a", ""],
  ["a", "\u0000"],
  ["a", "\u0000\u00ff"],
  ["a", "\u0001"],
  ["a", "keys"],
  ["a", "keys_by_hash"],
  ["a", "z"],
  ["a", "\u00e9"],
  ["a", "\u00ff"],
  ["a", "\u{1f511}"],
  ["n", -Infinity],
  ["n", -1e300],
  ["n", -2],
  ["n", -1.5],
  ["n", -Number.MIN_VALUE],
  ["n", 0],
  ["n", Number.MIN_VALUE],
  ["n", 1],
  ["n", 1.5],
  ["n", 2 ** 53],
  ["n", Infinity],
  ["b", -(2n ** 70n)],
  ["b", -256n],
  ["b", -255n],
  ["b", -1n],
  ["b", 0n],
  ["b", 1n],
  ["b", 255n],
  ["b", 256n],
  ["b", 2n ** 64n],
  ["b", 2n ** 64n + 1n],
];

async function listed(entries: Entries, prefix: EntryKey) {
  const keys: EntryKey[] = [];
  for await (const entry of entries.list({ prefix })) keys.push(entry.key);
  return keys;
}

function entriesContract(name: string, open: () => Promise<Opened>): void {
  Deno.test(`${name}: lists keys in Deno KV's order within each type, whatever order they were written in`, async () => {
    await using entries = await open();
    const shuffled = [...ORDERED].sort(() => Math.random() - 0.5);
    for (const key of shuffled) {
      assert.ok((await entries.atomic().set(key, key.length).commit()).ok);
    }
    for (const prefix of ["a", "n", "b"]) {
      assert.deepEqual(
        await listed(entries, [prefix]),
        ORDERED.filter((key) => key[0] === prefix),
      );
    }
  });

  Deno.test(`${name}: a prefix lists only longer keys under it, never a longer string beside it nor the prefix itself`, async () => {
    await using entries = await open();
    for (
      const key of [["keys"], ["keys", 1], ["keys", 2], ["keys_by_hash", "x"], [
        "key",
      ]]
    ) {
      await entries.atomic().set(key, true).commit();
    }
    assert.deepEqual(await listed(entries, ["keys"]), [["keys", 1], [
      "keys",
      2,
    ]]);
    const from: EntryKey[] = [];
    for await (
      const entry of entries.list({ prefix: ["keys"], start: ["keys", 2] })
    ) {
      from.push(entry.key);
    }
    assert.deepEqual(from, [["keys", 2]]);
  });

  Deno.test(`${name}: start and end bound a list, and limit and batch size cut it without losing or repeating an entry`, async () => {
    await using entries = await open();
    for (let i = 0; i < 25; i++) {
      await entries.atomic().set(["audit", BigInt(i)], { i }).commit();
    }
    const range: unknown[] = [];
    for await (
      const entry of entries.list<{ i: number }>(
        { start: ["audit", 3n], end: ["audit", 20n] },
        { batchSize: 4 },
      )
    ) range.push(entry.value.i);
    assert.deepEqual(range, Array.from({ length: 17 }, (_, i) => i + 3));
    const limited: unknown[] = [];
    for await (
      const entry of entries.list({ prefix: ["audit"] }, {
        limit: 7,
        batchSize: 3,
      })
    ) limited.push(entry.key[1]);
    assert.deepEqual(limited, [0n, 1n, 2n, 3n, 4n, 5n, 6n]);
  });

  Deno.test(`${name}: a commit whose check is stale writes nothing, and one whose checks hold writes all under one new versionstamp`, async () => {
    await using entries = await open();
    const first = await entries.atomic().set(["x"], 1).set(["y"], 1).commit();
    assert.ok(first.ok);
    const [x, y, z] = await entries.getMany<[number, number, number]>([["x"], [
      "y",
    ], ["z"]]);
    assert.equal(x.versionstamp, first.versionstamp);
    assert.equal(y.versionstamp, first.versionstamp);
    assert.equal(z.versionstamp, null);

    await entries.atomic().set(["x"], 2).commit();
    // x moved on: a commit that read it before is refused, whole.
    const stale = await entries.atomic().check(x, z).set(["y"], 9).set(["z"], 9)
      .commit();
    assert.equal(stale.ok, false);
    assert.equal((await entries.get(["y"])).value, 1);
    assert.equal((await entries.get(["z"])).value, null);
    // z present now fails a check that it is absent.
    await entries.atomic().set(["z"], 0).commit();
    assert.equal(
      (await entries.atomic().check(z).set(["w"], 1).commit()).ok,
      false,
    );

    const fresh = await entries.get(["x"]);
    const ok = await entries.atomic().check(fresh).delete(["x"]).set(["y"], 3)
      .set(["y"], 4).commit();
    assert.ok(ok.ok);
    assert.notEqual(ok.versionstamp, first.versionstamp);
    assert.ok(ok.versionstamp > first.versionstamp, "versionstamps grow");
    assert.equal((await entries.get(["x"])).value, null);
    // The last write of a key wins.
    assert.equal((await entries.get(["y"])).value, 4);
  });

  Deno.test(`${name}: of commits racing on the check that a key is still absent, exactly one wins`, async () => {
    await using entries = await open();
    for (let round = 0; round < 20; round++) {
      const key = ["claim", round];
      const seen = await entries.get(key);
      const results = await Promise.all(
        Array.from(
          { length: 6 },
          (_, i) => entries.atomic().check(seen).set(key, i).commit(),
        ),
      );
      assert.equal(results.filter((result) => result.ok).length, 1);
    }
  });

  Deno.test(`${name}: counters and JSON values, NUL and astral characters included, read back as written`, async () => {
    await using entries = await open();
    const record = { a: [1, "two", null, { b: true }], c: "\u0000\u{1f511}" };
    await entries.atomic().set(["r"], record).set(
      ["n"],
      new Deno.KvU64(2n ** 63n),
    )
      .set(["u64"], { u64: "1" }).commit();
    assert.deepEqual((await entries.get(["r"])).value, record);
    assert.equal(
      (await entries.get<Deno.KvU64>(["n"])).value?.value,
      2n ** 63n,
    );
    // An ordinary object shaped like a stored counter stays an object.
    assert.deepEqual((await entries.get(["u64"])).value, { u64: "1" });
  });
}

/** The seam as a plain map, for the model test. */
class Model {
  entries = new Map<string, { key: EntryKey; value: number; stamp: number }>();
  stamp = 0;
  static id(key: EntryKey) {
    return JSON.stringify(key);
  }
}

type Op =
  | { kind: "set"; key: number; value: number; checks: number[] }
  | { kind: "delete"; key: number; checks: number[] }
  | { kind: "list"; start: number; limit: number };

const KEYS: EntryKey[] = Array.from({ length: 8 }, (_, i) => ["m", i * 7 - 20]);

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant("set" as const),
    key: fc.nat(7),
    value: fc.integer(),
    checks: fc.array(fc.nat(7), { maxLength: 3 }),
  }),
  fc.record({
    kind: fc.constant("delete" as const),
    key: fc.nat(7),
    checks: fc.array(fc.nat(7), { maxLength: 3 }),
  }),
  fc.record({
    kind: fc.constant("list" as const),
    start: fc.nat(7),
    limit: fc.integer({ min: 1, max: 9 }),
  }),
);

function modelContract(name: string, open: () => Promise<Opened>): void {
  Deno.test(`${name}: model: random writes, checked commits and lists answer as a plain ordered map does`, async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(op, { maxLength: 25 }),
        fc.array(fc.boolean(), { minLength: 25, maxLength: 25 }),
        async (ops, staleness) => {
          await using entries = await open();
          const model = new Model();
          for (const [i, step] of ops.entries()) {
            if (step.kind === "list") {
              const got: [EntryKey, unknown][] = [];
              for await (
                const entry of entries.list<number>(
                  { prefix: ["m"], start: KEYS[step.start] },
                  { limit: step.limit, batchSize: 2 },
                )
              ) got.push([entry.key, entry.value]);
              const want = [...model.entries.values()]
                .filter((e) =>
                  (e.key[1] as number) >= (KEYS[step.start][1] as number)
                )
                .sort((a, b) => (a.key[1] as number) - (b.key[1] as number))
                .slice(0, step.limit)
                .map((e) => [e.key, e.value]);
              assert.deepEqual(got, want);
              continue;
            }
            // Read what the checks compare; once in a while, make one stale.
            const read = await entries.getMany(
              step.checks.map((k) => KEYS[k]) as EntryKey[],
            );
            const stale = staleness[i] && step.checks.length > 0;
            if (stale) {
              const k = KEYS[step.checks[0]];
              await entries.atomic().set(k, -1).commit();
              model.entries.set(Model.id(k), {
                key: k,
                value: -1,
                stamp: ++model.stamp,
              });
            }
            const atomic = entries.atomic().check(...read);
            const key = KEYS[step.key];
            if (step.kind === "set") atomic.set(key, step.value);
            else atomic.delete(key);
            const result = await atomic.commit();
            assert.equal(result.ok, !stale);
            if (!stale) {
              if (step.kind === "set") {
                model.entries.set(Model.id(key), {
                  key,
                  value: step.value,
                  stamp: ++model.stamp,
                });
              } else {
                model.entries.delete(Model.id(key));
              }
            }
          }
          const all = await entries.getMany(KEYS.slice(0, 8) as EntryKey[]);
          for (const [i, entry] of all.entries()) {
            assert.equal(
              entry.value,
              model.entries.get(Model.id(KEYS[i]))?.value ?? null,
            );
          }
        },
      ),
      { numRuns: 25 },
    );
  });
}

async function kvEntries(): Promise<Opened> {
  const entries = new KvEntries(await Deno.openKv(":memory:"));
  return Object.assign(entries, {
    [Symbol.asyncDispose]: () => entries.close(),
  });
}

async function postgresEntries(): Promise<Opened> {
  const database = await freshDatabase();
  await migrate(database.url);
  const entries = new PostgresEntries(new Pool(connect(database.url, {}), {}));
  return Object.assign(entries, {
    async [Symbol.asyncDispose]() {
      await entries.close();
      await database[Symbol.asyncDispose]();
    },
  });
}

Deno.test({
  name:
    "postgres entries: a value JSON would alter (a bigint, NaN, a Date, a Map, undefined) is refused when set, never stored altered",
  ignore: NO_DATABASE,
  async fn() {
    await using entries = await postgresEntries();
    for (
      const value of [1n, NaN, new Date(), new Map(), undefined, {
        a: Infinity,
      }]
    ) {
      assert.throws(() => entries.atomic().set(["bad"], value), TypeError);
    }
    assert.equal((await entries.get(["bad"])).versionstamp, null);
  },
});

entriesContract("kv entries", kvEntries);
modelContract("kv entries", kvEntries);
registerWithDatabase(() => {
  entriesContract("postgres entries", postgresEntries);
  modelContract("postgres entries", postgresEntries);
});
