/**
 * Every response the HTTP layer builds, each beside its entry in the contract.
 *
 * @module
 */

import type { Schema } from "./schema.ts";

/** The header that carries the key: the only place a key may travel. */
export const API_KEY_HEADER = "X-API-Key";

// Sent on every response: nothing here may be cached by a proxy or sniffed by a browser.
const COMMON_HEADERS = {
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
} as const;

const JSON_HEADERS = {
  ...COMMON_HEADERS,
  "content-type": "application/json",
} as const;

export function json(
  status: number,
  body: unknown,
  headers?: Record<string, string>,
): Response {
  return new Response(JSON.stringify(body), {
    status,
    // Built once: this is every successful answer's path.
    headers: headers === undefined
      ? JSON_HEADERS
      : { ...JSON_HEADERS, ...headers },
  });
}

export function jsonText(body: string): Response {
  return new Response(body, { headers: JSON_HEADERS });
}

/** The one 401, identical whatever the reason: a revoked key can't be told from an unknown one. */
export function unauthorized(): Response {
  return new Response(null, {
    status: 401,
    headers: {
      ...COMMON_HEADERS,
      "www-authenticate":
        `ApiKey realm="integration", header="${API_KEY_HEADER}"`,
    },
  });
}

export function lockedOut(retryAfterSeconds: number): Response {
  return json(429, LOCKED_OUT_BODY, {
    "retry-after": String(retryAfterSeconds),
  });
}

/** Told apart from the lock-out's 429 by its code. */
export function rateLimited(
  retryAfterSeconds: number,
  headers: readonly [string, string][],
): Response {
  return withFields(
    json(429, RATE_LIMITED_BODY, {
      "retry-after": String(retryAfterSeconds),
    }),
    headers,
  );
}

/** `response` with `fields` set on it: no copy of the response. */
export function withFields(
  response: Response,
  fields: readonly [string, string][],
): Response {
  for (const [name, value] of fields) response.headers.set(name, value);
  return response;
}

export function keyInUrl(): Response {
  return json(400, KEY_IN_URL_BODY);
}

/** A body the operation cannot take; `message` says what it must be, never what it held. */
export function invalidBody(message: string): Response {
  return json(400, { error: "invalid_body", message });
}

export function notFound(): Response {
  return json(404, NOT_FOUND_BODY);
}

export function methodNotAllowed(allow: string): Response {
  return json(405, {
    error: "method_not_allowed",
    message: `Use ${allow}`,
  }, { allow });
}

export function options(allow: string): Response {
  return new Response(null, {
    status: 204,
    headers: { ...COMMON_HEADERS, allow },
  });
}

/** 503 when the store cannot be read: never a 401, which would condemn the key. */
export function storeUnavailable(retryAfterSeconds: number): Response {
  return json(503, UNAVAILABLE_BODY, {
    "retry-after": String(retryAfterSeconds),
  });
}

export function internalError(): Response {
  return json(500, INTERNAL_BODY);
}

// The bodies, shared by the answers above and the contract's examples below.
const LOCKED_OUT_BODY = {
  error: "locked_out",
  message:
    "Too many failed authentications from this address; fix the key, then retry after Retry-After seconds",
};
const RATE_LIMITED_BODY = {
  error: "rate_limited",
  message:
    "This key has made as many requests as its rate limit allows; the key is fine: retry after Retry-After seconds, and pace calls by the RateLimit header",
};
const KEY_IN_URL_BODY = {
  error: "key_in_url",
  message:
    `Send the key in the ${API_KEY_HEADER} header, never in the URL, where proxies and logs keep it`,
};
const NOT_FOUND_BODY = { error: "not_found", message: "No such route" };
const UNAVAILABLE_BODY = {
  error: "unavailable",
  message: "The key store cannot be read; retry later, the key is not at fault",
};
const INTERNAL_BODY = {
  error: "internal",
  message: "The request failed on the server; retry later",
};

/** Beyond the common ones. */
type DocumentedHeader =
  | "Retry-After"
  | "Allow"
  | "WWW-Authenticate"
  | "RateLimit-Policy"
  | "RateLimit";

/**
 * One answer as the contract describes it: `openapi.json` has it under
 * `components/responses/NAME`, and a bodied one's HEAD twin as `NAMEHead`.
 */
export interface ResponseContract {
  name: string;
  /** What it means and what the client should do about it. */
  description: string;
  headers?: readonly DocumentedHeader[];
  /** Its schema is named under `components/schemas`. */
  body?: {
    name: string;
    schema: Schema;
    examples?: Record<string, { summary?: string; value: unknown }>;
  };
}

const ERROR_SCHEMA = {
  type: "object",
  description:
    "The body of an error answer. Fields may be added in later versions: ignore the ones you do not know.",
  required: ["error", "message"],
  properties: {
    error: {
      type: "string",
      pattern: "^[a-z][a-z0-9_]*$",
      description:
        "Machine-readable code, stable across versions: branch on it",
      examples: ["not_found"],
    },
    message: {
      type: "string",
      description:
        "Human-readable explanation, for logs; its wording may change",
    },
  },
} as const satisfies Schema;

