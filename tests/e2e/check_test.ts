/**
 * `deno task check`, run as a child process with the task's own permissions
 * against the real server and against small fake servers for the answers the
 * real one cannot be made to give on demand (clock off, 429, 503, redirects,
 * silence). Every run's output is searched for the key.
 */

import assert from "node:assert/strict";
import { generateApiKey, KEY_PATTERN } from "../../lib/auth/api_key.ts";
import {
  CHECK_ENV,
  DEFAULT_TIMEOUT_SECONDS,
  readCheckConfig,
} from "../../lib/check/config.ts";
import { formatFirstLine } from "../../lib/check/format.ts";
import { judgeStatus, parseConnectionStatus } from "../../lib/check/judge.ts";
import { microseconds } from "../../lib/check/_units.ts";
import { responseProblems } from "../support/openapi.ts";
import type { CheckOutcome } from "../../lib/check/outcome.ts";
import {
  createKey,
  keys,
  makeTlsFiles,
  type RunResult,
  startServer,
  taskArgs,
  tempDir,
} from "../support/processes.ts";

const ROOT = new URL("../../", import.meta.url).pathname;
const ROUTE = "/api/v1/integration/connection";
// Well formed, checksum included, but never issued by any server here.
const STRANGER_KEY = generateApiKey().key;

