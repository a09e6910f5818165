/**
 * The connection check's JSON body as the service answers a valid key, for
 * the bare server (bench/bare_server.ts) and the parts' timings
 * (bench/parts.ts) to build as the service would.
 *
 * @module
 */

/** A connection status of key 1, at this moment. */
export function statusBody(): string {
  return JSON.stringify({
    connected: true,
    authenticatedByApiKey: true,
    apiKeyId: 1,
    email: "ops@example.com",
    serverUtc: new Date().toISOString(),
  });
}
