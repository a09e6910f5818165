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

/** The two fields for an answer under `limit`, as `decision` left it. */
export function rateLimitHeaders(
  limit: RateLimit,
  decision: Pick<RateDecision, "remaining" | "resetSeconds">,
): [string, string][] {
  return [
    [
      "RateLimit-Policy",
      `"${RATE_POLICY}";q=${limit.count};w=${limit.windowSeconds}`,
    ],
    [
      "RateLimit",
      `"${RATE_POLICY}";r=${Math.max(0, Math.floor(decision.remaining))};t=${
        Math.max(0, Math.ceil(decision.resetSeconds))
      }`,
    ],
  ];
}
