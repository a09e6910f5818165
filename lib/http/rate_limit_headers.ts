/**
 * `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11),
 * so a client can slow down before a 429; `q` quota, `w` window, `r`
 * remaining, `t` seconds until restored in full. A key has one policy,
 * `"key"`. A key of a rotation line is also held to its line's count (twice
 * the limit: docs/design.md, "Rate limits"), so its answers state both
 * policies, `"key"` and `"line"`, and `RateLimit` names the one that binds
 * now: the line's when it has less left, or refused the request.
 *
 * @module
 */

import type { RateDecision, RateLimit } from "../auth/rate_limit.ts";

const KEY_POLICY = "key";
const LINE_POLICY = "line";

/** Written once per cached record's limit: this is every request's path for a key with one. */
const POLICIES = new WeakMap<RateLimit, string>();
/** A line key's two policies, by its line's limit (one object per key limit, lineLimit). */
const LINE_POLICIES = new WeakMap<RateLimit, string>();

/** A rotation line's limit, and whether it binds this answer. */
export interface LineState {
  limit: RateLimit;
  binds: boolean;
}

export function rateLimitHeaders(
  limit: RateLimit,
  decision: Pick<RateDecision, "remaining" | "resetSeconds">,
  options: { line?: LineState } = {},
): [string, string][] {
  const { line } = options;
  const binding = line?.binds === true ? LINE_POLICY : KEY_POLICY;
  // Whatever is counted leaves within the window: a reset past it (a count
  // timed on another clock, or a window just shortened) is never stated.
  const window = (line?.binds === true ? line.limit : limit).windowSeconds;
  return [
    [
      "RateLimit-Policy",
      line === undefined ? policyOf(limit) : (
        LINE_POLICIES.get(line.limit) ?? linePolicies(limit, line.limit)
      ),
    ],
    [
      "RateLimit",
      `"${binding}";r=${Math.max(0, Math.floor(decision.remaining))};t=${
        Math.min(window, Math.max(0, Math.ceil(decision.resetSeconds)))
      }`,
    ],
  ];
}

function policyOf(limit: RateLimit): string {
  let policy = POLICIES.get(limit);
  if (policy === undefined) {
    policy = item(KEY_POLICY, limit);
    POLICIES.set(limit, policy);
  }
  return policy;
}

function linePolicies(limit: RateLimit, line: RateLimit): string {
  const policies = `${policyOf(limit)}, ${item(LINE_POLICY, line)}`;
  LINE_POLICIES.set(line, policies);
  return policies;
}

function item(name: string, limit: RateLimit): string {
  return `"${name}";q=${limit.count};w=${limit.windowSeconds}`;
}
