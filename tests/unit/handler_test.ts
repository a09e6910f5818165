import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { BackgroundWrites } from "../../lib/util/background.ts";
import { createHandler } from "../../lib/server/handler.ts";
import { CONNECTION_PATH } from "../../lib/routes/connection.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import { serveInfo, validated } from "../support/http.ts";
import { storeKey } from "../support/stored_keys.ts";

const INFO = serveInfo("192.0.2.10");

async function setup() {
  const store = await openKvStore(":memory:");
  const valid = await storeKey(store, "berlin", { email: "ops@example.com" });
  const revoked = await storeKey(store, "hamburg", { revoked: true });
  const handler = createHandler(store, {
    now: () => new Date("2026-11-21T08:00:00.123Z"),
  });
  const get = async (
    headers: Record<string, string> = {},
    path = CONNECTION_PATH,
    method = "GET",
  ) => {
    const request = new Request(`http://localhost${path}`, { method, headers });
    return await validated(request, await handler(request, INFO));
  };
  return {
    store,
    handler,
    get,
    valid: valid.key,
    revoked: revoked.key,
    record: valid.record,
    [Symbol.asyncDispose]: () => store.close(),
  };
}

Deno.test("a valid key gets 200 with exactly the spec's fields and the no-store JSON headers", async () => {
  await using t = await setup();
  const response = await t.get({ "X-API-Key": t.valid });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "application/json");
  assert.equal(response.headers.get("cache-control"), "no-store");
  assert.equal(response.headers.get("x-content-type-options"), "nosniff");
  const body = await response.json();
  assert.deepEqual(body, {
    connected: true,
    authenticatedByApiKey: true,
    apiKeyId: t.record.id,
    email: "ops@example.com",
    serverUtc: "2026-11-21T08:00:00.123Z",
  });
  assert.deepEqual(Object.keys(body), [
    "connected",
    "authenticatedByApiKey",
    "apiKeyId",
    "email",
    "serverUtc",
  ]);
});

Deno.test("serverUtc is the current time in ISO 8601 UTC with milliseconds", async () => {
  const store = await openKvStore(":memory:");
  try {
    const k = await storeKey(store, "a");
    const before = Date.now();
    const response = await createHandler(store)(
      new Request(`http://localhost${CONNECTION_PATH}`, {
        headers: { "X-API-Key": k.key },
      }),
      INFO,
    );
    const { serverUtc } = await response.json();
    assert.match(serverUtc, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    // Between the moments before the request and after its answer, with
    // the server's millisecond rounding: however long that took.
    const at = Date.parse(serverUtc);
    assert.ok(before <= at && at <= Date.now(), serverUtc);
  } finally {
    await store.close();
  }
});

Deno.test("every failure reason gets the same 401, byte for byte", async () => {
  await using t = await setup();
  const forged = generateApiKey().key;
  const reasons: Record<string, Record<string, string>> = {
    missing: {},
    empty: { "X-API-Key": "" },
    malformed: { "X-API-Key": "hunter2" },
    "bad checksum": {
      "X-API-Key": t.valid.slice(0, 39) + (t.valid.endsWith("a") ? "b" : "a"),
    },
    unknown: { "X-API-Key": forged },
    revoked: { "X-API-Key": t.revoked },
    "in another header": { Authorization: `Bearer ${t.valid}` },
  };
  const seen = new Set<string>();
  for (const [reason, headers] of Object.entries(reasons)) {
    const response = await t.get(headers);
    assert.equal(response.status, 401, reason);
    const body = new Uint8Array(await response.arrayBuffer());
    seen.add(JSON.stringify([[...response.headers], [...body]]));
  }
  assert.equal(seen.size, 1, [...seen].join("\n"));
  const [[headers, body]] = [...seen].map((s) => JSON.parse(s));
  assert.deepEqual(body, []);
  assert.ok(
    (headers as [string, string][]).some(([k, v]) =>
      k === "www-authenticate" && v.startsWith("ApiKey ")
    ),
  );
});

Deno.test("unknown paths get 404 and other methods on the route get 405 with Allow", async () => {
  await using t = await setup();
  for (
    const path of [
      "/",
      "/api/v1",
      "/api/v2/integration/connection",
      "/api/v1/integration/connection/x",
    ]
  ) {
    const response = await t.get({ "X-API-Key": t.valid }, path);
    assert.equal(response.status, 404, path);
    assert.equal(response.headers.get("cache-control"), "no-store");
    await response.body?.cancel();
  }
  for (const method of ["POST", "PUT", "DELETE", "PATCH"]) {
    const response = await t.get(
      { "X-API-Key": t.valid },
      CONNECTION_PATH,
      method,
    );
    assert.equal(response.status, 405, method);
    assert.match(response.headers.get("allow") ?? "", /GET/);
    await response.body?.cancel();
  }
});

Deno.test("a store that cannot be read gets 503 with Retry-After, never 401", async () => {
  const t = await setup();
  await t.store.close();
  for (const key of [t.valid, t.revoked, generateApiKey().key]) {
    const response = await t.get({ "X-API-Key": key });
    assert.equal(response.status, 503);
    assert.match(response.headers.get("retry-after") ?? "", /^\d+$/);
    await response.body?.cancel();
  }
  // A malformed key needs no store: it is still refused as such.
  assert.equal((await t.get({ "X-API-Key": "nope" })).status, 401);
});

Deno.test("readiness fails with 503 when the store cannot be read, while liveness still answers", async () => {
  const t = await setup();
  const probe = async (path: string) => {
    const response = await t.get({}, path);
    return [response.status, await response.json()];
  };
  assert.deepEqual(await probe("/api/v1/health/ready"), [200, {
    status: "ok",
  }]);
  await t.store.close();
  assert.deepEqual(await probe("/api/v1/health/ready"), [503, {
    status: "unavailable",
  }]);
  assert.deepEqual(await probe("/api/v1/health/live"), [200, { status: "ok" }]);
});

Deno.test("the writes a request starts off the request path are counted until they end, so a stop can wait for them", async () => {
  const store = await openKvStore(":memory:");
  try {
    const leaked = await storeKey(store, "leaky");
    // The store's write held open until the test lets it go, as a slow
    // machine or a slow database would.
    let release = () => {};
    const gate = new Promise<void>((resolve) => release = resolve);
    const slow = new Proxy(store, {
      get(target, property) {
        const value = Reflect.get(target, property, target);
        if (property !== "markExposed") return value.bind?.(target) ?? value;
        return async (...args: Parameters<typeof store.markExposed>) => {
          await gate;
          return await target.markExposed(...args);
        };
      },
    });
    const background = new BackgroundWrites();
    const handler = createHandler(slow, { background });
    const request = new Request(
      `http://localhost${CONNECTION_PATH}?api_key=${leaked.key}`,
    );
    const response = await handler(request, INFO);
    await response.body?.cancel();
    assert.equal(response.status, 400);
    let settled = false;
    const stopping = background.settled().then(() => settled = true);
    // Every turn of the event loop has run: only the gate holds it.
    await new Promise((resolve) => setTimeout(resolve, 0));
    assert.equal(settled, false, "settled before the exposure was written");
    assert.equal(background.size, 1);
    release();
    await stopping;
    assert.notEqual((await store.get(leaked.record.id))?.exposedAt, null);
  } finally {
    store.close();
  }
});