/** Runs `deno task check` with only the given variables (and what deno itself needs). */
async function check(
  env: Record<string, string>,
  args: string[] = [],
): Promise<RunResult> {
  const inherited: Record<string, string> = {};
  for (const name of ["PATH", "HOME", "DENO_DIR", "XDG_CACHE_HOME"]) {
    const value = Deno.env.get(name);
    if (value !== undefined) inherited[name] = value;
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: [...taskArgs("check"), ...args],
    cwd: ROOT,
    clearEnv: true,
    env: { ...inherited, ...env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  const result = {
    code: out.code,
    stdout: decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
  };
  assertNoKey(result, env[CHECK_ENV.apiKey]);
  return result;
}

/** The key, or anything shaped like a key, must never appear in any output. */
function assertNoKey(result: RunResult, key: string | undefined): void {
  const all = result.stdout + result.stderr;
  assert.ok(!KEY_PATTERN.test(all), `the output shows a key:\n${all}`);
  if (key !== undefined && key.trim().length >= 8) {
    assert.ok(!all.includes(key.trim()), `the output shows the key:\n${all}`);
  }
}

function env(url: string, key: string, extra: Record<string, string> = {}) {
  return { [CHECK_ENV.baseUrl]: url, [CHECK_ENV.apiKey]: key, ...extra };
}

function firstLine(result: RunResult): string {
  return result.stdout.split("\n")[0];
}

/** What a fake server saw of one request. */
interface Seen {
  url: URL;
  headers: Headers;
}

/** A throwaway server on loopback that answers with `handler`, recording requests. */
function fakeServer(
  handler: (request: Request) => Response | Promise<Response>,
): { url: string; requests: Seen[] } & AsyncDisposable {
  const requests: Seen[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    (request) => {
      // Copied now: a request's headers cannot be read once it has closed.
      requests.push({
        url: new URL(request.url),
        headers: new Headers(request.headers),
      });
      return handler(request);
    },
  );
  return {
    url: `http://127.0.0.1:${server.addr.port}`,
    requests,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
    },
  };
}

function statusAt(serverUtc: string): Response {
  return Response.json({
    connected: true,
    authenticatedByApiKey: true,
    apiKeyId: 7,
    email: "fake@example.com",
    serverUtc,
  });
}

/** A port with nothing listening: bound, noted, released. */
function closedPort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

Deno.test("check against the real server: OK, then CRITICAL once the key is revoked", async (t) => {
  using dir = tempDir();
  const { id, key } = await createKey(dir.path, "monitor", "ops@example.com");
  await using server = await startServer(dir.path);

  await t.step("a valid key exits 0 with its id and e-mail", async () => {
    const result = await check(env(server.url, key));
    assert.equal(result.code, 0, result.stdout + result.stderr);
    assert.match(
      firstLine(result),
      new RegExp(
        `^CONNECTION OK - key ${id} \\(ops@example\\.com\\), clock offset [+-]\\d+\\.\\d{3} s, round trip [\\d.]+ ms \\| offset=-?[\\d.]+s;-30:30 rtt=[\\d.]+s;;;0$`,
      ),
    );
    assert.match(result.stdout, /^reachable: +yes, http:\/\/127\.0\.0\.1:/m);
    assert.match(result.stdout, /^HTTP status: +200$/m);
    assert.match(result.stdout, new RegExp(`^key id: +${id}$`, "m"));
    assert.match(result.stdout, /^e-mail: +ops@example\.com$/m);
    assert.match(result.stdout, /^clock offset: +[+-]\d+\.\d{3} s ± /m);
  });

  await t.step("--json prints one object with the same facts", async () => {
    const result = await check(env(server.url + "/", key), ["--json"]);
    assert.equal(result.code, 0, result.stdout + result.stderr);
    const outcome = JSON.parse(result.stdout) as CheckOutcome;
    assert.equal(outcome.state, "OK");
    assert.equal(outcome.reachable, true);
    assert.equal(outcome.httpStatus, 200);
    assert.equal(outcome.apiKeyId, id);
    assert.equal(outcome.email, "ops@example.com");
    assert.equal(outcome.url, server.url + ROUTE);
    // Both processes read the same clock, so only the request's own latency is left.
    assert.ok(Math.abs(outcome.clockOffsetSeconds!) < 1, result.stdout);
    assert.ok(outcome.roundTripSeconds! > 0, result.stdout);
  });

  await t.step("a revoked key exits 2 and says not to retry", async () => {
    const revoked = await keys(dir.path, ["revoke", String(id)]);
    assert.equal(revoked.code, 0, revoked.stderr);
    const result = await check(env(server.url, key));
    assert.equal(result.code, 2, result.stdout + result.stderr);
    assert.match(
      firstLine(result),
      /^CONNECTION CRITICAL - key refused \(HTTP 401\): it is revoked or invalid \| rtt=/,
    );
    assert.match(result.stdout, /do not retry in a loop/);
  });

  await t.step(
    "a key the server never issued exits 2 the same way",
    async () => {
      const result = await check(env(server.url, STRANGER_KEY));
      assert.equal(result.code, 2, result.stdout);
      assert.match(firstLine(result), /key refused \(HTTP 401\)/);
    },
  );

  await t.step("a wrong path prefix exits 2 with a 404", async () => {
    const result = await check(env(`${server.url}/prefix`, STRANGER_KEY));
    assert.equal(result.code, 2, result.stdout);
    assert.match(
      firstLine(result),
      /no connection route at this address \(HTTP 404 not_found\)/,
    );
  });
});

Deno.test("check exits 2 when nothing listens", async () => {
  const result = await check(
    env(`http://127.0.0.1:${closedPort()}`, STRANGER_KEY),
  );
  assert.equal(result.code, 2, result.stdout + result.stderr);
  assert.match(
    firstLine(result),
    /^CONNECTION CRITICAL - connection refused by 127\.0\.0\.1:\d+$/,
  );
  assert.match(result.stdout, /^reachable: +no, /m);
});

Deno.test("check exits 2 on a TLS failure", async () => {
  // https:// to a server that speaks plain HTTP fails in the TLS handshake.
  await using server = fakeServer(() => statusAt(new Date().toISOString()));
  const result = await check(
    env(server.url.replace("http:", "https:"), STRANGER_KEY),
  );
  assert.equal(result.code, 2, result.stdout + result.stderr);
  assert.match(
    firstLine(result),
    /^CONNECTION CRITICAL - TLS failure with 127\.0\.0\.1:\d+: /,
  );
});

Deno.test("check trusts a certificate from a private CA only when DENO_CERT names the CA's file", async () => {
  using dir = tempDir();
  await makeTlsFiles(dir.path);
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    cert: await Deno.readTextFile(`${dir.path}/cert.pem`),
    key: await Deno.readTextFile(`${dir.path}/key.pem`),
    onListen() {},
  }, () => statusAt(new Date().toISOString()));
  try {
    const url = `https://127.0.0.1:${server.addr.port}`;
    const untrusted = await check(env(url, STRANGER_KEY));
    assert.equal(untrusted.code, 2, untrusted.stdout + untrusted.stderr);
    assert.match(
      firstLine(untrusted),
      /^CONNECTION CRITICAL - TLS failure with 127\.0\.0\.1:\d+: .*UnknownIssuer/,
    );
    // The task may read no file and no other variable: Deno reads DENO_CERT
    // itself, at start, before any permission applies.
    const trusted = await check(
      env(url, STRANGER_KEY, { DENO_CERT: `${dir.path}/ca.pem` }),
    );
    assert.equal(trusted.code, 0, trusted.stdout + trusted.stderr);
    assert.match(firstLine(trusted), /^CONNECTION OK - key 7 /);
  } finally {
    await server.shutdown();
  }
});

