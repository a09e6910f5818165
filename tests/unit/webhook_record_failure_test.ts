/**
 * A try the store could not record (an outage between the receiver's answer
 * and the write) still has its log line, naming the delivery and what the
 * receiver answered: the same webhook-id comes again once the claim runs out,
 * and the operator can tell that repeat from a new event.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { StoreUnavailableError } from "../../lib/store/errors.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import { EVENT_TYPES } from "../../lib/store/webhook_types.ts";
import { WebhookSender } from "../../lib/webhooks/sender.ts";
import { newSecret } from "../../lib/webhooks/sign.ts";
import { startReceiver } from "../support/webhook_receiver.ts";

Deno.test("a try whose record the store refuses is logged with its delivery id, status and recorded false", async () => {
  const store = await openKvStore(`${await Deno.makeTempDir()}/keys.db`);
  try {
    await using receiver = startReceiver();
    const { secret, signingKey } = newSecret();
    receiver.verifyWith(secret);
    await store.webhooks.addEndpoint({
      url: receiver.url,
      events: [...EVENT_TYPES],
      signingKey,
    });
    const fresh = generateApiKey();
    await store.create({
      name: "berlin",
      email: "berlin@example.com",
      hash: fresh.hash,
      hint: fresh.hint,
    }, { actor: "test" });
    const outage = new StoreUnavailableError(
      "store_unavailable",
      "The key store cannot be used",
    );
    // The store as it is, but for the write of a try's outcome.
    const webhooks = withMethod(store.webhooks, "finish", () => {
      throw outage;
    });
    const lines: Record<string, unknown>[] = [];
    const sender = new WebhookSender(
      withMethod(store, "webhooks", webhooks),
      { log: (fields) => lines.push(fields) },
    );
    sender.poke();
    await sender.idle();
    await sender.stop();
    const [delivery] = await store.webhooks.deliveries();
    assert.equal(receiver.received.length, 1);
    const tried = lines.filter((line) => line.msg === "webhook_delivery");
    assert.deepEqual(
      tried.map(({ deliveryId, status, recorded, code }) => ({
        deliveryId,
        status,
        recorded,
        code,
      })),
      [{
        deliveryId: delivery.id,
        status: 204,
        recorded: false,
        code: "store_unavailable",
      }],
    );
  } finally {
    await store.close();
  }
});

/** `target` with `name` replaced by `value`, its other methods bound to it. */
function withMethod<T extends object>(
  target: T,
  name: string,
  value: unknown,
): T {
  return new Proxy(target, {
    get(object, property) {
      if (property === name) return value;
      const found = Reflect.get(object, property, object);
      return typeof found === "function" ? found.bind(object) : found;
    },
  });
}
