/**
 * `/metrics` of the real server (METRICS_PORT, lib/server/metrics.ts) as a
 * Prometheus scraper sees it: the counters move by exactly the load sent,
 * Prometheus's own `promtool check metrics` accepts the text, no key, hash
 * or e-mail address is in it or in the log, and it has a loopback listener
 * of its own. Without promtool (Debian's `prometheus` package) that test
 * is skipped with a message, and under CI it fails; .ci/run installs it.
 */

import assert from "node:assert/strict";
import { generateApiKey, hashApiKey } from "../../lib/auth/api_key.ts";
import {
  createKey,
  keys,
  type ServerProcess,
  startServer,
  tempDir,
} from "../support/processes.ts";
import {
  ignoreWithoutPromtool,
  promtoolInstalled,
  runPromtool,
} from "../support/promtool.ts";

const ROUTE = "/api/v1/integration/connection";

const noPromtool = await ignoreWithoutPromtool("metrics_test.ts");

/** A server with /metrics on a free loopback port, and where it serves it. */
async function withMetrics(
  cwd: string,
  env: Record<string, string> = {},
): Promise<{ server: ServerProcess; metrics: string }> {
  const server = await startServer(cwd, {
    DENO_KV_PATH: `${cwd}/keys.db`,
    METRICS_PORT: "0",
    ...env,
  });
  const [, metrics] = await server.waitForOutput(
    /"msg":"metrics_listening","address":"([^"]+)"/,
  );
  return { server, metrics };
}

async function scrape(metrics: string): Promise<string> {
  const response = await fetch(metrics);
  assert.equal(response.status, 200);
  assert.equal(
    response.headers.get("content-type"),
    "text/plain; version=0.0.4; charset=utf-8",
  );
  return await response.text();
}

