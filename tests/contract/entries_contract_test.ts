/**
 * The seam (lib/store/entries.ts) on each backend: what the layout above it
 * relies on, against Deno KV and against PostgreSQL alike, and against a
 * plain in-memory model under random sequences of writes, checks and lists.
 * The PostgreSQL key codec is held to the order Deno KV itself lists keys in.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import type { Entries, EntryKey, KeyPart } from "../../lib/store/entries.ts";
import { KvEntries } from "../../lib/store/kv.ts";
import { connect, Pool } from "../../lib/store/postgres/connection.ts";
import { PostgresEntries } from "../../lib/store/postgres/entries.ts";
import { migrate } from "../../lib/store/postgres/schema.ts";
import {
  compareBytes,
  decodeKey,
  encodeKey,
} from "../../lib/store/postgres/_key_codec.ts";
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
  ["a", "keys\u0000"],
  ["a", "keys_by_hash"],
  ["a", "z"],
  ["a", "\u00e9"],
  ["a", "\u00ff"],
  ["a", "\uffff"],
  ["a", "\u{1f511}"],
  ["n", -Infinity],
  ["n", -Number.MAX_VALUE],
  ["n", -1e300],
  ["n", -2],
  ["n", -1.5],
  ["n", -Number.MIN_VALUE],
  ["n", -0],
  ["n", 0],
  ["n", Number.MIN_VALUE],
  ["n", 0.1],
  ["n", 1],
  ["n", 1.5],
  ["n", 2 ** 53],
  ["n", Number.MAX_VALUE],
  ["n", Infinity],
  ["b", -(2n ** 70n)],
  ["b", -(2n ** 64n)],
  ["b", -(2n ** 64n) + 1n],
  ["b", -256n],
  ["b", -255n],
  ["b", -1n],
  ["b", 0n],
  ["b", 1n],
  ["b", 255n],
  ["b", 256n],
  ["b", 2n ** 64n - 1n],
  ["b", 2n ** 64n],
  ["b", 2n ** 64n + 1n],
  ["b", 2n ** 70n],
];

const keyPart: fc.Arbitrary<KeyPart> = fc.oneof(
  fc.string({ unit: "binary-ascii", maxLength: 4 }),
  fc.string({ unit: "binary", maxLength: 4 }),
  fc.constantFrom("\u0000", "\u00ff", "\u0000\u00ff", "keys", "keys_by_hash"),
  fc.double({ noNaN: true }),
  fc.integer({ min: -300, max: 300 }),
  fc.bigInt({ min: -(2n ** 72n), max: 2n ** 72n }),
  fc.constantFrom(-(2n ** 64n), 2n ** 64n - 1n, 2n ** 64n, -1n, 0n, 1n),
);

/** Keys of any parts, types mixed at a position, as the codec must still order them. */
const anyKey: fc.Arbitrary<EntryKey> = fc.array(keyPart, {
  minLength: 1,
  maxLength: 3,
});

/** The keys as Deno KV lists them: written under a prefix of their own, then listed. */
async function kvOrder(keys: EntryKey[]): Promise<EntryKey[]> {
  await using kv = await Deno.openKv(":memory:");
  const atomic = kv.atomic();
  for (const key of keys) atomic.set(["k", ...key] as Deno.KvKey, 0);
  assert.ok((await atomic.commit()).ok);
  const listed: EntryKey[] = [];
  for await (const entry of kv.list({ prefix: ["k"] })) {
    listed.push(entry.key.slice(1) as EntryKey);
  }
  return listed;
}

async function listed(entries: Entries, prefix: EntryKey) {
  const keys: EntryKey[] = [];
  for await (const entry of entries.list({ prefix })) keys.push(entry.key);
  return keys;
}

Deno.test("key codec: every key reads back as written, -0 and astral strings included", () => {
  fc.assert(
    fc.property(
      anyKey,
      (key) => assert.deepStrictEqual(decodeKey(encodeKey(key)), key),
    ),
    { numRuns: 500 },
  );
  assert.throws(() => encodeKey(["n", NaN]), TypeError);
});

