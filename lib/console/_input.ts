/**
 * What the admin typed, checked before the store is touched: names and fields,
 * `--rate` (or KEY_RATE_LIMIT), `--expires-in`/`--expires-at` within
 * KEY_MAX_LIFETIME, and `--overlap`.
 *
 * @module
 */

import {
  parseRate,
  type RateLimit,
  RateSyntaxError,
} from "../auth/rate_limit.ts";
import {
  parseDuration,
  processEnv,
  readKeyMaxLifetime,
  readKeyRateLimit,
} from "../server/config.ts";
import { InvalidFieldError } from "../store/errors.ts";
import { describeStoreError } from "./store_errors.ts";
import type { Context, OptionSpec } from "./command.ts";
import { ConsoleError } from "./errors.ts";

/** A refusal by a store rule or the rate's parser is a usage error (exit 2) naming the fix. */
export function checked<T>(normalize: (text: string) => T, text: string): T {
  try {
    return normalize(text);
  } catch (error) {
    if (error instanceof InvalidFieldError) {
      // The field allowFrom is the option --allow-from.
      const option = error.field.replace(
        /[A-Z]/g,
        (c) => `-${c.toLowerCase()}`,
      );
      throw new ConsoleError(`--${option}: ${describeStoreError(error)}`, {
        code: error.code,
        usage: true,
      });
    }
    if (error instanceof RateSyntaxError) {
      throw new ConsoleError(`--rate: ${error.message}`, {
        code: error.code,
        usage: true,
      });
    }
    throw error;
  }
}

/** A string option that must be given and not blank. */
export function required(values: Context["values"], option: string): string {
  const value = values[option];
  if (typeof value !== "string" || value.trim() === "") {
    throw new ConsoleError(`--${option} is required`, {
      code: "option_required",
    });
  }
  return value;
}

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

/** The options of a command that creates a key with a lifetime. */
export const LIFETIME_OPTIONS = {
  "expires-in": {
    type: "string",
    help: "the key stops working after this long: 60s, 15m, 2h, 7d",
  },
  "expires-at": {
    type: "string",
    help:
      "the key stops working at this time (ISO 8601, such as 2030-01-31T00:00:00Z)",
  },
} as const;

/**
 * A new key's expiry (ISO 8601) or null: what was asked, else KEY_MAX_LIFETIME
 * from now if set. Invalid, past or beyond KEY_MAX_LIFETIME is a usage error.
 */
export function requestedExpiry(
  values: Context["values"],
  options: { now: number },
): string | null {
  const max = readKeyMaxLifetime(processEnv);
  const { now } = options;
  const inText = values["expires-in"];
  const atText = values["expires-at"];
  if (typeof inText === "string" && typeof atText === "string") {
    throw new ConsoleError("Give --expires-in or --expires-at, not both", {
      code: "options_conflict",
    });
  }
  let at: number;
  if (typeof inText === "string") {
    at = Date.parse(fromNow("--expires-in", inText, options));
  } else if (typeof atText === "string") {
    // Date.parse moves 2030-02-31 to March 3rd: a day that does not exist
    // is refused, not guessed at.
    at = /^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/
        .test(atText.trim()) && dayExists(atText)
      ? Date.parse(atText.trim())
      : NaN;
    if (Number.isNaN(at)) {
      throw invalid(
        `--expires-at must be an ISO 8601 time with a zone, such as 2030-01-31T00:00:00Z, not ${
          JSON.stringify(atText)
        }`,
      );
    }
    if (at <= now) {
      throw invalid(
        `--expires-at ${atText.trim()} has passed; give a time in the future`,
      );
    }
  } else {
    return max === null ? null : new Date(now + max).toISOString();
  }
  if (max !== null && at - now > max) {
    throw invalid(
      `The key would live longer than KEY_MAX_LIFETIME allows (${
        processEnv("KEY_MAX_LIFETIME")?.trim()
      }); ask for less, or raise KEY_MAX_LIFETIME`,
    );
  }
  return new Date(at).toISOString();
}

/** The time (ISO 8601) a duration such as 7d, given as `option`, from now. */
export function fromNow(
  option: string,
  text: string,
  options: { now: number },
): string {
  const ms = parseDuration(text);
  if (ms === null) {
    throw invalid(
      `${option} must be a duration such as 60s, 15m, 2h or 7d, not ${
        JSON.stringify(text)
      }`,
    );
  }
  const at = new Date(options.now + ms);
  // parseDuration allows 999999999d, millions of years.
  if (Number.isNaN(at.getTime())) {
    throw invalid(
      `${option} ${
        JSON.stringify(text.trim())
      } reaches past the last time a date can hold; give a shorter duration`,
    );
  }
  return at.toISOString();
}

function invalid(message: string): ConsoleError {
  return new ConsoleError(message, { code: "invalid_value" });
}

/** True when `text` (checked as ISO 8601 already) names a day its month has. */
function dayExists(text: string): boolean {
  const [year, month, day] = text.trim().slice(0, 10).split("-").map(Number);
  const date = new Date(Date.UTC(year, month - 1, day));
  return date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}
