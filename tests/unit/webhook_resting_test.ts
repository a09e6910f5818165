/**
 * A receiver that fails is left alone for a moment before its other due
 * deliveries are tried: with a backlog to a receiver that is down, each
 * server tried every delivery back to back (3,000 in 5 s, a third of a core
 * on a 2-core machine, every time the backoff came round), for the same
 * refused connection. Once it answers again, all of it is delivered.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import { EVENT_TYPES } from "../../lib/store/webhook_types.ts";
import { WebhookSender } from "../../lib/webhooks/sender.ts";
import { newSecret } from "../../lib/webhooks/sign.ts";
import { startReceiver } from "../support/webhook_receiver.ts";

Deno.test("after a failed try an endpoint's backlog waits a moment instead of being tried back to back, and is all delivered once it answers", async () => {
  const store = await openKvStore(`${await Deno.makeTempDir()}/keys.db`);
  await using receiver = startReceiver();
  receiver.behave({ status: 503 });
  const { secret, signingKey } = newSecret();
  receiver.verifyWith(secret);
  await store.webhooks.addEndpoint({
    url: receiver.url,
    events: [...EVENT_TYPES],
    signingKey,
  });
  for (let i = 0; i < 20; i++) {
    const fresh = generateApiKey();
    await store.create({
      name: `k${i}`,
      email: `k${i}@example.com`,
      hash: fresh.hash,
      hint: fresh.hint,
    }, { actor: "test" });
  }
  let now = Date.now();
  const sender = new WebhookSender(store, {
    pollMs: 3_600_000,
    perEndpoint: 4,
    now: () => now,
    log: () => {},
  });
  try {
    await sender.idle();
    // One round's worth, in flight together, then it rests.
    assert.equal(receiver.received.length, 4);
    now += 1_000;
    await sender.idle();
    assert.equal(receiver.received.length, 8);
    receiver.behave({ status: 204 });
    // Minutes, not hours: a receiver refuses a timestamp 5 minutes off.
    for (let i = 0; i < 40 && receiver.received.length < 28; i++) {
      now += 5_000;
      await sender.idle();
    }
    const delivered = new Set(
      receiver.received.slice(8).map((received) => received.id),
    );
    assert.equal(delivered.size, 20);
    const all = await store.webhooks.deliveries();
    assert.ok(all.every((d) => d.state === "delivered"));
  } finally {
    await sender.stop();
    await store.close();
  }
});
