/**
 * The check's output: the monitoring-plugin text (a first line with
 * performance data, then details) or one JSON object; either way with
 * control characters escaped and the key withheld in any spelling.
 *
 * @module
 */

import { decodeAsciiEscapes, stillEscaped } from "../util/ascii_escapes.ts";
import { escapeControlCharacters } from "../util/control_characters.ts";
import type { CheckOutcome } from "./outcome.ts";
import { milliseconds, plain, signed } from "./_units.ts";
import { describeBudget, LOW_BUDGET_SHARE } from "./rate_budget.ts";

/**
 * The first line: state, summary and any performance data. Server text in the
 * summary gets control and bidirectional characters as `\uXXXX` escapes.
 */
export function formatFirstLine(outcome: CheckOutcome): string {
  const perf: string[] = [];
  if (
    outcome.clockOffsetSeconds !== null && outcome.maxOffsetSeconds !== null
  ) {
    // A range: alert below -N or above N, since the offset has a sign.
    const max = plain(outcome.maxOffsetSeconds);
    perf.push(
      `offset=${outcome.clockOffsetSeconds.toFixed(6)}s;-${max}:${max}`,
    );
  }
  if (outcome.roundTripSeconds !== null) {
    perf.push(`rtt=${outcome.roundTripSeconds.toFixed(6)}s;;;0`);
  }
  const budget = outcome.rateLimit;
  if (budget !== undefined) {
    // Warn below a tenth of the quota: a range whose low end alerts.
    perf.push(
      `budget=${budget.remaining};${
        Math.ceil(budget.quota * LOW_BUDGET_SHARE)
      }:;;0;${budget.quota}`,
    );
  }
  return escapeControlCharacters(
    `CONNECTION ${outcome.state} - ${outcome.summary}` +
      (perf.length === 0 ? "" : ` | ${perf.join(" ")}`),
  );
}

/** The lines after the first: every measurement, then the advice, escaped as the first. */
export function formatDetails(outcome: CheckOutcome): string[] {
  const lines: string[] = [];
  const add = (label: string, value: string) =>
    lines.push(`${(label + ":").padEnd(14)}${value}`);
  if (outcome.reachable !== null) {
    add(
      "reachable",
      outcome.reachable ? `yes, ${outcome.url}` : `no, ${outcome.url}`,
    );
  }
  if (outcome.httpStatus !== null) {
    add("HTTP status", String(outcome.httpStatus));
  }
  if (outcome.apiKeyId !== null) add("key id", String(outcome.apiKeyId));
  if (outcome.email !== null) add("e-mail", outcome.email);
  if (outcome.apiKeyExpiresAt !== undefined) {
    add("key expires", outcome.apiKeyExpiresAt);
  }
  if (outcome.serverUtc !== null) add("server UTC", outcome.serverUtc);
  if (outcome.clockOffsetSeconds !== null) {
    const offset = outcome.clockOffsetSeconds;
    const direction = offset >= 0 ? "ahead of" : "behind";
    add(
      "clock offset",
      `${signed(offset)} s ± ${
        (outcome.roundTripSeconds! / 2).toFixed(3)
      } s (the server's clock is ${direction} this machine's; warning above ${
        plain(outcome.maxOffsetSeconds!)
      } s)`,
    );
  }
  if (outcome.roundTripSeconds !== null) {
    add("round trip", milliseconds(outcome.roundTripSeconds));
  }
  if (outcome.retryAfterSeconds !== null) {
    add("retry after", `${outcome.retryAfterSeconds} s`);
  }
  if (outcome.rateLimit !== undefined) {
    add("rate limit", describeBudget(outcome.rateLimit));
  }
  if (outcome.advice !== null) add("what to do", outcome.advice);
  return lines.map(escapeControlCharacters);
}

/** The whole output of an outcome: JSON, or the first line and the details. */
export function formatOutcome(
  outcome: CheckOutcome,
  options: { json: boolean },
): string {
  return options.json
    // Still exact JSON: the escapes are JSON's own.
    ? escapeControlCharacters(JSON.stringify(outcome))
    : [formatFirstLine(outcome), ...formatDetails(outcome)].join("\n");
}

// A text this short is no key (a key has 40 characters); searching for it
// would withhold ordinary words.
const MIN_SECRET_LENGTH = 8;

/**
 * Any string holding the key in a spelling a server could echo (percent-encoded,
 * split by invisible or control characters) is withheld whole, an exact copy
 * shown as `[redacted]`: alert history must not hold it. The check's only guard.
 */
export function withholdKey<T>(value: T, secret: string): T {
  if (secret.length < MIN_SECRET_LENGTH) return value;
  const wanted = letters(decodeAsciiEscapes(secret));
  const visit = (item: unknown): unknown => {
    if (typeof item === "string") {
      const redacted = item.replaceAll(secret, "[redacted]");
      const decoded = decodeAsciiEscapes(redacted);
      // Escaped deeper than decoding goes, it may hide the key: withheld too.
      return letters(decoded).includes(wanted) || stillEscaped(decoded)
        ? "[withheld: the text held the API key]"
        : redacted;
    }
    if (Array.isArray(item)) return item.map(visit);
    if (item !== null && typeof item === "object") {
      return Object.fromEntries(
        Object.entries(item).map(([k, v]) => [k, visit(v)]),
      );
    }
    return item;
  };
  return visit(value) as T;
}

/** The letters and digits of a decoded text. */
function letters(text: string): string {
  return text.replace(/[^0-9A-Za-z]/g, "");
}
