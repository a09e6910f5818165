/**
 * Every response the HTTP layer builds, so that their headers and bodies
 * are written once: the public error shapes of the API live here.
 *
 * @module
 */

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

/** A JSON response with the common headers. */
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

/** A fixed JSON document, already serialised. */
export function jsonText(body: string): Response {
  return new Response(body, { headers: JSON_HEADERS });
}

/**
 * The one 401: same status, headers and (empty) body whatever the reason, so a
 * revoked key cannot be told from one that never existed.
 */
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

/** 429 for a locked-out client. */
export function lockedOut(retryAfterSeconds: number): Response {
  return json(429, {
    error: "locked_out",
    message:
      "Too many failed authentications from this address; fix the key, then retry after Retry-After seconds",
  }, { "retry-after": String(retryAfterSeconds) });
}

/** 400 for a credential in the URL. */
export function keyInUrl(): Response {
  return json(400, {
    error: "key_in_url",
    message:
      `Send the key in the ${API_KEY_HEADER} header, never in the URL, where proxies and logs keep it`,
  });
}

/** 404 for a path no route has. */
export function notFound(): Response {
  return json(404, { error: "not_found", message: "No such route" });
}

/** 405 with the methods the route does answer. */
export function methodNotAllowed(allow: string): Response {
  return json(405, {
    error: "method_not_allowed",
    message: `Use ${allow}`,
  }, { allow });
}

/** 204 to OPTIONS, with the methods the route answers. */
export function options(allow: string): Response {
  return new Response(null, {
    status: 204,
    headers: { ...COMMON_HEADERS, allow },
  });
}

/** 503 when the store cannot be read: never a 401, which would condemn the key. */
export function storeUnavailable(retryAfterSeconds: number): Response {
  return json(503, {
    error: "unavailable",
    message:
      "The key store cannot be read; retry later, the key is not at fault",
  }, { "retry-after": String(retryAfterSeconds) });
}

/** 500 for anything unexpected. */
export function internalError(): Response {
  return json(500, {
    error: "internal",
    message: "The request failed on the server; retry later",
  });
}
