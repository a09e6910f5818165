/**
 * The service's handler: the route table behind the router and the API-key
 * step, a plain function that tests call without a socket.
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
import type { ShareLedger } from "../auth/share_ledger.ts";
import type { RateLimiter } from "../auth/rate_limit.ts";
import type { KeyStore } from "../store/types.ts";
import { type LeakedKeyAction, LeakReports } from "../auth/leak_reports.ts";
import type { AuthCounts } from "../http/telemetry.ts";

export type { Handler } from "../http/router.ts";

/** Options of {@linkcode createHandler}: the router's and the API-key step's (lease and peers started by the caller). */
export interface HandlerOptions {
  /** The server clock; tests pin it. */
  now?: () => Date;
  retryAfterSeconds?: number;
  lockout?: LockoutTracker;
  trustedProxies?: readonly Cidr[];
  lastUsed?: LastUsedRecorder;
  usage?: UsageRecorder;
  log?: (fields: Record<string, unknown>) => void;
  logRequest?: (line: RequestLogLine) => void;
  lease?: Lease;
  background?: BackgroundWrites;
  peers?: Pick<Peers, "count" | "share">;
  /** Shares lent between servers (lib/auth/share_ledger.ts). */
  shares?: Pick<ShareLedger, "place" | "wait">;
  rateLimiter?: RateLimiter;
  /** LEAKED_KEY_ACTION: what a valid key reported as leaked gets; default `revoke`. */
  leakedKeyAction?: LeakedKeyAction;
  /** When a leak report's 202 is sent (lib/routes/leaked.ts); tests answer at once. */
  leakAnswerMs?: number;
  /** Hears each outcome of the API-key step and each lock-out (lib/server/figures.ts). */
  counts?: AuthCounts;
}

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
    shares: options.shares,
    rateLimiter: options.rateLimiter,
    counts: options.counts,
  });
  const reports = new LeakReports(store, {
    lookUp: authenticator.lookUpHash,
    action: options.leakedKeyAction,
    background: options.background,
    log: options.log,
  });
  const leaks = {
    refuseFailing: (
      context: { client: string; route: string },
      respond: () => Response,
    ) => authenticator.refuseFailing(context, "leak_reported", respond),
    report: (values: readonly string[], client: string) =>
      reports.report(values, client),
    answerAfterMs: options.leakAnswerMs,
  };
  return createRouter(routeTable({ store, leaks, now: options.now }), {
    authenticator,
    trustedProxies: options.trustedProxies,
    retryAfterSeconds: options.retryAfterSeconds,
    log: options.log,
    logRequest: options.logRequest,
  });
}
