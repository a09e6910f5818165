/**
 * What one run of the check found, and the monitoring-plugin states it maps
 * to: the shape of both the text output and `--json`.
 *
 * @module
 */

import type { CheckConfig } from "./config.ts";

/** The monitoring-plugin states, by exit code. */
export const EXIT = { OK: 0, WARNING: 1, CRITICAL: 2, UNKNOWN: 3 } as const;

/** A monitoring-plugin state. */
export type CheckState = keyof typeof EXIT;

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