Deno.test("check exits 2 when the server stays silent past the timeout", async () => {
  const { promise: released, resolve: release } = Promise.withResolvers<void>();
  let asked = 0;
  await using server = fakeServer(async () => {
    asked = performance.now();
    await released;
    return new Response(null, { status: 204 });
  });
  try {
    const result = await check(
      env(server.url, STRANGER_KEY, { [CHECK_ENV.timeout]: "0.3" }),
    );
    const exited = performance.now();
    assert.equal(result.code, 2, result.stdout + result.stderr);
    assert.match(
      firstLine(result),
      /^CONNECTION CRITICAL - no answer from 127\.0\.0\.1:\d+ within 0\.3 s$/,
    );
    // The 0.3 s was what it waited, not the default: counted from the
    // request's arrival (a process start is as slow as the machine), it
    // gave up well before the default timeout would have ended the wait.
    // On a busy machine the 0.3 s may even run out before the request
    // reaches this process, which waited for nothing either.
    if (asked > 0) {
      assert.ok(
        exited - asked < DEFAULT_TIMEOUT_SECONDS * 1000,
        `gave up ${Math.round(exited - asked)} ms after asking`,
      );
    }
  } finally {
    release();
  }
});

Deno.test("check warns with exit 1 when the clocks are an hour apart, either way", async () => {
  for (const shift of [3_600_000, -3_600_000]) {
    await using server = fakeServer(() =>
      statusAt(new Date(Date.now() + shift).toISOString())
    );
    const result = await check(env(server.url, STRANGER_KEY));
    assert.equal(result.code, 1, result.stdout + result.stderr);
    const match = firstLine(result).match(
      /^CONNECTION WARNING - clock offset ([+-]\d+\.\d{3}) s exceeds 30 s, key 7 \(fake@example\.com\), /,
    );
    assert.ok(match, result.stdout);
    // Only the request's own latency separates the two clocks here.
    assert.ok(Math.abs(Number(match[1]) - shift / 1000) < 1, match[1]);
    assert.match(result.stdout, /synchronise this machine's clock/);
    // The key went in the header, and only there.
    assert.equal(server.requests.length, 1);
    const request = server.requests[0];
    assert.equal(request.headers.get("x-api-key"), STRANGER_KEY);
    assert.equal(request.url.pathname, ROUTE);
    assert.equal(request.url.search, "");
  }
});

Deno.test("CHECK_MAX_OFFSET_SECONDS moves the warning threshold", async () => {
  await using server = fakeServer(() =>
    statusAt(new Date(Date.now() + 120_000).toISOString())
  );
  const relaxed = await check(
    env(server.url, STRANGER_KEY, { [CHECK_ENV.maxOffset]: "300" }),
  );
  assert.equal(relaxed.code, 0, relaxed.stdout);
  assert.match(firstLine(relaxed), /offset=120\.\d+s;-300:300 /);
  const strict = await check(
    env(server.url, STRANGER_KEY, { [CHECK_ENV.maxOffset]: "60" }),
  );
  assert.equal(strict.code, 1, strict.stdout);
});

Deno.test("check exits 2 on 429 and 503, with Retry-After and what to do", async () => {
  const cases = [
    {
      status: 429,
      error: "locked_out",
      text:
        /^CONNECTION CRITICAL - rate limited \(HTTP 429 locked_out\), retry after 42 s/,
    },
    {
      status: 503,
      error: "unavailable",
      text:
        /^CONNECTION CRITICAL - service unavailable \(HTTP 503 unavailable\), retry after 42 s/,
    },
  ];
  for (const { status, error, text } of cases) {
    await using server = fakeServer(() =>
      Response.json({ error, message: "wait" }, {
        status,
        headers: { "retry-after": "42" },
      })
    );
    const result = await check(env(server.url, STRANGER_KEY));
    assert.equal(result.code, 2, result.stdout);
    assert.match(firstLine(result), text);
    assert.match(result.stdout, /^retry after: +42 s$/m);
  }
  await using outage = fakeServer(() =>
    Response.json({ error: "unavailable", message: "x" }, { status: 503 })
  );
  const result = await check(env(outage.url, STRANGER_KEY));
  assert.match(result.stdout, /your key is not in question/);
});

Deno.test("check does not follow a redirect, so the key stays with the configured host", async () => {
  await using elsewhere = fakeServer(() => statusAt(new Date().toISOString()));
  await using server = fakeServer(() =>
    Response.redirect(`${elsewhere.url}${ROUTE}?from=check`, 307)
  );
  const result = await check(env(server.url, STRANGER_KEY));
  assert.equal(result.code, 2, result.stdout);
  assert.match(
    firstLine(result),
    new RegExp(
      `^CONNECTION CRITICAL - redirected \\(HTTP 307\\) to ${elsewhere.url}${ROUTE}; not followed`,
    ),
  );
  assert.equal(elsewhere.requests.length, 0);
});

Deno.test("check exits 3 when a 200 is not the connection status", async () => {
  for (
    const body of [
      "<html>login</html>",
      '{"connected":true}',
      '{"connected":true,"authenticatedByApiKey":true,"apiKeyId":1,"email":"a@example.com","serverUtc":"2026-01-01T00:00:00+01:00"}',
    ]
  ) {
    await using server = fakeServer(() => new Response(body));
    const result = await check(env(server.url, STRANGER_KEY));
    assert.equal(result.code, 3, result.stdout);
    assert.match(
      firstLine(result),
      /^CONNECTION UNKNOWN - HTTP 200 with an unexpected body: /,
    );
  }
});

Deno.test("check exits 3 on missing or bad configuration, and never echoes the values", async (t) => {
  await t.step("nothing set", async () => {
    const result = await check({});
    assert.equal(result.code, 3);
    assert.equal(
      firstLine(result),
      `CONNECTION UNKNOWN - ${CHECK_ENV.apiKey} is not set; export it from your secrets store (see --help)`,
    );
  });

  await t.step("no base URL", async () => {
    const result = await check({ [CHECK_ENV.apiKey]: STRANGER_KEY });
    assert.equal(result.code, 3);
    assert.match(firstLine(result), /INTEGRATION_BASE_URL is not set/);
  });

  await t.step("a mangled key", async () => {
    // Its last character changed, whatever it was (a key ending in X, once
    // in a few dozen runs, stayed well-formed when it was set to X).
    const last = STRANGER_KEY.at(-1) === "X" ? "Y" : "X";
    const mangled = STRANGER_KEY.slice(0, -1) + last;
    const result = await check(env("http://127.0.0.1:9", mangled));
    assert.equal(result.code, 3);
    assert.match(
      firstLine(result),
      /INTEGRATION_API_KEY is not a well-formed key \(40 characters;/,
    );
    assert.ok(!result.stdout.includes(mangled.slice(4, 20)));
  });

  await t.step("a key in the base URL", async () => {
    const result = await check(
      env(`https://host.example?api_key=${STRANGER_KEY}`, STRANGER_KEY),
    );
    assert.equal(result.code, 3);
    assert.match(firstLine(result), /INTEGRATION_BASE_URL contains an API key/);
  });

  await t.step("plain http to another machine", async () => {
    const result = await check(env("http://192.0.2.10:8000", STRANGER_KEY));
    assert.equal(result.code, 3);
    assert.match(firstLine(result), /would send the key unencrypted/);
  });

  await t.step("a bad threshold", async () => {
    const result = await check(
      env("http://127.0.0.1:9", STRANGER_KEY, { [CHECK_ENV.timeout]: "ten" }),
    );
    assert.equal(result.code, 3);
    assert.equal(
      firstLine(result),
      "CONNECTION UNKNOWN - CHECK_TIMEOUT_SECONDS must be a number of seconds above 0 and at most 300, such as 10",
    );
  });

  await t.step("the key passed as an argument", async () => {
    const result = await check({}, [STRANGER_KEY]);
    assert.equal(result.code, 3);
    assert.match(
      firstLine(result),
      /unexpected argument #1; .* environment variables/,
    );
    assert.match(result.stdout, /have the key replaced/);
  });
});

Deno.test("check never prints the key, even when a server sends it back", async () => {
  await using server = fakeServer((request) =>
    Response.json({
      connected: true,
      authenticatedByApiKey: true,
      apiKeyId: 1,
      email: `${request.headers.get("x-api-key")}@example.com`,
      serverUtc: new Date().toISOString(),
    })
  );
  // check() itself fails the test if the key shows up anywhere.
  const human = await check(env(server.url, STRANGER_KEY));
  assert.equal(human.code, 0, human.stdout);
  assert.match(human.stdout, /\[redacted\]@example\.com/);
  const json = await check(env(server.url, STRANGER_KEY), ["--json"]);
  assert.equal(json.code, 0, json.stdout);
});

Deno.test("check never prints the key in another spelling: percent-encoded in a redirect, or split by invisible characters", async () => {
  const spelled = [
    // A redirect whose target carries the key with one character escaped.
    (key: string) =>
      new Response(null, {
        status: 302,
        headers: {
          location: `/moved/isk_%${key.charCodeAt(4).toString(16)}${
            key.slice(5)
          }`,
        },
      }),
    // An e-mail that holds the key with a right-to-left override inside.
    (key: string) =>
      Response.json({
        connected: true,
        authenticatedByApiKey: true,
        apiKeyId: 1,
        email: `${key.slice(0, 20)}\u202e${key.slice(20)}@example.com`,
        serverUtc: new Date().toISOString(),
      }),
  ];
  const body = (text: string) =>
    text.replace(/\\u[0-9a-fA-F]{4}/g, "").replace(/%[0-9a-fA-F]{2}/g, "")
      .replace(/[^0-9A-Za-z]/g, "");
  for (const answer of spelled) {
    await using server = fakeServer((request) =>
      answer(request.headers.get("x-api-key")!)
    );
    for (const args of [[], ["--json"]]) {
      const result = await check(env(server.url, STRANGER_KEY), args);
      assert.ok(
        !body(result.stdout).includes(STRANGER_KEY.slice(5, 30)),
        `the key came through: ${result.stdout}`,
      );
      assert.match(result.stdout, /withheld: the text held the API key/);
    }
  }
});

Deno.test("--help explains why the key is read from the environment only", async () => {
  const result = await check({}, ["--help"]);
  assert.equal(result.code, 0);
  assert.match(result.stdout, /^Usage: deno task check \[--json\]/);
  assert.match(result.stdout, /shell history/);
  assert.match(result.stdout, /DENO_CERT=/, "how to trust a private CA");
  for (const name of Object.values(CHECK_ENV)) {
    assert.ok(result.stdout.includes(name), name);
  }
});

Deno.test("check --version prints the release deno.json carries, in one line, with the task's permissions; --help names it", async () => {
  const release = JSON.parse(
    Deno.readTextFileSync(new URL("../../deno.json", import.meta.url)),
  ).version;
  const result = await check({}, ["--version"]);
  assert.equal(result.code, 0, result.stderr);
  assert.equal(result.stdout, `integration-service ${release}\n`);
  assert.match((await check({}, ["--help"])).stdout, /--version/);
});

Deno.test("the check task is granted only the network and its own variables", () => {
  const args = taskArgs("check");
  const granted = args.filter((arg) => arg.startsWith("--allow"));
  assert.deepEqual(granted, [
    "--allow-net",
    `--allow-env=${Object.values(CHECK_ENV).join(",")}`,
  ]);
});

Deno.test("readCheckConfig builds the route URL under any path prefix", () => {
  const config = readCheckConfig((name) =>
    ({
      [CHECK_ENV.baseUrl]: "https://gw.example.net/integration/",
      [CHECK_ENV.apiKey]: ` ${STRANGER_KEY}\n`,
    })[name]
  );
  assert.equal(config.url.href, `https://gw.example.net/integration${ROUTE}`);
  assert.equal(config.apiKey, STRANGER_KEY);
  assert.equal(config.maxOffsetSeconds, 30);
  assert.equal(config.timeoutSeconds, 10);
});

/** A connection status as the service answers it. */
const STATUS = {
  connected: true,
  authenticatedByApiKey: true,
  apiKeyId: 4,
  email: "a@example.com",
  serverUtc: "2026-01-01T00:00:00.000Z",
};

Deno.test("parseConnectionStatus ignores fields added later and refuses a time without Z", () => {
  const base = STATUS;
  assert.deepEqual(
    parseConnectionStatus(JSON.stringify({ ...base, region: "eu" })),
    { apiKeyId: 4, email: "a@example.com", serverUtc: base.serverUtc },
  );
  assert.equal(
    parseConnectionStatus(
      JSON.stringify({ ...base, serverUtc: "2026-01-01T00:00:00.000" }),
    ),
    "serverUtc is not an ISO 8601 UTC time ending in Z",
  );
});

Deno.test("the check reads a connection status with the schema openapi.json publishes: it refuses exactly the bodies the contract refuses", () => {
  const base = STATUS;
  const { email: _, ...noEmail } = base;
  const cases: [Record<string, unknown>, string | null][] = [
    [base, null],
    [{ ...base, region: "eu" }, null],
    [{ ...base, apiKeyExpiresAt: "2026-02-01T00:00:00.000Z" }, null],
    [{ ...base, connected: false }, "connected is not true"],
    [
      { ...base, authenticatedByApiKey: "yes" },
      "authenticatedByApiKey is not true",
    ],
    [{ ...base, apiKeyId: 0 }, "apiKeyId is not a whole number of at least 1"],
    [
      { ...base, apiKeyId: 1.5 },
      "apiKeyId is not a whole number of at least 1",
    ],
    [noEmail, "email is not an e-mail address"],
    [{ ...base, email: "no at sign" }, "email is not an e-mail address"],
    [
      { ...base, email: `${"a".repeat(250)}@b.cd` },
      "email is not an e-mail address",
    ],
    [
      { ...base, serverUtc: "2026-01-01T00:00:00Z" },
      "serverUtc is not an ISO 8601 UTC time ending in Z",
    ],
    [
      { ...base, serverUtc: "2026-01-01T00:00:00.000+01:00" },
      "serverUtc is not an ISO 8601 UTC time ending in Z",
    ],
    [
      { ...base, apiKeyExpiresAt: "soon" },
      "apiKeyExpiresAt is not an ISO 8601 UTC time ending in Z",
    ],
  ];
  for (const [body, refusal] of cases) {
    const read = parseConnectionStatus(JSON.stringify(body));
    assert.equal(
      typeof read === "string" ? read : null,
      refusal,
      JSON.stringify(body),
    );
    // The contract, read by Ajv as a client reads it (added fields allowed).
    const problems = responseProblems(
      { method: "GET", path: ROUTE },
      {
        status: 200,
        headers: {
          "cache-control": "no-store",
          "x-content-type-options": "nosniff",
          "content-type": "application/json",
        },
        body: JSON.stringify(body),
      },
      { tolerant: true },
    );
    assert.equal(
      problems.length > 0,
      refusal !== null,
      `${JSON.stringify(body)}: ${problems}`,
    );
  }
});

Deno.test("formatFirstLine writes a signed offset range into the performance data", () => {
  const line = formatFirstLine({
    state: "OK",
    exitCode: 0,
    summary: "key 3 (ops@example.com), clock offset -0.012 s, round trip 4 ms",
    reachable: true,
    url: null,
    httpStatus: 200,
    apiKeyId: 3,
    email: "ops@example.com",
    serverUtc: null,
    clockOffsetSeconds: -0.012,
    roundTripSeconds: 0.004,
    maxOffsetSeconds: 30,
    retryAfterSeconds: null,
    advice: null,
  });
  assert.equal(
    line,
    "CONNECTION OK - key 3 (ops@example.com), clock offset -0.012 s, round trip 4 ms | offset=-0.012000s;-30:30 rtt=0.004000s;;;0",
  );
});

/** A 200's outcome before it is judged, as lib/check/call.ts builds it. */
function answered(roundTripSeconds: number): CheckOutcome {
  return {
    state: "UNKNOWN",
    exitCode: 3,
    summary: "",
    reachable: true,
    url: "https://integration.example.net/api/v1/integration/connection",
    httpStatus: 200,
    apiKeyId: null,
    email: null,
    serverUtc: null,
    clockOffsetSeconds: null,
    roundTripSeconds,
    maxOffsetSeconds: 30,
    retryAfterSeconds: null,
    advice: null,
  };
}

Deno.test("an expiry warning counts whole hours or days rounded up, singular for one", () => {
  const serverUtc = "2026-11-21T12:00:00.000Z";
  const expiring = (ms: number) =>
    judgeStatus(
      answered(0.004),
      JSON.stringify({
        ...STATUS,
        serverUtc,
        apiKeyExpiresAt: new Date(Date.parse(serverUtc) + ms).toISOString(),
      }),
      {
        localMidpointMs: Date.parse(serverUtc),
        maxOffsetSeconds: 30,
        expiryWarningDays: 14,
      },
    ).summary;
  const HOUR = 3_600_000;
  assert.match(expiring(HOUR / 2), /\(within 1 hour\)/);
  assert.match(expiring(HOUR), /\(within 1 hour\)/);
  assert.match(expiring(1.5 * HOUR), /\(within 2 hours\)/);
  assert.match(expiring(24 * 2.5 * HOUR), /\(within 3 days\)/);
  for (const ms of [HOUR / 2, HOUR, 1.5 * HOUR, 60 * HOUR]) {
    assert.doesNotMatch(expiring(ms), /\b1 (hours|days)\b/);
  }
});

Deno.test("the offset and round trip are reported to the microsecond, without float noise", () => {
  const serverUtc = "2026-11-21T12:00:00.000Z";
  const outcome = judgeStatus(
    answered(microseconds(0.045105131000000014)),
    JSON.stringify({ ...STATUS, serverUtc }),
    {
      // A midpoint between two whole milliseconds, as performance.now() gives.
      localMidpointMs: Date.parse(serverUtc) - 12.3456789,
      maxOffsetSeconds: 30,
    },
  );
  assert.equal(outcome.roundTripSeconds, 0.045105);
  assert.equal(outcome.clockOffsetSeconds, 0.012346);
  const json = JSON.stringify(outcome);
  assert.doesNotMatch(json, /\d\.\d{7,}/, json);
});

Deno.test("check reports the key's remaining rate budget, and warns with exit 1 when under a tenth of the quota is left", async () => {
  const cases = [
    { left: 540, code: 0, state: "OK" },
    { left: 59, code: 1, state: "WARNING" },
  ];
  for (const { left, code, state } of cases) {
    await using server = fakeServer(() => {
      const response = statusAt(new Date().toISOString());
      response.headers.set("RateLimit-Policy", '"key";q=600;w=60');
      response.headers.set("RateLimit", `"key";r=${left};t=42`);
      return response;
    });
    const result = await check(env(server.url, STRANGER_KEY));
    assert.equal(result.code, code, result.stdout);
    assert.match(firstLine(result), new RegExp(`^CONNECTION ${state} - `));
    assert.match(firstLine(result), new RegExp(` budget=${left};60:;;0;600`));
    assert.match(
      result.stdout,
      new RegExp(`^rate limit: +${left} of 600 requests left per 60 s`, "m"),
    );
    if (state === "WARNING") {
      assert.match(firstLine(result), /rate limit nearly used/);
    }
    const json = await check(env(server.url, STRANGER_KEY), ["--json"]);
    assert.deepEqual(JSON.parse(json.stdout).rateLimit, {
      quota: 600,
      windowSeconds: 60,
      remaining: left,
      resetSeconds: 42,
    });
  }
});

Deno.test("check tells a key's rate limit (429 rate_limited, exit 1: the key is fine) from the lock-out (429 locked_out, exit 2)", async () => {
  await using server = fakeServer(() =>
    Response.json({ error: "rate_limited", message: "slow down" }, {
      status: 429,
      headers: {
        "retry-after": "7",
        "ratelimit-policy": '"key";q=600;w=60',
        "ratelimit": '"key";r=0;t=7',
      },
    })
  );
  const result = await check(env(server.url, STRANGER_KEY));
  assert.equal(result.code, 1, result.stdout);
  assert.match(
    firstLine(result),
    /^CONNECTION WARNING - the key's rate limit is used up \(HTTP 429 rate_limited\), retry after 7 s/,
  );
  assert.match(result.stdout, /the key is fine/);
  assert.match(result.stdout, /^rate limit: +0 of 600 requests left/m);
});
