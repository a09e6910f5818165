/**
 * The HTTP handler: routes and responses. A plain function of
 * `(request, info)` so that tests call it without a socket and `main.ts` only
 * hands it to `Deno.serve`.
 *
 * The order on the connection route is the point: lock-out, then keys in the
 * URL, then the key's format, and only then hashing and the store.
 *
 * @module
 */

import { decodeAsciiEscapes } from "./_ascii_escapes.ts";
import { KEY_PATTERN } from "./api_key.ts";
import { API_KEY_HEADER, KeyLookup } from "./auth.ts";
import { clientAddress, lockoutKey } from "./client_address.ts";
import type { Cidr } from "./ip.ts";
import type { LastUsedRecorder } from "./last_used.ts";
import type { RequestLogLine } from "./log.ts";
import { LockoutTracker } from "./lockout.ts";
import openapi from "../openapi.json" with { type: "json" };
import { StoreUnavailableError } from "./store/errors.ts";
import type { KeyStore } from "./store/types.ts";
import { annotateRequest, countOutcome } from "./telemetry.ts";

/** The connection-check route of spec section 4.1. */
export const CONNECTION_PATH = "/api/v1/integration/connection";
/** Liveness: the process answers. */
export const LIVE_PATH = "/api/v1/health/live";
/** Readiness: the process answers and can read the store. */
export const READY_PATH = "/api/v1/health/ready";
/** The OpenAPI document of this API. */
export const OPENAPI_PATH = "/api/v1/openapi.json";

const OPENAPI_BODY = JSON.stringify(openapi);
const ROUTES = new Set([CONNECTION_PATH, LIVE_PATH, READY_PATH, OPENAPI_PATH]);

/** What a request turned out to be, for its log line and its span. */
interface Seen {
  route?: string;
  apiKeyId?: number;
}

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
  /** Lock-out of clients that keep failing; default 10 failures in 60 s lock for 5 minutes. */
  lockout?: LockoutTracker;
  /** Proxies whose X-Forwarded-For entries are believed; default none. */
  trustedProxies?: readonly Cidr[];
  /** Notes which keys are used; written off the request path. */
  lastUsed?: LastUsedRecorder;
  /** Receives one line per notable event (lock, exposure, error). */
  log?: (fields: Record<string, unknown>) => void;
  /** Receives one line per request. */
  logRequest?: (line: RequestLogLine) => void;
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

const ALLOW = "GET, HEAD, OPTIONS";

/** Query parameter names that mean "a credential", compared without case, `-` or `_`. */
const CREDENTIAL_NAMES = new Set([
  "apikey",
  "key",
  "token",
  "xapikey",
  "accesstoken",
]);
const KEY_ANYWHERE = new RegExp(KEY_PATTERN.source, "g");

