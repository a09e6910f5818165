/**
 * The service under abuse, as a real server process: lock-out, keys in URLs,
 * hostile bytes, logs, probes, stop, TLS and permissions.
 */

import assert from "node:assert/strict";
import { readConfig } from "../../lib/server/config.ts";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import {
  createKey,
  keys,
  makeTlsFiles,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { check, rawStatus, request } from "../support/http.ts";
import {
  sendAll,
  spreadAddress,
  statusFrom,
} from "../../scripts/from_address.ts";

const ROUTE = "/api/v1/integration/connection";

Deno.test("a loop of wrong keys from one address is locked out with 429, while its own valid key and another address keep getting 200", async () => {
  using dir = tempDir();
  // Dual-stack: ::1 and 127.0.0.1 are two real client addresses on one machine.
  await using server = await startServer(dir.path, { HOST: "::" });
  const { key } = await createKey(dir.path, "monitoring");
  const attacker = `http://[::1]:${server.port}`;
  const neighbour = `http://127.0.0.1:${server.port}`;

  const statuses = [];
  for (let i = 0; i < 12; i++) {
    statuses.push((await check(attacker, `isk_guess${i}`)).status);
  }
  assert.deepEqual(statuses, [...Array(10).fill(401), 429, 429]);
  const locked = await check(attacker, "isk_guess12");
  assert.equal(locked.status, 429);
  const wait = Number(locked.headers.get("retry-after"));
  assert.ok(wait > 290 && wait <= 300, `Retry-After ${wait}`);
  // The lock answers only requests that fail anyway.
  assert.equal((await check(attacker, key)).status, 200);
  assert.equal((await check(attacker, "isk_guess13")).status, 429);

  const ok = await check(neighbour, key);
  assert.equal(ok.status, 200);

  await server.stop();
  const lockLines = server.output().split("\n").filter((l) =>
    l.includes('"msg":"lockout"')
  );
  assert.equal(lockLines.length, 1, "one log line per lock");
  assert.match(lockLines[0], /"client":"::1","failures":10/);
});

Deno.test("a burst of 80 invented keys at once from one address gets no more 401s than the threshold", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path);
  await createKey(dir.path, "monitoring");
  // Checksum-valid keys that exist nowhere: each one costs a store lookup,
  // so all 80 are in flight before the first failure is counted.
  const statuses = await Promise.all(
    Array.from({ length: 80 }, async () => {
      const response = await request(`${server.url}${ROUTE}`, {
        headers: { "X-API-Key": generateApiKey().key },
      });
      return response.status;
    }),
  );
  const count = (status: number) => statuses.filter((s) => s === status).length;
  assert.equal(count(401), 10, `statuses: ${statuses.join(" ")}`);
  assert.equal(count(429), 70);
});

Deno.test("with TRUSTED_PROXIES set, a direct client rotating X-Forwarded-For is still locked by its own address", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "monitoring");
  await using server = await startServer(dir.path, {
    LOCKOUT_MAX_FAILURES: "3",
    // A proxy elsewhere: the test's own connections are direct clients.
    TRUSTED_PROXIES: "10.0.0.5/32",
  });
  const statuses = [];
  for (let i = 0; i < 6; i++) {
    const response = await request(`${server.url}${ROUTE}`, {
      headers: { "X-API-Key": "wrong", "X-Forwarded-For": `203.0.113.${i}` },
    });
    statuses.push(response.status);
  }
  assert.deepEqual(statuses, [401, 401, 401, 429, 429, 429]);
  const forged = await request(`${server.url}${ROUTE}`, {
    headers: { "X-API-Key": "wrong", "X-Forwarded-For": "203.0.113.200" },
  });
  assert.equal(forged.status, 429, "the forged address did not help");
  const valid = await request(`${server.url}${ROUTE}`, {
    headers: { "X-API-Key": key, "X-Forwarded-For": "203.0.113.201" },
  });
  assert.equal(valid.status, 200, "a valid key is never locked out");
});

