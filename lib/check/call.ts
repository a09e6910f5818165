/**
 * The HTTP call: one timed GET with the key in its header; network failures told apart.
 *
 * @module
 */

import { CHECK_ENV, type CheckConfig } from "./config.ts";
import { judgeFailure, judgeStatus } from "./judge.ts";
import { blankOutcome, type CheckOutcome, state } from "./outcome.ts";
import { microseconds } from "./_units.ts";
import { readRateBudget, withRateBudget } from "./rate_budget.ts";

// The connection status is a few hundred bytes; a page this big is not it.
const MAX_BODY_BYTES = 64 * 1024;

/** Options of {@linkcode runCheck}. */
export interface RunCheckOptions {
  /** Replaces the global fetch; tests use it. */
  fetch?: typeof fetch;
  /** This machine's clock in milliseconds since the epoch; tests pin it. */
  now?: () => number;
}

/** Calls the route once and judges the answer. Never throws for network trouble. */
export async function runCheck(
  config: CheckConfig,
  options: RunCheckOptions = {},
): Promise<CheckOutcome> {
  const doFetch = options.fetch ?? fetch;
  const now = options.now ?? Date.now;
  const base = blankOutcome(config);
  const signal = AbortSignal.timeout(config.timeoutSeconds * 1000);
  const sentAt = now();
  const started = performance.now();
  let response: Response;
  let body: string;
  let roundTripMs: number;
  try {
    response = await doFetch(config.url, {
      headers: {
        "X-API-Key": config.apiKey,
        "Accept": "application/json",
        "User-Agent": "integration-connection-check",
      },
      // A followed redirect would hand the X-API-Key header to wherever the
      // Location points, another host included: stop and report instead.
      redirect: "manual",
      signal,
    });
    // The server stamps serverUtc just before its headers leave; the body
    // adds transfer time that is not part of the round trip.
    roundTripMs = performance.now() - started;
    body = await readLimited(response, MAX_BODY_BYTES);
  } catch (error) {
    return { ...base, ...networkFailure(error, config) };
  }
  const answered: CheckOutcome = {
    ...base,
    reachable: true,
    httpStatus: response.status,
    roundTripSeconds: microseconds(roundTripMs / 1000),
  };
  const budget = readRateBudget(response.headers);
  if (response.status === 200) {
    return withRateBudget(
      judgeStatus(answered, body, {
        localMidpointMs: sentAt + roundTripMs / 2,
        maxOffsetSeconds: config.maxOffsetSeconds,
        expiryWarningDays: config.expiryWarningDays,
      }),
      budget,
    );
  }
  return withRateBudget(
    { ...answered, ...judgeFailure(response, body) },
    budget,
  );
}

async function readLimited(response: Response, limit: number): Promise<string> {
  if (response.body === null) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of response.body) {
    chunks.push(chunk);
    size += chunk.length;
    if (size > limit) break;
  }
  const all = new Uint8Array(Math.min(size, limit));
  let offset = 0;
  for (const chunk of chunks) {
    const part = chunk.subarray(0, all.length - offset);
    all.set(part, offset);
    offset += part.length;
  }
  return new TextDecoder().decode(all);
}

function networkFailure(
  error: unknown,
  config: CheckConfig,
): Partial<CheckOutcome> {
  if (error instanceof Deno.errors.NotCapable) {
    return {
      ...state("UNKNOWN"),
      summary: `network access was refused by Deno: ${error.message}`,
      advice: "run the check with deno task check, which grants --allow-net",
    };
  }
  const where = config.url.host;
  const unreachable = (summary: string, advice: string) => ({
    ...state("CRITICAL"),
    reachable: false,
    summary,
    advice,
  });
  if (error instanceof DOMException && error.name === "TimeoutError") {
    return unreachable(
      `no answer from ${where} within ${config.timeoutSeconds} s`,
      `check that the service is up and that nothing between here and ${where} drops the connection; raise ${CHECK_ENV.timeout} if the link is slow`,
    );
  }
  const detail = causeText(error);
  // The one place that reads message text, because Deno 2.9 gives nothing
  // else: a failed fetch is a TypeError whose cause is a plain Error, with
  // no class or code for TLS, DNS or a refused connection. Unknown text is
  // reported as it is.
  if (
    /certificate|tls|ssl|handshake|corrupt message|unknownissuer/i.test(detail)
  ) {
    return unreachable(
      `TLS failure with ${where}: ${detail}`,
      "check the server's certificate (issuer, expiry, host name) and that the address uses https:// only where the service speaks TLS",
    );
  }
  if (/dns error|failed to lookup|name or service not known/i.test(detail)) {
    return unreachable(
      `cannot resolve ${config.url.hostname}`,
      `check the host name in ${CHECK_ENV.baseUrl} and this machine's DNS`,
    );
  }
  if (/connection refused/i.test(detail)) {
    return unreachable(
      `connection refused by ${where}`,
      `check that the service is running and the port in ${CHECK_ENV.baseUrl}`,
    );
  }
  return unreachable(
    `cannot reach ${where}: ${detail}`,
    `check ${CHECK_ENV.baseUrl} and the network path to the service`,
  );
}

/** A fetch error's innermost message, without Deno's URL prefix, safe for a terminal and alert. */
function causeText(error: unknown): string {
  const cause = error instanceof Error && error.cause instanceof Error
    ? error.cause
    : error;
  const text = (cause instanceof Error ? cause.message : String(cause))
    .replace(/^error sending request for url \([^)]*\):\s*/i, "")
    // deno-lint-ignore no-control-regex
    .replace(/[\u0000-\u001f\u007f-\u009f]+/g, " ").trim();
  return text.length > 200 ? text.slice(0, 199) + "…" : text;
}