/** Builds the handler over a store. */
export function createHandler(
  store: KeyStore,
  options: HandlerOptions = {},
): Handler {
  const now = options.now ?? (() => new Date());
  const retryAfter = String(options.retryAfterSeconds ?? 5);
  const lockout = options.lockout ??
    new LockoutTracker({
      maxFailures: 10,
      windowSeconds: 60,
      lockSeconds: 300,
    });
  const proxies = { trustedProxies: options.trustedProxies ?? [] };
  const log = options.log;
  const logRequest = options.logRequest;
  const lookup = new KeyLookup(store);
  lookup.warm().catch(() => {});
  const lastUsed = options.lastUsed;

  async function connection(
    request: Request,
    client: string,
    seen: Seen,
  ): Promise<Response> {
    if (request.method === "OPTIONS") return options204();
    if (request.method !== "GET" && request.method !== "HEAD") {
      return methodNotAllowed();
    }
    // Before any hashing or store read: a locked client costs almost nothing.
    const counted = lockoutKey(client);
    if (lockout.retryAfter(counted) > 0) return lockedOut(counted);
    const result = await lookup.authenticate(
      request.headers.get(API_KEY_HEADER),
    );
    if (!result.ok) {
      countOutcome(result.reason === "revoked" ? "revoked" : "invalid");
      const lock = lockout.fail(counted);
      if (lock) {
        log?.({
          msg: "lockout",
          scope: lock.scope,
          client: lock.scope === "address" ? client : lock.client,
          failures: lock.failures,
          lockedUntil: lock.lockedUntil.toISOString(),
        });
      } // Requests of one burst all pass the check above before the first of
      // them fails; those that fail after the lock get 429, so a burst sees
      // no more 401s than the threshold.
      else if (lockout.retryAfter(counted) > 0) return lockedOut(counted);
      return unauthorized();
    }
    if (lockout.retryAfter(counted) > 0) return lockedOut(counted);
    lockout.succeeded(counted);
    countOutcome("ok");
    seen.apiKeyId = result.record.id;
    const at = now();
    lastUsed?.used(result.record.id, at.getTime());
    const status: ConnectionStatus = {
      connected: true,
      authenticatedByApiKey: true,
      apiKeyId: result.record.id,
      email: result.record.email,
      serverUtc: at.toISOString(),
    };
    return json(200, status);
  }

  function lockedOut(counted: string): Response {
    countOutcome("locked_out");
    return json(429, {
      error: "locked_out",
      message:
        "Too many failed authentications from this address; fix the key, then retry after Retry-After seconds",
    }, { "retry-after": String(lockout.retryAfter(counted)) });
  }

  /**
   * Refuses a request that carries a credential anywhere in its URL, on any
   * route, and marks every valid key found there as exposed: the admin must
   * rotate it.
   */
  async function keyInUrl(
    path: string,
    query: string,
    client: string,
  ): Promise<Response> {
    const text = `${safeDecode(path)} ${safeDecode(query)}`;
    await noteExposure(text, client);
    countOutcome("url_exposed");
    return json(400, {
      error: "key_in_url",
      message:
        `Send the key in the ${API_KEY_HEADER} header, never in the URL, where proxies and logs keep it`,
    });
  }

  async function noteExposure(text: string, client: string): Promise<void> {
    // A few at most: a URL stuffed with keys must not buy a read per key.
    const candidates = (text.match(KEY_ANYWHERE) ?? []).slice(0, 4);
    for (const candidate of candidates) {
      try {
        const result = await lookup.authenticate(candidate);
        if (!result.ok) continue;
        const record = result.record;
        const marked = await store.markExposed(record.id, {
          actor: "server",
          from: client,
        });
        if (marked) {
          log?.({ msg: "key_exposed_in_url", apiKeyId: record.id, client });
        }
      } catch (error) {
        // The request is refused either way; a store hiccup must not turn it into a 5xx.
        if (!(error instanceof StoreUnavailableError)) throw error;
      }
    }
  }

  async function route(
    request: Request,
    path: string,
    query: string,
    client: string,
    seen: Seen,
  ): Promise<Response> {
    if (ROUTES.has(path)) seen.route = path;
    if (pathCarriesKey(path) || (query !== "" && carriesCredential(query))) {
      return await keyInUrl(path, query, client);
    }
    switch (path) {
      case CONNECTION_PATH:
        return await connection(request, client, seen);
      case LIVE_PATH:
        return probe(request, async () => {});
      case READY_PATH:
        return await probe(request, () => store.revision());
      case OPENAPI_PATH:
        return probe(request, async () => {}, OPENAPI_BODY);
      default:
        return json(404, { error: "not_found", message: "No such route" });
    }
  }

  return async function handle(request, info) {
    const started = performance.now();
    const { path, query } = splitTarget(request.url);
    const client = clientAddress(request, info, proxies);
    const seen: Seen = {};
    let response: Response;
    try {
      response = await route(request, path, query, client, seen);
    } catch (error) {
      // Never 401 here: a 401 tells the integrator to throw its key away.
      if (error instanceof StoreUnavailableError) {
        response = json(503, {
          error: "unavailable",
          message:
            "The key store cannot be read; retry later, the key is not at fault",
        }, { "retry-after": retryAfter });
      } else {
        log?.({ msg: "error", path: redact(path), error: errorName(error) });
        response = json(500, {
          error: "internal",
          message: "The request failed on the server; retry later",
        });
      }
    }
    annotateRequest(seen);
    if (logRequest) {
      const line: RequestLogLine = {
        requestId: nextRequestId(),
        method: request.method,
        path: redact(path),
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

/** An unauthenticated GET: a probe, or a fixed document when `body` is given. */
async function probe(
  request: Request,
  check: () => Promise<unknown>,
  body?: string,
): Promise<Response> {
  if (request.method === "OPTIONS") return options204();
  if (request.method !== "GET" && request.method !== "HEAD") {
    return methodNotAllowed();
  }
  try {
    await check();
    return body === undefined
      ? json(200, { status: "ok" })
      : new Response(body, {
        headers: { ...COMMON_HEADERS, "content-type": "application/json" },
      });
  } catch {
    return json(503, { status: "unavailable" }, { "retry-after": "5" });
  }
}

/**
 * The path exactly as sent and the query string. Nothing is normalised:
 * `//`, `..`, `%2e` or a trailing slash simply match no route.
 */
function splitTarget(url: string): { path: string; query: string } {
  const start = url.indexOf("/", url.indexOf("//") + 2);
  const mark = url.indexOf("?", start);
  return mark === -1
    ? { path: url.slice(start), query: "" }
    : { path: url.slice(start, mark), query: url.slice(mark + 1) };
}

function pathCarriesKey(path: string): boolean {
  // Only a path with "isk_" or an escape can hold a key; most are routes.
  return (path.includes("isk_") || path.includes("%")) &&
    KEY_PATTERN.test(safeDecode(path));
}

function carriesCredential(query: string): boolean {
  for (const [name, value] of new URLSearchParams(query)) {
    if (CREDENTIAL_NAMES.has(name.toLowerCase().replace(/[-_]/g, ""))) {
      return true;
    }
    if (KEY_PATTERN.test(name) || KEY_PATTERN.test(value)) return true;
  }
  return KEY_PATTERN.test(safeDecode(query));
}

/** The URL text as the key check reads it; `+` is a space in a query. */
function safeDecode(text: string): string {
  return decodeAsciiEscapes(text.replaceAll("+", " "));
}

/** A path may hold anything a client typed, a key included: never log one. */
function redact(path: string): string {
  // Only a path with "isk_" or an escape can hold a key; most are routes.
  if (!path.includes("isk_") && !path.includes("%")) return path;
  // A key in any spelling withholds the whole path: no re-encoding can leak.
  return pathCarriesKey(path) ? "[redacted: a key in the path]" : path;
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

function errorName(error: unknown): string {
  return error instanceof Error ? error.name : typeof error;
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

function methodNotAllowed(): Response {
  return json(405, {
    error: "method_not_allowed",
    message: `Use ${ALLOW}`,
  }, { allow: ALLOW });
}

function options204(): Response {
  return new Response(null, {
    status: 204,
    headers: { ...COMMON_HEADERS, allow: ALLOW },
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