Deno.test("X-Forwarded-For is believed only from TRUSTED_PROXIES, so nobody can lock out someone else or dodge a lock by forging it", async () => {
  using dir = tempDir();
  const { key } = await createKey(dir.path, "monitoring");
  {
    await using server = await startServer(dir.path, {
      LOCKOUT_MAX_FAILURES: "3",
    });
    const forge = (xff: string, k: string) =>
      request(`${server.url}${ROUTE}`, {
        headers: { "X-API-Key": k, "X-Forwarded-For": xff },
      });
    // The forged addresses all differ, yet the real peer is one client: it gets locked.
    for (let i = 0; i < 3; i++) {
      await (await forge(`203.0.113.${i}`, "wrong")).body?.cancel();
    }
    const after = await forge("198.51.100.1", "wrong");
    await after.body?.cancel();
    assert.equal(after.status, 429);
    const served = await forge("198.51.100.1", key);
    await served.body?.cancel();
    assert.equal(served.status, 200, "its valid key is still served");
  }
  {
    await using server = await startServer(dir.path, {
      LOCKOUT_MAX_FAILURES: "3",
      TRUSTED_PROXIES: "127.0.0.1,::1",
    });
    const via = (xff: string, k: string) =>
      request(`${server.url}${ROUTE}`, {
        headers: { "X-API-Key": k, "X-Forwarded-For": xff },
      });
    for (let i = 0; i < 3; i++) {
      await (await via("6.6.6.6, 203.0.113.7", "wrong")).body?.cancel();
    }
    const attacker = await via("203.0.113.7", "wrong");
    await attacker.body?.cancel();
    assert.equal(attacker.status, 429, "the proxy-reported client is locked");
    const other = await via("203.0.113.7, 198.51.100.2", "wrong");
    await other.body?.cancel();
    assert.equal(
      other.status,
      401,
      "another client behind the same proxy is not",
    );
  }
});

Deno.test("a key in the URL is refused with 400, never authenticated, and shows up as exposed in keys list", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path);
  const leaked = await createKey(dir.path, "leaky-erp");
  const other = await createKey(dir.path, "careful-erp");
  const cases = [
    `?api_key=${leaked.key}`,
    `?APIKEY=whatever`,
    `?Token=abc`,
    `?x-api-key=abc`,
    `?key=abc`,
    `?q=${encodeURIComponent(leaked.key)}`,
    `?${leaked.key}`,
  ];
  for (const query of cases) {
    const response = await request(`${server.url}${ROUTE}${query}`, {
      headers: { "X-API-Key": other.key },
    });
    assert.equal(response.status, 400, query.slice(0, 12));
    const body = await response.json();
    assert.equal(body.error, "key_in_url");
    assert.match(body.message, /X-API-Key header/);
  }
  // A harmless query string does not get in the way.
  const harmless = await request(`${server.url}${ROUTE}?verbose=1`, {
    headers: { "X-API-Key": other.key },
  });
  await harmless.body?.cancel();
  assert.equal(harmless.status, 200);

  // The key stays valid (not revoked automatically) but the admin is told,
  // once the server has written it down off the request path: waited for
  // by its log line, whatever the machine's speed.
  assert.equal((await check(server.url, leaked.key)).status, 200);
  await server.waitForOutput(/"msg":"key_exposed_in_url"/);
  const list = await keys(dir.path, ["list"]);
  assert.equal(list.code, 0, list.stderr);
  assert.match(
    list.stdout,
    new RegExp(
      `\\n${leaked.id}\\s+leaky-erp.*just now from 127\\.0\\.0\\.1`,
    ),
  );
  assert.doesNotMatch(list.stdout, /careful-erp.* from /);
  assert.match(
    list.stderr,
    new RegExp(`Exposed: sent in a URL.*: ${leaked.id}; rotate`),
  );
  const show = JSON.parse(
    (await keys(dir.path, ["show", "leaky-erp", "--json"])).stdout,
  );
  assert.equal(show.exposedFrom, "127.0.0.1");
  assert.equal(show.status, "valid");
  const audit = JSON.parse((await keys(dir.path, ["audit", "--json"])).stdout);
  assert.equal(
    audit.filter((e: { action: string }) => e.action === "expose").length,
    1,
  );
});

