/**
 * A webhook URL has a length limit, so that the endpoint list (one entry,
 * read by every change) stays small: on Deno KV ten URLs of 7,000 characters
 * failed the ninth `keys webhooks add` with the store's raw "Value too large
 * (max 65536 bytes)", and on PostgreSQL nothing stopped megabytes being read
 * by each change.
 */

import assert from "node:assert/strict";
import { openKvStore } from "../../lib/store/kv.ts";
import { MAX_ENDPOINTS } from "../../lib/store/webhook_types.ts";
import {
  endpointUrl,
  EndpointUrlError,
  URL_MAX,
} from "../../lib/webhooks/endpoint_url.ts";

const BASE = "https://hooks.example.com/";

Deno.test("a webhook URL longer than the limit is refused naming it, and the most endpoints at the limit fit in the store", async () => {
  assert.throws(
    () => endpointUrl(BASE + "a".repeat(URL_MAX)),
    (error: EndpointUrlError) =>
      error.code === "not_a_url" && error.message.includes(String(URL_MAX)),
  );
  const longest = BASE + "a".repeat(URL_MAX - BASE.length);
  const url = endpointUrl(longest).href;
  assert.equal(url.length, URL_MAX);
  const store = await openKvStore(`${await Deno.makeTempDir()}/keys.db`);
  try {
    for (let i = 0; i < MAX_ENDPOINTS; i++) {
      await store.webhooks.addEndpoint({
        url,
        events: ["key.revoked"],
        signingKey: "a".repeat(44),
      });
    }
    assert.equal((await store.webhooks.endpoints()).length, MAX_ENDPOINTS);
  } finally {
    await store.close();
  }
});
