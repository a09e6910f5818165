/**
 * A key's rate limit as the admin asks for it (`--rate 600/min`, `none`),
 * or the installation's default for new keys (`KEY_RATE_LIMIT`).
 *
 * @module
 */

import { parseRate, type RateLimit } from "../auth/rate_limit.ts";
import { processEnv, readKeyRateLimit } from "../server/config.ts";
import type { Context, OptionSpec } from "./command.ts";
import { checked } from "./_input.ts";

/** The option of `create` and `update`. */
export const RATE_OPTION: OptionSpec = {
  type: "string",
  help:
    'requests the key may make, across every server: 600/min, 10/s, 1000/h, 50000/day; "none" for no limit',
};

/** A new key's limit: `--rate` when given, else KEY_RATE_LIMIT, else none. */
export function requestedRate(values: Context["values"]): RateLimit | null {
  const text = values.rate;
  return typeof text === "string"
    ? checked(parseRate, text)
    : readKeyRateLimit(processEnv);
}
