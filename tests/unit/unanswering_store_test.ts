/**
 * A store that stops answering, without failing (a Deno KV file another
 * process froze mid-write, issue 29), never hangs a request or a change:
 * a request on a server without its lease, or one missing its key in the
 * cache, fails as an outage (503) within its bound; a change whose commit
 * never answers fails with `change_unconfirmed`, and whatever it wrote is
 * whole or absent.
 */

import assert from "node:assert/strict";
import { KeyLookup } from "../../lib/auth/key_lookup.ts";
import { Lease } from "../../lib/auth/lease.ts";
import { StoreUnavailableError } from "../../lib/store/errors.ts";
import { KvEntries } from "../../lib/store/kv.ts";
import { openEntryStore } from "../../lib/store/layout/backend.ts";
import { countingStore } from "../support/counting_store.ts";
import { storeKey } from "../support/stored_keys.ts";

/** The bound under test: far below the give-up, so a hang cannot pass for it. */
const BOUND_MS = 300;
/** How long a test waits for an answer before it calls the wait a hang. */
const GIVE_UP_MS = 20_000;

/** How `work` settled, and after how long; "hung" when not within the give-up. */
async function outcome(
  work: unknown,
): Promise<{ ms: number; result: unknown; error?: unknown }> {
  const started = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hung = new Promise<"hung">((resolve) => {
    timer = setTimeout(() => resolve("hung"), GIVE_UP_MS);
  });
  try {
    const result = await Promise.race([Promise.resolve(work), hung]);
    return { ms: performance.now() - started, result };
  } catch (error) {
    return { ms: performance.now() - started, result: "failed", error };
  } finally {
    clearTimeout(timer);
  }
}

function assertOutage(
  got: { ms: number; result: unknown; error?: unknown },
): void {
  assert.notEqual(got.result, "hung", "the request hung");
  assert.ok(
    got.error instanceof StoreUnavailableError,
    `an outage (503), not ${String(got.error ?? JSON.stringify(got.result))}`,
  );
  assert.equal(got.error.code, "store_unavailable");
  assert.ok(
    got.ms < GIVE_UP_MS / 4,
    `answered after ${got.ms} ms, not near its bound`,
  );
}

Deno.test("a server without its lease answers a valid key 503 within its bound when the store's catch-up read never answers, and again for the next request, then 200 once the store answers", async () => {
  await using counting = await countingStore();
  const { key } = await counting.addKey("valid");
  // Never started: no lease, so every request waits for a catch-up read.
  const lease = new Lease(counting.store, { readTimeoutMs: BOUND_MS });
  const lookup = new KeyLookup(counting.store, { lease, waitMs: BOUND_MS });
  const frozen = counting.hold("pollInstance");
  const first = outcome(lookup.authenticate(key));
  await frozen.reached;
  assertOutage(await first);
  // The read still held must not hold every later catch-up behind it.
  assertOutage(await outcome(lookup.authenticate(key)));
  frozen.release();
  const after = await outcome(lookup.authenticate(key));
  assert.equal((after.result as { ok: boolean }).ok, true);
  await counting.settled();
});

Deno.test("a server without its lease answers a never-used key's first request 503 within its bound when the record's read never answers", async () => {
  await using counting = await countingStore();
  const { key } = await counting.addKey("first");
  const lease = new Lease(counting.store, { readTimeoutMs: BOUND_MS });
  const lookup = new KeyLookup(counting.store, { lease, waitMs: BOUND_MS });
  const frozen = counting.hold("findByHashAt");
  const got = outcome(lookup.authenticate(key));
  await frozen.reached;
  assertOutage(await got);
  frozen.release();
  await counting.settled();
});

Deno.test("a server holding its lease answers a cache miss 503 within its bound when the record's read never answers, and a cached key 200 meanwhile", async () => {
  await using counting = await countingStore();
  const cached = await counting.addKey("cached");
  const missed = await counting.addKey("missed");
  const lease = new Lease(counting.store);
  const lookup = new KeyLookup(counting.store, { lease, waitMs: BOUND_MS });
  await lease.start();
  try {
    assert.ok(lease.held, "the lease is held");
    assert.equal((await lookup.authenticate(cached.key)).ok, true);
    const frozen = counting.hold("findByHashAt");
    const got = outcome(lookup.authenticate(missed.key));
    await frozen.reached;
    assertOutage(await got);
    // The steady state asks the store nothing, so it never meets the hang.
    const steady = lookup.authenticate(cached.key);
    assert.ok(!(steady instanceof Promise), "answered from memory");
    assert.equal(steady.ok, true);
    frozen.release();
  } finally {
    await lease.stop();
    await counting.settled();
  }
});

Deno.test("a change whose commit never answers fails with change_unconfirmed within its bound, and leaves no half of itself", async () => {
  const kv = await Deno.openKv(":memory:");
  let freeze = false;
  // Deno KV as a frozen peer leaves it: commits block rather than fail.
  const frozen = new Proxy(kv, {
    get(target, property) {
      const value = Reflect.get(target, property, target);
      if (property !== "atomic") {
        return typeof value === "function" ? value.bind(target) : value;
      }
      return () => {
        const op = target.atomic();
        return new Proxy(op, {
          get(inner, name) {
            const member = Reflect.get(inner, name, inner);
            if (name === "commit" && freeze) return () => new Promise(() => {});
            return typeof member === "function" ? member.bind(inner) : member;
          },
        });
      };
    },
  });
  const store = await openEntryStore(
    new KvEntries(frozen, { timeoutMs: BOUND_MS }),
  );
  try {
    const made = await storeKey(store, "before");
    const revision = await store.revision();
    freeze = true;
    const got = await outcome(
      store.setAllowFrom(made.record.id, ["10.0.0.0/8"], { actor: "test" }),
    );
    freeze = false;
    assert.notEqual(got.result, "hung", "the change hung");
    assert.ok(
      got.error instanceof StoreUnavailableError,
      `the documented store error, not ${String(got.error)}`,
    );
    assert.equal(got.error.code, "change_unconfirmed");
    assert.equal(got.error.timeoutMs, BOUND_MS);
    assert.ok(got.ms < GIVE_UP_MS / 4, `failed after ${got.ms} ms`);
    // The blocked commit never landed here: nothing of it, not a part.
    assert.equal(await store.revision(), revision);
    const record = await store.get(made.record.id);
    assert.equal(record?.allowFrom ?? null, null);
  } finally {
    await store.close();
  }
});
