/**
 * The HTTP layer: a route table and what every route gets without writing
 * it. In order, for each request:
 *
 * 1. the client's address (the TCP peer, or a trusted proxy's word);
 * 2. a credential anywhere in the URL: 400 on every path, and any valid key
 *    found there marked exposed;
 * 3. the route: 404 for an unknown path; 405 with `Allow`, 204 to OPTIONS,
 *    HEAD answered by GET;
 * 4. for an authenticated route, the API-key step (./authenticate.ts):
 *    the route runs only with a key valid at that moment;
 * 5. errors: 503 when the store cannot be read (never 401), 500 otherwise;
 * 6. on HEAD, any answer (refusals and errors too) without its body but
 *    with the GET's length;
 * 7. the request's log line, its id header and its telemetry.
 *
 * Adding an authenticated route is one entry in the table.
 *
 * @module
 */

import { Turns } from "./_turns.ts";
import { clientAddress } from "../net/client_address.ts";
import type { Cidr } from "../net/ip.ts";
import type { RequestLogLine } from "./log.ts";
import { StoreUnavailableError } from "../store/errors.ts";
import type { KeyRecord } from "../store/types.ts";
import { annotateRequest } from "./telemetry.ts";
import type { Authenticator } from "./authenticate.ts";
import {
  internalError,
  methodNotAllowed,
  notFound,
  options as optionsResponse,
  storeUnavailable,
} from "./responses.ts";
import {
  keysInUrl,
  loggablePath,
  urlCarriesCredential,
} from "./url_credentials.ts";

/** What every route handler receives. */
export interface RequestContext {
  request: Request;
  /** The client's address, as lock-out and the log know it. */
  client: string;
}

/** What a handler behind the API-key step receives. */
export interface AuthenticatedContext extends RequestContext {
  /** The record of the key that authenticated the request, valid when checked. */
  key: KeyRecord;
}

/** The methods a route answers; HEAD and OPTIONS come with them. */
export type Methods<C> = Partial<
  Record<
    "GET" | "POST" | "PUT" | "PATCH" | "DELETE",
    (context: C) => Response | Promise<Response>
  >
>;

/** One entry of the route table. */
export type Route =
  | { path: string; auth: "api_key"; methods: Methods<AuthenticatedContext> }
  | { path: string; auth: "none"; methods: Methods<RequestContext> };

/** Options of {@linkcode createRouter}. */
export interface RouterOptions {
  /** The API-key step, for routes with `auth: "api_key"` and for exposure marks. */
  authenticator: Authenticator;
  /** Proxies whose X-Forwarded-For entries are believed; default none. */
  trustedProxies?: readonly Cidr[];
  /** Seconds a caller should wait after a 503. */
  retryAfterSeconds?: number;
  /** Receives one line per notable event (an unexpected error). */
  log?: (fields: Record<string, unknown>) => void;
  /** Receives one line per request. */
  logRequest?: (line: RequestLogLine) => void;
}

/** A `Deno.serve` handler. */
export type Handler = (
  request: Request,
  info: Deno.ServeHandlerInfo,
) => Promise<Response>;

interface Entry {
  route: Route;
  allow: string;
}

