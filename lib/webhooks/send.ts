/**
 * One try of one delivery: the Standard Webhooks payload, signed, POSTed
 * with a deadline, and what came of it. Only the status is read; the
 * receiver's body is discarded unread.
 * @module
 */

import type {
  Attempt,
  StoredEndpoint,
  WebhookEvent,
} from "../store/webhook_types.ts";
import { grantedHost } from "./endpoint_url.ts";
import { signedHeaders } from "./sign.ts";

/** The body a receiver gets: `{type, timestamp, data}`. */
export function payload(event: WebhookEvent): string {
  const { type, timestamp, data } = event;
  return JSON.stringify({ type, timestamp, data });
}

/** Whether a try delivered its event: the receiver answered 2xx. */
export function delivered(attempt: Attempt): boolean {
  return attempt.status !== null && attempt.status >= 200 &&
    attempt.status < 300;
}

/**
 * Sends `event` to `endpoint` once; never throws. `signal` aborts it (a
 * stop); with `hosts` (WEBHOOK_HOSTS), a URL on no host of it is not sent.
 */
export async function sendOnce(
  endpoint: StoredEndpoint,
  event: WebhookEvent,
  options: {
    at: Date;
    timeoutMs: number;
    signal?: AbortSignal;
    hosts?: readonly string[];
  },
): Promise<Attempt> {
  const body = payload(event);
  const headers = await signedHeaders(endpoint.signingKey, {
    id: event.id,
    body,
  }, { at: options.at });
  const started = performance.now();
  const result = (status: number | null, error: string | null): Attempt => ({
    at: options.at.toISOString(),
    status,
    error,
    ms: Math.round(performance.now() - started),
  });
  if (options.hosts && !grantedHost(new URL(endpoint.url), options.hosts)) {
    return result(null, "not_permitted");
  }
  const timeout = AbortSignal.timeout(options.timeoutMs);
  try {
    const response = await fetch(endpoint.url, {
      method: "POST",
      headers,
      body,
      // A redirect is an answer: following it would send the payload to a
      // host nobody configured.
      redirect: "manual",
      signal: options.signal
        ? AbortSignal.any([timeout, options.signal])
        : timeout,
    });
    await response.body?.cancel();
    return result(response.status, null);
  } catch (error) {
    if (timeout.aborted) return result(null, "timeout");
    if (options.signal?.aborted) return result(null, "stopped");
    if (error instanceof Deno.errors.NotCapable) {
      return result(null, "not_permitted");
    }
    return result(null, "connection");
  }
}
