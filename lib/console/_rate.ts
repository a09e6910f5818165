/**
 * A key's rate limit as the admin asks for it (`--rate 600/min`, `none`),
 * or the installation's default for new keys (`KEY_RATE_LIMIT`).
 *
 * @module
 */

import {
  formatRate,
  parseRate,
  type RateLimit,
  RateSyntaxError,
} from "../auth/rate_limit.ts";
import { processEnv, readKeyRateLimit } from "../server/config.ts";
import type { OptionSpec } from "./command.ts";
import type { Context } from "./command.ts";
import { UsageError } from "./errors.ts";

/** The option of `create` and `update`. */
export const RATE_OPTION: OptionSpec = {
  type: "string",
  help:
    'requests the key may make, across every server: 600/min, 10/s, 1000/h, 50000/day; "none" for no limit',
};

/**
 * The value of `--rate`: a limit, or null for `none`. A refusal is a usage
 * error (exit 2) whose code is the parser's and whose line names the fix.
 */
export function rateOption(text: string): RateLimit | null {
  try {
    return parseRate(text);
  } catch (error) {
    if (error instanceof RateSyntaxError) {
      throw new UsageError(`--rate: ${error.message}`, { code: error.code });
    }
    throw error;
  }
}

/** A new key's limit: `--rate` when given, else KEY_RATE_LIMIT, else none. */
export function requestedRate(values: Context["values"]): RateLimit | null {
  const text = values.rate;
  return typeof text === "string"
    ? rateOption(text)
    : readKeyRateLimit(processEnv);
}

/** A limit as the console shows it: `600/min`, or `none`. */
export function shownRate(limit: RateLimit | null): string {
  return limit === null ? "none" : formatRate(limit);
}