/** The value of one series as written (name and labels), 0 when absent. */
function valueOf(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

async function call(server: ServerProcess, headers: HeadersInit = {}) {
  const response = await fetch(server.url + ROUTE, { headers });
  await response.body?.cancel();
  return response.status;
}

Deno.test("N valid, M invalid and K rate-limited requests move the counters by exactly N, M and K", async () => {
  using dir = tempDir();
  const env = { DENO_KV_PATH: `${dir.path}/keys.db` };
  const open = await createKey(dir.path, "berlin-erp", undefined, env);
  const limited = await createKey(dir.path, "hamburg-erp", undefined, env);
  const rate = await keys(
    dir.path,
    ["update", String(limited.id), "--rate", "2/1h"],
    env,
  );
  assert.equal(rate.code, 0, rate.stderr);
  // Far from any lock-out: every invalid request is a 401.
  const { server, metrics } = await withMetrics(dir.path, {
    LOCKOUT_MAX_FAILURES: "1000",
  });
  try {
    const before = await scrape(metrics);
    const [N, M, K] = [7, 5, 3];
    for (let i = 0; i < N; i++) {
      assert.equal(await call(server, { "X-API-Key": open.key }), 200);
    }
    for (let i = 0; i < M; i++) {
      const key = i % 2 === 0 ? "not-a-key" : generateApiKey().key;
      assert.equal(await call(server, { "X-API-Key": key }), 401);
    }
    // Its limit's two, then K refused.
    for (let i = 0; i < 2 + K; i++) {
      assert.equal(
        await call(server, { "X-API-Key": limited.key }),
        i < 2 ? 200 : 429,
      );
    }
    const after = await scrape(metrics);
    const moved = (series: string) =>
      valueOf(after, series) - valueOf(before, series);
    const outcome = (name: string) =>
      moved(`integration_auth_outcomes_total{outcome="${name}"}`);
    const status = (code: number) =>
      moved(`integration_requests_total{route="${ROUTE}",status="${code}"}`);
    assert.equal(outcome("valid"), N + 2);
    assert.equal(outcome("malformed") + outcome("unknown"), M);
    assert.equal(outcome("malformed"), Math.ceil(M / 2));
    assert.equal(outcome("rate_limited"), K);
    assert.equal(outcome("locked_out"), 0);
    assert.deepEqual([status(200), status(401), status(429)], [N + 2, M, K]);
    assert.equal(
      moved(`integration_key_requests_total{key_id="${open.id}"}`),
      N,
    );
    assert.equal(
      moved(`integration_key_rate_limited_total{key_id="${limited.id}"}`),
      K,
    );
    assert.equal(valueOf(after, "integration_rate_limited_keys"), 1);
    assert.equal(valueOf(after, "integration_lease_held"), 1);
  } finally {
    await server.stop();
  }
});

/**
 * A server that has answered every kind of request: valid, missing,
 * malformed, unknown and revoked keys, a key in the URL and in
 * Authorization, a typo, a lock-out; its scrape and its keys.
 */
async function servedEverything(cwd: string) {
  const env = { DENO_KV_PATH: `${cwd}/keys.db` };
  const valid = await createKey(cwd, "berlin-erp", "ops@example.com", env);
  const revoked = await createKey(cwd, "hamburg-erp", "it@example.com", env);
  const revoke = await keys(cwd, ["revoke", "hamburg-erp", "--yes"], env);
  assert.equal(revoke.code, 0, revoke.stderr);
  const { server, metrics } = await withMetrics(cwd, {
    LOCKOUT_MAX_FAILURES: "5",
  });
  try {
    await call(server, { "X-API-Key": valid.key });
    for (const path of [`${ROUTE}?api_key=${valid.key}`, `/${valid.key}`]) {
      await (await fetch(server.url + path)).body?.cancel();
    }
    await call(server, { "X-API-Key": revoked.key });
    await call(server, { Authorization: `Bearer ${valid.key}` });
    // The fifth failure locks the client out; the next meets the lock.
    await call(server, { "X-API-Key": "not-a-key" });
    await call(server, { "X-API-Key": generateApiKey().key });
    const text = await scrape(metrics);
    await server.stop();
    return { text, log: server.output(), keys: [valid, revoked] };
  } catch (error) {
    await server.stop();
    throw error;
  }
}

Deno.test({
  name:
    "promtool check metrics accepts the scrape of a server that has answered every kind of request",
  ignore: noPromtool,
  async fn() {
    assert.ok(await promtoolInstalled(), "apt-get install -y prometheus");
    using dir = tempDir();
    const { text } = await servedEverything(dir.path);
    assert.ok(valueOf(text, 'integration_lockouts_total{scope="address"}') > 0);
    const { code, output } = await runPromtool(["check", "metrics"], text);
    assert.equal(code, 0, output);
    assert.equal(output.trim(), "", "promtool has nothing to remark");
  },
});

Deno.test("no generated key, its hash or its e-mail address is in /metrics or the log, whatever was sent", async () => {
  using dir = tempDir();
  const { text, log, keys } = await servedEverything(dir.path);
  // The traffic did reach the counters that would carry them.
  assert.ok(
    valueOf(text, 'integration_auth_outcomes_total{outcome="revoked"}') > 0,
  );
  assert.ok(
    valueOf(text, 'integration_auth_outcomes_total{outcome="url_exposed"}') > 0,
  );
  const emails = ["ops@example.com", "it@example.com"];
  for (const { key } of keys) {
    const hash = hashApiKey(key);
    for (const secret of [key, key.slice(4), hash, hash.toUpperCase()]) {
      assert.ok(!text.includes(secret), "a key or hash in /metrics");
      assert.ok(!log.includes(secret), "a key or hash in the log");
    }
  }
  for (const email of emails) {
    assert.ok(!text.includes(email) && !text.includes("@"));
    assert.ok(!log.includes(email), "an e-mail address in the log");
  }
  // Label values are routes, statuses, outcomes, scopes, methods, ids.
  for (const [, value] of text.matchAll(/="([^"]*)"/g)) {
    assert.match(value, /^(\/[\w/]+|unrouted|\d+|[a-zA-Z_]+|[\d.]+|\+Inf)$/);
  }
});

Deno.test("/metrics is not served on the integrators' port, and its own listener binds 127.0.0.1 unless METRICS_HOST says otherwise", async () => {
  using dir = tempDir();
  const { server, metrics } = await withMetrics(dir.path);
  try {
    const url = new URL(metrics);
    assert.equal(url.hostname, "127.0.0.1");
    assert.equal(url.pathname, "/metrics");
    assert.notEqual(Number(url.port), server.port);
    const onService = await fetch(`${server.url}/metrics`);
    assert.equal(onService.status, 404);
    assert.ok(!(await onService.text()).includes("integration_"));
    // Only /metrics on its own listener, and only GET or HEAD there.
    for (
      const [path, method, status] of [
        ["/", "GET", 404],
        ["/metrics", "POST", 405],
      ] as const
    ) {
      const other = await fetch(url.origin + path, { method });
      await other.body?.cancel();
      assert.equal(other.status, status, `${method} ${path}`);
    }
    await scrape(metrics);
  } finally {
    await server.stop();
  }
});
