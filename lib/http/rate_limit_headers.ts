/**
 * `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11),
 * so a client can slow down before a 429: one policy, `"key"`; `q` quota,
 * `w` window, `r` remaining, `t` seconds until restored in full.
 *
 * @module
 */

import type { RateDecision, RateLimit } from "../auth/rate_limit.ts";

const RATE_POLICY = "key";

/** Written once per cached record's limit: this is every request's path for a key with one. */
const POLICIES = new WeakMap<RateLimit, string>();

export function rateLimitHeaders(
  limit: RateLimit,
  decision: Pick<RateDecision, "remaining" | "resetSeconds">,
): [string, string][] {
  let policy = POLICIES.get(limit);
  if (policy === undefined) {
    policy = `"${RATE_POLICY}";q=${limit.count};w=${limit.windowSeconds}`;
    POLICIES.set(limit, policy);
  }
  return [
    ["RateLimit-Policy", policy],
    [
      "RateLimit",
      `"${RATE_POLICY}";r=${Math.max(0, Math.floor(decision.remaining))};t=${
        Math.max(0, Math.ceil(decision.resetSeconds))
      }`,
    ],
  ];
}
