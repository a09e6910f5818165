/**
 * A new key's lifetime as the admin asked for it (`--expires-in`,
 * `--expires-at`) within the installation's `KEY_MAX_LIFETIME`, and the
 * end of a rotation's overlap (`--overlap`).
 *
 * @module
 */

import {
  parseDuration,
  processEnv,
  readKeyMaxLifetime,
} from "../server/config.ts";
import type { Context } from "./command.ts";
import { ConsoleError } from "./errors.ts";

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
 * When a new key expires (ISO 8601), or null for never: what was asked,
 * else KEY_MAX_LIFETIME from now when it is set. A time that is not one, is
 * past, or lies beyond KEY_MAX_LIFETIME is a usage error.
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
