/**
 * What only the service knows, on OpenTelemetry (`OTEL_DENO=true`): `http.route`
 * and key id on the request span (never the key), `integration.auth.outcomes`.
 * Deno 2.9's span records `url.full` and `url.query` before the handler, and
 * attributes cannot be removed: a key pasted into a URL reaches the collector;
 * docs/operators.md gives the collector rule that strips them.
 *
 * @module
 */

import { activeSpan, counter } from "../util/otel.ts";

/** One per answer of an authenticated route or a URL refused. */
export type AuthOutcome =
  | "ok"
  | "invalid"
  | "revoked"
  | "locked_out"
  | "url_exposed"
  | "address_refused"
  | "rate_limited";

const outcomes = counter(
  "integration.auth.outcomes",
  {
    description:
      "Authentication outcomes by route: ok, invalid, revoked, locked_out, url_exposed, address_refused",
  },
);

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
