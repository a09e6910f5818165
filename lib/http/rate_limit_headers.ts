/**
 * The `RateLimit-Policy` and `RateLimit` fields of the IETF draft "RateLimit
 * header fields for HTTP" (draft-ietf-httpapi-ratelimit-headers-11), so that
 * a client can slow down before it meets a 429.
 *
 * Both are Structured Field lists of one item, named by the policy: a key's
 * limit is the one policy, `"key"`. `q` is the quota and `w` its window in
 * seconds; `r` is what remains and `t` the seconds until the quota is
 * restored in full.
 *
 * @module
 */

import type { RateDecision, RateLimit } from "../auth/rate_limit.ts";

/** The name of the policy in both fields: a key's own limit. */
export const RATE_POLICY = "key";

/**
 * The policy field of each limit, written once: a cached record's limit is
 * one object for as long as the record is cached, and this is every
 * request's path for a key with a limit.
 */
const POLICIES = new WeakMap<RateLimit, string>();

/** The two fields for an answer under `limit`, as `decision` left it. */
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
