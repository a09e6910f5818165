/**
 * The API-key step (lib/http/authenticate.ts) on its own, step by step,
 * against a store that counts what it is asked: which answers each kind of
 * key gets, and what each costs. The real-process tests (abuse_test.ts,
 * second_route_test.ts) show the same guarantees end to end.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import {
  type AuthDecision,
  createAuthenticator,
} from "../../lib/http/authenticate.ts";
import { LastUsedRecorder } from "../../lib/usage/last_used.ts";
import { LockoutTracker } from "../../lib/auth/lockout.ts";
import { StoreUnavailableError } from "../../lib/store/errors.ts";
import { countingStore } from "../support/counting_store.ts";

const ROUTE = "/api/v1/integration/connection";
const THRESHOLD = 3;

/** A lock-out of THRESHOLD failures a minute, and what the step logged. */
async function setup(options: { lastUsed?: true } = {}) {
  const counting = await countingStore();
  const { key, record } = await counting.addKey("erp");
  const logged: Record<string, unknown>[] = [];
  const lastUsed = options.lastUsed
    ? new LastUsedRecorder(counting.store, { flushMs: 3_600_000 })
    : undefined;
  const auth = createAuthenticator(counting.store, {
    lockout: new LockoutTracker({
      maxFailures: THRESHOLD,
      windowSeconds: 60,
      lockSeconds: 300,
    }),
    lastUsed,
    log: (fields) => logged.push(fields),
  });
  // The step warms its index of hashes at once; count from a quiet store on.
  await counting.settled();
  counting.reset();
  const check = (apiKey: string | null, client = "192.0.2.1") =>
    auth.check(
      new Request(`http://localhost${ROUTE}`, {
        headers: apiKey === null ? {} : { "X-API-Key": apiKey },
      }),
      { client, route: ROUTE },
    );
  return {
    counting,
    auth,
    check,
    key,
    record,
    logged,
    lastUsed,
    async [Symbol.asyncDispose]() {
      await lastUsed?.close();
      await counting.settled();
      await counting[Symbol.asyncDispose]();
    },
  };
}

function status(decision: AuthDecision): number {
  return decision.ok ? 200 : decision.response.status;
}

/** Fails from `client` until it is locked. */
async function lockOut(
  t: Awaited<ReturnType<typeof setup>>,
  client = "192.0.2.1",
) {
  for (let i = 0; i < THRESHOLD; i++) {
    assert.equal(status(await t.check("wrong", client)), 401);
  }
}

Deno.test("a locked client gets 429 with Retry-After for every failing request, without a record read", async () => {
  await using t = await setup();
  await lockOut(t);
  await t.counting.settled();
  t.counting.reset();
  for (const key of [generateApiKey().key, "malformed", null]) {
    const decision = await t.check(key);
    assert.ok(!decision.ok);
    assert.equal(decision.response.status, 429);
    assert.equal(decision.response.headers.get("retry-after"), "300");
  }
  await t.counting.settled();
  assert.equal(t.counting.calls("findByHashAt", "findByHash", "get"), 0);
});

Deno.test("a locked client that sends a valid key is served at once, and stays locked for failures", async () => {
  await using t = await setup();
  await lockOut(t);
  assert.equal(status(await t.check(t.key)), 200);
  assert.equal(status(await t.check(generateApiKey().key)), 429);
  assert.equal(status(await t.check(t.key)), 200);
});

Deno.test("a missing or malformed key is refused without a store call", async () => {
  await using t = await setup();
  for (
    const [i, key] of [
      null,
      "",
      "hunter2",
      t.key.slice(0, 39) + (t.key.endsWith("a") ? "b" : "a"), // bad checksum
      `${t.key}, ${t.key}`, // a repeated header, folded
    ].entries()
  ) {
    assert.equal(status(await t.check(key, `192.0.2.${20 + i}`)), 401);
  }
  await t.counting.settled();
  assert.equal(t.counting.calls(), 0);
});

Deno.test("an invented key with a valid checksum is refused by the index, without a read of any key", async () => {
  await using t = await setup();
  for (let i = 0; i < 5; i++) {
    const invented = generateApiKey().key;
    assert.equal(status(await t.check(invented, `192.0.2.${30 + i}`)), 401);
  }
  await t.counting.settled();
  assert.equal(t.counting.calls("findByHashAt", "findByHash", "get"), 0);
  // What it may cost: the revision, read once per waiting batch.
  assert.ok(t.counting.calls("revision") <= 5);
});

Deno.test("a burst of invented keys from one client gets at most the threshold of 401s, the rest 429", async () => {
  await using t = await setup();
  const decisions = await Promise.all(
    Array.from({ length: 40 }, () => t.check(generateApiKey().key)),
  );
  const statuses = decisions.map(status);
  assert.equal(statuses.filter((s) => s === 401).length, THRESHOLD);
  assert.equal(statuses.filter((s) => s === 429).length, 40 - THRESHOLD);
  assert.equal(t.logged.filter((line) => line.msg === "lockout").length, 1);
});

Deno.test("a success notes the key as last used and lifts no lock, nor the failures counted before it", async () => {
  await using t = await setup({ lastUsed: true });
  for (let i = 0; i < THRESHOLD - 1; i++) {
    assert.equal(status(await t.check("wrong")), 401);
  }
  assert.equal(status(await t.check(t.key)), 200);
  // The failures before the success still count: one more locks.
  assert.equal(status(await t.check("wrong")), 401);
  assert.equal(status(await t.check("wrong")), 429, "locked");
  assert.equal(status(await t.check(t.key)), 200, "a valid key is not");
  await t.lastUsed!.flush();
  const record = await t.counting.store.get(t.record.id);
  assert.ok(record?.lastUsedAt, "last use written");
});

