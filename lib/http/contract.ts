/**
 * `openapi.json` from the route table (`deno task contract`). Routes declare
 * their own operations; what the router gives all (HEAD, OPTIONS, 405, 400,
 * 429, 500, 401, 503) is written once here; front matter: ./contract_base.json.
 *
 * @module
 */

import base from "./contract_base.json" with { type: "json" };
import { DOCUMENTED, type ResponseContract } from "./responses.ts";
import type { Methods, Route } from "./router.ts";
import type { Schema } from "./schema.ts";

export type Method = keyof Methods<never>;

/** The methods in the order `openapi.json` lists them. */
export const METHODS: readonly Method[] = [
  "GET",
  "POST",
  "PUT",
  "PATCH",
  "DELETE",
];

/** One operation a route answers, as the contract describes it. */
export interface OperationContract {
  operationId: string;
  summary: string;
  description: string;
  /** The JSON body it takes, if any: its 400 then also answers a body it cannot take. */
  requestBody?: RequestBodyContract;
  /** The router's answers are added to them. */
  responses: Record<number, ResponseContract>;
}

/** A required `application/json` request body; its schema is named under `components/schemas`. */
export interface RequestBodyContract {
  description: string;
  name: string;
  schema: Schema | ListSchema;
  examples?: Record<string, { summary?: string; value: unknown }>;
}

/** What a route says about itself in `openapi.json`. */
export interface RouteContract {
  title: string;
  /** Within a sentence, such as "the connection check". */
  noun: string;
  /** The stem of derived operation ids: `head${name}`, `connectionOptions`. */
  name: string;
  tag: string;
  /** One entry per method of the route's `methods`, and no other. */
  operations: Partial<Record<Method, OperationContract>>;
}

/** A JSON list, as a request body may be (no answer is one). */
export interface ListSchema {
  readonly type: "array";
  readonly description?: string;
  readonly items: Schema;
  readonly maxItems?: number;
}

export type DocumentedRoute = Route & { contract: RouteContract };

/** The route table and its contract cannot be made into one document. */
export class ContractError extends Error {
  override name = "ContractError";
  readonly code:
    | "operation_mismatch"
    | "name_taken"
    | "status_taken"
    | "unknown_tag";

  constructor(code: ContractError["code"], message: string) {
    super(message);
    this.code = code;
  }
}

/** On every operation, before any handler runs. */
const ROUTER_RESPONSES: Readonly<Record<number, ResponseContract>> = {
  400: DOCUMENTED.keyInUrl,
  429: DOCUMENTED.lockedOut,
  500: DOCUMENTED.internalError,
};

const API_KEY_RESPONSES: Readonly<Record<number, ResponseContract>> = {
  401: DOCUMENTED.unauthorized,
  503: DOCUMENTED.storeUnavailable,
};

const HEAD_PREFIX =
  "As the answer to `GET`, with the same status and headers (`Content-Type: application/json` included) and no body. ";

const HEADER_COMPONENTS = {
  "Retry-After": "RetryAfter",
  "Allow": "Allow",
  "WWW-Authenticate": "WwwAuthenticate",
  "RateLimit-Policy": "RateLimitPolicy",
  "RateLimit": "RateLimit",
  "Cache-Control": "CacheControl",
  "X-Content-Type-Options": "ContentTypeOptions",
  "X-Request-Id": "RequestId",
} as const;

const COMMON_HEADERS = [
  "Cache-Control",
  "X-Content-Type-Options",
  "X-Request-Id",
] as const;

