/**
 * Signing as Standard Webhooks 1.0 defines it, proved by its reference
 * library: every delivery verifies with `standardwebhooks` and the secret
 * the console printed, and nothing else does.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { Webhook } from "standardwebhooks";
import { newSecret, signedHeaders } from "../../lib/webhooks/sign.ts";
import {
  endpointUrl,
  EndpointUrlError,
} from "../../lib/webhooks/endpoint_url.ts";
import { GIVE_UP_AFTER_MS, nextTry } from "../../lib/webhooks/schedule.ts";

Deno.test("every signed delivery verifies with the standardwebhooks reference library and the printed secret", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.string({ minLength: 1, maxLength: 40 }).map((s) =>
        `msg_${s.replace(/[^A-Za-z0-9]/g, "x")}`
      ),
      fc.jsonValue().map((value) => JSON.stringify({ data: value })),
      async (id, body) => {
        const { secret, signingKey } = newSecret();
        const headers = await signedHeaders(signingKey, { id, body }, {
          at: new Date(),
        });
        const verified = new Webhook(secret).verify(body, headers);
        assert.deepEqual(verified, JSON.parse(body));
      },
    ),
    { numRuns: 50 },
  );
});

Deno.test("a delivery altered on the way, or signed with another secret, fails verification", async () => {
  const { secret, signingKey } = newSecret();
  const body = JSON.stringify({ type: "key.revoked", data: { keyId: 1 } });
  const headers = await signedHeaders(signingKey, { id: "msg_1", body }, {
    at: new Date(),
  });
  const receiver = new Webhook(secret);
  assert.throws(() => receiver.verify(body.replace("1", "2"), headers));
  assert.throws(() =>
    receiver.verify(body, { ...headers, "webhook-id": "msg_2" })
  );
  assert.throws(() => new Webhook(newSecret().secret).verify(body, headers));
  // The reference library refuses a timestamp over 5 minutes off, replays too.
  const old = await signedHeaders(signingKey, { id: "msg_1", body }, {
    at: new Date(Date.now() - 10 * 60_000),
  });
  assert.throws(() => receiver.verify(body, old));
});

Deno.test("a secret is whsec_ and the base64 of 32 random bytes, never twice the same", () => {
  const seen = new Set<string>();
  for (let i = 0; i < 100; i++) {
    const { secret, signingKey } = newSecret();
    assert.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.equal(secret, `whsec_${signingKey}`);
    assert.equal(Uint8Array.fromBase64(signingKey).length, 32);
    seen.add(secret);
  }
  assert.equal(seen.size, 100);
});

Deno.test("a webhook URL must be HTTPS unless it points at this host", () => {
  for (
    const ok of [
      "https://hooks.example.com/keys",
      "http://127.0.0.1:8080/hook",
      "http://127.9.8.7/hook",
      "http://[::1]:9000/",
      "http://localhost/x",
      "http://LOCALHOST:1/x",
    ]
  ) assert.ok(endpointUrl(ok) instanceof URL, ok);
  for (
    const [text, code] of [
      ["http://hooks.example.com/keys", "https_required"],
      ["http://128.0.0.1/", "https_required"],
      ["http://127.0.0.1.example.com/", "https_required"],
      ["http://10.0.0.1/", "https_required"],
      ["ftp://127.0.0.1/", "not_a_url"],
      ["hooks.example.com", "not_a_url"],
      ["https://user:pw@hooks.example.com/", "not_a_url"],
    ]
  ) {
    assert.throws(
      () => endpointUrl(text),
      (error: EndpointUrlError) => error.code === code,
      text,
    );
  }
});

Deno.test("a failing delivery is retried with doubling delays, capped at an hour, for at least 24 hours", () => {
  const baseMs = 5_000;
  let now = 0;
  const delays: number[] = [];
  for (let tries = 1;; tries++) {
    const next = nextTry(tries, { nowMs: now, createdMs: 0, baseMs });
    if (next === null) break;
    delays.push(next - now);
    now = next;
  }
  assert.deepEqual(delays.slice(0, 4), [5_000, 10_000, 20_000, 40_000]);
  assert.ok(delays.every((d) => d <= 3_600_000));
  assert.ok(now >= 24 * 3_600_000, `last try at ${now / 3_600_000} h`);
  assert.ok(now >= GIVE_UP_AFTER_MS);
  assert.ok(delays.length < 40, `${delays.length} tries`);
});
