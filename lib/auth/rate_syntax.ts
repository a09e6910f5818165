/**
 * Rates as written in the console and the configuration (`600/min`,
 * `100/10s`, `none`), read and written back.
 *
 * @module
 */

import {
  RATE_MAX_COUNT,
  RATE_MAX_WINDOW_SECONDS,
} from "../store/rate_limits.ts";
import type { RateLimit } from "../store/types.ts";

const UNITS: Record<string, number> = {
  s: 1,
  sec: 1,
  second: 1,
  m: 60,
  min: 60,
  minute: 60,
  h: 3600,
  hour: 3600,
  d: 86_400,
  day: 86_400,
};

/** `600/min`, `100/10s`, `50000/day`…; `none` is null; else throws, so a typo is never "no limit". */
export function parseRate(text: string): RateLimit | null {
  const trimmed = text.trim().toLowerCase();
  if (trimmed === "none") return null;
  // A count of 0 is read, to be refused as out of range rather than as no rate.
  const match = /^(0+|[1-9][0-9]*)\/([1-9][0-9]{0,5})?([a-z]+)$/.exec(
    trimmed,
  );
  const seconds = match ? UNITS[match[3]] : undefined;
  if (match === null || seconds === undefined) {
    throw new RateSyntaxError("rate_syntax", text);
  }
  const windowSeconds = seconds * Number(match[2] ?? 1);
  if (windowSeconds > RATE_MAX_WINDOW_SECONDS) {
    throw new RateSyntaxError("rate_syntax", text);
  }
  const count = Number(match[1]);
  if (count < 1) throw new RateSyntaxError("invalid_rateLimit", text);
  if (count > RATE_MAX_COUNT) throw new RateSyntaxError("rate_too_large", text);
  return { count, windowSeconds };
}

/** `600/min`: the unit the window was written in, or seconds. */
export function formatRate(limit: RateLimit): string {
  const unit = WRITTEN[limit.windowSeconds];
  return unit === undefined
    ? `${limit.count}/${limit.windowSeconds}s`
    : `${limit.count}/${unit}`;
}

const WRITTEN: Record<number, string> = {
  1: "s",
  60: "min",
  3600: "h",
  86_400: "day",
};

/** A rate the console or the configuration could not read. */
export class RateSyntaxError extends Error {
  /** `invalid_rateLimit` (a count of 0) is the store's code for a limit out of range. */
  readonly code: "rate_syntax" | "rate_too_large" | "invalid_rateLimit";
  constructor(code: RateSyntaxError["code"], text: string) {
    const rate = `Rate '${text.slice(0, 40)}'`;
    super(
      code === "rate_syntax"
        ? `${rate} is not a rate; write COUNT/UNIT such as 600/min, 10/s, 100/10s, 1000/h or 50000/day (a window of at most a day), or none`
        : code === "rate_too_large"
        ? `${rate} allows more than ${RATE_MAX_COUNT} requests; write a smaller count, or none for no limit`
        : `${rate} allows no requests; the count must be 1 to ${RATE_MAX_COUNT}, such as 600/min, or none for no limit`,
    );
    this.name = "RateSyntaxError";
    this.code = code;
  }
}
