/**
 * The HTTP handler: routes and responses. A plain function of
 * `(request, info)` so that tests call it without a socket and `main.ts` only
 * hands it to `Deno.serve`.
 *
 * @module
 */

import { API_KEY_HEADER, authenticate } from "./auth.ts";
import { type KeyStore, StoreUnavailableError } from "./store.ts";

/** The connection-check route of spec section 4.1. */
export const CONNECTION_PATH = "/api/v1/integration/connection";

/** A `Deno.serve` handler. */
export type Handler = (
  request: Request,
  info: Deno.ServeHandlerInfo,
) => Promise<Response>;

/** Options of {@linkcode createHandler}. */
export interface HandlerOptions {
  /** The server clock; tests pin it. */
  now?: () => Date;
  /** Seconds a caller should wait after a 503. */
  retryAfterSeconds?: number;
}

/** The body of a successful connection check (spec section 2.1). */
export interface ConnectionStatus {
  connected: true;
  authenticatedByApiKey: true;
  apiKeyId: number;
  email: string;
  serverUtc: string;
}

// Sent on every response: nothing here may be cached by a proxy or sniffed by a browser.
const COMMON_HEADERS = {
  "cache-control": "no-store",
  "x-content-type-options": "nosniff",
} as const;

const ROUTE_METHODS = "GET, HEAD";

/** Builds the handler over a store. */
export function createHandler(
  store: KeyStore,
  options: HandlerOptions = {},
): Handler {
  const now = options.now ?? (() => new Date());
  const retryAfter = String(options.retryAfterSeconds ?? 5);

  return async function handle(request) {
    const path = new URL(request.url).pathname;
    if (path !== CONNECTION_PATH) {
      return json(404, { error: "not_found", message: "no such route" });
    }
    if (request.method !== "GET" && request.method !== "HEAD") {
      return json(405, {
        error: "method_not_allowed",
        message: `use ${ROUTE_METHODS}`,
      }, { allow: ROUTE_METHODS });
    }
    try {
      const result = await authenticate(
        store,
        request.headers.get(API_KEY_HEADER),
      );
      if (!result.ok) return unauthorized();
      const status: ConnectionStatus = {
        connected: true,
        authenticatedByApiKey: true,
        apiKeyId: result.record.id,
        email: result.record.email,
        serverUtc: now().toISOString(),
      };
      return json(200, status);
    } catch (error) {
      if (!(error instanceof StoreUnavailableError)) throw error;
      // Never 401 here: a 401 tells the integrator to throw its key away.
      return json(503, {
        error: "unavailable",
        message: "the key store cannot be read; retry later",
      }, { "retry-after": retryAfter });
    }
  };
}

/**
 * The one 401: same status, headers and (empty) body whatever the reason, so a
 * revoked key cannot be told from one that never existed.
 */
function unauthorized(): Response {
  return new Response(null, {
    status: 401,
    headers: {
      ...COMMON_HEADERS,
      "www-authenticate":
        `ApiKey realm="integration", header="${API_KEY_HEADER}"`,
    },
  });
}

function json(
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: {
      ...COMMON_HEADERS,
      "content-type": "application/json",
      ...headers,
    },
  });
}