/** The whole OpenAPI 3.1 document of a route table, in the table's order. */
export function openApiDocument(
  routes: readonly DocumentedRoute[],
): Record<string, unknown> {
  const components = new Components();
  const operationIds = new Set<string>();
  const paths: Record<string, unknown> = {};
  for (const route of routes) {
    paths[route.path] = pathItem(route, components);
    for (const operation of Object.values(paths[route.path] as object)) {
      const id = (operation as { operationId?: string }).operationId;
      if (id === undefined) continue;
      if (operationIds.has(id)) {
        throw new ContractError(
          "name_taken",
          `operationId ${id} is used twice`,
        );
      }
      operationIds.add(id);
    }
  }
  const unrouted = {
    description:
      "What the service answers outside the operations listed under `paths`, which OpenAPI cannot list: 404 on every path that is not listed, whatever the method; 405 with `Allow` for a method a listed path does not list (such as `TRACE`); and on any path 400 when the URL carries a credential (429 instead while the client is locked out). Any answer may also be 500 on an unexpected failure.",
    unknownPath: components.inline(DOCUMENTED.notFound),
    unknownMethod: components.response(DOCUMENTED.methodNotAllowed),
    keyInUrl: components.response(DOCUMENTED.keyInUrl),
    lockedOut: components.response(DOCUMENTED.lockedOut),
    internalError: components.response(DOCUMENTED.internalError),
  };
  const { components: front, ...rest } = base;
  return {
    ...rest,
    paths,
    "x-unrouted-responses": unrouted,
    components: {
      ...front,
      responses: components.responses,
      schemas: components.schemas,
    },
  };
}

/** The statuses a route's operation documents: its own and the router's. */
function operationResponses(
  route: Route,
  operation: OperationContract,
): Record<number, ResponseContract> {
  let own = operation.responses;
  if (route.auth === "api_key") {
    // Every answer the route gives went through the API-key step, and
    // carries the key's rate limit when it has one.
    own = Object.fromEntries(
      Object.entries(own).map(([status, response]) => [status, {
        ...response,
        headers: [
          ...(response.headers ?? []),
          "RateLimit-Policy" as const,
          "RateLimit" as const,
        ],
      }]),
    );
  }
  // An operation that takes a body answers one it cannot take with the
  // router's 400, told apart by its code.
  const router = operation.requestBody === undefined
    ? ROUTER_RESPONSES
    : { ...ROUTER_RESPONSES, 400: DOCUMENTED.badRequest };
  const added = route.auth === "api_key"
    ? { ...router, ...API_KEY_RESPONSES }
    : router;
  for (const status of Object.keys(own)) {
    if (status in added) {
      throw new ContractError(
        "status_taken",
        `${route.path} documents ${status}, which the router answers there itself`,
      );
    }
  }
  return { ...own, ...added };
}