Deno.test("key codec: keys' bytes sort as Deno KV lists the keys, across types too", async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(anyKey, { maxLength: 40 }), async (keys) => {
      const byBytes = new Map(keys.map((key) => [encodeKey(key).toHex(), key]));
      const sorted = [...byBytes.values()].sort((a, b) =>
        compareBytes(encodeKey(a), encodeKey(b))
      );
      assert.deepStrictEqual(sorted, await kvOrder(keys));
    }),
    { numRuns: 200 },
  );
});

function entriesContract(name: string, open: () => Promise<Opened>): void {
  Deno.test(`${name}: lists keys in Deno KV's order within each type, whatever order they were written in`, async () => {
    await using entries = await open();
    const shuffled = [...ORDERED].sort(() => Math.random() - 0.5);
    for (const key of shuffled) {
      assert.ok((await entries.atomic().set(key, key.length).commit()).ok);
    }
    for (const prefix of ["a", "n", "b"]) {
      assert.deepStrictEqual(
        await listed(entries, [prefix]),
        ORDERED.filter((key) => key[0] === prefix),
      );
    }
  });

  Deno.test(`${name}: random keys of mixed types list in the order Deno KV lists them`, async () => {
    await using entries = await open();
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(anyKey, { maxLength: 30 }), async (keys) => {
        const prefix = ["run", ++run];
        const atomic = entries.atomic();
        for (const key of keys) atomic.set([...prefix, ...key], 0);
        assert.ok((await atomic.commit()).ok);
        const got = (await listed(entries, prefix)).map((key) => key.slice(2));
        assert.deepStrictEqual(got, await kvOrder(keys));
      }),
      { numRuns: 40 },
    );
  });

  Deno.test(`${name}: -0 and 0 are two keys, -0 just below 0, as Deno KV keeps them`, async () => {
    await using entries = await open();
    await entries.atomic().set(["z", 0], "zero").set(["z", -0], "minus")
      .commit();
    const got = [];
    for await (const entry of entries.list({ prefix: ["z"] })) {
      got.push([entry.key[1], entry.value]);
    }
    assert.deepStrictEqual(got, [[-0, "minus"], [0, "zero"]]);
    assert.equal((await entries.get(["z", -0])).value, "minus");
  });

  Deno.test(`${name}: a prefix lists only longer keys under it, never a longer string beside it nor the prefix itself`, async () => {
    await using entries = await open();
    for (
      const key of [["keys"], ["keys", 1], ["keys", 2], ["keys_by_hash", "x"], [
        "key",
      ], ["keys\u0000", 1]]
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
    assert.equal((await listed(entries, [])).length, 6);
  });

  Deno.test(`${name}: a list whose start lies outside its prefix, or after its end, is refused`, async () => {
    await using entries = await open();
    await entries.atomic().set(["a"], 1).set(["p", 1], 2).set(["z"], 3)
      .commit();
    const drain = async (
      selector: Parameters<Entries["list"]>[0],
      options?: Parameters<Entries["list"]>[1],
    ) => {
      for await (const _ of entries.list(selector, options)) { /* drained */ }
    };
    // Refused, not listed. No class is asserted: KvEntries reports Deno KV's
    // TypeError as unreadable, PostgresEntries throws the TypeError itself.
    for (const start of [["a"], ["p"], ["z"]]) {
      await assert.rejects(drain({ prefix: ["p"], start }));
    }
    await assert.rejects(drain({ start: ["z"], end: ["a"] }));
    await drain({ start: ["p"], end: ["p"] });
    await assert.rejects(drain({ prefix: [] }, { limit: 0 }));
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
    const later: unknown[] = [];
    for await (
      const entry of entries.list(
        { prefix: ["audit"], start: ["audit", 22n] },
        {
          batchSize: 1,
        },
      )
    ) later.push(entry.key[1]);
    assert.deepEqual(later, [22n, 23n, 24n]);
  });

  Deno.test(`${name}: getMany reads up to 10 keys, present and absent, in the order asked, and refuses more`, async () => {
    await using entries = await open();
    await entries.atomic().set(["k", 1], "one").set(["k", 3], "three").commit();
    const keys = Array.from({ length: 10 }, (_, i) => ["k", i]);
    const got = await entries.getMany(keys);
    assert.deepEqual(got.map((entry) => entry.key), keys);
    assert.deepEqual(got.map((entry) => entry.value), [
      null,
      "one",
      null,
      "three",
      ...Array(6).fill(null),
    ]);
    assert.deepEqual(await entries.getMany([]), []);
    await assert.rejects(entries.getMany([...keys, ["k", 10]]));
  });

  Deno.test(`${name}: a commit whose check is stale writes nothing, and one whose checks hold writes all under one new versionstamp`, async () => {
    await using entries = await open();
    const first = await entries.atomic().set(["x"], 1).set(["y"], 1).commit();
    assert.ok(first.ok);
    assert.match(first.versionstamp, /^[0-9a-f]{20}$/);
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
    assert.equal((await entries.get(["y"])).versionstamp, first.versionstamp);
    assert.equal((await entries.get(["z"])).value, null);
    // z present now fails a check that it is absent.
    await entries.atomic().set(["z"], 0).commit();
    assert.equal(
      (await entries.atomic().check(z).set(["w"], 1).commit()).ok,
      false,
    );
    assert.equal((await entries.get(["w"])).versionstamp, null);

    const fresh = await entries.get(["x"]);
    const ok = await entries.atomic().check(fresh).delete(["x"]).set(["y"], 3)
      .set(["y"], 4).commit();
    assert.ok(ok.ok);
    assert.notEqual(ok.versionstamp, first.versionstamp);
    assert.ok(ok.versionstamp > first.versionstamp, "versionstamps grow");
    assert.equal((await entries.get(["x"])).value, null);
    // The last write of a key wins, whether a set or a delete.
    assert.equal((await entries.get(["y"])).value, 4);
    await entries.atomic().set(["d"], 1).delete(["d"]).commit();
    assert.equal((await entries.get(["d"])).versionstamp, null);
    await entries.atomic().delete(["d"]).set(["d"], 2).commit();
    assert.equal((await entries.get(["d"])).value, 2);
  });

  Deno.test(`${name}: a check that a key is absent holds only while it is, and a check of a present key needs its versionstamp`, async () => {
    await using entries = await open();
    const absent = { key: ["k"], versionstamp: null };
    assert.ok((await entries.atomic().check(absent).commit()).ok);
    const made = await entries.atomic().check(absent).set(["k"], 1).commit();
    assert.ok(made.ok);
    assert.equal((await entries.atomic().check(absent).commit()).ok, false);
    const present = { key: ["k"], versionstamp: made.versionstamp };
    assert.ok(
      (await entries.atomic().check(present).delete(["k"]).commit()).ok,
    );
    assert.equal((await entries.atomic().check(present).commit()).ok, false);
    assert.ok((await entries.atomic().check(absent).commit()).ok);
  });

  Deno.test(`${name}: of commits racing on the check that a key is still absent, exactly one wins`, async () => {
    await using entries = await open();
    for (let round = 0; round < 50; round++) {
      const key = ["claim", round];
      const seen = await entries.get(key);
      const results = await Promise.all(
        Array.from(
          { length: 8 },
          (_, i) => entries.atomic().check(seen).set(key, i).commit(),
        ),
      );
      assert.equal(results.filter((result) => result.ok).length, 1);
      const winner = results.findIndex((result) => result.ok);
      assert.equal((await entries.get(key)).value, winner);
    }
  });

  Deno.test(`${name}: counters and JSON values, NUL and astral characters included, read back as written`, async () => {
    await using entries = await open();
    const record = { a: [1, "two", null, { b: true }], c: "\u0000\u{1f511}" };
    await entries.atomic().set(["r"], record)
      .set(["n"], new Deno.KvU64(2n ** 64n - 1n))
      .set(["u64"], { u64: "1" }).set(["$u64"], { $u64: "1" }).set(["v"], {
        v: 1,
      })
      .set(["s"], "plain").set(["null"], null).commit();
    assert.deepEqual((await entries.get(["r"])).value, record);
    const counter = (await entries.get<Deno.KvU64>(["n"])).value;
    assert.ok(counter instanceof Deno.KvU64);
    assert.equal(counter.value, 2n ** 64n - 1n);
    // Ordinary objects shaped like a stored counter or wrapper stay objects.
    assert.deepEqual((await entries.get(["u64"])).value, { u64: "1" });
    assert.deepEqual((await entries.get(["$u64"])).value, { $u64: "1" });
    assert.deepEqual((await entries.get(["v"])).value, { v: 1 });
    assert.equal((await entries.get(["s"])).value, "plain");
    const stored = await entries.get(["null"]);
    assert.equal(stored.value, null);
    assert.notEqual(stored.versionstamp, null, "a null value is present");
  });

  Deno.test(`${name}: closing twice is harmless`, async () => {
    const entries = await open();
    await entries.close();
    await entries.close();
    await entries[Symbol.asyncDispose]();
  });
}

