/**
 * The key's rate limit as `RateLimit-Policy` and `RateLimit` report it
 * (lib/http/rate_limit_headers.ts writes them), and when it is low enough to warn.
 *
 * @module
 */

import type { CheckOutcome, RateBudget } from "./outcome.ts";
import { state } from "./outcome.ts";

/** Below this share of the quota left, the check warns. */
export const LOW_BUDGET_SHARE = 0.1;

/**
 * The budget both fields describe: the policy `RateLimit` names (`"key"`,
 * or `"line"` for a rotated key whose line binds), with its quota from
 * `RateLimit-Policy`; null when either is absent or not as the service writes it.
 */
export function readRateBudget(headers: Headers): RateBudget | null {
  const left = /^"(key|line)";r=(\d{1,12});t=(\d{1,7})$/.exec(
    headers.get("ratelimit")?.trim() ?? "",
  );
  if (left === null) return null;
  const policies = (headers.get("ratelimit-policy") ?? "").split(",");
  for (const text of policies) {
    const policy = /^"(key|line)";q=(\d{1,10});w=(\d{1,6})$/.exec(text.trim());
    if (policy === null) return null;
    if (policy[1] !== left[1]) continue;
    return {
      quota: Number(policy[2]),
      windowSeconds: Number(policy[3]),
      remaining: Number(left[2]),
      resetSeconds: Number(left[3]),
    };
  }
  return null;
}

/**
 * An OK outcome becomes a WARNING below {@linkcode LOW_BUDGET_SHARE} of the
 * quota left, as the next calls may then meet 429 `rate_limited`.
 */
export function withRateBudget(
  outcome: CheckOutcome,
  budget: RateBudget | null,
): CheckOutcome {
  if (budget === null) return outcome;
  const found = { ...outcome, rateLimit: budget };
  if (
    outcome.state !== "OK" ||
    budget.remaining >= budget.quota * LOW_BUDGET_SHARE
  ) return found;
  return {
    ...found,
    ...state("WARNING"),
    summary:
      `rate limit nearly used: ${budget.remaining} of ${budget.quota} requests left in ${budget.windowSeconds} s, ${outcome.summary}`,
    advice:
      `the installation calls nearly as often as its key's rate limit allows; slow its calls down (the RateLimit header says how far), or ask the installation's administrator for a higher limit`,
  };
}

/** The budget as the check's details show it. */
export function describeBudget(budget: RateBudget): string {
  return `${budget.remaining} of ${budget.quota} requests left per ${budget.windowSeconds} s, restored in full within ${budget.resetSeconds} s (warning below ${
    Math.ceil(budget.quota * LOW_BUDGET_SHARE)
  })`;
}
