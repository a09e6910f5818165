/**
 * Every future route authenticates the same way: a second authenticated
 * route, mounted through the HTTP layer's public API alone, gets every
 * guarantee of the connection check without a line of it copied.
 */

import assert from "node:assert/strict";
import { BackgroundWrites } from "../../lib/util/background.ts";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { createAuthenticator } from "../../lib/http/authenticate.ts";
import { json } from "../../lib/http/responses.ts";
import { createRouter, type Route } from "../../lib/http/router.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import { LockoutTracker } from "../../lib/auth/lockout.ts";
import { tempDir } from "../support/processes.ts";
import { storeKey } from "../support/stored_keys.ts";
import { serveInfo } from "../support/http.ts";

const WHOAMI = "/api/v1/integration/whoami";

/** The whole of what a new route needs to write. */
const whoami: Route = {
  path: WHOAMI,
  auth: "api_key",
  methods: {
    GET: ({ key }) => json(200, { apiKeyId: key.id, name: key.name }),
  },
};

async function setup(dir: string) {
  const server = await openKvStore(`${dir}/keys.db`);
  const admin = await openKvStore(`${dir}/keys.db`); // the console, elsewhere
  const { key, record } = await storeKey(admin, "erp", {
    email: "ops@example.com",
  });
  const background = new BackgroundWrites();
  const handler = createRouter([whoami], {
    authenticator: createAuthenticator(server, {
      background,
      lockout: new LockoutTracker({
        maxFailures: 3,
        windowSeconds: 60,
        lockSeconds: 300,
      }),
    }),
  });
  const call = (
    key: string | null,
    options: { from?: string; target?: string; method?: string } = {},
  ) =>
    handler(
      new Request(`http://localhost${options.target ?? WHOAMI}`, {
        method: options.method ?? "GET",
        headers: key === null ? {} : { "X-API-Key": key },
      }),
      serveInfo(options.from ?? "192.0.2.1"),
    );
  return {
    admin,
    server,
    background,
    call,
    key,
    id: record.id,
    async [Symbol.asyncDispose]() {
      await admin.close();
      await server.close();
    },
  };
}

Deno.test("a second route answers a valid key and refuses a missing, malformed, invented or revoked one with the one empty 401", async () => {
  using dir = tempDir();
  await using t = await setup(dir.path);
  const ok = await t.call(t.key);
  assert.equal(ok.status, 200);
  assert.deepEqual(await ok.json(), { apiKeyId: t.id, name: "erp" });
  const refusals = [];
  for (
    const [key, from] of [
      [null, "192.0.2.10"],
      ["not-a-key", "192.0.2.11"],
      [generateApiKey().key, "192.0.2.12"],
    ] as const
  ) {
    refusals.push(await t.call(key, { from }));
  }
  await t.admin.revoke(t.id, { actor: "test" });
  refusals.push(await t.call(t.key, { from: "192.0.2.13" }));
  for (const response of refusals) {
    assert.equal(response.status, 401);
    assert.equal(await response.text(), "");
    assert.equal(
      response.headers.get("www-authenticate"),
      'ApiKey realm="integration", header="X-API-Key"',
    );
  }
});

Deno.test("a second route locks out a client that keeps failing, and only its failing requests", async () => {
  using dir = tempDir();
  await using t = await setup(dir.path);
  const statuses = [];
  for (let i = 0; i < 5; i++) {
    statuses.push((await t.call("wrong", { from: "198.51.100.7" })).status);
  }
  assert.deepEqual(statuses, [401, 401, 401, 429, 429]);
  // The lock answers requests that fail anyway: a valid key is served.
  assert.equal((await t.call(t.key, { from: "198.51.100.7" })).status, 200);
  assert.equal((await t.call("wrong", { from: "198.51.100.7" })).status, 429);
  assert.equal((await t.call(t.key, { from: "198.51.100.8" })).status, 200);
});

Deno.test("a second route refuses a key in its URL and marks it exposed", async () => {
  using dir = tempDir();
  await using t = await setup(dir.path);
  for (const target of [`${WHOAMI}?api_key=${t.key}`, `${WHOAMI}/${t.key}`]) {
    const response = await t.call(t.key, { target });
    assert.equal(response.status, 400);
    assert.equal((await response.json()).error, "key_in_url");
  }
  // Marked off the request path, so that the 400's timing says nothing;
  // written once the server's background writes have settled.
  await t.background.settled();
  const record = await t.admin.get(t.id);
  assert.equal(record?.exposedFrom, "192.0.2.1");
});

Deno.test("a second route gets HEAD without a body, OPTIONS and 405 with Allow", async () => {
  using dir = tempDir();
  await using t = await setup(dir.path);
  const head = await t.call(t.key, { method: "HEAD" });
  assert.equal(head.status, 200);
  assert.equal(head.body, null);
  const options = await t.call(null, { method: "OPTIONS" });
  assert.equal(options.status, 204);
  assert.equal(options.headers.get("allow"), "GET, HEAD, OPTIONS");
  const post = await t.call(t.key, { method: "POST" });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get("allow"), "GET, HEAD, OPTIONS");
  assert.equal((await t.call(t.key, { target: `${WHOAMI}/` })).status, 404);
});
