/**
 * The HTTP layer's router (lib/http/router.ts) on its own, with a stand-in
 * for the API-key step: what every route gets without writing it (404, 405
 * with Allow, OPTIONS, HEAD, URL refusal, 503 or 500 for errors) and the one
 * log line each request leaves.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import type {
  AuthDecision,
  Authenticator,
} from "../../lib/http/authenticate.ts";
import { json, unauthorized } from "../../lib/http/responses.ts";
import { createRouter, type Route } from "../../lib/http/router.ts";
import type { RequestLogLine } from "../../lib/http/log.ts";
import { newRecord } from "../../lib/store/records.ts";
import { StoreUnavailableError } from "../../lib/store/errors.ts";
import { serveInfo } from "../support/http.ts";

const KEY = generateApiKey();
const RECORD = newRecord(7, {
  name: "erp",
  email: "ops@example.com",
  hash: KEY.hash,
  hint: KEY.hint,
}, new Date("2026-01-01T00:00:00Z"));

const outage = () =>
  new StoreUnavailableError("store_unavailable", "the database is down");

/** The router over a few routes, with an API-key step that knows one key. */
function setup(
  options: { checkThrows?: () => Error; answerAtOnce?: boolean } = {},
) {
  const seen = { checks: 0, refusals: [] as string[][], handled: 0 };
  const authenticator: Authenticator = {
    check(request) {
      seen.checks++;
      if (options.checkThrows) {
        if (options.answerAtOnce) throw options.checkThrows();
        return Promise.reject(options.checkThrows());
      }
      const decision: AuthDecision =
        request.headers.get("x-api-key") === KEY.key
          ? { ok: true, key: RECORD }
          : { ok: false, response: unauthorized() };
      // The real step answers at once from memory, later after a read.
      return options.answerAtOnce ? decision : Promise.resolve(decision);
    },
    refuseKeyInUrl(candidates) {
      seen.refusals.push(candidates);
      return json(400, { error: "key_in_url", message: "" });
    },
  };
  const routes: Route[] = [
    {
      path: "/private",
      auth: "api_key",
      methods: {
        GET: ({ key }) => {
          seen.handled++;
          return json(200, { id: key.id }, { "x-route": "private" });
        },
        DELETE: () => new Response(null, { status: 204 }),
      },
    },
    {
      path: "/public",
      auth: "none",
      methods: { GET: () => (seen.handled++, json(200, { open: true })) },
    },
    {
      path: "/outage",
      auth: "none",
      methods: {
        GET: () => {
          throw outage();
        },
      },
    },
    {
      path: "/immutable",
      auth: "none",
      // Its headers cannot take the request id.
      methods: { GET: () => Response.redirect("http://localhost/public") },
    },
    {
      path: "/failing-body",
      auth: "none",
      methods: {
        GET: () =>
          new Response(
            new ReadableStream({
              pull(controller) {
                controller.error(new RangeError("the body broke"));
              },
            }),
          ),
      },
    },
    {
      path: "/bug",
      auth: "none",
      methods: {
        GET: () => {
          throw new TypeError(`oops ${KEY.key}`);
        },
      },
    },
  ];
  const logged: Record<string, unknown>[] = [];
  const lines: RequestLogLine[] = [];
  const handler = createRouter(routes, {
    authenticator,
    retryAfterSeconds: 7,
    log: (fields) => logged.push(fields),
    logRequest: (line) => lines.push(line),
  });
  const call = (
    target: string,
    init: { method?: string; key?: string } = {},
  ) =>
    handler(
      new Request(`http://localhost${target}`, {
        method: init.method ?? "GET",
        headers: init.key === undefined ? {} : { "X-API-Key": init.key },
      }),
      serveInfo("192.0.2.5"),
    );
  return { call, seen, logged, lines };
}