/** Builds the handler that serves the route table. */
export function createRouter(
  routes: readonly Route[],
  options: RouterOptions,
): Handler {
  const table = new Map<string, Entry>();
  for (const route of routes) {
    const methods = Object.keys(route.methods);
    if (methods.includes("GET")) methods.push("HEAD");
    table.set(route.path, {
      route,
      allow: [...methods, "OPTIONS"].join(", "),
    });
  }
  const { authenticator, log, logRequest } = options;
  // Logged as they are; any other path only when it cannot hold a key.
  const loggable = { routes: new Set(table.keys()) };
  const proxies = { trustedProxies: options.trustedProxies ?? [] };
  const retryAfter = options.retryAfterSeconds ?? 5;

  async function dispatch(
    request: Request,
    target: { authority: string; path: string; query: string; client: string },
    seen: { route?: string; apiKeyId?: number },
  ): Promise<Response> {
    const { authority, path, query, client } = target;
    const entry = table.get(path);
    if (entry) seen.route = path;
    // The authority too: a request line may carry userinfo (`KEY@host`) and
    // the Host header is whatever the client wrote.
    const located = authority + path;
    if (urlCarriesCredential(located, query)) {
      return authenticator.refuseKeyInUrl(
        keysInUrl(located, query, { most: 4 }),
        {
          client,
          route: seen.route ?? "unrouted",
        },
      );
    }
    if (!entry) return notFound();
    if (request.method === "OPTIONS") return optionsResponse(entry.allow);
    const method =
      (request.method === "HEAD" ? "GET" : request.method) as keyof Methods<
        never
      >;
    const { route } = entry;
    if (route.methods[method] === undefined) {
      return methodNotAllowed(entry.allow);
    }
    let response: Response;
    if (route.auth === "api_key") {
      const decision = await authenticator.check(request, {
        client,
        route: path,
      });
      if (!decision.ok) return decision.response;
      seen.apiKeyId = decision.key.id;
      response = await route.methods[method]!({
        request,
        client,
        key: decision.key,
      });
      if (decision.headers !== undefined) {
        // Set on the route's own answer: no copy of the response.
        for (const [name, value] of decision.headers) {
          response.headers.set(name, value);
        }
      }
    } else {
      response = await route.methods[method]!({ request, client });
    }
    return response;
  }

  const turns = new Turns();

  return async function handle(request, info) {
    const started = performance.now();
    const { authority, path, query } = splitTarget(request.url);
    const client = clientAddress(request, info, proxies);
    const seen: { route?: string; apiKeyId?: number } = {};
    let response: Response;
    try {
      const wait = turns.enter();
      if (wait !== null) await wait;
      response = await dispatch(
        request,
        { authority, path, query, client },
        seen,
      );
    } catch (error) {
      if (error instanceof StoreUnavailableError) {
        response = storeUnavailable(retryAfter);
      } else {
        log?.({
          msg: "error",
          path: loggablePath(path, loggable),
          error: error instanceof Error ? error.name : typeof error,
        });
        response = internalError();
      }
    }
    // Every answer, refusals and errors included: over HTTP/2 a body on a
    // HEAD is a protocol error that fails the client's whole request.
    if (request.method === "HEAD") response = await withoutBody(response);
    annotateRequest(seen);
    if (logRequest) {
      const line: RequestLogLine = {
        requestId: nextRequestId(),
        method: loggableMethod(request.method),
        path: loggablePath(path, loggable),
        status: response.status,
        durationMs: Math.round((performance.now() - started) * 1000) / 1000,
        client,
      };
      if (seen.apiKeyId !== undefined) line.apiKeyId = seen.apiKeyId;
      response.headers.set("x-request-id", line.requestId);
      logRequest(line);
    }
    return response;
  };
}

/**
 * The GET's status and headers without its body. Its length is kept, as
 * the GET announces it: a `Response` with no body would otherwise go out
 * with `content-length: 0` over HTTP/1.1 and none over HTTP/2. Every body
 * this service sends is a short fixed text, so measuring it costs little.
 */
async function withoutBody(response: Response): Promise<Response> {
  if (response.body === null) return response;
  const headers = new Headers(response.headers);
  if (!headers.has("content-length")) {
    headers.set(
      "content-length",
      String((await response.arrayBuffer()).byteLength),
    );
  } else await response.body.cancel();
  return new Response(null, { status: response.status, headers });
}

const KNOWN_METHODS = new Set([
  "GET",
  "HEAD",
  "POST",
  "PUT",
  "PATCH",
  "DELETE",
  "OPTIONS",
  "CONNECT",
  "TRACE",
]);

/** A method is whatever token the client sent, a key included: log only known ones. */
function loggableMethod(method: string): string {
  return KNOWN_METHODS.has(method) ? method : "[other]";
}

/**
 * The authority, the path exactly as sent and the query string. Nothing is
 * normalised: `//`, `..`, `%2e` or a trailing slash simply match no route.
 */
function splitTarget(
  url: string,
): { authority: string; path: string; query: string } {
  const from = url.indexOf("//") + 2;
  const start = url.indexOf("/", from);
  const mark = url.indexOf("?", start);
  const authority = url.slice(from, start);
  return mark === -1
    ? { authority, path: url.slice(start), query: "" }
    : { authority, path: url.slice(start, mark), query: url.slice(mark + 1) };
}

// Unique per process without a random draw per request: a random prefix
// drawn once, then a counter. Enough to find a request's line in the log.
const REQUEST_ID_PREFIX = Array.from(
  crypto.getRandomValues(new Uint8Array(4)),
  (b) => b.toString(16).padStart(2, "0"),
).join("");
let requestCount = 0;

function nextRequestId(): string {
  return `${REQUEST_ID_PREFIX}-${(++requestCount).toString(36)}`;
}