Deno.test("a valid key whose lookup is still out when the same burst locks the client is served, and its answer unlocks nothing", async () => {
  await using t = await setup();
  // The valid key's record read (a cold cache) is held mid-way while
  // invented keys from the same client lock it.
  const read = t.counting.hold("findByHashAt");
  const valid = t.check(t.key);
  await read.reached;
  const invented = await Promise.all(
    Array.from({ length: THRESHOLD }, () => t.check(generateApiKey().key)),
  );
  assert.deepEqual(invented.map(status), Array(THRESHOLD).fill(401));
  assert.equal(t.logged.filter((line) => line.msg === "lockout").length, 1);
  read.release();
  assert.equal(status(await valid), 200);
  assert.equal(status(await t.check(generateApiKey().key)), 429);
});

Deno.test("a store that cannot be read throws StoreUnavailableError and counts no failure toward the lock-out", async () => {
  await using t = await setup();
  t.counting.failing = true;
  for (let i = 0; i < THRESHOLD + 2; i++) {
    await assert.rejects(
      async () => await t.check(t.key),
      StoreUnavailableError,
    );
  }
  t.counting.failing = false;
  assert.equal(status(await t.check(t.key)), 200, "the client is not locked");
});

Deno.test("a key in the URL is refused with 400 and counts toward the lock-out; a locked client gets 429", async () => {
  await using t = await setup();
  const context = { client: "198.51.100.7", route: ROUTE };
  for (let i = 0; i < THRESHOLD; i++) {
    const response = t.auth.refuseKeyInUrl([], context);
    assert.equal(response.status, 400);
    assert.equal((await response.json()).error, "key_in_url");
  }
  const locked = t.auth.refuseKeyInUrl([t.key], context);
  assert.equal(locked.status, 429);
  assert.equal(status(await t.check(t.key, context.client)), 200);
  await t.counting.settled();
  assert.equal(
    t.counting.calls("markExposed"),
    0,
    "a locked client marks nothing",
  );
});

Deno.test("a valid key in the URL is marked exposed after the 400 is sent, and only a valid one", async () => {
  await using t = await setup();
  const invented = generateApiKey().key;
  const response = t.auth.refuseKeyInUrl([invented, t.key], {
    client: "203.0.113.9",
    route: ROUTE,
  });
  assert.equal(response.status, 400);
  assert.equal(t.counting.calls("markExposed"), 0, "not on the request path");
  await t.counting.settled();
  assert.equal(t.counting.calls("markExposed"), 1);
  const record = await t.counting.store.get(t.record.id);
  assert.equal(record?.exposedFrom, "203.0.113.9");
  assert.deepEqual(
    t.logged,
    [{
      msg: "key_exposed_in_url",
      apiKeyId: t.record.id,
      client: "203.0.113.9",
    }],
  );
  assert.ok(!JSON.stringify(t.logged).includes("isk_"), "no key logged");
});

Deno.test("a store outage while marking a key exposed neither throws nor changes the 400", async () => {
  await using t = await setup();
  t.counting.failing = true;
  const response = t.auth.refuseKeyInUrl([t.key], {
    client: "203.0.113.10",
    route: ROUTE,
  });
  assert.equal(response.status, 400);
  await t.counting.settled();
  assert.deepEqual(t.logged, []);
});

Deno.test("no traffic from anyone makes the lock-out refuse a valid key its rules allow (property, tables saturated)", async () => {
  const counting = await countingStore();
  try {
    const open = await counting.addKey("open");
    const fenced = generateApiKey();
    await counting.store.create({
      name: "fenced",
      email: "fenced@example.com",
      hash: fenced.hash,
      hint: fenced.hint,
      allowFrom: ["10.0.0.0/8"],
    }, { actor: "test" });
    const revoked = await counting.addKey("gone", { revoked: true });
    const keys = {
      open: open.key,
      fenced: fenced.key,
      revoked: revoked.key,
      invented: generateApiKey().key,
      malformed: "isk_not-a-key",
      missing: null,
    };
    // 24 addresses over two /24s: half inside the fenced key's range.
    const address = (who: number) =>
      who % 2 === 0 ? `10.0.0.${who}` : `192.0.2.${who}`;
    const request = fc.record({
      who: fc.nat(23),
      key: fc.constantFrom(...Object.keys(keys) as (keyof typeof keys)[]),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(request, { maxLength: 200 }), async (run) => {
        // Two cells a row and budgets of a few failures: every lock
        // collides with every address, and the global level fires early.
        const auth = createAuthenticator(counting.store, {
          lockout: new LockoutTracker({
            maxFailures: THRESHOLD,
            windowSeconds: 60,
            lockSeconds: 300,
            networkMaxFailures: 5,
            globalMaxFailures: 8,
            sketchWidth: 2,
          }),
        });
        const answered401 = new Map<string, number>();
        for (const { who, key } of run) {
          const client = address(who);
          const decision = await auth.check(
            new Request(`http://localhost${ROUTE}`, {
              headers: keys[key] === null ? {} : { "X-API-Key": keys[key]! },
            }),
            { client, route: ROUTE },
          );
          const allowed = key === "open" ||
            (key === "fenced" && client.startsWith("10."));
          if (allowed) {
            assert.equal(status(decision), 200, `${key} from ${client}`);
            continue;
          }
          assert.ok([401, 429].includes(status(decision)));
          if (status(decision) === 401) {
            answered401.set(client, (answered401.get(client) ?? 0) + 1);
          }
        }
        // The bound on failures answered 401, per address, in one window.
        for (const [client, count] of answered401) {
          assert.ok(count <= THRESHOLD, `${client}: ${count} × 401`);
        }
      }),
      { numRuns: 60 },
    );
  } finally {
    await counting.settled();
    await counting[Symbol.asyncDispose]();
  }
});
