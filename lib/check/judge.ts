/**
 * Judges a 200 by its status and clock offset, others by what they mean to the integrator.
 *
 * @module
 */

import { firstBreach } from "../http/schema.ts";
import {
  CONNECTION_STATUS_SCHEMA,
  type ConnectionStatus as RouteStatus,
} from "../routes/connection.ts";
import { CHECK_ENV } from "./config.ts";
import { type CheckOutcome, state } from "./outcome.ts";
import {
  counted,
  microseconds,
  milliseconds,
  plain,
  signed,
} from "./_units.ts";

/**
 * A 200's body: OK, WARNING when the clock offset (against the request's
 * midpoint here) passes the threshold, UNKNOWN when not a connection status.
 */
export function judgeStatus(
  answered: CheckOutcome,
  body: string,
  clock: {
    localMidpointMs: number;
    maxOffsetSeconds: number;
    /** A key expiring within this many days is a WARNING; 0 or unset: never. */
    expiryWarningDays?: number;
  },
): CheckOutcome {
  const status = parseConnectionStatus(body);
  if (typeof status === "string") {
    return {
      ...answered,
      ...state("UNKNOWN"),
      summary: `HTTP 200 with an unexpected body: ${status}`,
      advice:
        `check that ${CHECK_ENV.baseUrl} points at the integration service and not at a proxy or login page`,
    };
  }
  const offset = microseconds(
    (Date.parse(status.serverUtc) - clock.localMidpointMs) / 1000,
  );
  const who = `key ${status.apiKeyId} (${status.email})`;
  const found = {
    ...answered,
    apiKeyId: status.apiKeyId,
    email: status.email,
    serverUtc: status.serverUtc,
    clockOffsetSeconds: offset,
    ...(status.apiKeyExpiresAt === undefined
      ? {}
      : { apiKeyExpiresAt: status.apiKeyExpiresAt }),
  };
  const rtt = `round trip ${milliseconds(answered.roundTripSeconds!)}`;
  if (Math.abs(offset) > clock.maxOffsetSeconds) {
    return {
      ...found,
      ...state("WARNING"),
      summary: `clock offset ${signed(offset)} s exceeds ${
        plain(clock.maxOffsetSeconds)
      } s, ${who}, ${rtt}`,
      advice:
        "synchronise this machine's clock (NTP); if it is right, tell the installation's administrator that the server's clock is off",
    };
  }
  const expiring = expiryWarning(status, clock);
  if (expiring !== null) {
    return {
      ...found,
      ...state("WARNING"),
      summary: `${who} expires ${expiring}, clock offset ${
        signed(offset)
      } s, ${rtt}`,
      advice:
        `ask the installation's administrator for a replacement key now and put it in ${CHECK_ENV.apiKey} before then; after it the key gets 401`,
    };
  }
  return {
    ...found,
    ...state("OK"),
    summary: `${who}, clock offset ${signed(offset)} s, ${rtt}`,
  };
}

/** "at TIME (in N days)" when the key expires within the warning (server clock); else null. */
function expiryWarning(
  status: ConnectionStatus,
  clock: { expiryWarningDays?: number },
): string | null {
  const days = clock.expiryWarningDays ?? 0;
  if (status.apiKeyExpiresAt === undefined || days <= 0) return null;
  const left = Date.parse(status.apiKeyExpiresAt) -
    Date.parse(status.serverUtc);
  if (left >= days * 86_400_000) return null;
  // Rounded up: "within 2 hours" of a key with 1.5 hours left is true,
  // "within 1 hours" was neither true nor English.
  const hours = Math.max(0, left) / 3_600_000;
  const within = hours < 48
    ? counted(Math.max(1, Math.ceil(hours)), "hour")
    : counted(Math.ceil(hours / 24), "day");
  return `at ${status.apiKeyExpiresAt} (within ${within})`;
}

/** The fields of a connection status that the check reports. */
export type ConnectionStatus = Pick<
  RouteStatus,
  "apiKeyId" | "email" | "serverUtc" | "apiKeyExpiresAt"
>;

/**
 * The fields the check relies on, or the first that breaks the route's schema;
 * fields added later are ignored, so the check keeps working.
 */
