/**
 * One run's findings and their monitoring-plugin states: the text and `--json` shape.
 *
 * @module
 */

import type { CheckConfig } from "./config.ts";

/** The monitoring-plugin states, by exit code. */
export const EXIT = { OK: 0, WARNING: 1, CRITICAL: 2, UNKNOWN: 3 } as const;

/** A monitoring-plugin state. */
export type CheckState = keyof typeof EXIT;

/** The key's rate limit and what remains of it, from the answer's headers. */
export interface RateBudget {
  /** Requests allowed per window. */
  quota: number;
  windowSeconds: number;
  /** Requests left now, across the installation. */
  remaining: number;
  /** Seconds until the quota is restored in full. */
  resetSeconds: number;
}

/** What one check found; also the `--json` output. */
export interface CheckOutcome {
  /** The monitoring-plugin state. */
  state: CheckState;
  /** The exit code of that state: 0 to 3. */
  exitCode: number;
  /** The text after `CONNECTION STATE - ` on the first line. */
  summary: string;
  /** False when no HTTP answer came back; null when nothing was attempted. */
  reachable: boolean | null;
  /** The route that was called; null when the configuration stopped the check. */
  url: string | null;
  /** The answer's status; null when none came back. */
  httpStatus: number | null;
  /** The id of the key that answered, from a 200. */
  apiKeyId: number | null;
  /** The e-mail of the integrator the key belongs to, from a 200. */
  email: string | null;
  /** When the key stops working, from a 200 that says so. */
  apiKeyExpiresAt?: string;
  /** The server's clock as it answered, from a 200. */
  serverUtc: string | null;
  /** serverUtc minus this machine's clock at the midpoint of the request. */
  clockOffsetSeconds: number | null;
  /** From sending the request to receiving the answer's headers. */
  roundTripSeconds: number | null;
  /** The WARNING threshold in use. */
  maxOffsetSeconds: number | null;
  /** From a 429 or 503 answer. */
  retryAfterSeconds: number | null;
  /** The key's rate limit, when the answer reports one. */
  rateLimit?: RateBudget;
  /** What to do about it, for a person reading the alert. */
  advice: string | null;
}

/** An outcome with nothing found yet: UNKNOWN, every measurement null. */
export function blankOutcome(config: CheckConfig | null): CheckOutcome {
  return {
    state: "UNKNOWN",
    exitCode: EXIT.UNKNOWN,
    summary: "",
    reachable: null,
    url: config === null ? null : config.url.href,
    httpStatus: null,
    apiKeyId: null,
    email: null,
    serverUtc: null,
    clockOffsetSeconds: null,
    roundTripSeconds: null,
    maxOffsetSeconds: config?.maxOffsetSeconds ?? null,
    retryAfterSeconds: null,
    advice: null,
  };
}

/** The state and its exit code, to spread into an outcome. */
export function state(
  name: CheckState,
): Pick<CheckOutcome, "state" | "exitCode"> {
  return { state: name, exitCode: EXIT[name] };
}
