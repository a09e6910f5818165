/**
 * The outbox and its sender, in process on a Deno KV file: every event a
 * change raises is queued in that change's commit, once per subscribed
 * endpoint; senders sharing the store send each delivery once; a receiver
 * that hangs, fails or is down delays nothing else; the bound holds.
 */

import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { retireExpired } from "../../lib/store/expiry.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import { newRecord } from "../../lib/store/records.ts";
import type { ExportItem } from "../../lib/store/types.ts";
import type { KeyService } from "../../lib/store/keys.ts";
import { EVENT_TYPES } from "../../lib/store/webhook_types.ts";
import {
  remindOfExpiry,
  sweepOutbox,
} from "../../lib/webhooks/housekeeping.ts";
import { WebhookSender } from "../../lib/webhooks/sender.ts";
import { newSecret } from "../../lib/webhooks/sign.ts";
import { until } from "../support/wait.ts";
import {
  distinctByType,
  type Receiver,
  startReceiver,
} from "../support/webhook_receiver.ts";

const ACTOR = { actor: "test" };

async function kvFile(): Promise<string> {
  return `${await Deno.makeTempDir()}/keys.db`;
}

/** An endpoint for `receiver`, which verifies with its secret. */
async function subscribe(
  store: KeyService,
  receiver: Receiver,
  events = [...EVENT_TYPES],
): Promise<number> {
  const { secret, signingKey } = newSecret();
  receiver.verifyWith(secret);
  const endpoint = await store.webhooks.addEndpoint({
    url: receiver.url,
    events,
    signingKey,
  });
  return endpoint.id;
}

function newKey(name: string, extra: { expiresAt?: string } = {}) {
  const fresh = generateApiKey();
  return {
    fresh,
    input: {
      name,
      email: `${name}@example.com`,
      hash: fresh.hash,
      hint: fresh.hint,
      ...extra,
    },
  };
}

Deno.test("each change raises its event once per subscribed endpoint, in its own commit, with the key's id, name, e-mail and hint and never the key or its hash", async () => {
  const store = await openKvStore(await kvFile());
  try {
    await using all = startReceiver();
    await using revocations = startReceiver();
    const everything = await subscribe(store, all);
    const revokedOnly = await subscribe(store, revocations, ["key.revoked"]);
    const { fresh, input } = newKey("berlin");
    const created = await store.create(input, ACTOR);
    await store.setAllowFrom(created.id, ["10.0.0.0/8"], ACTOR);
    await store.markExposed(created.id, { ...ACTOR, from: "192.0.2.7" });
    await store.markExposed(created.id, { ...ACTOR, from: "192.0.2.8" });
    const at = new Date();
    await store.recordNetworkUses([
      { id: created.id, network: "10.1.2.0/24", at },
    ]);
    await store.recordRefusedUses([{
      id: created.id,
      address: "192.0.2.9",
      at,
    }]);
    await store.recordRefusedUses([{
      id: created.id,
      address: "198.51.100.10",
      at,
    }]);
    await store.setRateLimit(
      created.id,
      { count: 10, windowSeconds: 60 },
      ACTOR,
    );
    assert.equal(await store.noteRateLimited(created.id, at), true);
    assert.equal(await store.noteRateLimited(created.id, at), false);
    const rotated = await store.rotate(created.id, generateApiKey(), ACTOR);
    await store.revoke(rotated.created.id, ACTOR);
    const lapsing = newKey("hamburg", {
      expiresAt: new Date(Date.now() + 100).toISOString(),
    });
    const short = await store.create(lapsing.input, ACTOR);
    const days = [14, 1];
    assert.equal(
      await store.noteExpiring(short.id, { now: new Date(), days }),
      1,
    );
    assert.equal(
      await store.noteExpiring(short.id, { now: new Date(), days }),
      null,
    );
    await until(() => Date.now() > Date.parse(short.expiresAt!), "expiry");
    assert.equal(
      (await retireExpired(store, short.id, { actor: "expiry" })).changed,
      true,
    );

    const pending = await store.webhooks.deliveries();
    const types = (endpoint: number) =>
      pending.filter((d) => d.endpointId === endpoint).map((d) => d.event.type)
        .sort();
    assert.deepEqual(types(everything), [
      "key.created",
      "key.created",
      "key.expired",
      "key.expiring",
      "key.exposed",
      "key.new_network",
      "key.rate_limited",
      "key.refused_network",
      "key.refused_network",
      "key.revoked",
      "key.rotated",
      "key.updated",
      "key.updated",
    ]);
    assert.deepEqual(types(revokedOnly), ["key.revoked"]);
    const exposed = pending.find((d) => d.event.type === "key.exposed")!;
    assert.deepEqual(
      {
        keyId: exposed.event.data.keyId,
        name: exposed.event.data.name,
        email: exposed.event.data.email,
        hint: exposed.event.data.hint,
        from: exposed.event.data.from,
        source: exposed.event.data.source,
      },
      {
        keyId: created.id,
        name: "berlin",
        email: "berlin@example.com",
        hint: fresh.hint,
        from: "192.0.2.7",
        source: "url",
      },
    );
    const network = pending.find((d) => d.event.type === "key.new_network")!;
    assert.equal(network.event.data.network, "10.1.2.0/24");
    const text = JSON.stringify(pending);
    for (const secret of [fresh.key, fresh.hash, lapsing.fresh.key]) {
      assert.ok(!text.includes(secret), "a key or hash in the outbox");
    }
  } finally {
    await store.close();
  }
});