Deno.test("a key in the URL path, plain or percent-encoded, on any route, is refused with 400 and marked exposed", async () => {
  using dir = tempDir();
  const server = await startServer(dir.path);
  const leaked = await createKey(dir.path, "path-leaker");
  const other = await createKey(dir.path, "bystander");
  const escaped = leaked.key.replace("_", "%5F").replace(
    /A|B|c/,
    (c) => `%${c.charCodeAt(0).toString(16)}`,
  );
  const oneEscaped = `isk_%${leaked.key.charCodeAt(4).toString(16)}${
    leaked.key.slice(5)
  }`;
  const targets = [
    `${ROUTE}/${leaked.key}`,
    `/api/v1/keys/${leaked.key}`,
    `/${escaped}`,
    `/api/v1/health/live/${leaked.key}`,
    // A broken escape elsewhere must not hide an escaped key.
    `/%zz/${oneEscaped}`,
    `/%FF/${oneEscaped}`,
    // Nor may encoding it twice.
    `/${leaked.key.replace("_", "%255F")}`,
  ];
  try {
    for (const target of targets) {
      const response = await request(`${server.url}${target}`, {
        headers: { "X-API-Key": other.key },
      });
      assert.equal(response.status, 400, target.slice(0, 20));
      assert.equal((await response.json()).error, "key_in_url");
    }
  } finally {
    await server.stop();
  }
  const show = JSON.parse(
    (await keys(dir.path, ["show", "path-leaker", "--json"])).stdout,
  );
  assert.equal(show.exposedFrom, "127.0.0.1");
  const bystander = JSON.parse(
    (await keys(dir.path, ["show", "bystander", "--json"])).stdout,
  );
  assert.equal(bystander.exposedAt, null);
  // The request log never holds the key, in any spelling.
  assert.ok(!server.output().includes(leaked.key.slice(4)));
  assert.ok(!server.output().includes(escaped.slice(6)));
  assert.ok(!server.output().includes(oneEscaped.slice(7)));
});

Deno.test("a key in the URL's authority, as userinfo in the request line or in the Host header, is refused and marked exposed", async () => {
  using dir = tempDir();
  const server = await startServer(dir.path);
  const leaked = await createKey(dir.path, "userinfo");
  const head = (target: string, host: string) =>
    `GET ${target} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;
  try {
    const local = `127.0.0.1:${server.port}`;
    assert.equal(
      await rawStatus(
        server.port,
        head(`http://${leaked.key}@${local}/api/v1/health/live`, local),
      ),
      400,
    );
    assert.equal(
      await rawStatus(
        server.port,
        head("/api/v1/health/live", `a?${leaked.key}`),
      ),
      400,
    );
    assert.equal(
      await rawStatus(server.port, head("/api/v1/health/live", local)),
      200,
      "an ordinary authority passes",
    );
  } finally {
    await server.stop();
  }
  const show = JSON.parse(
    (await keys(dir.path, ["show", "userinfo", "--json"])).stdout,
  );
  assert.equal(show.exposedFrom, "127.0.0.1");
  assert.ok(!server.output().includes(leaked.key.slice(4)));
});

Deno.test("keys in URLs count toward the lock-out, and a locked client gets 429 for them without any key being looked up", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path, {
    LOCKOUT_MAX_FAILURES: "3",
  });
  const victim = await createKey(dir.path, "victim");
  const statuses = [];
  for (let i = 0; i < 5; i++) {
    const invented = generateApiKey().key;
    const response = await request(
      `${server.url}/anything?a=${invented}&b=${victim.key}`,
    );
    await response.body?.cancel();
    statuses.push(response.status);
  }
  assert.deepEqual(statuses, [400, 400, 400, 429, 429]);
  // The locked client's URLs checked nothing: the victim's key was marked
  // exposed by the first three at most, never by the last two (same key).
  const show = JSON.parse(
    (await keys(dir.path, ["show", "victim", "--json"])).stdout,
  );
  assert.equal(show.exposedFrom, "127.0.0.1");
});

