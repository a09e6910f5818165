/**
 * What only the service knows, on OpenTelemetry (`OTEL_DENO=true`): `http.route`
 * and key id on the request span (never the key), `integration.auth.outcomes`.
 * Deno 2.9's span records `url.full` and `url.query` before the handler, and
 * attributes cannot be removed: a key pasted into a URL reaches the collector;
 * docs/operators.md gives the collector rule that strips them.
 *
 * @module
 */

import type { LockScope } from "../auth/lockout.ts";
import { activeSpan, counter } from "../util/otel.ts";

/** One per answer of an authenticated route, a URL refused or a leak report. */
export type AuthOutcome =
  | "ok"
  | "invalid"
  | "revoked"
  | "locked_out"
  | "url_exposed"
  | "address_refused"
  | "rate_limited"
  | "leak_reported";

const outcomes = counter(
  "integration.auth.outcomes",
  {
    description:
      "Authentication outcomes by route: ok, invalid, revoked, locked_out, url_exposed, address_refused, rate_limited, leak_reported",
  },
);

/**
 * The API-key step's decision as the Prometheus figures tell it
 * (lib/server/figures.ts): an `invalid` told apart as missing, malformed
 * or unknown, a `revoked` as revoked or expired.
 */
export type AuthReason =
  | "valid"
  | "missing"
  | "malformed"
  | "unknown"
  | "revoked"
  | "expired"
  | "refused_network"
  | "locked_out"
  | "rate_limited"
  | "url_exposed"
  | "leak_reported";

/** Each reason's coarser outcome, the one OpenTelemetry has always counted. */
export const OUTCOME_OF: Readonly<Record<AuthReason, AuthOutcome>> = {
  valid: "ok",
  missing: "invalid",
  malformed: "invalid",
  unknown: "invalid",
  revoked: "revoked",
  expired: "revoked",
  refused_network: "address_refused",
  locked_out: "locked_out",
  rate_limited: "rate_limited",
  url_exposed: "url_exposed",
  leak_reported: "leak_reported",
};

/** Hears each decision of the API-key step and each lock-out it starts. */
export interface AuthCounts {
  /** `keyId` for a valid key's answers (valid, rate limited). */
  outcome(reason: AuthReason, keyId?: number): void;
  lockout(scope: LockScope): void;
}

/** `unrouted` for no route. */
export function countOutcome(outcome: AuthOutcome, route: string): void {
  outcomes.add(1, { outcome, "http.route": route });
}

export function annotateRequest(
  fields: { route?: string; apiKeyId?: number },
): void {
  const span = activeSpan();
  if (span === undefined) return;
  if (fields.route !== undefined) span.setAttribute("http.route", fields.route);
  if (fields.apiKeyId !== undefined) {
    span.setAttribute("integration.api_key.id", fields.apiKeyId);
  }
}