function pathItem(
  route: DocumentedRoute,
  components: Components,
): Record<string, unknown> {
  const { contract } = route;
  if (!base.tags.some((tag) => tag.name === contract.tag)) {
    throw new ContractError(
      "unknown_tag",
      `${route.path}: tag ${contract.tag} is not in lib/http/contract_base.json`,
    );
  }
  const answered = METHODS.filter((method) => route.methods[method]);
  for (const method of METHODS) {
    if (
      (route.methods[method] === undefined) !==
        (contract.operations[method] === undefined)
    ) {
      throw new ContractError(
        "operation_mismatch",
        `${route.path}: ${method} has a handler or a contract but not both`,
      );
    }
  }
  const refused = METHODS.filter((method) => !route.methods[method]);
  const allow = [
    ...Object.keys(route.methods),
    ...(route.methods.GET ? ["HEAD"] : []),
    "OPTIONS",
  ];
  const security = route.auth === "api_key" ? {} : { security: [] };
  const common = { tags: [contract.tag] };
  const lower = contract.name[0].toLowerCase() + contract.name.slice(1);
  const refs = (
    responses: Record<number, ResponseContract>,
    head = false,
  ) =>
    Object.fromEntries(
      Object.entries(responses).map((
        [status, response],
      ) => [status, components.response(response, head)]),
    );
  const item: Record<string, unknown> = {
    summary: contract.title,
    description: [
      ...(route.methods.GET
        ? ["`HEAD` answers as `GET` does, with no body"]
        : []),
      refused.length === 0
        ? "any other method answers 405"
        : `${sentence(refused)} ${
          refused.length === 1 ? "answers" : "answer"
        } 405, as does any other method`,
    ].join("; ") + ".",
  };
  for (const method of answered) {
    const operation = contract.operations[method]!;
    const responses = operationResponses(route, operation);
    const body = operation.requestBody;
    item[method.toLowerCase()] = {
      ...common,
      operationId: operation.operationId,
      summary: operation.summary,
      description: operation.description,
      ...security,
      ...(body === undefined ? {} : {
        requestBody: {
          description: body.description,
          required: true,
          content: {
            "application/json": {
              schema: components.schema(body.name, body.schema),
              ...(body.examples === undefined
                ? {}
                : { examples: body.examples }),
            },
          },
        },
      }),
      responses: refs(responses),
    };
    if (method !== "GET") continue;
    item.head = {
      ...common,
      operationId: `head${contract.name}`,
      summary: `${operation.summary}, without the body`,
      description:
        "Answers as `GET` does, with the same status and headers and no body.",
      ...security,
      responses: refs(responses, true),
    };
  }
  item.options = {
    ...common,
    operationId: `${lower}Options`,
    summary: `List the methods of ${contract.noun}`,
    security: [],
    responses: refs({ 204: DOCUMENTED.options, ...ROUTER_RESPONSES }),
  };
  for (const method of refused) {
    item[method.toLowerCase()] = {
      ...common,
      operationId: `${lower}${method[0]}${method.slice(1).toLowerCase()}`,
      summary:
        `Not answered: ${method} on ${contract.noun} is refused with 405`,
      description: `The path answers ${
        sentence(allow)
      } only; this operation is listed so that the 405 and its \`Allow\` header are part of the contract. Needs no key.`,
      security: [],
      responses: refs({
        405: DOCUMENTED.methodNotAllowed,
        ...ROUTER_RESPONSES,
      }),
    };
  }
  return item;
}

/** "`A`, `B` and `C`". */
function sentence(words: readonly string[]): string {
  const quoted = words.map((word) => `\`${word}\``);
  return quoted.length === 1
    ? quoted[0]
    : `${quoted.slice(0, -1).join(", ")} and ${quoted.at(-1)}`;
}

/** `components/responses` and `components/schemas`, filled as they are used. */
class Components {
  responses: Record<string, unknown> = {};
  schemas: Record<string, unknown> = {};

  /** A reference to the response, or its HEAD twin (no body), added once. */
  response(response: ResponseContract, head = false): { $ref: string } {
    const twin = head && response.body !== undefined;
    const name = twin ? `${response.name}Head` : response.name;
    this.#add(this.responses, name, this.inline(response, twin));
    return { $ref: `#/components/responses/${name}` };
  }

  inline(response: ResponseContract, head = false): Record<string, unknown> {
    const headers = [...(response.headers ?? []), ...COMMON_HEADERS];
    const rendered: Record<string, unknown> = {
      description: (head ? HEAD_PREFIX : "") + response.description,
      headers: Object.fromEntries(
        headers.map((header) => [header, {
          $ref: `#/components/headers/${HEADER_COMPONENTS[header]}`,
        }]),
      ),
    };
    const { body } = response;
    if (body !== undefined && !head) {
      rendered.content = {
        "application/json": {
          schema: this.schema(body.name, body.schema),
          ...(body.examples === undefined ? {} : { examples: body.examples }),
        },
      };
    }
    return rendered;
  }

  schema(name: string, schema: Schema | ListSchema): { $ref: string } {
    this.#add(this.schemas, name, schema);
    return { $ref: `#/components/schemas/${name}` };
  }

  #add(into: Record<string, unknown>, name: string, value: unknown): void {
    if (
      name in into && JSON.stringify(into[name]) !== JSON.stringify(value)
    ) {
      throw new ContractError(
        "name_taken",
        `Two different components are named ${name}; rename one`,
      );
    }
    into[name] = value;
  }
}