Deno.test("of two senders sharing a store, each delivery is sent once, and every one verifies", async () => {
  const path = await kvFile();
  const one = await openKvStore(path);
  const two = await openKvStore(path);
  await using receiver = startReceiver();
  await subscribe(one, receiver);
  for (let i = 0; i < 20; i++) await one.create(newKey(`k${i}`).input, ACTOR);
  const senders = [one, two].map((store) =>
    new WebhookSender(store, { pollMs: 5, log: () => {} })
  );
  try {
    senders.forEach((sender) => sender.start());
    await until(() => receiver.received.length >= 20, "20 deliveries");
    await Promise.all(senders.map((sender) => sender.idle()));
    assert.equal(receiver.unverified, 0);
    assert.equal(receiver.received.length, 20, "no delivery sent twice");
    assert.equal(
      distinctByType(receiver.received).get("key.created")!.size,
      20,
    );
    const done = await one.webhooks.deliveries();
    assert.ok(done.every((d) => d.state === "delivered" && d.tries === 1));
  } finally {
    for (const sender of senders) await sender.stop();
    await one.close();
    await two.close();
  }
});

Deno.test("a receiver that hangs or answers 500 delays no other endpoint", async () => {
  const store = await openKvStore(await kvFile());
  await using hanging = startReceiver();
  await using failing = startReceiver();
  await using healthy = startReceiver();
  hanging.behave({ hang: true });
  failing.behave({ status: 500 });
  await subscribe(store, hanging);
  await subscribe(store, failing);
  await subscribe(store, healthy);
  const sender = new WebhookSender(store, {
    pollMs: 5,
    perEndpoint: 2,
    // Longer than the test: only the hanging receiver's own slots are held.
    timeoutMs: 120_000,
    retryBaseMs: 3_600_000,
    log: () => {},
  });
  try {
    sender.start();
    for (let i = 0; i < 10; i++) {
      await store.create(newKey(`k${i}`).input, ACTOR);
    }
    await until(() => healthy.received.length === 10, "the healthy receiver");
    await until(() => failing.received.length === 10, "the failing receiver");
    assert.equal(hanging.hanging, 2, "two in flight to the hanging receiver");
    const failed = await store.webhooks.deliveries({ endpointId: 2 });
    await until(
      async () =>
        (await store.webhooks.deliveries({ endpointId: 2 })).every((d) =>
          d.attempts.length === 1
        ),
      "the failures recorded",
    );
    assert.equal(failed.length, 10);
  } finally {
    hanging.release(204);
    await sender.stop();
    await store.close();
  }
});