Deno.test("a key sent as the HTTP method, or escaped nine times over in the path, never reaches the log", async () => {
  using dir = tempDir();
  const server = await startServer(dir.path);
  const { key } = await createKey(dir.path, "hidden");
  // One layer for the underscore, then eight more over it.
  let deep = key.replace("_", "%5F");
  for (let i = 0; i < 8; i++) deep = deep.replaceAll("%", "%25");
  try {
    assert.equal(
      await rawStatus(
        server.port,
        `${key} ${ROUTE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
      ),
      405,
    );
    const response = await request(`${server.url}/x/${deep}`);
    await response.body?.cancel();
    assert.equal(
      response.status,
      400,
      "escaped deeper than decoding goes: refused",
    );
  } finally {
    await server.stop();
  }
  assert.ok(!server.output().includes(key.slice(4)), "the key in a log line");
  assert.match(server.output(), /"method":"\[other\]"/);
  assert.ok(
    !server.output().includes(deep.slice(-20)),
    "the escaped path in a log line",
  );
});

Deno.test("30+ hostile or malformed requests each get their expected status, and a valid request still gets 200 after each", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path, {
    LOCKOUT_MAX_FAILURES: "100000",
  });
  const { key } = await createKey(dir.path, "steady");
  const get = (headers: string, target = ROUTE) =>
    `GET ${target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n${headers}\r\n`;
  const bytes = (...parts: (string | number[])[]) =>
    new Uint8Array(
      parts.flatMap((p) =>
        typeof p === "string" ? [...new TextEncoder().encode(p)] : p
      ),
    );
  const table: [string, string | Uint8Array, number][] = [
    ["a valid key", get(`X-API-Key: ${key}\r\n`), 200],
    ["header name in lower case", get(`x-api-key: ${key}\r\n`), 200],
    ["no key", get(""), 401],
    ["empty key", get("X-API-Key: \r\n"), 401],
    ["key plus one character", get(`X-API-Key: ${key}a\r\n`), 401],
    ["an 8 KB key", get(`X-API-Key: ${"a".repeat(8192)}\r\n`), 401],
    [
      "a non-ASCII key (UTF-8)",
      get(`X-API-Key: ${key.slice(0, 39)}é\r\n`),
      401,
    ],
    [
      "a latin1 byte in the key",
      bytes(
        get(`X-API-Key: ${key.slice(0, 39)}`).slice(0, -2),
        [0xff],
        "\r\n\r\n",
      ),
      401,
    ],
    [
      "a no-break space before the key",
      bytes(
        `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-Key: `,
        [0xc2, 0xa0],
        `${key}\r\n\r\n`,
      ),
      401,
    ],
    [
      "a no-break space after the key",
      bytes(
        `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-Key: ${key}`,
        [0xc2, 0xa0],
        "\r\n\r\n",
      ),
      401,
    ],
    [
      "a space inside the key",
      get(`X-API-Key: ${key.slice(0, 20)} ${key.slice(20)}\r\n`),
      401,
    ],
    ["a vertical tab after the key", get(`X-API-Key: ${key}\x0b\r\n`), 400],
    [
      "the header given twice",
      get(`X-API-Key: ${key}\r\nX-API-Key: ${key}\r\n`),
      401,
    ],
    [
      "the header twice, second junk",
      get(`X-API-Key: ${key}\r\nX-API-Key: nope\r\n`),
      401,
    ],
    [
      "two keys folded in one header",
      get(`X-API-Key: ${key}, ${key}\r\n`),
      401,
    ],
    ["the key as a bearer token", get(`Authorization: Bearer ${key}\r\n`), 401],
    ["the key in a cookie", get(`Cookie: api_key=${key}\r\n`), 401],
    ["the key in the query", get("", `${ROUTE}?api_key=${key}`), 400],
    [
      "a token parameter",
      get(`X-API-Key: ${key}\r\n`, `${ROUTE}?TOKEN=1`),
      400,
    ],
    [
      "POST",
      `POST ${ROUTE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-Key: ${key}\r\nContent-Length: 0\r\n\r\n`,
      405,
    ],
    [
      "DELETE",
      `DELETE ${ROUTE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-Key: ${key}\r\n\r\n`,
      405,
    ],
    [
      "HEAD",
      `HEAD ${ROUTE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-Key: ${key}\r\n\r\n`,
      200,
    ],
    [
      "OPTIONS",
      `OPTIONS ${ROUTE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
      204,
    ],
    [
      "OPTIONS *",
      `OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`,
      404,
    ],
    ["a trailing slash", get(`X-API-Key: ${key}\r\n`, `${ROUTE}/`), 404],
    ["a doubled slash", get(`X-API-Key: ${key}\r\n`, `/${ROUTE}`), 404],
    ["upper case", get(`X-API-Key: ${key}\r\n`, ROUTE.toUpperCase()), 404],
    [
      "a percent-encoded letter",
      get(`X-API-Key: ${key}\r\n`, ROUTE.replace("connection", "%63onnection")),
      404,
    ],
    [
      "dot segments",
      get(`X-API-Key: ${key}\r\n`, "/api/v1/health/../integration/connection"),
      404,
    ],
    [
      "encoded dot segments",
      get(
        `X-API-Key: ${key}\r\n`,
        "/api/v1/health/%2e%2e/integration/connection",
      ),
      404,
    ],
    [
      "an unknown version",
      get(`X-API-Key: ${key}\r\n`, "/api/v2/integration/connection"),
      404,
    ],
    ["not HTTP at all", "HELLO\r\n\r\n", 400],
    [
      "binary garbage",
      new Uint8Array([
        0x16,
        0x03,
        0x01,
        0x00,
        0xa5,
        0x01,
        0x00,
        0x00,
        0xa1,
        0x03,
        0x03,
        13,
        10,
        13,
        10,
      ]),
      400,
    ],
    ["a header line without a colon", get("NoColonHere\r\n"), 400],
    [
      "a NUL byte in a header",
      bytes(
        get(`X-API-Key: ${key.slice(0, 10)}`).slice(0, -2),
        [0],
        "\r\n\r\n",
      ),
      400,
    ],
    // Deno's HTTP parser refuses oversized heads with 400 before the handler runs.
    ["a 100 KB header", get(`X-Padding: ${"a".repeat(100_000)}\r\n`), 400],
    ["a 100 KB request line", get("", `${ROUTE}?${"a".repeat(100_000)}`), 400],
    [
      "Content-Length with Transfer-Encoding",
      `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
      400,
    ],
    [
      "two Content-Lengths",
      `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab`,
      400,
    ],
    [
      "an unknown HTTP version",
      `GET ${ROUTE} HTTP/9.9\r\nHost: x\r\n\r\n`,
      400,
    ],
  ];
  assert.ok(table.length >= 30);
  const failures: string[] = [];
  for (const [label, request, expected] of table) {
    const status = await rawStatus(server.port, request);
    if (status !== expected) {
      failures.push(`${label}: expected ${expected}, got ${status}`);
    }
    const after = await check(server.url, key);
    if (after.status !== 200) {
      failures.push(`after ${label}: a valid request got ${after.status}`);
    }
  }
  assert.deepEqual(failures, []);
});

/** The server's default HEADER_TIMEOUT_SECONDS, in milliseconds. */
const HEADER_TIMEOUT_MS =
  readConfig(() => undefined).connections.headerTimeoutSeconds * 1000;

Deno.test("a client that sends half a request and stalls holds up nobody else", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path);
  const { key } = await createKey(dir.path, "steady");
  const stalled = await Promise.all(
    Array.from({ length: 50 }, async () => {
      const conn = await Deno.connect({
        hostname: "127.0.0.1",
        port: server.port,
      });
      await conn.write(
        new TextEncoder().encode(`GET ${ROUTE} HTTP/1.1\r\nHost: x\r\nX-API-`),
      );
      return conn;
    }),
  );
  try {
    // A server that served the stalled heads first would answer only once
    // their header timeout (by default) closed them: the 20 answers
    // must come well before that, however busy the machine.
    const started = performance.now();
    for (let i = 0; i < 20; i++) {
      assert.equal((await check(server.url, key)).status, 200);
    }
    const took = performance.now() - started;
    assert.ok(
      took < HEADER_TIMEOUT_MS / 2,
      `20 requests beside 50 stalled ones took ${Math.round(took)} ms`,
    );
  } finally {
    for (const conn of stalled) conn.close();
  }
});

Deno.test("every response carries nosniff and no-store and no header that names the software", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path, {
    LOCKOUT_MAX_FAILURES: "2",
  });
  const { key } = await createKey(dir.path, "a");
  const requests: [string, RequestInit][] = [
    [ROUTE, { headers: { "X-API-Key": key } }],
    [`${ROUTE}?token=x`, {}],
    ["/nowhere", {}],
    [ROUTE, { method: "POST" }],
    [ROUTE, { method: "OPTIONS" }],
    ["/api/v1/health/live", {}],
    ["/api/v1/health/ready", {}],
    [ROUTE, {}],
    [ROUTE, {}],
    [ROUTE, {}], // locked by now: 429
  ];
  const statuses = new Set<number>();
  for (const [path, init] of requests) {
    const response = await request(`${server.url}${path}`, init);
    await response.body?.cancel();
    statuses.add(response.status);
    assert.equal(
      response.headers.get("x-content-type-options"),
      "nosniff",
      path,
    );
    assert.equal(response.headers.get("cache-control"), "no-store", path);
    assert.ok(response.headers.get("date"), path);
    for (const name of ["server", "x-powered-by", "via"]) {
      assert.equal(response.headers.get(name), null, name);
    }
  }
  assert.deepEqual([...statuses].sort(), [200, 204, 400, 401, 404, 405, 429]);
});

Deno.test("the health probes answer without a key and reveal nothing", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path);
  for (const path of ["/api/v1/health/live", "/api/v1/health/ready"]) {
    const response = await request(`${server.url}${path}`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { status: "ok" });
  }
});

Deno.test("the server logs one JSON line per request and never a key, the X-API-Key header or a query string", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path, {
    LOCKOUT_MAX_FAILURES: "5",
  });
  const valid = await createKey(dir.path, "valid");
  const revoked = await createKey(dir.path, "revoked");
  const leaked = await createKey(dir.path, "leaked");
  await keys(dir.path, ["revoke", "revoked"]);
  const forged = `isk_${"A".repeat(36)}`;
  const keysUsed = [valid.key, revoked.key, leaked.key, forged];
  let sent = 0;
  const call = async (path: string, key?: string) => {
    const response = await request(`${server.url}${path}`, {
      headers: key ? { "X-API-Key": key } : {},
    });
    await response.body?.cancel();
    sent++;
    return response.status;
  };
  assert.equal(await call(ROUTE, valid.key), 200);
  assert.equal(await call(ROUTE, revoked.key), 401);
  assert.equal(await call(`${ROUTE}?api_key=${leaked.key}`), 400);
  assert.equal(await call(`${ROUTE}?q=${leaked.key}`, valid.key), 400);
  assert.equal(
    await call(`/api/v1/${leaked.key}`),
    400,
    "a key in the path is refused",
  );
  for (let i = 0; i < 6; i++) await call(ROUTE, forged);
  assert.equal(await call(ROUTE, forged), 429);
  assert.equal(await server.stop(), 0);

  const output = server.output();
  for (const key of keysUsed) {
    assert.ok(!output.includes(key.slice(4)), "a key is in the server output");
  }
  assert.ok(!/x-api-key/i.test(output), "the header name is in the output");
  assert.ok(!output.includes("?"), "a query string is in the output");
  const lines = output.trim().split("\n").map((l) => JSON.parse(l));
  const requests = lines.filter((l) => l.msg === "request");
  assert.equal(requests.length, sent);
  for (const line of requests) {
    assert.deepEqual(
      Object.keys(line).filter((k) => k !== "apiKeyId").sort(),
      [
        "client",
        "durationMs",
        "method",
        "msg",
        "path",
        "requestId",
        "status",
        "time",
      ],
    );
    assert.match(line.requestId, /^[0-9a-f]{8}-[0-9a-z]+$/);
    assert.equal(line.client, "127.0.0.1");
  }
  assert.equal(requests[0].apiKeyId, valid.id);
  assert.equal(requests[0].path, ROUTE);
  assert.equal(requests[1].apiKeyId, undefined);
  assert.equal(lines.filter((l) => l.msg === "lockout").length, 1);
  assert.equal(lines.filter((l) => l.msg === "key_exposed_in_url").length, 1);
});

/** Every byte of one answer over HTTP/1.1, until the server closes. */
async function rawAnswer(port: number, head: string): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(new TextEncoder().encode(head));
    const chunks: Uint8Array[] = [];
    const buffer = new Uint8Array(16 * 1024);
    for (;;) {
      const n = await conn.read(buffer);
      if (n === null) break;
      chunks.push(buffer.slice(0, n));
    }
    return new TextDecoder("latin1").decode(
      new Uint8Array(chunks.flatMap((chunk) => [...chunk])),
    );
  } finally {
    conn.close();
  }
}

Deno.test("a 401 without X-API-Key logs where a key was sent instead, never the key, and answers as a plain 401; a mistyped path is logged as sent", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path, {
    LOCKOUT_MAX_FAILURES: "1000",
  });
  const { key } = await createKey(dir.path, "misplaced");
  const body = key.slice(4);
  const get = (headers: string, target = ROUTE) =>
    `GET ${target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n${headers}\r\n`;
  // What differs between any two answers: the date and the request's id.
  const bare = (answer: string) =>
    answer.replace(/^(date|x-request-id): .*\r\n/gim, "");
  const plain = await rawAnswer(server.port, get(""));
  assert.match(plain, /^HTTP\/1\.1 401 /);
  const misplaced: [string, string][] = [
    [`Authorization: Bearer ${key}`, "Authorization"],
    [`Authorization: ApiKey ${key}`, "Authorization"],
    [`Authorization: Basic ${btoa(`${key}:`)}`, "Authorization"],
    [`Api-Key: ${key}`, "Api-Key"],
    [`X-Api-Token: ${key}`, "X-Api-Token"],
    [`X-Something-Else: ${body}`, "another header"],
  ];
  for (const [header] of misplaced) {
    const answer = await rawAnswer(server.port, get(`${header}\r\n`));
    assert.equal(bare(answer), bare(plain), header.slice(0, 14));
  }
  const jwt = "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl";
  const bearer = await rawAnswer(
    server.port,
    get(`Authorization: Bearer ${jwt}\r\n`),
  );
  assert.equal(bare(bearer), bare(plain));
  const typo = "/api/v1/integration/conection";
  assert.equal(await rawStatus(server.port, get("", typo)), 404);
  assert.equal(await server.stop(), 0);

  const output = server.output();
  assert.ok(!output.includes(body), "the key in the output");
  for (let i = 0; i + 8 <= body.length; i++) {
    assert.ok(!output.includes(body.slice(i, i + 8)), "a part of the key");
  }
  assert.ok(!output.includes(jwt.slice(0, 8)), "the bearer token");
  const requests = output.trim().split("\n").map((l) => JSON.parse(l))
    .filter((l) => l.msg === "request");
  assert.deepEqual(
    requests.map((l) => [l.status, l.hint]),
    [
      [401, undefined],
      ...misplaced.map(([, where]) => [
        401,
        `a key was sent in ${where}, which is not read; send it in X-API-Key`,
      ]),
      [
        401,
        "a Bearer credential was sent in Authorization, which is not read; send the key in X-API-Key",
      ],
      [404, undefined],
    ],
  );
  assert.equal(requests.at(-1).path, typo);
});

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.test(`${signal} stops the server gracefully: in-flight requests finish, the store is closed, exit code 0`, async () => {
    using dir = tempDir();
    const { key } = await createKey(dir.path, "a");
    const server = await startServer(dir.path);
    const url = server.url;
    const inFlight = Array.from(
      { length: 40 },
      () =>
        request(`${url}${ROUTE}`, { headers: { "X-API-Key": key } })
          .then(async (r) => (await r.body?.cancel(), r.status))
          .catch(() => "refused"),
    );
    // The signal comes once the server has answered one of them, so that
    // it cannot beat every request to the accept however busy the machine;
    // the others are then still arriving or in flight.
    await server.waitForOutput(/"msg":"request"/);
    const code = await server.stop(signal);
    const statuses = await Promise.all(inFlight);
    assert.equal(code, 0);
    // Each request either completed or was never accepted: none was cut off with an error status.
    assert.ok(
      statuses.every((s) => s === 200 || s === "refused"),
      statuses.join(","),
    );
    assert.ok(statuses.includes(200));
    assert.match(server.output(), /"msg":"stopping"[\s\S]*"msg":"stopped"/);
    await assert.rejects(fetch(`${server.url}${ROUTE}`));
    // The store was closed cleanly: the console can use it at once.
    assert.equal((await keys(dir.path, ["list"])).code, 0);
  });
}

Deno.test("TLS_CERT_FILE and TLS_KEY_FILE make the server speak HTTPS", async () => {
  using dir = tempDir();
  await Deno.mkdir(`${dir.path}/data/tls`, { recursive: true });
  const tls = `${dir.path}/data/tls`;
  await makeTlsFiles(tls);
  await using server = await startServer(dir.path, {
    TLS_CERT_FILE: "./data/tls/cert.pem",
    TLS_KEY_FILE: "./data/tls/key.pem",
  });
  assert.match(server.output(), /"address":"https:/);
  const { key, id } = await createKey(dir.path, "a");
  using client = Deno.createHttpClient({
    caCerts: [await Deno.readTextFile(`${tls}/ca.pem`)],
  });
  const response = await request(`https://localhost:${server.port}${ROUTE}`, {
    client,
    headers: { "X-API-Key": key },
  });
  assert.equal(response.status, 200);
  assert.equal((await response.json()).apiKeyId, id);
  assert.equal(
    await rawStatus(server.port, `GET ${ROUTE} HTTP/1.1\r\nHost: x\r\n\r\n`),
    0,
    "no plain HTTP",
  );
});

Deno.test("a locked-out client gets 429 wherever a key fails, 200 for a valid key, and the usual answer wherever none is checked (health, openapi.json, OPTIONS, 404, 405), as docs/operators.md says", async () => {
  using dir = tempDir();
  await using server = await startServer(dir.path, {
    LOCKOUT_MAX_FAILURES: "2",
  });
  const { key } = await createKey(dir.path, "locked-out");
  for (let i = 0; i < 3; i++) await check(server.url, `isk_guess${i}`);
  assert.equal((await check(server.url, "isk_guess9")).status, 429);
  assert.equal((await check(server.url, key)).status, 200, "a valid key");
  const url = await request(`${server.url}${ROUTE}?api_key=x`);
  await url.body?.cancel();
  assert.equal(url.status, 429, "a URL holding a credential");
  const keyless: [string, RequestInit, number][] = [
    ["/api/v1/health/live", {}, 200],
    ["/api/v1/health/ready", {}, 200],
    ["/api/v1/openapi.json", {}, 200],
    [ROUTE, { method: "OPTIONS" }, 204],
    ["/nowhere", {}, 404],
    [ROUTE, { method: "POST" }, 405],
  ];
  for (const [path, init, status] of keyless) {
    const response = await request(`${server.url}${path}`, init);
    await response.body?.cancel();
    assert.equal(response.status, status, `${init.method ?? "GET"} ${path}`);
  }
});

Deno.test("a flood of invented keys from 1 500 addresses, past every lock-out level, never refuses a valid key: established clients, newcomers, and newcomers inside the flooded networks all get 200", async () => {
  using dir = tempDir();
  const honest = await createKey(dir.path, "honest");
  const attackers = await createKey(dir.path, "attackers-own");
  // Budgets low enough for a short test to pass all three levels: 2 per
  // address, 20 per network, 200 in total.
  await using server = await startServer(dir.path, {
    LOCKOUT_MAX_FAILURES: "2",
    LOCKOUT_SECONDS: "600",
  });
  const path = ROUTE;
  const get = (from: string, key: string | null) =>
    statusFrom(server.port, { from, path, key });
  const established = (i: number) =>
    spreadAddress(i, { first: 200, perNetwork: 50 });
  const flooder = (i: number) =>
    spreadAddress(i, { first: 10, perNetwork: 99 });

  assert.deepEqual(
    [...await sendAll(100, (i) => get(established(i), honest.key))],
    [[200, 100]],
  );
  // The attacker's own valid key from fresh addresses, then the flood.
  await sendAll(
    300,
    (i) => get(`127.150.${i >> 8}.${1 + (i & 255) % 250}`, attackers.key),
  );
  const flood = await sendAll(
    1_500,
    (i) => get(flooder(i), generateApiKey().key),
  );
  assert.ok((flood.get(429) ?? 0) > 0, "the flood met the lock-out");

  const answers = {
    established: await sendAll(100, (i) => get(established(i), honest.key)),
    newcomers: await sendAll(
      100,
      (i) => get(spreadAddress(i, { first: 100, perNetwork: 50 }), honest.key),
    ),
    // Hosts 100 to 199 of the flooded /24s: their networks are locked.
    neighbours: await sendAll(
      100,
      (i) => get(`127.10.${i % 15}.${100 + i}`, honest.key),
    ),
    // The flood's own addresses, holding a valid key now.
    flooders: await sendAll(100, (i) => get(flooder(i), honest.key)),
  };
  for (const [who, statuses] of Object.entries(answers)) {
    assert.deepEqual([...statuses], [[200, 100]], who);
  }
  // And they stay locked for what fails.
  assert.deepEqual(
    [...await sendAll(50, (i) => get(flooder(i), generateApiKey().key))],
    [[429, 50]],
  );
});
