/**
 * openapi.json: linted by Redocly's CLI, and held against the real server's
 * answers through tests/support/openapi.ts, which must also refuse answers
 * that break it.
 */

import assert from "node:assert/strict";
import {
  OpenApiValidationError,
  readResponse,
  type ReceivedResponse,
  responseProblems,
  validateResponse,
} from "../support/openapi.ts";
import { createKey, startServer, tempDir } from "../support/processes.ts";
import { OFFLINE_RUN } from "../support/npm_tools.ts";

const ROOT = new URL("../../", import.meta.url);
const CONNECTION = "/api/v1/integration/connection";

/** Runs `redocly lint` on a document, with the version pinned in deno.json. */
async function lint(
  path: string,
): Promise<{ code: number; output: string }> {
  const config = JSON.parse(
    await Deno.readTextFile(new URL("deno.json", ROOT)),
  ) as { imports: Record<string, string> };
  const redocly = config.imports["@redocly/cli"];
  assert.match(redocly, /^npm:@redocly\/cli@\d+\.\d+\.\d+$/);
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      // Linting reads files only, offline.
      ...OFFLINE_RUN,
      redocly,
      "lint",
      // recommended-strict turns every warning into an error.
      "--extends=recommended-strict",
      // The project has not chosen a licence yet; drop this once it has.
      "--skip-rule=info-license",
      // Probes, OPTIONS and this document have no client error to describe.
      "--skip-rule=operation-4xx-response",
      // POST, PUT, PATCH and DELETE are listed only for the 405 the service
      // answers them with: they have no success to describe.
      "--skip-rule=operation-2xx-response",
      "--format=stylish",
      path,
    ],
    cwd: ROOT,
    env: { REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  return {
    code: out.code,
    output: decoder.decode(out.stdout) + decoder.decode(out.stderr),
  };
}

Deno.test("openapi.json passes redocly lint with the recommended-strict rules", async () => {
  const { code, output } = await lint(new URL("openapi.json", ROOT).pathname);
  assert.equal(code, 0, output);
});

Deno.test("redocly lint fails a document with a broken reference", async () => {
  using dir = tempDir();
  const document = JSON.parse(
    await Deno.readTextFile(new URL("openapi.json", ROOT)),
  );
  document.components.responses.Connected.content["application/json"].schema = {
    $ref: "#/components/schemas/NoSuchSchema",
  };
  const path = `${dir.path}/openapi.json`;
  await Deno.writeTextFile(path, JSON.stringify(document));
  const { code, output } = await lint(path);
  assert.notEqual(code, 0, output);
  assert.match(output, /no-unresolved-refs/);
});

/** Sends a request and validates the answer, returning it for further checks. */
async function exchange(
  base: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
): Promise<ReceivedResponse> {
  const response = await readResponse(
    await fetch(base + path, { method, headers }),
  );
  validateResponse({ method, path }, response);
  return response;
}

Deno.test("the real server's answers match openapi.json", async (t) => {
  using dir = tempDir();
  const { id, key } = await createKey(dir.path, "openapi", "ops@example.com");
  await using server = await startServer(dir.path);

  await t.step("200 on GET with a valid key", async () => {
    const response = await exchange(server.url, "GET", CONNECTION, {
      "X-API-Key": key,
    });
    assert.equal(response.status, 200);
    const body = JSON.parse(response.body!);
    assert.equal(body.apiKeyId, id);
    assert.equal(body.email, "ops@example.com");
  });

  await t.step("200 without a body on HEAD", async () => {
    const response = await exchange(server.url, "HEAD", CONNECTION, {
      "X-API-Key": key,
    });
    assert.equal(response.status, 200);
    assert.equal(response.body, "");
  });

  await t.step("401 without a key and with an unknown one", async () => {
    const missing = await exchange(server.url, "GET", CONNECTION);
    assert.equal(missing.status, 401);
    const unknown = await exchange(server.url, "GET", CONNECTION, {
      "X-API-Key": `isk_${"0".repeat(36)}`,
    });
    assert.equal(unknown.status, 401);
  });

  await t.step("404 on a path the document does not list", async () => {
    const response = await exchange(server.url, "GET", "/api/v1/no-such-route");
    assert.equal(response.status, 404);
  });

  await t.step("405 on a method the route does not answer", async () => {
    for (const method of ["POST", "DELETE"]) {
      const response = await exchange(server.url, method, CONNECTION, {
        "X-API-Key": key,
      });
      assert.equal(response.status, 405);
    }
  });
});

const COMMON = {
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
};
const GOOD_STATUS = {
  connected: true,
  authenticatedByApiKey: true,
  apiKeyId: 3,
  email: "ops@example.com",
  serverUtc: "2026-01-15T09:30:00.123Z",
};

function ok(body: unknown): ReceivedResponse {
  return {
    status: 200,
    headers: { ...COMMON, "content-type": "application/json" },
    body: JSON.stringify(body),
  };
}

Deno.test("the validator accepts a well-formed 200", () => {
  validateResponse({ method: "GET", path: CONNECTION }, ok(GOOD_STATUS));
});