Deno.test("a receiver down for a minute gets every event once it is back, on an injected clock", async () => {
  const store = await openKvStore(await kvFile());
  await using receiver = startReceiver();
  receiver.behave({ status: 503 });
  await subscribe(store, receiver);
  let now = 0;
  const sender = new WebhookSender(store, {
    pollMs: 3_600_000,
    retryBaseMs: 5_000,
    now: () => now,
    log: () => {},
  });
  try {
    for (let i = 0; i < 3; i++) {
      await store.create(newKey(`k${i}`).input, ACTOR);
    }
    now = Date.now();
    await sender.idle();
    assert.equal(receiver.received.length, 3);
    // Down for a minute: tries at 5, 15, 35 s, each refused.
    for (const step of [5_000, 10_000, 20_000]) {
      now += step;
      await sender.idle();
    }
    assert.equal(receiver.received.length, 12);
    receiver.behave({ status: 204 });
    now += 40_000;
    await sender.idle();
    assert.equal(receiver.received.length, 15);
    const repeats = distinctByType(receiver.received).get("key.created")!;
    assert.equal(
      repeats.size,
      3,
      "one event id per event, however often tried",
    );
    const done = await store.webhooks.deliveries();
    assert.ok(done.every((d) => d.state === "delivered" && d.tries === 5));
    // Delivered: nothing more is sent, however long after.
    now += 86_400_000;
    await sender.idle();
    assert.equal(receiver.received.length, 15);
  } finally {
    await sender.stop();
    await store.close();
  }
});

Deno.test("past its bound the outbox drops its oldest deliveries, each with a log line, and redeliver queues one again", async () => {
  const store = await openKvStore(await kvFile());
  await using receiver = startReceiver();
  await subscribe(store, receiver);
  try {
    for (let i = 0; i < 8; i++) {
      await store.create(newKey(`k${i}`).input, ACTOR);
    }
    const lines: Record<string, unknown>[] = [];
    const dropped = await sweepOutbox(store, {
      now: new Date(),
      log: (line) => lines.push(line),
      maxPending: 5,
    });
    assert.equal(dropped, 3);
    const all = await store.webhooks.deliveries();
    const oldest = all.map((d) => d.id).sort().slice(0, 3);
    assert.deepEqual(
      lines.map((line) => line.deliveryId).sort(),
      oldest,
    );
    assert.ok(lines.every((line) => line.msg === "webhook_dropped"));
    assert.deepEqual(
      all.filter((d) => d.state === "dropped").map((d) => d.id).sort(),
      oldest,
    );
    const again = await store.webhooks.redeliver(oldest[0], new Date());
    assert.equal(again?.state, "pending");
    const sender = new WebhookSender(store, { log: () => {} });
    await sender.idle();
    await sender.stop();
    assert.equal(receiver.received.length, 6);
    assert.ok(receiver.received.some((r) => `${r.id}.1` === oldest[0]));
  } finally {
    await store.close();
  }
});

Deno.test("past its bound the outbox drops what traffic raised before any older change's event, so one key's flood cannot push a revocation out", async () => {
  const store = await openKvStore(await kvFile());
  await using receiver = startReceiver();
  await subscribe(store, receiver);
  try {
    const created = await store.create(newKey("leaked").input, ACTOR);
    await store.revoke(created.id, ACTOR);
    // An attacker holding another key runs into its limit window after window.
    const flooding = await store.create({
      ...newKey("flood").input,
      rateLimit: { count: 5, windowSeconds: 60 },
    }, ACTOR);
    for (let i = 0; i < 6; i++) {
      await store.noteRateLimited(flooding.id, new Date(i * 3_600_000));
    }
    const before = await store.webhooks.deliveries();
    assert.equal(before.length, 9);
    const dropped = await sweepOutbox(store, {
      now: new Date(),
      log: () => {},
      maxPending: 4,
    });
    assert.equal(dropped, 5);
    const pending = (await store.webhooks.deliveries())
      .filter((d) => d.state === "pending")
      .map((d) => d.event.type)
      .sort();
    assert.deepEqual(pending, [
      "key.created",
      "key.created",
      "key.rate_limited",
      "key.revoked",
    ]);
  } finally {
    store.close();
  }
});

