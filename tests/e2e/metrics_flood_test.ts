/**
 * Connection floods against the `/metrics` listener (METRICS_PORT) of a real
 * server at `ulimit -n 1024`, as tests/e2e/connections_test.ts floods the
 * integrators' port: whoever reaches the metrics port (loopback, or the
 * scraper's network when METRICS_HOST is set) must not be able to end the
 * server, starve it of descriptors or hold connections open for ever.
 */

import assert from "node:assert/strict";
import {
  createKey,
  freePort,
  keys,
  refusedStart,
  type ServerProcess,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { GIVE_UP_MS } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";

/** The server under `ulimit -n 1024` with /metrics on a free loopback port. */
async function limitedServer(
  cwd: string,
  env: Record<string, string> = {},
): Promise<{ server: ServerProcess; metricsPort: number }> {
  const server = await startServer(
    cwd,
    {
      DENO_KV_PATH: `${cwd}/keys.db`,
      METRICS_PORT: "0",
      ...env,
    },
    "start",
    { openFiles: 1024 },
  );
  const [, port] = await server.waitForOutput(
    /"msg":"metrics_listening","address":"http:\/\/127\.0\.0\.1:(\d+)\/metrics"/,
  );
  return { server, metricsPort: Number(port) };
}

/** Opens `count` TCP connections, each with a request head it never ends. */
async function openHalfHeads(
  port: number,
  count: number,
): Promise<Deno.Conn[]> {
  const head = new TextEncoder().encode("GET /metrics HTTP/1.1\r\nHost: x\r\n");
  const conns: Deno.Conn[] = [];
  for (let i = 0; i < count; i++) {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    conns.push(conn);
    // A connection the server closed already may refuse the write.
    await conn.write(head).catch(() => {});
  }
  return conns;
}

/** Resolves once the server closed `conn` (a reset is a close too). */
async function closed(conn: Deno.Conn): Promise<void> {
  const buffer = new Uint8Array(16 * 1024);
  try {
    while ((await conn.read(buffer)) !== null) {
      // An answer may come first; the close is what counts.
    }
  } catch {
    // reset
  }
}

/** Waits at most `ms` for `promise`; false when it did not settle in time. */
function settlesWithin(
  promise: Promise<unknown>,
  ms: number,
): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise.then(() => true),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

function closeAll(conns: Deno.Conn[]): void {
  for (const conn of conns) {
    try {
      conn.close();
    } catch {
      // closed by the server
    }
  }
}

async function status(url: string, headers: HeadersInit = {}) {
  const response = await fetch(url, {
    headers,
    signal: AbortSignal.timeout(GIVE_UP_MS),
  });
  await response.body?.cancel();
  return response.status;
}

Deno.test("1 100 half-sent heads on the metrics port at ulimit -n 1024 neither end the server nor keep a valid key from its 200 or a scrape from its answer", async () => {
  using dir = tempDir();
  const env = { DENO_KV_PATH: `${dir.path}/keys.db` };
  const { key } = await createKey(dir.path, "berlin-erp", undefined, env);
  // Timeouts far beyond the test: only the cap and the accept loop are at work.
  const { server, metricsPort } = await limitedServer(dir.path, {
    HEADER_TIMEOUT_SECONDS: "600",
    IDLE_TIMEOUT_SECONDS: "600",
  });
  await using _ = server;
  const flood = await openHalfHeads(metricsPort, 1100);
  try {
    assert.equal(
      await status(server.url + ROUTE, { "X-API-Key": key }),
      200,
      server.output(),
    );
    assert.equal(
      await status(`http://127.0.0.1:${metricsPort}/metrics`),
      200,
      server.output(),
    );
    assert.equal(
      await settlesWithin(server.process.status, 50),
      false,
      server.output(),
    );
    assert.doesNotMatch(server.output(), /Too many open files|Uncaught/);
  } finally {
    closeAll(flood);
  }
});

Deno.test("a head never finished on the metrics port is closed after HEADER_TIMEOUT_SECONDS, as on the integrators' port", async () => {
  using dir = tempDir();
  const { server, metricsPort } = await limitedServer(dir.path, {
    HEADER_TIMEOUT_SECONDS: "1",
  });
  await using _ = server;
  const [conn] = await openHalfHeads(metricsPort, 1);
  try {
    // A second, plus the sweep's period and a busy machine's lateness.
    assert.equal(await settlesWithin(closed(conn), 15_000), true);
  } finally {
    closeAll([conn]);
  }
});

Deno.test("METRICS_PORT equal to PORT is refused before anything listens or registers, with one line naming both", async () => {
  using dir = tempDir();
  const env = { DENO_KV_PATH: `${dir.path}/keys.db` };
  const port = String(freePort());
  const { code, output } = await refusedStart(dir.path, {
    ...env,
    PORT: port,
    HOST: "127.0.0.1",
    METRICS_PORT: port,
  });
  assert.equal(code, 1, output);
  assert.match(output, new RegExp(`^METRICS_PORT is PORT \\(${port}\\)`, "m"));
  assert.doesNotMatch(output, /"msg":"(metrics_)?listening"/);
  const status = await keys(dir.path, ["status", "--json"], env);
  assert.deepEqual(JSON.parse(status.stdout).servers, [], status.stdout);
});