export function parseConnectionStatus(body: string): ConnectionStatus | string {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return body.trim() === "" ? "it is empty" : "it is not JSON";
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return "it is not a JSON object";
  }
  const fields = value as Record<string, unknown>;
  const breach = firstBreach(CONNECTION_STATUS_SCHEMA, fields);
  if (breach !== null) return breach;
  const status = fields as RouteStatus;
  const { apiKeyId, email, serverUtc, apiKeyExpiresAt } = status;
  return apiKeyExpiresAt === undefined
    ? { apiKeyId, email, serverUtc }
    : { apiKeyId, email, serverUtc, apiKeyExpiresAt };
}

/** Any answer but a 200: what it means, and what to do about it. */
export function judgeFailure(
  response: Response,
  body: string,
): Partial<CheckOutcome> {
  const status = response.status;
  const code = errorCode(body);
  const label = `HTTP ${status}${code === null ? "" : ` ${code}`}`;
  const retryAfter = retryAfterSeconds(response.headers.get("retry-after"));
  const wait = retryAfter === null ? "later" : `after ${retryAfter} s`;
  const critical = (summary: string, advice: string) => ({
    ...state("CRITICAL"),
    summary,
    advice,
  });
  if (status === 401) {
    return critical(
      `key refused (${label}): it is revoked or invalid`,
      `do not retry in a loop, that leads to lock-out; check that ${CHECK_ENV.apiKey} holds the whole key, otherwise ask the installation's administrator to revoke it and generate a replacement`,
    );
  }
  if (status === 429 && code === "rate_limited") {
    // The key is valid and the service up: the installation calls more
    // often than the key's limit allows.
    return {
      ...state("WARNING"),
      retryAfterSeconds: retryAfter,
      summary: `the key's rate limit is used up (${label}), retry ${wait}`,
      advice:
        "the key is fine; the installation calls more often than its rate limit allows: slow its calls down by the RateLimit header, or ask the installation's administrator for a higher limit",
    };
  }
  if (status === 429) {
    return {
      ...critical(
        `rate limited (${label}), retry ${wait}`,
        "wait for Retry-After before the next call; if 401 answers came first, fix or replace the key, or the lock-out starts again",
      ),
      retryAfterSeconds: retryAfter,
    };
  }
  if (status === 503) {
    return {
      ...critical(
        `service unavailable (${label}), retry ${wait}`,
        "the service cannot check keys right now; your key is not in question, keep it and retry later",
      ),
      retryAfterSeconds: retryAfter,
    };
  }
  if (status >= 300 && status < 400) {
    const location = response.headers.get("location");
    // Printed without user information, query or fragment.
    const target = location !== null && URL.canParse(location, response.url)
      ? new URL(location, response.url)
      : null;
    return critical(
      `redirected (${label}) to ${
        target === null ? "an unknown address" : target.origin + target.pathname
      }; not followed`,
      `set ${CHECK_ENV.baseUrl} to the final address; redirects are not followed so that the key is never sent to another address`,
    );
  }
  if (status === 400 && code === "key_in_url") {
    return critical(
      `the service saw a credential in the URL (${label})`,
      `remove it from ${CHECK_ENV.baseUrl}, and have a key that was in a URL replaced`,
    );
  }
  if (status === 404) {
    return critical(
      `no connection route at this address (${label})`,
      `check ${CHECK_ENV.baseUrl}: scheme, host, port and any path prefix, without /api/v1`,
    );
  }
  return critical(
    `unexpected ${label}`,
    "look at the service's logs, or ask the installation's administrator",
  );
}

/** The machine-readable `error` of an error body, when it looks like one. */
function errorCode(body: string): string | null {
  try {
    const value = JSON.parse(body);
    const code = value?.error;
    return typeof code === "string" && /^[a-z][a-z0-9_]{0,63}$/.test(code)
      ? code
      : null;
  } catch {
    return null;
  }
}

function retryAfterSeconds(header: string | null): number | null {
  if (header === null) return null;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const date = Date.parse(text);
  return Number.isFinite(date)
    ? Math.max(0, Math.ceil((date - Date.now()) / 1000))
    : null;
}