Deno.test("an import that fails, wiping what it staged, leaves the webhook endpoints and outbox in place", async () => {
  const store = await openKvStore(await kvFile());
  await using receiver = startReceiver();
  try {
    await subscribe(store, receiver);
    const { fresh } = newKey("imported");
    const record = newRecord(1, {
      name: "imported",
      email: "imported@example.com",
      hash: fresh.hash,
      hint: fresh.hint,
    }, new Date());
    const items = async function* (): AsyncIterable<ExportItem> {
      yield { type: "key", record };
      yield { type: "bogus" } as unknown as ExportItem;
    };
    await assert.rejects(store.importAll(items(), ACTOR));
    assert.equal(await store.get(1), null, "the import was wiped");
    assert.equal((await store.webhooks.endpoints()).length, 1);
    await store.create(newKey("after").input, ACTOR);
    assert.equal((await store.webhooks.deliveries()).length, 1);
  } finally {
    await store.close();
  }
});

Deno.test("expiry reminders are raised once each, at 14 days and at 1 day, however many servers and rounds remind", async () => {
  const path = await kvFile();
  const stores = [await openKvStore(path), await openKvStore(path)];
  await using receiver = startReceiver();
  try {
    await subscribe(stores[0], receiver, ["key.expiring"]);
    const day = 86_400_000;
    const start = Date.now();
    const far = await stores[0].create(
      newKey("far", {
        expiresAt: new Date(start + 10 * day).toISOString(),
      }).input,
      ACTOR,
    );
    await stores[0].create(
      newKey("near", {
        expiresAt: new Date(start + 12 * 3_600_000).toISOString(),
      }).input,
      ACTOR,
    );
    const settled = stores.map(() => new Set<string>());
    const remind = async (now: number) => {
      for (const [i, store] of stores.entries()) {
        for (let round = 0; round < 2; round++) {
          await remindOfExpiry(store, {
            now: new Date(now),
            days: [14, 1],
            settled: settled[i],
          });
        }
      }
    };
    await remind(start);
    const reminders = async () =>
      (await stores[0].webhooks.deliveries()).map((d) =>
        `${d.event.data.name} ${d.event.data.daysBefore}`
      ).sort();
    assert.deepEqual(await reminders(), ["far 14", "near 1"]);
    await remind(start + 9.5 * day);
    assert.deepEqual(await reminders(), ["far 1", "far 14", "near 1"]);
    assert.equal((await stores[0].get(far.id))?.status, "valid");
  } finally {
    for (const store of stores) await store.close();
  }
});

Deno.test("a try past its deadline, a refused connection and a stop each leave the delivery due again, with the reason recorded", async () => {
  const store = await openKvStore(await kvFile());
  await using hanging = startReceiver();
  hanging.behave({ hang: true });
  try {
    await subscribe(store, hanging);
    // Nothing listens on port 1 of this host.
    await store.webhooks.addEndpoint({
      url: "http://127.0.0.1:1/hooks",
      events: [...EVENT_TYPES],
      signingKey: newSecret().signingKey,
    });
    await store.create(newKey("k").input, ACTOR);
    const quick = new WebhookSender(store, {
      timeoutMs: 200,
      retryBaseMs: 3_600_000,
      log: () => {},
    });
    await quick.idle();
    await quick.stop();
    const reasons = async () =>
      (await store.webhooks.deliveries()).map((d) => [
        d.endpointId,
        d.state,
        d.attempts.map((a) => a.error),
      ]).sort();
    assert.deepEqual(await reasons(), [
      [1, "pending", ["timeout"]],
      [2, "pending", ["connection"]],
    ]);
    hanging.release(204);

    // A stop cuts a try short and leaves the delivery due at once.
    await store.create(newKey("k2").input, ACTOR);
    const stopping = new WebhookSender(store, {
      timeoutMs: 60_000,
      retryBaseMs: 3_600_000,
      log: () => {},
    });
    stopping.start();
    await until(() => hanging.hanging === 1, "a try held open");
    const stoppedAt = Date.now();
    await stopping.stop();
    const stopped = (await store.webhooks.deliveries({ endpointId: 1 }))
      .find((d) => d.attempts.at(-1)?.error === "stopped")!;
    assert.equal(stopped.state, "pending");
    assert.ok(Date.parse(stopped.dueAt) <= Date.now());
    assert.ok(Date.parse(stopped.dueAt) >= stoppedAt - 1000);
  } finally {
    hanging.release(204);
    await store.close();
  }
});