Deno.test("an unknown path gets 404 without the key step", async () => {
  const t = setup();
  for (const path of ["/", "/privat", "/private/", "//private", "/PRIVATE"]) {
    const response = await t.call(path, { key: KEY.key });
    assert.equal(response.status, 404, path);
    assert.equal((await response.json()).error, "not_found");
  }
  assert.equal(t.seen.checks, 0);
});

Deno.test("a method a route lacks gets 405 with the route's Allow, without the key step", async () => {
  const t = setup();
  for (const method of ["POST", "PUT", "PATCH"]) {
    const response = await t.call("/private", { method, key: KEY.key });
    assert.equal(response.status, 405, method);
    assert.equal(response.headers.get("allow"), "GET, DELETE, HEAD, OPTIONS");
    await response.body?.cancel();
  }
  const other = await t.call("/public", { method: "DELETE" });
  assert.equal(other.headers.get("allow"), "GET, HEAD, OPTIONS");
  await other.body?.cancel();
  assert.equal(t.seen.checks, 0);
});

Deno.test("OPTIONS gets 204 with Allow and no body, without the key step", async () => {
  const t = setup();
  const response = await t.call("/private", { method: "OPTIONS" });
  assert.equal(response.status, 204);
  assert.equal(response.headers.get("allow"), "GET, DELETE, HEAD, OPTIONS");
  assert.equal(response.body, null);
  assert.equal(t.seen.checks, 0);
});

Deno.test("HEAD gets the GET's status and headers without its body, behind the same key step", async () => {
  const t = setup();
  const head = await t.call("/private", { method: "HEAD", key: KEY.key });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get("x-route"), "private");
  assert.equal(head.headers.get("content-type"), "application/json");
  assert.equal(head.body, null);
  const refused = await t.call("/private", { method: "HEAD" });
  assert.equal(refused.status, 401);
  assert.equal(t.seen.checks, 2);
});

Deno.test("an authenticated route runs only when the key step lets the request through", async () => {
  const t = setup();
  const refused = await t.call("/private", { key: "wrong" });
  assert.equal(refused.status, 401);
  assert.equal(t.seen.handled, 0);
  const ok = await t.call("/private", { key: KEY.key });
  assert.deepEqual(await ok.json(), { id: 7 });
  assert.equal(t.seen.handled, 1);
  assert.equal(t.lines.at(-1)?.apiKeyId, 7);
  assert.equal(t.lines[0].apiKeyId, undefined, "none for a refused request");
});

Deno.test("a key in the URL is refused on every path, known or not, before any route or key step runs", async () => {
  const t = setup();
  for (
    const target of [
      `/private?api_key=${KEY.key}`,
      `/public/${KEY.key}`,
      `/nowhere?x=${KEY.key.replace("_", "%5F")}`,
    ]
  ) {
    const response = await t.call(target, { key: KEY.key });
    assert.equal(response.status, 400, target);
    await response.body?.cancel();
  }
  assert.deepEqual(t.seen.refusals, [[KEY.key], [KEY.key], [KEY.key]]);
  assert.equal(t.seen.checks, 0);
  assert.equal(t.seen.handled, 0);
});

Deno.test("a store that cannot be read gets 503 with Retry-After, never 401, from the key step or the route", async () => {
  const failing = setup({ checkThrows: outage });
  const fromStep = await failing.call("/private", { key: KEY.key });
  assert.equal(fromStep.status, 503);
  assert.equal(fromStep.headers.get("retry-after"), "7");
  assert.equal((await fromStep.json()).error, "unavailable");
  const fromRoute = await setup().call("/outage");
  assert.equal(fromRoute.status, 503);
  assert.equal(fromRoute.headers.get("retry-after"), "7");
  await fromRoute.body?.cancel();
  assert.deepEqual(failing.logged, [], "an outage is not a bug");
});

