/**
 * A server started with no WEBHOOK_HOSTS sends no delivery anywhere, not
 * even to its own port, which the start task grants it for listening (and
 * Deno's permission grants for connecting too): an endpoint pointed at the
 * server itself got a POST on each try before.
 */

import assert from "node:assert/strict";
import { freePort, keys, startServer, tempDir } from "../support/processes.ts";

Deno.test("with no WEBHOOK_HOSTS, an endpoint on the server's own port is not_permitted and never requested", async () => {
  using dir = tempDir();
  const cwd = dir.path;
  const port = freePort();
  const env = {
    DENO_KV_PATH: "./data/keys.db",
    HOST: "127.0.0.1",
    PORT: String(port),
  };
  const self = `http://127.0.0.1:${port}/api/v1/keys/leaked`;
  const added = await keys(cwd, ["webhooks", "add", self], env);
  assert.equal(added.code, 0, added.stderr);
  const server = await startServer(cwd, env);
  try {
    const created = await keys(cwd, [
      "create",
      "--name",
      "berlin",
      "--email",
      "berlin@example.com",
    ], env);
    assert.equal(created.code, 0, created.stderr);
    await server.waitForOutput(/"msg":"webhook_delivery"[^\n]*/);
  } finally {
    await server.stop();
  }
  const output = server.output();
  assert.match(output, /"msg":"webhook_delivery".*"error":"not_permitted"/);
  assert.doesNotMatch(output, /"path":"\/api\/v1\/keys\/leaked"/);
});
