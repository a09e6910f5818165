/**
 * The service's handler: the route table (./routes/table.ts) behind the
 * router, with the API-key step for its authenticated routes. A plain
 * function of `(request, info)` so that tests call it without a socket and
 * `main.ts` only hands it to the server.
 *
 * @module
 */

import type { BackgroundWrites } from "../util/background.ts";
import { createAuthenticator } from "../http/authenticate.ts";
import { createRouter, type Handler } from "../http/router.ts";
import type { Cidr } from "../net/ip.ts";
import type { LastUsedRecorder } from "../usage/last_used.ts";
import type { RequestLogLine } from "../http/log.ts";
import type { LockoutTracker } from "../auth/lockout.ts";
import type { UsageRecorder } from "../usage/networks.ts";
import { routeTable } from "../routes/table.ts";
import type { Lease } from "../auth/lease.ts";
import type { Peers } from "../auth/peers.ts";
import type { RateLimiter } from "../auth/rate_limit.ts";
import type { KeyStore } from "../store/types.ts";

export type { Handler } from "../http/router.ts";

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
  /** Notes networks used and uses refused by `allowFrom`; written off the request path. */
  usage?: UsageRecorder;
  /** Receives one line per notable event (lock, exposure, error). */
  log?: (fields: Record<string, unknown>) => void;
  /** Receives one line per request. */
  logRequest?: (line: RequestLogLine) => void;
  /**
   * This process's lease (lib/auth/lease.ts), started by the caller: requests
   * are answered from memory while it holds. Without one, every request
   * waits for a store read, shared with those arriving at the same time.
   */
  lease?: Lease;
  /** Counts the writes made off the request path, for a stop to wait for. */
  background?: BackgroundWrites;
  /**
   * The servers sharing the store (lib/auth/peers.ts), started by the
   * caller: each key's rate limit is split among them.
   */
  peers?: Pick<Peers, "count" | "share">;
  /** Counts requests of keys with a rate limit; default one of its own. */
  rateLimiter?: RateLimiter;
}

/** Builds the service's handler over a store. */
export function createHandler(
  store: KeyStore,
  options: HandlerOptions = {},
): Handler {
  const authenticator = createAuthenticator(store, {
    lockout: options.lockout,
    lastUsed: options.lastUsed,
    usage: options.usage,
    log: options.log,
    lease: options.lease,
    background: options.background,
    peers: options.peers,
    rateLimiter: options.rateLimiter,
  });
  return createRouter(routeTable({ store, now: options.now }), {
    authenticator,
    trustedProxies: options.trustedProxies,
    retryAfterSeconds: options.retryAfterSeconds,
    log: options.log,
    logRequest: options.logRequest,
  });
}
