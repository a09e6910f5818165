/**
 * What every route gets without writing it, in order: the client's address;
 * 400 for a credential anywhere in the URL (any valid key there marked
 * exposed); 404, 405 with `Allow`, 204 to OPTIONS, HEAD answered by GET;
 * the API-key step; 503 when the store cannot be read (never 401), else
 * 500; on HEAD any answer without its body; the log line, id and telemetry.
 *
 * @module
 */

import { clientAddress } from "../net/client_address.ts";
import type { Cidr } from "../net/ip.ts";
import type { RequestLogLine } from "./log.ts";
import { StoreUnavailableError } from "../store/errors.ts";
import type { KeyRecord } from "../store/types.ts";
import { annotateRequest } from "./telemetry.ts";
import type { AuthDecision, Authenticator } from "./authenticate.ts";
import { misplacedKeyHint } from "./key_hint.ts";
import {
  API_KEY_HEADER,
  internalError,
  methodNotAllowed,
  notFound,
  options as optionsResponse,
  storeUnavailable,
  withFields,
} from "./responses.ts";
import { keysInUrl, urlCarriesCredential } from "./url_credentials.ts";
import { loggablePath } from "./loggable_path.ts";

/** What every route handler receives. */
export interface RequestContext {
  request: Request;
  client: string;
}

/** What a handler behind the API-key step receives. */
export interface AuthenticatedContext extends RequestContext {
  key: KeyRecord;
}

/** HEAD and OPTIONS come with them. */
export type Methods<C> = Partial<
  Record<
    "GET" | "POST" | "PUT" | "PATCH" | "DELETE",
    (context: C) => Response | Promise<Response>
  >
>;

export type Route =
  | { path: string; auth: "api_key"; methods: Methods<AuthenticatedContext> }
  | { path: string; auth: "none"; methods: Methods<RequestContext> };

export interface RouterOptions {
  authenticator: Authenticator;
  trustedProxies?: readonly Cidr[];
  /** After a 503. */
  retryAfterSeconds?: number;
  log?: (fields: Record<string, unknown>) => void;
  logRequest?: (line: RequestLogLine) => void;
}

/** Answers at once when it can. */
export type Handler = (
  request: Request,
  info: Deno.ServeHandlerInfo,
) => Response | Promise<Response>;

interface Seen {
  route?: string;
  apiKeyId?: number;
  hint?: string;
}

interface Pending {
  request: Request;
  path: string;
  client: string;
  started: number;
  seen: Seen;
}

interface Entry {
  route: Route;
  allow: string;
}

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
  // Logged as they are; any other path with its key-shaped parts withheld.
  const loggable = { routes: new Set(table.keys()) };
  const proxies = { trustedProxies: options.trustedProxies ?? [] };
  const retryAfter = options.retryAfterSeconds ?? 5;

  function dispatch(
    request: Request,
    target: { authority: string; path: string; query: string; client: string },
    seen: Seen,
  ): Response | Promise<Response> {
    const { authority, path, query, client } = target;
    const entry = table.get(path);
    if (entry) seen.route = path;
    // The authority too: a request line may carry userinfo (`KEY@host`) and
    // the Host header is whatever the client wrote.
    const located = authority + path;
    if (urlCarriesCredential(located, query)) {
      return authenticator.refuseKeyInUrl(
        keysInUrl(located, query, { most: 4 }),
        { client, route: seen.route ?? "unrouted" },
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
    if (route.auth === "none") {
      return route.methods[method]!({ request, client });
    }
    const run = (decision: AuthDecision): Response | Promise<Response> => {
      if (!decision.ok) {
        // Only a refused request looks at its other headers.
        if (
          decision.response.status === 401 &&
          !request.headers.has(API_KEY_HEADER)
        ) seen.hint = misplacedKeyHint(request.headers);
        return decision.response;
      }
      seen.apiKeyId = decision.key.id;
      const response = route.methods[method]!({
        request,
        client,
        key: decision.key,
      });
      const { headers } = decision;
      if (headers === undefined) return response;
      return response instanceof Promise
        ? response.then((answer) => withFields(answer, headers))
        : withFields(response, headers);
    };
    const decision = authenticator.check(request, { client, route: path });
    return decision instanceof Promise ? decision.then(run) : run(decision);
  }

  /** A store outage is 503, never 401; anything else 500, logged by class. */
  function failed(error: unknown, path: string): Response {
    if (error instanceof StoreUnavailableError) {
      return storeUnavailable(retryAfter);
    }
    log?.({
      msg: "error",
      path: loggablePath(path, loggable),
      error: error instanceof Error ? error.name : typeof error,
    });
    return internalError();
  }

  function finish(
    response: Response,
    pending: Pending,
  ): Response | Promise<Response> {
    const { request, path, client, started, seen } = pending;
    // Every answer, refusals and errors included: over HTTP/2 a body on a
    // HEAD is a protocol error that fails the client's whole request.
    if (request.method === "HEAD" && response.body !== null) {
      return withoutBody(response).then((bare) => finish(bare, pending));
    }
    annotateRequest(seen);
    if (logRequest) {
      const line: RequestLogLine = {
        requestId: `${REQUEST_ID_PREFIX}-${(++requestCount).toString(36)}`,
        // Whatever token the client sent, a key included: only known ones.
        method: KNOWN_METHODS.has(request.method) ? request.method : "[other]",
        path: loggablePath(path, loggable),
        status: response.status,
        durationMs: Math.round((performance.now() - started) * 1000) / 1000,
        client,
      };
      if (seen.apiKeyId !== undefined) line.apiKeyId = seen.apiKeyId;
      if (seen.hint !== undefined) line.hint = seen.hint;
      response.headers.set("x-request-id", line.requestId);
      logRequest(line);
    }
    return response;
  }

  // Synchronous end to end in the steady state: a promise per layer is a
  // microtask and garbage on every request.
  return function handle(request, info) {
    const started = performance.now();
    const { authority, path, query } = splitTarget(request.url);
    const client = clientAddress(request, info, proxies);
    const seen: Seen = {};
    const pending = { request, path, client, started, seen };
    let answer: Response | Promise<Response>;
    try {
      answer = dispatch(request, { authority, path, query, client }, seen);
    } catch (error) {
      answer = failed(error, path);
    }
    return answer instanceof Promise
      ? answer.then(
        (response) => finishOr500(response, pending),
        (error) => finishOr500(failed(error, path), pending),
      )
      : finishOr500(answer, pending);
  };

  /** Else a logged 500, never Deno's bare 500 without a log line. */
  function finishOr500(
    response: Response,
    pending: Pending,
  ): Response | Promise<Response> {
    const fallback = (error: unknown) =>
      finish(failed(error, pending.path), pending);
    try {
      const finished = finish(response, pending);
      return finished instanceof Promise ? finished.catch(fallback) : finished;
    } catch (error) {
      return fallback(error);
    }
  }
}

/**
 * Keeps the length the GET announces: a bodiless `Response` would go out
 * with `content-length: 0` over HTTP/1.1. Every body here is short.
 */
async function withoutBody(response: Response): Promise<Response> {
  const headers = new Headers(response.headers);
  if (!headers.has("content-length")) {
    headers.set(
      "content-length",
      String((await response.arrayBuffer()).byteLength),
    );
  } else await response.body?.cancel();
  return new Response(null, { status: response.status, headers });
}

const KNOWN_METHODS = new Set(
  "GET HEAD POST PUT PATCH DELETE OPTIONS CONNECT TRACE".split(" "),
);

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