/** A write of the model test: a value, or null for a delete. */
interface Write {
  key: number;
  value: number | null;
}

type Op =
  | { kind: "commit"; checks: number[]; meddle: Write | null; writes: Write[] }
  | {
    kind: "list";
    start: number;
    end: number | null;
    limit: number | undefined;
    batchSize: number;
  };

/** The model's keys, in Deno KV's order (held by the ordering test above). */
const KEYS: EntryKey[] = [
  ["", ""],
  ["a"],
  ["a", "\u0000"],
  ["a", -1n],
  ["a", 2n ** 64n],
  ["a", -0.5],
  ["a", 0],
  ["b"],
];

const write: fc.Arbitrary<Write> = fc.record({
  key: fc.nat(KEYS.length - 1),
  value: fc.option(fc.integer({ min: -5, max: 5 }), { freq: 3 }),
});

const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant("commit" as const),
    checks: fc.array(fc.nat(KEYS.length - 1), { maxLength: 3 }),
    meddle: fc.option(write, { freq: 3 }),
    writes: fc.array(write, { maxLength: 3 }),
  }),
  fc.record({
    kind: fc.constant("list" as const),
    start: fc.nat(KEYS.length - 1),
    end: fc.option(fc.nat(KEYS.length)),
    limit: fc.option(fc.integer({ min: 1, max: 9 }), { nil: undefined }),
    batchSize: fc.integer({ min: 1, max: 4 }),
  }),
);

