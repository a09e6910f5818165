/**
 * Standard Webhooks 1.0 signing: a `whsec_` secret (base64 of random bytes),
 * and the `webhook-id`, `webhook-timestamp` and `webhook-signature` headers,
 * the last `v1,` + base64 HMAC-SHA256 of `id.timestamp.body` keyed with the
 * secret's decoded bytes. Web Crypto signs; receivers verify with the
 * reference library of their language (`standardwebhooks` on npm).
 * @module
 */

/** The secret's prefix, as Standard Webhooks writes it. */
export const SECRET_PREFIX = "whsec_";
/** Random bytes in a secret: the spec asks for 24 to 64. */
const SECRET_BYTES = 32;

/** A new secret, and the signing key the store keeps (its base64 part). */
export function newSecret(): { secret: string; signingKey: string } {
  const signingKey = crypto.getRandomValues(new Uint8Array(SECRET_BYTES))
    .toBase64();
  return { secret: `${SECRET_PREFIX}${signingKey}`, signingKey };
}

/** The headers of one delivery of `body`, signed with `signingKey` at `at`. */
export async function signedHeaders(
  signingKey: string,
  message: { id: string; body: string },
  options: { at: Date },
): Promise<Record<string, string>> {
  const timestamp = String(Math.floor(options.at.getTime() / 1000));
  const key = await crypto.subtle.importKey(
    "raw",
    Uint8Array.fromBase64(signingKey),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  const signed = await crypto.subtle.sign(
    "HMAC",
    key,
    new TextEncoder().encode(`${message.id}.${timestamp}.${message.body}`),
  );
  return {
    "content-type": "application/json",
    "webhook-id": message.id,
    "webhook-timestamp": timestamp,
    "webhook-signature": `v1,${new Uint8Array(signed).toBase64()}`,
  };
}
