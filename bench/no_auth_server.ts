/**
 * The same serving layer as the service, without the key check: the
 * connection guard with the start task's limits (lib/server/serve.ts), the router
 * with its request log, request id and telemetry (lib/http/router.ts), and
 * the connection check's JSON from a route with `auth: "none"`. The
 * benchmark's row (f): what the key check costs is (b) against this.
 *
 * Run with the start task's V8 flags, its log drained by the benchmark.
 *
 * @module
 */

import { createAuthenticator } from "../lib/http/authenticate.ts";
import { json } from "../lib/http/responses.ts";
import { createRouter } from "../lib/http/router.ts";
import { JsonLog } from "../lib/http/log.ts";
import { serveGuarded } from "../lib/server/serve.ts";
import { openStore } from "../lib/store/open.ts";

const port = Number(Deno.env.get("PORT") ?? 8002);
const log = new JsonLog();
// The router refuses keys in URLs with it; no row here sends one.
const store = await openStore({ kind: "kv", path: ":memory:" });
const handler = createRouter([{
  path: "/api/v1/integration/connection",
  auth: "none",
  methods: {
    GET: () =>
      json(200, {
        connected: true,
        authenticatedByApiKey: true,
        apiKeyId: 1,
        email: "ops@example.com",
        serverUtc: new Date().toISOString(),
      }),
  },
}], {
  authenticator: createAuthenticator(store),
  log: (fields) => log.write(fields),
  logRequest: (line) => log.request(line),
});
serveGuarded(handler, {
  hostname: "127.0.0.1",
  port,
  onListen: () => {
    log.write({ msg: "listening", address: `http://127.0.0.1:${port}` });
    log.flush();
  },
});