/** The seam as a plain map from a key's index in KEYS; stamps count commits. */
class Model {
  #entries = new Map<number, { value: number; stamp: number }>();
  #stamp = 0;

  get(key: number): { value: number; stamp: number } | null {
    return this.#entries.get(key) ?? null;
  }

  /** The new stamp, or null when a check failed. */
  commit(checks: [number, number | null][], writes: Write[]): number | null {
    if (
      checks.some(([key, stamp]) => (this.get(key)?.stamp ?? null) !== stamp)
    ) {
      return null;
    }
    const stamp = ++this.#stamp;
    for (const { key, value } of writes) {
      if (value === null) this.#entries.delete(key);
      else this.#entries.set(key, { value, stamp });
    }
    return stamp;
  }

  list(from: number, to: number, limit = Infinity): number[] {
    return [...this.#entries.keys()].filter((key) => key >= from && key < to)
      .sort((a, b) => a - b).slice(0, limit);
  }
}

function modelContract(name: string, open: () => Promise<Opened>): void {
  Deno.test(`${name}: model: random commits, checks and lists answer as a plain ordered map does`, async () => {
    await using entries = await open();
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 25 }), async (ops) => {
        // Each run in a keyspace of its own, so that one database serves all.
        const prefix = ["run", ++run];
        const at = (key: number) => [...prefix, ...KEYS[key]];
        const model = new Model();
        // Versionstamps are compared only for equality: the model's stamp
        // of each commit and the backend's versionstamp of it.
        const stamps = new Map<number, string>();
        const sameStamp = (stamp: number | null, versionstamp: string | null) =>
          assert.equal(versionstamp, stamp === null ? null : stamps.get(stamp));
        /** Commits on both, checks given as [key, versionstamp, model stamp] read. */
        const commit = async (
          checks: [number, string | null, number | null][],
          writes: Write[],
        ) => {
          const atomic = entries.atomic().check(
            ...checks.map(([key, versionstamp]) => ({
              key: at(key),
              versionstamp,
            })),
          );
          for (const { key, value } of writes) {
            if (value === null) atomic.delete(at(key));
            else atomic.set(at(key), value);
          }
          const result = await atomic.commit();
          const stamp = model.commit(
            checks.map(([key, , stamp]) => [key, stamp]),
            writes,
          );
          assert.equal(result.ok, stamp !== null);
          if (result.ok && stamp !== null) {
            // A new versionstamp, never one an earlier commit had.
            assert.ok(![...stamps.values()].includes(result.versionstamp));
            stamps.set(stamp, result.versionstamp);
          }
        };
        for (const step of ops) {
          if (step.kind === "list") {
            const to = step.end === null
              ? KEYS.length
              : Math.max(step.start, step.end);
            const selector = step.end === null
              ? { prefix, start: at(step.start) }
              : {
                start: at(step.start),
                // Past the last key: a key above every one the run writes.
                end: to < KEYS.length ? at(to) : [...prefix, "c"],
              };
            const got = [];
            for await (
              const entry of entries.list<number>(selector, {
                limit: step.limit,
                batchSize: step.batchSize,
              })
            ) got.push(entry);
            const want = model.list(step.start, to, step.limit);
            assert.deepStrictEqual(got.map((e) => e.key), want.map(at));
            for (const [i, key] of want.entries()) {
              assert.equal(got[i].value, model.get(key)!.value);
              sameStamp(model.get(key)!.stamp, got[i].versionstamp);
            }
            continue;
          }
          const read = await entries.getMany(step.checks.map(at));
          const checks = step.checks.map((key, i) => {
            const stamp = model.get(key)?.stamp ?? null;
            assert.equal(read[i].value, model.get(key)?.value ?? null);
            sameStamp(stamp, read[i].versionstamp);
            return [key, read[i].versionstamp, stamp] as [
              number,
              string | null,
              number | null,
            ];
          });
          // Another writer between the read and the commit, at times.
          if (step.meddle !== null) await commit([], [step.meddle]);
          await commit(checks, step.writes);
        }
        const all = await entries.getMany(KEYS.map((_, key) => at(key)));
        for (const [key, entry] of all.entries()) {
          assert.equal(entry.value, model.get(key)?.value ?? null);
          sameStamp(model.get(key)?.stamp ?? null, entry.versionstamp);
        }
      }),
      { numRuns: 60 },
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
    "postgres entries: a value JSON would alter (a bigint, NaN, -0, a Date, a Map, undefined) is refused when set, never stored altered",
  ignore: NO_DATABASE,
  async fn() {
    await using entries = await postgresEntries();
    class Point {
      x = 1;
    }
    for (
      const value of [
        1n,
        NaN,
        -0,
        new Date(),
        new Map(),
        new Uint8Array(1),
        new Point(),
        undefined,
        () => 1,
        Symbol("s"),
        { a: Infinity },
        { a: undefined },
        [undefined],
        { deep: [{ big: 1n }] },
      ]
    ) {
      assert.throws(
        () => entries.atomic().set(["bad"], value),
        TypeError,
        String(typeof value),
      );
    }
    assert.equal((await entries.get(["bad"])).versionstamp, null);
  },
});

Deno.test({
  name:
    "postgres entries: a hint from one process reaches another's change listener, until it stops listening",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await migrate(database.url);
    const open = () =>
      new PostgresEntries(new Pool(connect(database.url, {}), {}));
    const [listening, hinting] = [open(), open()];
    try {
      let heard = 0;
      const stop = await listening.onChange(() => heard++);
      await hinting.hint();
      for (let waited = 0; heard === 0 && waited < 5000; waited += 20) {
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(heard, 1);
      await stop();
      await hinting.hint();
      await new Promise((resolve) => setTimeout(resolve, 300));
      assert.equal(heard, 1, "no notice once it stopped listening");
    } finally {
      await listening.close();
      await hinting.close();
    }
  },
});

entriesContract("kv entries", kvEntries);
modelContract("kv entries", kvEntries);
registerWithDatabase(() => {
  entriesContract("postgres entries", postgresEntries);
  modelContract("postgres entries", postgresEntries);
});
