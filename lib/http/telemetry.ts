/**
 * OpenTelemetry, through Deno's built-in integration (`OTEL_DENO=true`):
 * Deno.serve already opens a span per request and exports runtime metrics;
 * this module adds what only the service knows, and takes out what must
 * never leave it.
 *
 * - Each request span gets `http.route` and, when authenticated, the key id
 *   (`integration.api_key.id`): never the key, never the query string.
 * - `integration.auth.outcomes` counts authentication outcomes by `outcome`
 *   and `http.route`.
 *
 * A limit of Deno 2.9 that no code here can lift: the span Deno.serve opens
 * records `url.full` and `url.query` with the raw query string before the
 * handler runs, and attributes cannot be removed afterwards (setting them
 * again only adds a second value). So a key someone pasted into a URL, which
 * the service refuses and marks exposed, reaches the collector on that span.
 * docs/operators.md gives the collector rule that strips both attributes.
 *
 * Without OTEL_DENO, Deno's no-op providers make all of this nearly free.
 *
 * @module
 */

import { activeSpan, counter } from "../util/otel.ts";

/** The outcomes counted, one per answer of an authenticated route or a URL refused. */
export type AuthOutcome =
  | "ok"
  | "invalid"
  | "revoked"
  | "locked_out"
  | "url_exposed"
  /** A valid key from outside its allowFrom, answered as an invalid one. */
  | "address_refused"
  /** A valid key past its rate limit: 429, not counted toward the lock-out. */
  | "rate_limited";

const outcomes = counter(
  "integration.auth.outcomes",
  {
    description:
      "Authentication outcomes by route: ok, invalid, revoked, locked_out, url_exposed, address_refused",
  },
);

/** Counts one authentication outcome on a route (`unrouted` for none). */
export function countOutcome(outcome: AuthOutcome, route: string): void {
  outcomes.add(1, { outcome, "http.route": route });
}

/** Adds the route and, when authenticated, the key id to the request's span. */
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
