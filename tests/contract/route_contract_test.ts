/**
 * The route table and openapi.json say the same: the committed document is
 * the one `deno task contract` generates from the table, and, read on its
 * own, it lists the table's paths, methods, key requirement and statuses,
 * which the router, serving the same table, answers. Each kind of
 * disagreement is shown to fail.
 */

import assert from "node:assert/strict";
import {
  ContractError,
  type DocumentedRoute,
  METHODS,
  openApiDocument,
} from "../../lib/http/contract.ts";
import type { Authenticator } from "../../lib/http/authenticate.ts";
import { json, unauthorized } from "../../lib/http/responses.ts";
import { createRouter } from "../../lib/http/router.ts";
import { documentedRoutes } from "../../lib/routes/table.ts";
import { contractText, OPENAPI_FILE } from "../../scripts/contract.ts";
import { serveInfo } from "../support/http.ts";

interface Operation {
  security?: unknown[];
  responses: Record<string, unknown>;
}
type Document = {
  security: unknown[];
  paths: Record<string, Record<string, Operation | string>>;
};

const committed = (): Document =>
  JSON.parse(Deno.readTextFileSync(OPENAPI_FILE));

/** The committed document with one path only, for a table of that route. */
function onlyPath(path: string): Document {
  const document = committed();
  return { ...document, paths: { [path]: document.paths[path] } };
}

// What the router answers around any handler, whatever the route
// (lib/http/router.ts): a key in the URL, a lock-out, a failure; and behind
// the API-key step a refused key and an unreadable store.
const ROUTER = [400, 429, 500];
const API_KEY_STEP = [401, 503];

/** Every way the document and the table disagree; empty when they agree. */
function disagreements(
  routes: readonly DocumentedRoute[],
  document: Document,
): string[] {
  const found: string[] = [];
  const listed = new Set(Object.keys(document.paths));
  for (const path of listed) {
    if (!routes.some((route) => route.path === path)) {
      found.push(`${path} is in openapi.json but not in the route table`);
    }
  }
  for (const route of routes) {
    const item = document.paths[route.path];
    if (item === undefined) {
      found.push(`${route.path} is in the route table but not in openapi.json`);
      continue;
    }
    const answered = METHODS.filter((method) => route.methods[method]);
    const expected = new Map<string, { key: boolean; statuses: number[] }>();
    const keyed = route.auth === "api_key";
    for (const method of answered) {
      const own = Object.keys(route.contract.operations[method]!.responses)
        .map(Number);
      const statuses = [...own, ...ROUTER, ...(keyed ? API_KEY_STEP : [])];
      expected.set(method, { key: keyed, statuses });
      if (method === "GET") expected.set("HEAD", { key: keyed, statuses });
    }
    expected.set("OPTIONS", { key: false, statuses: [204, ...ROUTER] });
    for (const method of METHODS.filter((m) => !answered.includes(m))) {
      expected.set(method, { key: false, statuses: [405, ...ROUTER] });
    }
    const operations = Object.keys(item).filter((k) =>
      !["summary", "description"].includes(k)
    ).map((k) => k.toUpperCase());
    const methods = [...expected.keys()];
    if (sorted(operations).join() !== sorted(methods).join()) {
      found.push(
        `${route.path}: openapi.json lists ${
          sorted(operations)
        }, the route table ${sorted(methods)}`,
      );
    }
    for (const [method, { key, statuses }] of expected) {
      const operation = item[method.toLowerCase()];
      if (typeof operation !== "object") continue;
      const security = operation.security ?? document.security;
      const requiresKey = security.length > 0 &&
        security.every((option) => Object.keys(option as object).length > 0);
      if (requiresKey !== key) {
        found.push(
          `${method} ${route.path}: openapi.json ${
            requiresKey ? "requires" : "does not require"
          } a key, the route table ${key ? "does" : "does not"}`,
        );
      }
      const documented = sorted(Object.keys(operation.responses).map(Number));
      if (documented.join() !== sorted(statuses).join()) {
        found.push(
          `${method} ${route.path}: openapi.json documents ${documented}, the route table and router answer ${
            sorted(statuses)
          }`,
        );
      }
    }
  }
  return found;
}

function sorted<T extends string | number>(values: T[]): T[] {
  return [...values].sort((a, b) => a < b ? -1 : a > b ? 1 : 0);
}

Deno.test("openapi.json is the document deno task contract generates from the route table", () => {
  assert.ok(
    Deno.readTextFileSync(OPENAPI_FILE) === contractText(),
    "openapi.json differs from the route table: run deno task contract and commit it",
  );
});

Deno.test("openapi.json lists the route table's paths, methods, key requirement and statuses", () => {
  const routes = documentedRoutes();
  assert.ok(routes.length >= 4, "the table was read");
  assert.deepEqual(disagreements(routes, committed()), []);
});