Deno.test("the validator refuses an extra field and names path, status and field", () => {
  let error: unknown;
  try {
    validateResponse(
      { method: "GET", path: CONNECTION },
      ok({ ...GOOD_STATUS, apiKey: "isk_leaked" }),
    );
  } catch (caught) {
    error = caught;
  }
  assert.ok(error instanceof OpenApiValidationError, String(error));
  assert.match(
    error.message,
    /^The 200 response to GET \/api\/v1\/integration\/connection breaks openapi\.json: /,
  );
  assert.match(error.message, /extra property "apiKey"/);
  assert.deepEqual(error.problems, [
    'body must not have the extra property "apiKey"',
  ]);
});

Deno.test("openapi.json lets clients read a body with an added field, while the tests hold the service to the listed ones", () => {
  const document = JSON.parse(
    Deno.readTextFileSync(new URL("openapi.json", ROOT)),
  );
  const closedSchemas = Object.entries(document.components.schemas).filter((
    [, schema],
  ) =>
    (schema as { additionalProperties?: unknown }).additionalProperties ===
      false
  )
    .map(([name]) => name);
  assert.deepEqual(closedSchemas, [], "response bodies may gain fields");
  const added = ok({ ...GOOD_STATUS, addedLater: "x" });
  const request = { method: "GET", path: CONNECTION };
  assert.deepEqual(responseProblems(request, added, { tolerant: true }), []);
  assert.deepEqual(responseProblems(request, added), [
    'body must not have the extra property "addedLater"',
  ]);
  // Tolerance never drops a required field.
  const { apiKeyId: _, ...noId } = GOOD_STATUS;
  assert.deepEqual(responseProblems(request, ok(noId), { tolerant: true }), [
    "body must have required property 'apiKeyId'",
  ]);
});

Deno.test("the validator refuses a serverUtc that is not UTC with milliseconds", () => {
  for (
    const serverUtc of [
      "2026-01-15T09:30:00.123+01:00",
      "2026-01-15T09:30:00Z",
      "2026-01-15 09:30:00.123Z",
      "yesterday",
    ]
  ) {
    const problems = responseProblems(
      { method: "GET", path: CONNECTION },
      ok({ ...GOOD_STATUS, serverUtc }),
    );
    assert.ok(
      problems.some((p) => p.startsWith("body/serverUtc ")),
      `${serverUtc}: ${problems}`,
    );
  }
});

Deno.test("the validator refuses a missing field, a zero id and a bad e-mail", () => {
  const { email: _, ...noEmail } = GOOD_STATUS;
  assert.deepEqual(
    responseProblems({ method: "GET", path: CONNECTION }, ok(noEmail)),
    ["body must have required property 'email'"],
  );
  assert.deepEqual(
    responseProblems(
      { method: "GET", path: CONNECTION },
      ok({ ...GOOD_STATUS, apiKeyId: 0, email: "not an address" }),
    ),
    ["body/apiKeyId must be >= 1", 'body/email must match format "email"'],
  );
});

Deno.test("the validator refuses a 401 with a body or without its headers", () => {
  assert.deepEqual(
    responseProblems({ method: "GET", path: CONNECTION }, {
      status: 401,
      headers: { "cache-control": "no-store" },
      body: '{"error":"revoked"}',
    }),
    [
      "header WWW-Authenticate is missing",
      "header X-Content-Type-Options is missing",
      "body must be empty, got 19 characters",
    ],
  );
});

Deno.test("the validator refuses undocumented statuses and bad Retry-After values", () => {
  assert.deepEqual(
    responseProblems({ method: "GET", path: CONNECTION }, {
      status: 502,
      headers: COMMON,
      body: "",
    }),
    [
      "status 502 is not documented for GET /api/v1/integration/connection (documented: 200, 400, 401, 429, 500, 503)",
    ],
  );
  assert.deepEqual(
    responseProblems({ method: "GET", path: CONNECTION }, {
      status: 503,
      headers: {
        ...COMMON,
        "content-type": "application/json",
        "retry-after": "soon",
      },
      body: '{"error":"unavailable","message":"retry later"}',
    }),
    ['header Retry-After "soon" must be integer'],
  );
  assert.deepEqual(
    responseProblems({ method: "GET", path: "/api/v1/elsewhere" }, {
      status: 200,
      headers: { ...COMMON, "content-type": "application/json" },
      body: "{}",
    }),
    [
      "status 200 is not documented for GET /api/v1/elsewhere, a path openapi.json does not list (documented: 400, 404, 429, 500)",
    ],
  );
});

Deno.test("the validator refuses a 405 without Allow and a body on HEAD", () => {
  assert.deepEqual(
    responseProblems({ method: "PUT", path: CONNECTION }, {
      status: 405,
      headers: { ...COMMON, "content-type": "application/json" },
      body: '{"error":"method_not_allowed","message":"use GET"}',
    }),
    ["header Allow is missing"],
  );
  assert.deepEqual(
    responseProblems({ method: "HEAD", path: CONNECTION }, ok(GOOD_STATUS)),
    [`body must be empty, got ${
      JSON.stringify(GOOD_STATUS).length
    } characters`],
  );
});
