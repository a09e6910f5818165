/**
 * What a stored rate limit may be, and how the audit log words it: the
 * store's half of per-key rate limits, below lib/auth/rate_limit.ts, which
 * parses, formats and enforces them.
 * @module
 */

import type { RateLimit } from "./types.ts";

/** The largest count a limit may have: beyond, it limits nothing. */
export const RATE_MAX_COUNT = 1_000_000_000;
/** The longest window a limit may have, in seconds: a day. */
export const RATE_MAX_WINDOW_SECONDS = 86_400;

/** True when `value` is a limit as stored: whole, positive and in range. */
export function isRateLimit(value: unknown): value is RateLimit {
  if (typeof value !== "object" || value === null) return false;
  const { count, windowSeconds } = value as Record<string, unknown>;
  return Number.isSafeInteger(count) && (count as number) >= 1 &&
    (count as number) <= RATE_MAX_COUNT &&
    Number.isSafeInteger(windowSeconds) && (windowSeconds as number) >= 1 &&
    (windowSeconds as number) <= RATE_MAX_WINDOW_SECONDS;
}

/** The limit in its canonical stored shape (no stray fields), or null. */
export function storedRateLimit(value: unknown): RateLimit | null {
  return isRateLimit(value)
    ? { count: value.count, windowSeconds: value.windowSeconds }
    : null;
}

/** The audit detail of a limit set or lifted: alike in every store. */
export function rateLimitDetail(limit: RateLimit | null): string {
  return limit === null
    ? "no rate limit"
    : `${limit.count} requests per ${limit.windowSeconds} s`;
}
