/**
 * A new key's lifetime as the admin asked for it (`--expires-in`,
 * `--expires-at`) within the installation's `KEY_MAX_LIFETIME`, and the
 * length of a rotation's overlap (`--overlap`).
 *
 * @module
 */

import {
  parseDuration,
  processEnv,
  readKeyMaxLifetime,
} from "../server/config.ts";
import type { Context } from "./command.ts";
import { UsageError } from "./errors.ts";

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
 * else KEY_MAX_LIFETIME from now when it is set. Throws a UsageError for
 * a time that is not one, is past, or lies beyond KEY_MAX_LIFETIME.
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
    throw new UsageError("Give --expires-in or --expires-at, not both", {
      code: "options_conflict",
    });
  }
  let at: number;
  if (typeof inText === "string") {
    const ms = parseDuration(inText);
    if (ms === null) {
      throw new UsageError(
        `--expires-in must be a duration such as 60s, 15m, 2h or 7d, not ${
          JSON.stringify(inText)
        }`,
      );
    }
    at = Date.parse(isoAfter(now, ms, "--expires-in", inText));
  } else if (typeof atText === "string") {
    // Date.parse moves 2030-02-31 to March 3rd: a day that does not exist
    // is refused, not guessed at.
    at = /^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/
        .test(atText.trim()) && dayExists(atText)
      ? Date.parse(atText.trim())
      : NaN;
    if (Number.isNaN(at)) {
      throw new UsageError(
        `--expires-at must be an ISO 8601 time with a zone, such as 2030-01-31T00:00:00Z, not ${
          JSON.stringify(atText)
        }`,
      );
    }
    if (at <= now) {
      throw new UsageError(
        `--expires-at ${atText.trim()} has passed; give a time in the future`,
      );
    }
  } else {
    return max === null ? null : new Date(now + max).toISOString();
  }
  if (max !== null && at - now > max) {
    throw new UsageError(
      `The key would live longer than KEY_MAX_LIFETIME allows (${
        processEnv("KEY_MAX_LIFETIME")?.trim()
      }); ask for less, or raise KEY_MAX_LIFETIME`,
    );
  }
  return new Date(at).toISOString();
}

/**
 * `now + ms` as ISO 8601, or a UsageError naming `option` when no date can
 * hold it (parseDuration allows 999999999d, millions of years).
 */
function isoAfter(
  now: number,
  ms: number,
  option: string,
  text: string,
): string {
  const at = new Date(now + ms);
  if (Number.isNaN(at.getTime())) {
    throw new UsageError(
      `${option} ${
        JSON.stringify(text.trim())
      } reaches past the last time a date can hold; give a shorter duration`,
    );
  }
  return at.toISOString();
}

/** True when `text` (checked as ISO 8601 already) names a day its month has. */
function dayExists(text: string): boolean {
  const [year, month, day] = text.trim().slice(0, 10).split("-").map(Number);
  const date = new Date(Date.UTC(year, month - 1, day));
  return date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

/** The lifetime of a rotation's replacement: KEY_MAX_LIFETIME when set. */
export function replacementExpiry(options: { now: number }): string | null {
  const max = readKeyMaxLifetime(processEnv);
  return max === null ? null : new Date(options.now + max).toISOString();
}

/** The deadline of `--overlap DURATION` from now (ISO 8601). */
export function overlapDeadline(
  text: string,
  options: { now: number },
): string {
  const ms = parseDuration(text);
  if (ms === null) {
    throw new UsageError(
      `--overlap must be a duration such as 60s, 15m, 2h or 7d, not ${
        JSON.stringify(text)
      }`,
    );
  }
  return isoAfter(options.now, ms, "--overlap", text);
}