Deno.test("any other error gets 500 and one log line naming the error's class, not its message", async () => {
  const t = setup();
  const response = await t.call("/bug");
  assert.equal(response.status, 500);
  assert.equal((await response.json()).error, "internal");
  assert.deepEqual(t.logged, [{
    msg: "error",
    path: "/bug",
    error: "TypeError",
  }]);
  const step = setup({ checkThrows: () => new RangeError("x") });
  const fromStep = await step.call("/private", { key: KEY.key });
  assert.equal(fromStep.status, 500);
  await fromStep.body?.cancel();
});

Deno.test("each request gets one log line and an x-request-id that names it, each id its own", async () => {
  const t = setup();
  const responses = [
    await t.call("/public"),
    await t.call("/private", { key: KEY.key }),
    await t.call("/nowhere"),
    await t.call("/private", { method: "POST" }),
  ];
  assert.equal(t.lines.length, responses.length);
  const ids = responses.map((r) => r.headers.get("x-request-id"));
  assert.deepEqual(ids, t.lines.map((line) => line.requestId));
  assert.equal(new Set(ids).size, ids.length);
  assert.deepEqual(
    t.lines.map(({ method, path, status, client }) => [
      method,
      path,
      status,
      client,
    ]),
    [
      ["GET", "/public", 200, "192.0.2.5"],
      ["GET", "/private", 200, "192.0.2.5"],
      ["GET", "/nowhere", 404, "192.0.2.5"],
      ["POST", "/private", 405, "192.0.2.5"],
    ],
  );
  for (const line of t.lines) assert.ok(line.durationMs >= 0);
});

Deno.test("no log line holds a key: not from the header, the path, the query or the method", async () => {
  const t = setup();
  await t.call("/private", { key: KEY.key });
  await t.call(`/private/${KEY.key}`);
  await t.call(`/${escapeTwice(KEY.key)}`);
  await t.call(`/private?token=${KEY.key}`);
  await t.call("/private", { method: KEY.key });
  await t.call(`/bug`);
  const text = JSON.stringify([t.lines, t.logged]);
  assert.ok(!text.includes(KEY.key.slice(4, 24)), text);
  assert.ok(!/isk(_|%)/i.test(text), text);
  assert.equal(t.lines.length, 6);
  assert.equal(t.lines[4].method, "[other]");
});

function escapeTwice(key: string): string {
  return key.replace("_", "%255F");
}

Deno.test("an answer the router cannot finish gets its logged 500 with a request id, never the runtime's bare 500", async () => {
  const t = setup();
  for (
    const [path, method] of [
      ["/immutable", "GET"],
      ["/immutable", "HEAD"],
      ["/failing-body", "HEAD"],
    ]
  ) {
    const response = await t.call(path, { method });
    assert.equal(response.status, 500, `${method} ${path}`);
    assert.ok(response.headers.get("x-request-id"), `${method} ${path}`);
    await response.body?.cancel();
  }
  assert.deepEqual(t.lines.map((line) => line.status), [500, 500, 500]);
  assert.deepEqual(t.logged.map((line) => line.error), [
    "TypeError",
    "TypeError",
    "RangeError",
  ]);
});

Deno.test("a key step that answers at once and one that answers later lead to the same answers, errors included", async () => {
  const answers = async (answerAtOnce: boolean) => {
    const out: unknown[] = [];
    const t = setup({ answerAtOnce });
    for (const key of [KEY.key, "wrong", undefined]) {
      for (const method of ["GET", "HEAD"]) {
        const response = await t.call("/private", { method, key });
        out.push([
          method,
          key === KEY.key,
          response.status,
          await response.text(),
        ]);
      }
    }
    const down = setup({ answerAtOnce, checkThrows: outage });
    const refused = await down.call("/private", { key: KEY.key });
    out.push(refused.status, refused.headers.get("retry-after"));
    await refused.body?.cancel();
    out.push(t.lines.map((line) => [line.status, line.apiKeyId ?? null]));
    return out;
  };
  assert.deepEqual(await answers(true), await answers(false));
});
