/**
 * The request-time rule of key lifetimes, checked against a model: for any
 * lifetime, overlap and first use, the authenticator accepts a key exactly
 * when the model says it is valid at that moment.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { BackgroundWrites } from "../../lib/util/background.ts";
import { createAuthenticator } from "../../lib/http/authenticate.ts";
import { until } from "../support/wait.ts";
import { API_KEY_HEADER } from "../../lib/http/responses.ts";
import { LockoutTracker } from "../../lib/auth/lockout.ts";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import { storeKey } from "../support/stored_keys.ts";

const SECOND = 1000;

/** Lifetimes and deadlines far enough from now that the test's own time does not cross them. */
const offset = fc.oneof(
  fc.constant(null),
  fc.integer({ min: -3600, max: 3600 }).filter((s) => Math.abs(s) >= 5),
);

async function memoryStore() {
  const store = await openKvStore(":memory:");
  return Object.assign(store, {
    [Symbol.asyncDispose]: () => store.close(),
  });
}

function request(key: string): Request {
  return new Request("http://127.0.0.1/api/v1/integration/connection", {
    headers: { [API_KEY_HEADER]: key },
  });
}

Deno.test("the authenticator accepts the old and the new key of a rotation exactly when the lifetime model says they are valid", async () => {
  await fc.assert(
    fc.asyncProperty(
      offset,
      offset,
      fc.boolean(),
      fc.boolean(),
      async (lifetime, overlap, untilFirstUse, newUsedFirst) => {
        await using store = await memoryStore();
        const now = Date.now();
        const auth = createAuthenticator(store, {
          lockout: new LockoutTracker({
            maxFailures: 1000,
            windowSeconds: 60,
            lockSeconds: 1,
          }),
          // Checked at the moment the model's times are counted from.
          now: () => now,
        });
        const at = (s: number | null) =>
          s === null ? null : new Date(now + s * SECOND).toISOString();
        const { key: oldKey, record: old } = await storeKey(store, "site", {
          expiresAt: at(lifetime),
        });
        const newKey = generateApiKey();
        const rotated = overlap !== null && overlap > 0 &&
          (lifetime === null || lifetime > 0);
        if (rotated) {
          await store.rotate(old.id, newKey, {
            actor: "test",
            overlapUntil: at(overlap)!,
            untilFirstUse,
          });
        }
        const check = async (key: string) =>
          (await auth.check(request(key), {
            client: "127.0.0.1",
            route: "test",
          })).ok;
        // The model: the old key works before its own end and the rotation's
        // deadline, and, with untilFirstUse, before the new key's first use.
        const ends = [lifetime, rotated ? overlap : null].filter((s) =>
          s !== null
        ) as number[];
        const oldAlive = ends.every((s) => s > 0);
        if (rotated && newUsedFirst) {
          assert.equal(await check(newKey.key), true);
          assert.equal(
            await check(oldKey),
            oldAlive && !untilFirstUse,
          );
        } else {
          assert.equal(await check(oldKey), oldAlive);
          if (rotated) assert.equal(await check(newKey.key), true);
        }
      },
    ),
    { numRuns: 60 },
  );
});

Deno.test("an expired key is refused with the revoked key's reason and one store write, off the request path", async () => {
  await using store = await memoryStore();
  const background = new BackgroundWrites();
  // The authenticator's clock, moved by the test: how long the machine
  // takes between two lines cannot move a deadline past either of them.
  let now = Date.now();
  const auth = createAuthenticator(store, { background, now: () => now });
  const { key: fresh, record } = await storeKey(store, "site", {
    expiresAt: new Date(now + 300).toISOString(),
  });
  const context = { client: "127.0.0.1", route: "test" };
  now += 299;
  assert.equal((await auth.check(request(fresh), context)).ok, true);
  // The store writes the lapse down only once its own clock says so.
  const expiresAt = Date.parse(record.expiresAt!);
  await until(() => Date.now() > expiresAt, "the deadline on the real clock");
  now = Date.now();
  const refused = await auth.check(request(fresh), context);
  assert.equal(refused.ok, false);
  // The lapse is written down in the background: wait for that write.
  await background.settled();
  const stored = await store.get(record.id);
  assert.equal(stored?.status, "revoked");
  assert.equal(stored?.revokedReason, "expired");
  const lines = [];
  for await (const line of store.audit({ keyId: record.id })) lines.push(line);
  assert.deepEqual(lines.map((l) => [l.action, l.actor]), [
    ["create", "test"],
    ["revoke", "server"],
  ]);
});