const KEY_IN_URL_SCHEMA = {
  type: "object",
  description:
    "The body of the answer to a request that carried a credential in its URL",
  required: ["error", "message"],
  properties: {
    error: { type: "string", const: "key_in_url" },
    message: {
      type: "string",
      description: "Human-readable explanation, for logs",
    },
  },
} as const satisfies Schema;

const error = (name: string, value: unknown) => ({
  name: "Error",
  schema: ERROR_SCHEMA,
  examples: { [name]: { value } },
});

/** The contract of every answer above: the router's part of `openapi.json`. */
export const DOCUMENTED = {
  unauthorized: {
    name: "Unauthorized",
    description:
      "The key is missing, malformed, unknown or revoked. The answer is the same whatever the reason and the body is empty: there is nothing to interpret. A generated client therefore gets no error object: branch on the status (401), never on the body.\n\nDo not retry: the same key will keep failing, and retrying in a loop leads to lock-out (429). Check that the key is sent in the `X-API-Key` header exactly as it was shown at generation, otherwise ask the installation's administrator to revoke it and generate a replacement, which takes seconds.",
    headers: ["WWW-Authenticate"],
  },
  keyInUrl: {
    name: "KeyInUrl",
    description:
      "The URL (its authority, path or query string) carries a credential, such as an API key. The request was refused without being looked at further; every path answers so, listed or not.\n\nSend the key in the `X-API-Key` header only. A key that has been in a URL may sit in proxy and server logs: have it revoked and use a new one.",
    body: {
      name: "KeyInUrlError",
      schema: KEY_IN_URL_SCHEMA,
      examples: { keyInUrl: { value: KEY_IN_URL_BODY } },
    },
  },
  lockedOut: {
    name: "TooManyRequests",
    description:
      "Too many requests from this caller. Wait the number of seconds in `Retry-After` before the next request. Branch on the body's `error`:\n\n- `locked_out`: too many failed authentications from one address lock it out for a while. If it follows a series of 401 answers, the key is the problem: fix or replace it rather than retry, or the lock-out starts again.\n- `rate_limited`: the key is valid and has used its rate limit (`RateLimit-Policy`), shared by every server of the installation. Nothing is wrong with the key and nothing counts toward a lock-out: wait `Retry-After` seconds, and pace calls by the `RateLimit` header so that this answer does not come again. This answer carries `RateLimit-Policy` and `RateLimit`; the lock-out's does not.",
    headers: ["Retry-After", "RateLimit-Policy", "RateLimit"],
    body: {
      name: "Error",
      schema: ERROR_SCHEMA,
      examples: {
        lockedOut: {
          summary: "Locked out after repeated failed keys",
          value: LOCKED_OUT_BODY,
        },
        rateLimited: {
          summary: "A valid key past its rate limit",
          value: RATE_LIMITED_BODY,
        },
      },
    },
  },
  badRequest: {
    name: "BadRequest",
    description:
      "The request was refused without being acted on. Branch on the body's `error`:\n\n- `invalid_body`: the body is not what the operation takes (its media type, size, encoding or shape); `message` says what it must be. Fix the request rather than retry it as it is.\n- `key_in_url`: the URL (its authority, path or query string) carries a credential, such as an API key. Send the key in the `X-API-Key` header only; a key that has been in a URL may sit in proxy and server logs: have it revoked and use a new one.",
    body: {
      name: "Error",
      schema: ERROR_SCHEMA,
      examples: {
        invalidBody: {
          summary: "A body the operation cannot take",
          value: {
            error: "invalid_body",
            message: "Send a JSON list of at most 100 strings",
          },
        },
        keyInUrl: { summary: "A key in the URL", value: KEY_IN_URL_BODY },
      },
    },
  },
  notFound: {
    name: "NotFound",
    description:
      "No such path. Check the base URL: it ends before `/api/v1`. Every path that is not listed in this document answers so, whatever the method (see `x-unrouted-responses`).",
    body: error("notFound", NOT_FOUND_BODY),
  },
  methodNotAllowed: {
    name: "MethodNotAllowed",
    description:
      "The path does not answer this method; `Allow` lists those it does. Needs no key: the method is checked before the key.",
    headers: ["Allow"],
    body: error("methodNotAllowed", {
      error: "method_not_allowed",
      message: "Use GET, HEAD, OPTIONS",
    }),
  },
  options: {
    name: "Options",
    description:
      "No body; `Allow` lists the methods of the path. Needs no key.",
    headers: ["Allow"],
  },
  storeUnavailable: {
    name: "ServiceUnavailable",
    description:
      "The service cannot check keys right now, for instance because its key store cannot be read. Your key is not in question: keep it, and retry after the number of seconds in `Retry-After`.",
    headers: ["Retry-After"],
    body: error("unavailable", UNAVAILABLE_BODY),
  },
  internalError: {
    name: "InternalError",
    description:
      "The request failed on the server for an unexpected reason. Retry later; if it persists, report it to the installation's administrator with the `X-Request-Id`.",
    body: error("internal", INTERNAL_BODY),
  },
} satisfies Record<string, ResponseContract>;