Deno.test("the parity check fails on a path, a method, a key requirement or a status the two do not share", () => {
  const routes = documentedRoutes();
  const [connection] = routes;
  const added: DocumentedRoute = {
    ...connection,
    path: "/api/v1/not-in-openapi",
  };
  assert.deepEqual(disagreements([...routes, added], committed()), [
    "/api/v1/not-in-openapi is in the route table but not in openapi.json",
  ]);
  assert.deepEqual(disagreements(routes.slice(1), committed()), [
    `${connection.path} is in openapi.json but not in the route table`,
  ]);

  const get = connection.contract.operations.GET!;
  const withPost = {
    ...connection,
    methods: { ...connection.methods, POST: () => json(200, {}) },
    contract: {
      ...connection.contract,
      operations: { GET: get, POST: { ...get, operationId: "post" } },
    },
  } as DocumentedRoute;
  assert.deepEqual(disagreements([withPost], onlyPath(connection.path)), [
    `POST ${connection.path}: openapi.json does not require a key, the route table does`,
    `POST ${connection.path}: openapi.json documents 400,405,429,500, the route table and router answer 200,400,401,429,500,503`,
  ]);

  const open = { ...connection, auth: "none" } as DocumentedRoute;
  const openProblems = disagreements([open], onlyPath(connection.path));
  assert.ok(
    openProblems.includes(
      `GET ${connection.path}: openapi.json requires a key, the route table does not`,
    ),
    openProblems.join("\n"),
  );

  const document = onlyPath(connection.path);
  delete (document.paths[connection.path].get as Operation).responses["503"];
  delete document.paths[connection.path].delete;
  assert.deepEqual(
    disagreements([connection], document),
    [
      `${connection.path}: openapi.json lists GET,HEAD,OPTIONS,PATCH,POST,PUT, the route table DELETE,GET,HEAD,OPTIONS,PATCH,POST,PUT`,
      `GET ${connection.path}: openapi.json documents 200,400,401,429,500, the route table and router answer 200,400,401,429,500,503`,
    ],
  );
});

Deno.test("the router serving the table answers as openapi.json says: Allow on OPTIONS, 405 on the refused methods, the key asked for on the secured operations only", async () => {
  const asked: string[] = [];
  const authenticator: Authenticator = {
    check: (_request, { route }) => {
      asked.push(route);
      return Promise.resolve({ ok: false, response: unauthorized() });
    },
    refuseKeyInUrl: () => {
      throw new Error("no key is sent in a URL here");
    },
  };
  const handler = createRouter(documentedRoutes(), { authenticator });
  const document = committed();
  for (const [path, item] of Object.entries(document.paths)) {
    const call = (method: string) =>
      handler(
        new Request(`http://localhost${path}`, { method }),
        serveInfo(),
      );
    const operations = Object.entries(item).filter((
      [, operation],
    ) => typeof operation === "object") as [string, Operation][];
    const answers = operations.filter(([, operation]) =>
      !("405" in operation.responses)
    ).map(([method]) => method.toUpperCase());
    const options = await call("OPTIONS");
    assert.equal(options.status, 204, path);
    assert.deepEqual(
      sorted(options.headers.get("allow")!.split(", ")),
      sorted(answers),
      `OPTIONS ${path}`,
    );
    for (const [method, operation] of operations) {
      if (!("405" in operation.responses)) continue;
      const response = await call(method.toUpperCase());
      await response.body?.cancel();
      assert.equal(response.status, 405, `${method} ${path}`);
    }
    const secured = (item.get as Operation).security === undefined;
    const before = asked.length;
    await (await call("GET")).body?.cancel();
    assert.equal(asked.length - before, secured ? 1 : 0, `GET ${path}`);
  }
});

Deno.test("a route whose handlers and contract name different methods, or two contracts that reuse a name, make no document", () => {
  const [connection] = documentedRoutes();
  const noContract = {
    ...connection,
    methods: { ...connection.methods, DELETE: () => json(200, {}) },
  } as DocumentedRoute;
  assert.throws(
    () => openApiDocument([noContract]),
    (error) =>
      error instanceof ContractError && error.code === "operation_mismatch",
  );
  const reused: DocumentedRoute = {
    ...connection,
    path: "/api/v1/integration/other",
    contract: {
      ...connection.contract,
      name: "Other",
      operations: {
        GET: {
          ...connection.contract.operations.GET!,
          operationId: "other",
          responses: {
            200: { name: "Connected", description: "Something else" },
          },
        },
      },
    },
  };
  assert.throws(
    () => openApiDocument([connection, reused]),
    (error) => error instanceof ContractError && error.code === "name_taken",
  );
});
